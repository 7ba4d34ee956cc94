// trickle/outer/any.hpp: outer::any, an outer optimizer chosen at run time among the registered ones.
//
// diloco<outer::any, ...> is one engine that serves every optimizer of outer::registry
// (sgd, momentum, nesterov, adam, average), each with or without a schedule of its
// learning rate, so a front end that picks the optimizer by name (Python's outer=,
// trickle-sim's --outer) compiles one engine instead of one per optimizer. What it holds is
// exactly what the front ends built before: outer::maybe_lr_scheduled<O, schedule::any> for
// an optimizer with a learning rate, O itself for one without (average).
//
// The choice costs nothing per element. prepare(t) returns a rule_choice holding the held
// optimizer's own rule, and each pass visits it once (with_rule, kernels/outer_rule.hpp;
// once per tile inside a host codec's fused passes), so the kernels run the concrete
// rule's body: the same bits as the optimizer used directly. The state is the held
// optimizer's (state_slot_count() slots, its layout), and describe() writes exactly its
// fields, so a worker running any{nesterov{...}} agrees with one running nesterov{...} and
// their checkpoints are interchangeable.
//
//     outer::any o = outer::any::named("adam", {.lr = 0.4}, std::nullopt);
//     diloco<outer::any> algo(group, comm, {.interval = 50}, o);
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/error.hpp>
#include <trickle/kernels/outer_rule.hpp>
#include <trickle/outer/lr_schedule.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/outer/registry.hpp>
#include <trickle/schedule/any.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

TRICKLE_NAMESPACE_BEGIN

namespace outer {

namespace choice {
template <class O>
using held = maybe_lr_scheduled_t<O, schedule::any>;
template <class O>
using rule = outer_rule_t<held<O>>;

// Every type outer::any can hold, in the registry's order.
using held_types = type_list_map_t<held, registry>;
// The registry index of held type H (its name is its optimizer's: the registry's names are
// unique).
template <class H>
inline constexpr std::size_t index_of_held = index_of_name<registry>(H::name);
} // namespace choice

// The rule of one outer step of whichever optimizer outer::any holds: the held optimizer's
// own rule, alternative i for registry entry i (two entries may share a rule type).
class rule_choice {
public:
    using variant_type = type_list_map_t<choice::rule, registry>::apply<std::variant>;

    template <std::size_t I, class R>
    rule_choice(std::in_place_index_t<I> at, R&& r) : held_(at, std::forward<R>(r)) {}

    // f(rule) with the held rule.
    template <class F>
    decltype(auto) visit(F&& f) const {
        return std::visit(std::forward<F>(f), held_);
    }

    const variant_type& held() const { return held_; }

private:
    variant_type held_;
};

class any {
public:
    using variant_type = choice::held_types::apply<std::variant>;

    static constexpr const char* name = "any";

    // Holds nesterov{} (DiLoCo's default) without a schedule.
    any() : any(nesterov{}) {}

    // A registered optimizer, as given: nesterov{...} (no schedule), or as the front ends
    // build them, maybe_lr_scheduled<nesterov, schedule::any>::of(...).
    template <class O>
        requires type_list_contains<choice::held_types, std::remove_cvref_t<O>>
    any(O&& o) : held_(std::in_place_index<choice::index_of_held<std::remove_cvref_t<O>>>, std::forward<O>(o)) {}
    template <class O>
        requires(type_list_contains<registry, O> && !std::is_same_v<choice::held<O>, O>)
    any(const O& o) : any(choice::held<O>::of(o)) {}

    // The registered optimizer of that name with the given fields (the others its
    // defaults) and, where given, a schedule of its learning rate (visit_named: an unknown
    // name, or a schedule for an optimizer without a learning rate, throws invalid_argument).
    static any named(std::string_view optimizer_name, const outer_settings& s,
                     const std::optional<schedule::any>& lr_schedule, std::string_view what = "outer optimizer") {
        return visit_named(optimizer_name, s, lr_schedule, [](auto o) -> any { return any(std::move(o)); }, what);
    }

    void describe(config_record& rec) const {
        std::visit([&](const auto& o) { o.describe(rec); }, held_);
    }

    rule_choice prepare(std::uint64_t t) const {
        return std::visit(
            [&](const auto& o) {
                return rule_choice(std::in_place_index<choice::index_of_held<std::remove_cvref_t<decltype(o)>>>,
                                   o.prepare(t));
            },
            held_);
    }

    int state_slot_count() const {
        return std::visit([](const auto& o) -> int { return std::remove_cvref_t<decltype(o)>::state_slots; }, held_);
    }

    // The held optimizer's name ("nesterov", "adam", ...).
    const char* held_name() const {
        return std::visit([](const auto& o) -> const char* { return std::remove_cvref_t<decltype(o)>::name; }, held_);
    }

    // The held optimizer itself (std::get_if / std::visit on it; fields may be changed).
    const variant_type& held() const { return held_; }
    variant_type& held() { return held_; }

private:
    variant_type held_;
};

} // namespace outer

static_assert(outer_optimizer<outer::any>);

TRICKLE_NAMESPACE_END
