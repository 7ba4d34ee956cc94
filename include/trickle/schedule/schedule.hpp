// trickle/schedule/schedule.hpp: fraction schedules: how much an exchange at a given step averages.
//
// When to exchange is the algorithm's `interval` option (every H steps, detail::due_every),
// unless the schedule also says when (an optional due(step, interval)); a schedule says
// how much: fraction(step, base) maps the 0-based step and the options' base fraction to
// the fraction used at that step, in (0, 1]. The SPARTA authors observe that replicas
// correlate quickly and suggest a larger fraction early that decreases later: linear and
// cosine decay from the base fraction to end_fraction do that.
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <numbers>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// A schedule policy (concept schedule_policy; the namespace trickle::schedule holds the
// policies): a copyable object with
//   static constexpr const char* name
//   double fraction(std::uint64_t step, double base) const    in (0, 1] for valid parameters
//   void describe(config_record&) const                       its parameters; set_error() for bad ones
// and, optionally, double max_fraction(double base) const: the largest fraction it ever
// gives, from which algorithms size their buffers at construction (without it they size
// them for the whole group).
template <class S>
concept schedule_policy = std::copy_constructible<S> && requires(const S& s, std::uint64_t step, double base,
                                                          config_record& rec) {
    { S::name } -> std::convertible_to<const char*>;
    { s.fraction(step, base) } -> std::convertible_to<double>;
    s.describe(rec);
};

namespace detail {
inline bool valid_fraction(double p) { return std::isfinite(p) && p > 0.0 && p <= 1.0; }

// When: whether the step after inner step t (0-based) is due in a cycle of `interval`
// steps that starts at `phase` (every interval-th step: phase 0). The one home of
// "every H steps" for SPARTA's exchanges, DiLoCo's outer steps and streaming fragments.
inline bool due_every(std::uint64_t t, std::uint64_t interval, std::uint64_t phase = 0) {
    const std::uint64_t s = t + 1;
    return s >= phase && (s - phase) % interval == 0;
}

// Whether schedule s exchanges after step t: its own due(step, interval) when it has one
// (a schedule that decides when as well as how much), every interval-th step otherwise.
template <class S>
bool schedule_due(const S& s, std::uint64_t t, std::uint64_t interval) {
    if constexpr (requires { { s.due(t, interval) } -> std::convertible_to<bool>; })
        return s.due(t, interval);
    else
        return due_every(t, interval);
}

// The largest fraction a schedule gives for base fraction `base`, clipped to (0, 1]; 1
// when the schedule cannot say.
template <class S>
double schedule_max_fraction(const S& s, double base) {
    double p = 1.0;
    if constexpr (requires { { s.max_fraction(base) } -> std::convertible_to<double>; }) p = s.max_fraction(base);
    return valid_fraction(p) ? p : 1.0;
}

// The fields and checks shared by the schedules that decay to end_fraction over `steps`.
inline void describe_decay(config_record& rec, const char* name, double end_fraction, std::uint64_t steps) {
    rec.add("schedule", name).add("end_fraction", end_fraction).add("schedule_steps", steps);
    if (!valid_fraction(end_fraction))
        rec.set_error(concat("schedule::", name, ": end_fraction must be in (0, 1], got ", end_fraction));
    if (steps < 1) rec.set_error(concat("schedule::", name, ": steps must be >= 1"));
}
} // namespace detail

namespace schedule {

// The base fraction at every step.
struct constant {
    static constexpr const char* name = "constant";
    double fraction(std::uint64_t, double base) const { return base; }
    double max_fraction(double base) const { return base; }
    void describe(config_record& rec) const { rec.add("schedule", name); }
};

// From the base fraction at step 0 to end_fraction at step `steps`, linearly; then constant.
struct linear {
    static constexpr const char* name = "linear";
    double end_fraction = 0.001;
    std::uint64_t steps = 1000;

    double fraction(std::uint64_t step, double base) const {
        if (step >= steps) return end_fraction;
        const double t = static_cast<double>(step) / static_cast<double>(steps);
        return base + (end_fraction - base) * t;
    }
    double max_fraction(double base) const { return base > end_fraction ? base : end_fraction; }
    void describe(config_record& rec) const { detail::describe_decay(rec, name, end_fraction, steps); }
};

// From the base fraction to end_fraction along half a cosine over `steps`; then constant.
struct cosine {
    static constexpr const char* name = "cosine";
    double end_fraction = 0.001;
    std::uint64_t steps = 1000;

    double fraction(std::uint64_t step, double base) const {
        if (step >= steps) return end_fraction;
        const double t = static_cast<double>(step) / static_cast<double>(steps);
        return end_fraction + (base - end_fraction) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
    }
    double max_fraction(double base) const { return base > end_fraction ? base : end_fraction; }
    void describe(config_record& rec) const { detail::describe_decay(rec, name, end_fraction, steps); }
};

// Piecewise constant: the base fraction until the first point's step, then each point's
// fraction from its step on. Points must be sorted by strictly increasing step.
struct piecewise {
    static constexpr const char* name = "piecewise";
    std::vector<std::pair<std::uint64_t, double>> points;

    double fraction(std::uint64_t step, double base) const {
        double p = base;
        for (const auto& [from, f] : points) {
            if (step < from) break;
            p = f;
        }
        return p;
    }
    double max_fraction(double base) const {
        double m = base;
        for (const auto& point : points) m = point.second > m ? point.second : m;
        return m;
    }
    void describe(config_record& rec) const {
        rec.add("schedule", name);
        for (std::size_t i = 0; i < points.size(); ++i) {
            // The value text keeps the 17-digit fraction checkpoints hash; messages show the shortest.
            rec.add_text(detail::concat("point", i),
                         detail::concat(points[i].first, ":", detail::record_text(points[i].second)),
                         detail::concat(points[i].first, ":", points[i].second));
            if (!detail::valid_fraction(points[i].second))
                rec.set_error(detail::concat("schedule::piecewise: fraction of point ", i, " must be in (0, 1], got ",
                                             points[i].second));
            if (i > 0 && points[i].first <= points[i - 1].first)
                rec.set_error("schedule::piecewise: steps must be strictly increasing");
        }
    }
};

// Ramps from start_fraction at step 0 to what `then` gives at step `steps`, linearly;
// afterwards follows `then` (which sees the real step).
template <class Then = constant>
struct warmup {
    static constexpr const char* name = "warmup";
    std::uint64_t steps = 100;
    double start_fraction = 0.05;
    Then then{};

    double fraction(std::uint64_t step, double base) const {
        if (step >= steps) return then.fraction(step, base);
        const double target = then.fraction(steps, base);
        const double t = static_cast<double>(step) / static_cast<double>(steps);
        return start_fraction + (target - start_fraction) * t;
    }
    double max_fraction(double base) const {
        const double then_max = detail::schedule_max_fraction(then, base);
        return start_fraction > then_max ? start_fraction : then_max;
    }
    void describe(config_record& rec) const {
        rec.add("schedule", name).add("warmup_steps", steps).add("start_fraction", start_fraction);
        config_record inner;
        then.describe(inner);
        rec.add_fields("then_", inner);
        if (!inner.error().empty()) rec.set_error(inner.error());
        if (!detail::valid_fraction(start_fraction))
            rec.set_error(detail::concat("schedule::warmup: start_fraction must be in (0, 1], got ", start_fraction));
        if (steps < 1) rec.set_error("schedule::warmup: steps must be >= 1");
    }
};

} // namespace schedule

static_assert(schedule_policy<schedule::constant>);
static_assert(schedule_policy<schedule::warmup<schedule::cosine>>);

TRICKLE_NAMESPACE_END
