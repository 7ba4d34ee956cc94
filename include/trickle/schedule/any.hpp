// trickle/schedule/any.hpp: a schedule chosen at run time among the registered ones (schedule/registry.hpp).
//
// sparta<Sampler, schedule::any, Topology> is one instantiation that serves every registered
// schedule, so a binding (Python, a command line) can pick one by name without compiling
// every combination of templates. It costs one std::variant visit per call of fraction()
// (once per exchange), never one per value. describe() emits exactly the fields of the
// held schedule, so a worker using any{cosine{...}} agrees with one using cosine{...}
// directly, and their checkpoints carry the same configuration hash.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/schedule/registry.hpp>
#include <trickle/schedule/schedule.hpp>

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

TRICKLE_NAMESPACE_BEGIN

namespace detail {
template <class S, class Variant>
inline constexpr bool schedule_in_variant = false;
template <class S, class... A>
inline constexpr bool schedule_in_variant<S, std::variant<A...>> = (std::is_same_v<S, A> || ...);
} // namespace detail

namespace schedule {

// Holds one of the registered schedules or a warm-up into one of the warmed ones
// (schedule/registry.hpp: constant, linear, cosine, piecewise, warmup<constant>,
// warmup<linear> and warmup<cosine>; constant by default), and forwards every member of
// the schedule concept to it:
//   schedule::any s = schedule::cosine{.end_fraction = 0.001, .steps = 100};
//   s.fraction(t, base) == schedule::cosine{...}.fraction(t, base)
class any {
public:
    using variant_type = type_list_cat_t<registry, type_list_map_t<warmup, warmed>>::apply<std::variant>;

    // Whether S is one of the schedules any can hold.
    template <class S>
    static constexpr bool holds_type = detail::schedule_in_variant<S, variant_type>;

    static constexpr const char* name = "any";

    any() = default;

    // Implicit, so that a built-in schedule converts where an any is expected.
    template <class S>
        requires holds_type<std::remove_cvref_t<S>>
    any(S&& s) : held_(std::forward<S>(s)) {}

    // The registered schedule of that name with its default fields: from_name("cosine")
    // holds cosine{}. Throws invalid_argument listing the registered names for any other
    // ("warmup" too: a warm-up wraps a schedule, it is built as warmup<S>{...}).
    static any from_name(std::string_view schedule_name) {
        return visit_name<registry>(schedule_name, "schedule", [](auto s) -> any { return typename decltype(s)::type{}; });
    }
    // The registered names, in the registry's order.
    static constexpr const auto& names() { return names_of<registry>(); }

    double fraction(std::uint64_t step, double base) const {
        return std::visit([&](const auto& s) -> double { return s.fraction(step, base); }, held_);
    }

    // The held schedule's largest fraction, clipped as the algorithms clip it.
    double max_fraction(double base) const {
        return std::visit([&](const auto& s) -> double { return detail::schedule_max_fraction(s, base); }, held_);
    }

    // Exactly the held schedule's fields and error.
    void describe(config_record& rec) const {
        std::visit([&](const auto& s) { s.describe(rec); }, held_);
    }

    // The held schedule's name ("constant", "linear", "cosine", "piecewise", "warmup").
    const char* held_name() const {
        return std::visit([](const auto& s) -> const char* { return std::remove_cvref_t<decltype(s)>::name; }, held_);
    }

    // The held schedule itself (std::get_if / std::visit on it; fields may be changed).
    const variant_type& held() const { return held_; }
    variant_type& held() { return held_; }

private:
    variant_type held_{};
};

} // namespace schedule

static_assert(schedule_policy<schedule::any>);

TRICKLE_NAMESPACE_END
