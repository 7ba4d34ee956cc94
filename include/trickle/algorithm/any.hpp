// trickle/algorithm/any.hpp: any_algorithm, one owning handle for an algorithm chosen at run time.
//
// sparta<...>, diloco<...>, sparta_diloco<...> and ddp are each their own type, so a
// trainer that picks one from its command line would otherwise hold a std::variant of
// them and visit it at every call. any_algorithm holds any one of them: it is built or
// assigned from the object itself, whose engine it takes over (the object is left empty,
// as after a move), and offers what they share:
//
//   trickle::any_algorithm algo;
//   if (name == "sparta")      algo = trickle::sparta<>(params, comm, {.fraction = 0.005});
//   else if (name == "diloco") algo = trickle::diloco<>(params, comm, {.interval = 500});
//   else                       algo = trickle::ddp(params, comm);
//   for (...) { train_step(); algo.step(trickle::exec::host{}); }
//   std::printf("%s sent %llu bytes\n", algo.kind(), (unsigned long long)algo.stats().total.bytes_sent);
//
// Its calls are those of the objects (detail::erased_handle): step, stats, membership,
// flush, outer_step, set_weight, save, load, kind, plus sparse_stats and outer_stats,
// which are SPARTA + DiLoCo's parts and stats() for the others. A call that does not apply
// to the algorithm held (set_weight on SPARTA, say) throws invalid_argument naming it, as
// the object itself would. Move-only; default-constructed or moved from, it is empty and
// every call throws invalid_argument (operator bool tells).
//
// (Named like codec::any, schedule::any and topology::any, the policies chosen at run
// time; "algorithm" is the name of this folder and its umbrella header.)
#pragma once

#include <trickle/algorithm/detail/erased.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/config.hpp>

#include <concepts>
#include <type_traits>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// sparta<...>, diloco<...>, sparta_diloco<...>, ddp (and erased_handle itself), passed as
// an rvalue: any_algorithm takes their engine.
template <class A>
concept movable_algorithm = !std::is_lvalue_reference_v<A> && std::derived_from<std::remove_cvref_t<A>, erased_handle>;

} // namespace detail

class any_algorithm : public detail::erased_handle {
public:
    any_algorithm() = default;
    any_algorithm(any_algorithm&&) noexcept = default;
    any_algorithm& operator=(any_algorithm&&) noexcept = default;

    // Takes over the engine of `algorithm` (left empty).
    template <class A>
        requires detail::movable_algorithm<A> && (!std::same_as<std::remove_cvref_t<A>, any_algorithm>)
    any_algorithm(A&& algorithm) noexcept : erased_handle(static_cast<erased_handle&&>(algorithm)) {}

    // Drops the algorithm held (if any) and takes over the engine of `algorithm`.
    template <class A>
        requires detail::movable_algorithm<A> && (!std::same_as<std::remove_cvref_t<A>, any_algorithm>)
    any_algorithm& operator=(A&& algorithm) noexcept {
        erased_handle::operator=(static_cast<erased_handle&&>(algorithm));
        return *this;
    }

    // SPARTA + DiLoCo: its SPARTA and DiLoCo parts' accounts (stats() is their sum); the
    // other algorithms have one part, and both give stats().
    const exchange_stats& sparse_stats() const { return get("sparse_stats").sparse_stats(); }
    const exchange_stats& outer_stats() const { return get("outer_stats").outer_stats(); }
};

TRICKLE_NAMESPACE_END
