// trickle/algorithm/stage/deadline.hpp: adaptive_deadline, the deadline of DiLoCo's
// deadline rounds derived from recent arrival times (diloco_options::deadline; docs/robustness.md).
//
// Workers at different speeds run rounds that close at a deadline (manual_outer: the
// trainer calls outer_step when it passes); a worker that has not finished its round's
// work by then contributes what it has, weighted by its tokens, and the rest of its work
// goes into the next round. A fixed deadline is a timeout tuned by hand. Here the deadline
// follows the arrival times: each worker reports when it finished (or would finish) its
// round's work, and after every round
//
//     deadline = clamp(Q_q(arrivals of the last `window` rounds) + grace, floor, cap)
//
// with Q_q the nearest-rank quantile (the value at rank ceil(q M) of the M sorted
// arrivals). An arrival of +inf means "not by the deadline, unknown when"; a NaN one (a
// worker that reported nothing) is left out. The sequence of deadlines is a pure function
// of the arrival times, so every worker computes the same one from the same gathered
// arrivals, and a test replays a recorded trace without sleeping. The unit is the
// trainer's (seconds, ticks).
#pragma once

#include <trickle/algorithm/stats.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

struct deadline_options {
    double quantile = 0.9;    // q in (0, 1]: the quantile of the arrival times the deadline follows
    double grace = 0.0;       // >= 0, added to the quantile
    double floor = 0.0;       // >= 0: the shortest deadline
    double cap = 0.0;         // >= floor and > 0: the longest deadline; 0 turns adaptive deadlines off
    double initial = 0.0;     // the first round's deadline, in [floor, cap]; 0: the cap
    std::uint32_t window = 4; // >= 1: the rounds of arrival times the quantile looks at

    bool active() const { return cap != 0.0; }
};

class adaptive_deadline {
public:
    adaptive_deadline() = default;
    explicit adaptive_deadline(deadline_options o) : o_(o) {
        const std::string p = problem(o);
        if (!p.empty()) throw invalid_argument(p);
        stats_.current = o.initial != 0.0 ? o.initial : o.cap;
    }

    // What is wrong with these options, or empty.
    static std::string problem(const deadline_options& o) {
        if (!(std::isfinite(o.cap) && o.cap > 0.0)) return detail::concat("deadline: cap must be finite and > 0, got ", o.cap);
        if (!(std::isfinite(o.floor) && o.floor >= 0.0))
            return detail::concat("deadline: floor must be finite and >= 0, got ", o.floor);
        if (o.cap < o.floor) return detail::concat("deadline: cap (", o.cap, ") is below the floor (", o.floor, ")");
        if (!(o.quantile > 0.0 && o.quantile <= 1.0))
            return detail::concat("deadline: quantile must be in (0, 1], got ", o.quantile);
        if (!(std::isfinite(o.grace) && o.grace >= 0.0))
            return detail::concat("deadline: grace must be finite and >= 0, got ", o.grace);
        if (o.window < 1) return "deadline: window must be >= 1 round";
        if (o.initial != 0.0 && !(o.initial >= o.floor && o.initial <= o.cap))
            return detail::concat("deadline: initial (", o.initial, ") must be in [floor, cap] = [", o.floor, ", ",
                                  o.cap, "]");
        return {};
    }

    static void describe(config_record& rec, const deadline_options& o) {
        rec.add("deadline_quantile", o.quantile)
            .add("deadline_grace", o.grace)
            .add("deadline_floor", o.floor)
            .add("deadline_cap", o.cap)
            .add("deadline_initial", o.initial)
            .add("deadline_window", o.window);
        const std::string p = problem(o);
        if (!p.empty()) rec.set_error(p);
    }

    const deadline_options& options() const { return o_; }
    // The deadline of the coming round.
    double current() const { return stats_.current; }
    const deadline_stats& stats() const { return stats_; }

    // Closes a round: its arrival time per worker, in rank order. Returns the next deadline.
    double record(const std::vector<double>& arrivals) {
        for (double a : arrivals)
            if (a > stats_.current) ++stats_.late; // +inf counts, NaN does not
        stats_.history.push_back(stats_.current);
        stats_.last_arrivals = arrivals;
        ++stats_.rounds;
        window_.push_back(arrivals);
        while (window_.size() > o_.window) window_.pop_front();
        std::vector<double> all;
        for (const auto& r : window_)
            for (double a : r)
                if (!std::isnan(a)) all.push_back(a);
        if (!all.empty()) {
            std::sort(all.begin(), all.end());
            const std::size_t M = all.size();
            std::size_t rank = static_cast<std::size_t>(std::ceil(o_.quantile * static_cast<double>(M)));
            rank = std::clamp<std::size_t>(rank, 1, M);
            const double q = all[rank - 1];
            stats_.current = std::clamp(q + o_.grace, o_.floor, o_.cap); // +inf becomes the cap
        }
        return stats_.current;
    }

    // The state a checkpoint or a joiner carries: the current deadline, the counters and
    // the window of arrivals (the history of deadlines stays with the worker).
    std::vector<double> state() const {
        std::vector<double> s{stats_.current, static_cast<double>(stats_.rounds), static_cast<double>(stats_.late),
                              static_cast<double>(window_.size())};
        for (const auto& r : window_) {
            s.push_back(static_cast<double>(r.size()));
            s.insert(s.end(), r.begin(), r.end());
        }
        return s;
    }
    void set_state(const std::vector<double>& s) {
        const auto bad = [] { return invalid_argument("deadline: the saved state is malformed"); };
        if (s.size() < 4) throw bad();
        std::deque<std::vector<double>> w;
        std::size_t at = 4;
        for (std::size_t i = 0; i < static_cast<std::size_t>(s[3]); ++i) {
            if (at >= s.size()) throw bad();
            const std::size_t m = static_cast<std::size_t>(s[at++]);
            if (s.size() - at < m) throw bad();
            w.emplace_back(s.begin() + static_cast<std::ptrdiff_t>(at), s.begin() + static_cast<std::ptrdiff_t>(at + m));
            at += m;
        }
        if (at != s.size()) throw bad();
        window_ = std::move(w);
        stats_.current = s[0];
        stats_.rounds = static_cast<std::uint64_t>(s[1]);
        stats_.late = static_cast<std::uint64_t>(s[2]);
    }

private:
    deadline_options o_{};
    deadline_stats stats_{};
    std::deque<std::vector<double>> window_;
};

TRICKLE_NAMESPACE_END
