// trickle/outer/registry.hpp: the outer optimizers a run-time choice can name: trickle-sim's --outer, Python's outer=.
//
// One list, in the order the front ends list the names; every front end finds an
// optimizer by the name it declares (its `name`) and compiles one algorithm per entry.
// Adding an outer optimizer is its header and one line here (docs/extending.md).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/fields.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/error.hpp>
#include <trickle/outer/adam.hpp>
#include <trickle/outer/average.hpp>
#include <trickle/outer/lr_schedule.hpp>
#include <trickle/outer/momentum.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/outer/sgd.hpp>

#include <optional>
#include <string_view>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace outer {

using registry = type_list<sgd, momentum, nesterov, adam, average>;

static_assert(names_unique<registry>(), "outer::registry: two outer optimizers share a name");
static_assert([]<class... O>(type_list<O...>*) { return (outer_optimizer<O> && ...); }(static_cast<registry*>(nullptr)),
              "outer::registry: every entry must satisfy outer_optimizer");

// The fields a front end sets on an outer optimizer by name; each applies to the
// optimizers that have a field of that name (core/fields.hpp), and one left unset keeps
// the optimizer's default.
struct outer_settings {
    std::optional<double> lr{}, momentum{}, beta1{}, beta2{}, eps{};
};

// Calls f with the registered outer optimizer of that name, its fields set from `s`, as
// maybe_lr_scheduled_t<O, Schedule> (trickle/outer/lr_schedule.hpp): with `lr_schedule`
// over its learning rate where one is given. Throws invalid_argument naming the registered
// optimizers for any other name (`what` names the option in that message), and for a
// schedule given to an optimizer with no learning rate (average). Every optimizer is one
// instantiation of f.
template <class Schedule, class F>
decltype(auto) visit_named(std::string_view optimizer_name, const outer_settings& s,
                           const std::optional<Schedule>& lr_schedule, F&& f,
                           std::string_view what = "outer optimizer") {
    return visit_name<registry>(optimizer_name, what, [&](auto t) -> decltype(auto) {
        using O = typename decltype(t)::type;
        O o{};
        if constexpr (fields::has_lr<O>)
            if (s.lr) o.lr = *s.lr;
        if constexpr (fields::has_momentum<O>)
            if (s.momentum) o.momentum = *s.momentum;
        if constexpr (fields::has_betas<O>) {
            if (s.beta1) o.beta1 = *s.beta1;
            if (s.beta2) o.beta2 = *s.beta2;
        }
        if constexpr (fields::has_eps<O>)
            if (s.eps) o.eps = *s.eps;
        if constexpr (has_learning_rate<O>) {
            return f(maybe_lr_scheduled<O, Schedule>::of(o, lr_schedule));
        } else {
            if (lr_schedule)
                throw invalid_argument(trickle::detail::concat("outer::", O::name,
                                                               " has no learning rate to schedule"));
            return f(o);
        }
    });
}

} // namespace outer

TRICKLE_NAMESPACE_END
