// trickle/algorithm/detail/pick.hpp: policies given by type, in any order.
//
// The algorithm objects take their policies positionally (sparta<Sampler, Schedule,
// Topology, Codec>{group, comm, options, sampler, schedule, topology, codec}), so passing
// only the last one (DiLoCo's outer optimizer in sparta_diloco, say) used to mean spelling
// out every one before it. Their by-type constructors take any of them, in any order, each
// matched to the slot of its type; a slot given no argument is default-constructed. An
// argument whose type fills no slot, or fills two, or two arguments for one slot, do not
// compile (the constraint fails, so the positional constructor is the one considered).
#pragma once

#include <trickle/config.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

template <class... Slots>
struct policy_slots {};

template <class A, class... Slots>
inline constexpr std::size_t slots_of_type = (std::size_t{0} + ... + (std::is_same_v<std::remove_cvref_t<A>, Slots> ? 1 : 0));

template <class P, class... Args>
inline constexpr std::size_t args_of_type = (std::size_t{0} + ... + (std::is_same_v<std::remove_cvref_t<Args>, P> ? 1 : 0));

template <class Slots, class... Args>
struct by_type_check;
template <class... Slots, class... Args>
struct by_type_check<policy_slots<Slots...>, Args...> {
    // Every argument fills exactly one slot, and no slot takes two arguments.
    static constexpr bool value = ((slots_of_type<Args, Slots...> == 1) && ...) && ((args_of_type<Slots, Args...> <= 1) && ...);
};

template <class Slots>
struct first_slot;
template <class S0, class... S>
struct first_slot<policy_slots<S0, S...>> {
    using type = S0;
};

// Slots: policy_slots<the algorithm's policy types, in order>; First: the first argument
// after the options, which must not be the first slot's (that is the positional
// constructor's call).
template <class Slots, class First, class... Rest>
concept by_type_policies = by_type_check<Slots, First, Rest...>::value &&
                           !std::is_same_v<std::remove_cvref_t<First>, typename first_slot<Slots>::type>;

// The argument of type P, or P{} when there is none.
template <class P>
P pick() {
    return P{};
}
template <class P, class A, class... Rest>
P pick(A&& a, Rest&&... rest) {
    if constexpr (std::is_same_v<std::remove_cvref_t<A>, P>)
        return P(std::forward<A>(a));
    else
        return pick<P>(std::forward<Rest>(rest)...);
}

} // namespace detail

TRICKLE_NAMESPACE_END
