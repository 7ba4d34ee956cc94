// trickle/outer/lr_schedule.hpp: outer::lr_scheduled, an outer learning-rate schedule around any outer optimizer with an lr.
//
// outer::lr_scheduled<Opt, Schedule>{.optimizer = ..., .schedule = ...} is itself an outer
// optimizer. At outer step t (counted from 1) it runs Opt with
//     lr_t = optimizer.lr * schedule.fraction(t - 1, 1.0)
// so the schedule policies of trickle/schedule (constant, linear, cosine, piecewise,
// warmup<...>) serve as learning-rate multipliers in (0, 1], with their `steps` counted in
// outer steps. For example, a cosine decay of Nesterov's lr from 0.7 to 0.07 over 100 outer
// steps:
//
//     using opt = outer::lr_scheduled<outer::nesterov, schedule::cosine>;
//     opt{.optimizer = {.lr = 0.7}, .schedule = {.end_fraction = 0.1, .steps = 100}}
//
// torch equivalent: the wrapped optimizer with an LR scheduler that sets the group's lr to
// lr_t before step t (LambdaLR with that multiplier, stepped after each optimizer step).
// The multiplier is computed in double and lr_t rounded to float once, in the wrapped
// optimizer's prepare(). The state and its layout are the wrapped optimizer's, so a
// schedule can be added to a run without changing its checkpoints' state arrays; the
// schedule's position is the outer step counter, which checkpoints already hold.
//
// The configuration check covers the schedule: describe() adds the wrapped optimizer's
// fields, then the schedule's as "outer.lr_<field>", so workers that disagree on either
// are caught by agree().
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/schedule/schedule.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace outer {

// Outer optimizers whose step size is a public field `double lr` (sgd, momentum,
// nesterov, adam; not average, which has none).
template <class O>
concept has_learning_rate = outer_optimizer<O> && requires(O o) {
    { o.lr } -> std::same_as<double&>;
};

template <has_learning_rate Opt, schedule_policy Schedule>
struct lr_scheduled {
    static constexpr const char* name = Opt::name;
    static constexpr int state_slots = Opt::state_slots;

    Opt optimizer{};
    Schedule schedule{};

    // The multiplier of optimizer.lr at outer step t >= 1.
    double lr_factor(std::uint64_t t) const { return schedule.fraction(t - 1, 1.0); }

    void describe(config_record& rec) const {
        optimizer.describe(rec);
        config_record inner;
        schedule.describe(inner);
        rec.add_fields("outer.lr_", inner);
        if (!inner.error().empty()) rec.set_error(detail::concat("outer::", name, " lr schedule: ", inner.error()));
    }

    auto prepare(std::uint64_t t) const {
        detail::check_outer_step(name, t);
        config_record rec;
        describe(rec);
        if (!rec.error().empty()) throw invalid_argument(rec.error());
        Opt at = optimizer;
        at.lr = optimizer.lr * lr_factor(t);
        return at.prepare(t);
    }
};

// An outer optimizer with a learning rate, with or without a schedule of it, chosen at run
// time: with one it runs as lr_scheduled<Opt, Schedule>; without, as Opt itself (its bits,
// its configuration fields, its checkpoints). One type for both, so a front end that
// offers an optional schedule (Python's outer_lr_schedule=, trickle-sim's
// --outer-lr-schedule) compiles one algorithm per optimizer: the rule prepare() returns is
// Opt's either way. Typically Schedule is schedule::any.
template <has_learning_rate Opt, schedule_policy Schedule>
struct maybe_lr_scheduled {
    using scheduled = lr_scheduled<Opt, Schedule>;
    static constexpr const char* name = Opt::name;
    static constexpr int state_slots = Opt::state_slots;

    Opt optimizer{};
    std::optional<scheduled> schedule{};

    // opt, with `lr_schedule` over its learning rate where one is given.
    static maybe_lr_scheduled of(const Opt& opt, std::optional<Schedule> lr_schedule = std::nullopt) {
        maybe_lr_scheduled m{.optimizer = opt};
        if (lr_schedule) m.schedule = scheduled{.optimizer = opt, .schedule = std::move(*lr_schedule)};
        return m;
    }

    void describe(config_record& rec) const {
        if (schedule)
            schedule->describe(rec);
        else
            optimizer.describe(rec);
    }
    auto prepare(std::uint64_t t) const { return schedule ? schedule->prepare(t) : optimizer.prepare(t); }
};

// (No outer::detail namespace here: it would hide trickle::detail from the optimizers.)
template <class Opt, class Schedule>
struct maybe_lr_scheduled_of {
    using type = Opt;
};
template <has_learning_rate Opt, class Schedule>
struct maybe_lr_scheduled_of<Opt, Schedule> {
    using type = maybe_lr_scheduled<Opt, Schedule>;
};

// The type a front end instantiates for Opt: maybe_lr_scheduled<Opt, Schedule> where Opt
// has a learning rate, Opt itself (average) where it has none.
template <class Opt, class Schedule>
using maybe_lr_scheduled_t = typename maybe_lr_scheduled_of<Opt, Schedule>::type;

} // namespace outer

TRICKLE_NAMESPACE_END
