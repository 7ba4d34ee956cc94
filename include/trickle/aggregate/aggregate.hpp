// trickle/aggregate/aggregate.hpp: how DiLoCo's outer step combines the workers' outer
// gradients (diloco_options::aggregate; docs/robustness.md).
//
//   mean        the weighted mean, reduced by the topology (the default: an all-reduce of
//               the weighted deltas and the weights, today's bits)
//   trimmed:K   coordinate-wise trimmed mean: per coordinate the K lowest and K highest
//               contributions dropped, the rest averaged with their weights
//   median      coordinate-wise median (weights only decide who takes part)
//   clip:TAU    centered clipping: each contribution's difference to the previous round's
//               aggregate clipped to norm TAU, then the weighted mean of the clipped
//               differences added to it
//
// The robust rules need every worker's contribution on every worker: one all-gather of
// the fp32 deltas (N times the bytes a reduce-scatter sends), not a reduce. They combine
// with the all-reduce topology, the fp32 codec and host parameters; every other
// combination is refused at construction on every worker (the configuration record).
// The rule is a run-time value rather than a compile-time policy: it is a per-run choice
// of the trainer or the command line, and it decides one branch per outer step, which an
// all-gather of the whole model dwarfs.
#pragma once

#include <trickle/config.hpp>
#include <trickle/error.hpp>

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

TRICKLE_NAMESPACE_BEGIN

namespace aggregate {

enum class kind { mean, trimmed, median, clip };

struct rule {
    aggregate::kind kind = aggregate::kind::mean;
    int trim = 0;      // trimmed: K >= 1, with 2K below the number of workers
    double tau = 0.0;  // clip: the radius, finite and > 0

    bool robust() const { return kind != aggregate::kind::mean; }
    bool operator==(const rule&) const = default;

    // "mean", "trimmed:K", "median" or "clip:TAU" (as parse() reads it).
    std::string name() const {
        switch (kind) {
        case aggregate::kind::trimmed: return "trimmed:" + std::to_string(trim);
        case aggregate::kind::median: return "median";
        case aggregate::kind::clip: {
            char buf[32];
            const auto r = std::to_chars(buf, buf + sizeof buf, tau);
            return "clip:" + std::string(buf, r.ptr);
        }
        default: return "mean";
        }
    }

    // What is wrong with this rule for `workers` workers (-1: a number not known yet, as
    // over an elastic communicator, where a round with fewer workers trims fewer), or empty.
    std::string problem(int workers) const {
        switch (kind) {
        case aggregate::kind::trimmed:
            if (trim < 1) return detail::concat("aggregate trimmed:", trim, ": the trim count must be >= 1");
            if (workers >= 0 && 2 * trim >= workers)
                return detail::concat("aggregate trimmed:", trim, ": the trim count must be below half the workers (",
                                      workers, " workers keep none after dropping ", trim, " from each end)");
            return {};
        case aggregate::kind::clip:
            if (!(std::isfinite(tau) && tau > 0.0))
                return detail::concat("aggregate clip: the radius tau must be finite and > 0, got ", tau);
            return {};
        default: return {};
        }
    }
};

inline rule mean() { return {}; }
inline rule trimmed(int k) { return {kind::trimmed, k, 0.0}; }
inline rule median() { return {kind::median, 0, 0.0}; }
inline rule clip(double tau) { return {kind::clip, 0, tau}; }

// Reads "mean", "trimmed:K", "median" or "clip:TAU"; throws invalid_argument naming the
// accepted forms otherwise. (Whether K suits the number of workers is checked at
// construction, where that number is known.)
inline rule parse(std::string_view s) {
    const auto bad = [&](std::string_view why) {
        return invalid_argument(detail::concat("aggregate: '", s, "' ", why,
                                               " (expected mean, trimmed:K, median or clip:TAU)"));
    };
    if (s == "mean") return mean();
    if (s == "median") return median();
    const std::size_t colon = s.find(':');
    if (colon == std::string_view::npos) throw bad("is not a rule");
    const std::string_view head = s.substr(0, colon), arg = s.substr(colon + 1);
    if (head == "trimmed") {
        int k = 0;
        const auto r = std::from_chars(arg.data(), arg.data() + arg.size(), k);
        if (r.ec != std::errc{} || r.ptr != arg.data() + arg.size() || k < 1) throw bad("needs an integer K >= 1");
        return trimmed(k);
    }
    if (head == "clip") {
        double tau = 0.0;
        const auto r = std::from_chars(arg.data(), arg.data() + arg.size(), tau);
        if (r.ec != std::errc{} || r.ptr != arg.data() + arg.size() || !(std::isfinite(tau) && tau > 0.0))
            throw bad("needs a radius TAU > 0");
        return clip(tau);
    }
    throw bad("is not a rule");
}

} // namespace aggregate

TRICKLE_NAMESPACE_END
