// trickle/algorithm/stage/aggregate.hpp: outer_aggregate, the stage of DiLoCo's outer step
// that decides who takes part in a round and how the contributions combine
// (diloco_options::aggregate and ::deadline; docs/robustness.md).
//
// On host parameters every outer round begins with the workers' reports: one all-gather
// of 16 bytes per worker (its weight, the norm of its outer gradient, its arrival time).
// A worker whose outer gradient is not finite sends weight 0 and exact zeros, and every
// worker names it from the reports; if no contribution is left the round is skipped (the
// snapshot and the optimizer's state stay as they are). The mean rule then lets the route
// reduce the weighted deltas (its bits unchanged). A robust rule all-gathers every
// worker's unweighted delta and weight instead, checks each row itself (a row that is not
// finite is excluded, whatever its sender reported), and combines the participants with
// the rule's body (kernels/aggregate.hpp) into the buffer the outer update reads. The
// adaptive deadline (stage/deadline.hpp) records the reported arrivals after the round.
#pragma once

#include <trickle/aggregate/aggregate.hpp>
#include <trickle/algorithm/stage/deadline.hpp>
#include <trickle/algorithm/stage/replica_state.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/error.hpp>
#include <trickle/kernels/aggregate.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// What a worker tells the others at the start of an outer round.
struct worker_report {
    float weight = 0.0f; // its weight in this round (0: dropped, or its outer gradient is not finite)
    float norm = 0.0f;   // ||snapshot - params|| (inf or NaN: not finite)
    double arrival = std::numeric_limits<double>::quiet_NaN(); // when it finished its round's work (NaN: not reported)
};
static_assert(sizeof(worker_report) == 16);

class outer_aggregate {
public:
    outer_aggregate() = default;
    outer_aggregate(aggregate::rule rule, const deadline_options& deadline) : rule_(rule), deadline_on_(deadline.active()) {
        stats_.rule = rule.name();
        if (deadline_on_ && adaptive_deadline::problem(deadline).empty()) deadline_ = adaptive_deadline(deadline);
    }

    // The rule's and the deadline's fields of the configuration record, with what they
    // cannot combine with. Nothing is added for the mean rule without a deadline, so the
    // records (and the checkpoints' configuration hashes) of earlier versions stay as they were.
    static void describe(config_record& rec, const aggregate::rule& rule, const deadline_options& deadline, int workers,
                         bool all_reduce, bool plain_codec, bool streaming, bool on_device, bool manual_outer,
                         const char* kind) {
        if (rule.robust()) {
            rec.add("aggregate", rule.name());
            std::string p = rule.problem(workers);
            if (p.empty() && workers > max_robust_rows) // (an elastic view that grows past it: combine refuses)
                p = concat("aggregate ", rule.name(), ": combines at most ", max_robust_rows, " workers, there are ", workers);
            if (p.empty() && !all_reduce)
                p = "needs every worker's contribution on every worker: it runs on the all-reduce topology only";
            else if (p.empty() && !plain_codec)
                p = "gathers fp32 contributions: it cannot use an encoded all-reduce (choose the fp32 codec)";
            else if (p.empty() && streaming)
                p = "does not combine with streaming (fragments, overlap_steps)";
            else if (p.empty() && on_device)
                p = "runs on host parameters only in this version";
            if (!p.empty()) rec.set_error(concat(kind, ": aggregate ", rule.name(), ": ", p));
        }
        if (deadline.active()) {
            adaptive_deadline::describe(rec, deadline);
            if (!manual_outer)
                rec.set_error(concat(kind, ": an adaptive deadline needs manual_outer (the trainer closes each round "
                                           "at the deadline)"));
            else if (on_device)
                rec.set_error(concat(kind, ": adaptive deadlines run with host parameters only in this version"));
        }
    }

    bool robust() const { return rule_.robust(); }
    const aggregation_stats& stats() const { return stats_; }
    bool deadline_active() const { return deadline_on_; }
    const adaptive_deadline& deadline() const { return deadline_; }

    // This worker's arrival time in the coming round (local; NaN: none).
    void report_arrival(double t) { arrival_ = t; }

    // Collective: exchanges the reports. `w` is this worker's weight (0 when dropped) and
    // `norm` the norm of its outer gradient. Returns the weight it sends with (0 when its
    // outer gradient is not finite), or a negative value when no worker has a contribution
    // left (the round is skipped on every worker).
    template <class Comm>
    float begin(Comm& comm, float w, double norm) {
        const int N = comm.size();
        worker_report mine{w, static_cast<float>(norm), arrival_};
        if (!std::isfinite(mine.norm)) mine.weight = 0.0f;
        reports_.assign(static_cast<std::size_t>(N), worker_report{});
        comm.all_gather_bytes(&mine, reports_.data(), sizeof(worker_report));
        ++stats_.rounds;
        stats_.weights.assign(static_cast<std::size_t>(N), 0.0f);
        stats_.norm.assign(static_cast<std::size_t>(N), 0.0);
        stats_.distance.assign(static_cast<std::size_t>(N), std::numeric_limits<double>::quiet_NaN());
        stats_.trimmed_fraction.clear();
        stats_.clipped.clear();
        stats_.excluded.clear();
        bool any = false;
        for (int r = 0; r < N; ++r) {
            const worker_report& rep = reports_[static_cast<std::size_t>(r)];
            stats_.weights[static_cast<std::size_t>(r)] = rep.weight;
            stats_.norm[static_cast<std::size_t>(r)] = rep.norm;
            if (!std::isfinite(rep.norm)) exclude(r);
            any = any || rep.weight > 0.0f;
        }
        if (!any) {
            ++stats_.skipped;
            return -1.0f;
        }
        return mine.weight;
    }

    // Collective, robust rules: buf holds this worker's unweighted delta [0, n) and its
    // weight at buf[n]; on return buf[0, n) holds the aggregate and buf[n] 1 (0 when every
    // row was excluded, which makes the update's gradient 0).
    template <class Comm>
    void combine(Comm& comm, float* buf, std::size_t n) {
        const int N = comm.size();
        const std::size_t row = n + 1;
        gathered_.resize(static_cast<std::size_t>(N) * row);
        comm.all_gather_bytes(buf, gathered_.data(), row * sizeof(float));
        rows_.clear();
        weights_.clear();
        ranks_.clear();
        for (int r = 0; r < N; ++r) {
            const float* p = gathered_.data() + static_cast<std::size_t>(r) * row;
            const float w = p[n];
            if (!(std::isfinite(w) && w > 0.0f)) continue;
            if (!all_finite(p, n)) { // its sender reported it finite
                exclude(r);
                stats_.weights[static_cast<std::size_t>(r)] = 0.0f;
                continue;
            }
            rows_.push_back(p);
            weights_.push_back(w);
            ranks_.push_back(r);
        }
        const int m = static_cast<int>(rows_.size());
        if (m > max_robust_rows) // the same on every worker
            throw invalid_argument(concat("aggregate ", rule_.name(), ": combines at most ", max_robust_rows,
                                          " workers, this round has ", m));
        buf[n] = m > 0 ? 1.0f : 0.0f;
        if (m == 0) return;
        const robust_rows in{rows_.data(), weights_.data(), m};
        switch (rule_.kind) {
        case aggregate::kind::trimmed: {
            const int trim = std::min(rule_.trim, (m - 1) / 2);
            counts_.assign(static_cast<std::size_t>(m), 0);
            trimmed_mean_body{in, trim, buf, counts_.data()}.run(0, n);
            stats_.trimmed_fraction.assign(static_cast<std::size_t>(N), 0.0);
            for (int j = 0; j < m; ++j) {
                const double f = n == 0 ? 0.0 : static_cast<double>(counts_[static_cast<std::size_t>(j)]) / static_cast<double>(n);
                stats_.trimmed_fraction[static_cast<std::size_t>(ranks_[static_cast<std::size_t>(j)])] = f;
                if (f > 0.5) name_clipped(ranks_[static_cast<std::size_t>(j)]);
            }
            break;
        }
        case aggregate::kind::median: median_body{in, buf}.run(0, n); break;
        case aggregate::kind::clip: {
            if (center_.size() != n) center_.assign(n, 0.0f);
            factors_.resize(static_cast<std::size_t>(m));
            for (int j = 0; j < m; ++j) {
                const double d = distance(rows_[static_cast<std::size_t>(j)], center_.data(), n);
                factors_[static_cast<std::size_t>(j)] = clip_factor(d, rule_.tau);
                if (factors_[static_cast<std::size_t>(j)] < 1.0f) name_clipped(ranks_[static_cast<std::size_t>(j)]);
            }
            clipped_mean_body{in, center_.data(), factors_.data(), buf}.run(0, n);
            std::memcpy(center_.data(), buf, n * sizeof(float));
            break;
        }
        default: break;
        }
        for (int j = 0; j < m; ++j)
            stats_.distance[static_cast<std::size_t>(ranks_[static_cast<std::size_t>(j)])] =
                distance(rows_[static_cast<std::size_t>(j)], buf, n);
    }

    // After the round (applied or skipped): the deadline records the reported arrivals.
    void end() {
        if (deadline_on_ && !reports_.empty()) {
            std::vector<double> a(reports_.size());
            for (std::size_t r = 0; r < a.size(); ++r) a[r] = reports_[r].arrival;
            deadline_.record(a);
        }
        reports_.clear();
        arrival_ = std::numeric_limits<double>::quiet_NaN();
    }

    // The stage's part of the replica state: its counters (backed up only, never saved), the
    // clipping center and the deadline's state (global state, identical on every worker;
    // neither exists for the mean rule without a deadline, so those checkpoints keep their
    // format).
    void add_sections(replica_state& rs, std::size_t n) {
        // The counters over all rounds, backed up only: a round redone after a peer failure
        // counts once (the last round's per-worker fields are rewritten by the redone round).
        rs.add("aggregation", backed_up, 4 * sizeof(std::uint64_t),
               [this] {
                   const std::uint64_t c[4] = {stats_.rounds, stats_.clipped_total, stats_.excluded_total,
                                               stats_.skipped};
                   return bytes_of(c, 4);
               },
               [this](const std::string& b) {
                   std::uint64_t c[4] = {};
                   bytes_to(b, c, 4);
                   stats_.rounds = c[0];
                   stats_.clipped_total = c[1];
                   stats_.excluded_total = c[2];
                   stats_.skipped = c[3];
               });
        if (rule_.kind == aggregate::kind::clip)
            rs.add("aggregate_center", saved | sent | hashed | backed_up, n * sizeof(float),
                   [this, n] {
                       std::vector<float> c = center_;
                       c.resize(n, 0.0f);
                       return bytes_of(c.data(), n);
                   },
                   [this, n](const std::string& b) {
                       center_.assign(n, 0.0f);
                       bytes_to(b, center_.data(), n);
                   });
        if (deadline_on_)
            rs.add(replica_state::section{"deadline", saved | sent | hashed | backed_up,
                                          [this] {
                                              const std::vector<double> s = deadline_.state();
                                              return bytes_of(s.data(), s.size());
                                          },
                                          [this](const std::string& b) {
                                              std::vector<double> s(b.size() / sizeof(double));
                                              bytes_to(b, s.data(), s.size());
                                              deadline_.set_state(s);
                                          },
                                          [](const staged_sections&) { return replica_state::any_size; },
                                          [](const staged_sections& st) {
                                              const std::string& b = st["deadline"];
                                              if (b.size() % sizeof(double) != 0)
                                                  throw invalid_argument("checkpoint: the deadline section is malformed");
                                              std::vector<double> s(b.size() / sizeof(double));
                                              bytes_to(b, s.data(), s.size());
                                              adaptive_deadline{}.set_state(s); // throws when malformed
                                          }});
    }

private:
    void exclude(int r) {
        stats_.excluded.push_back(r);
        ++stats_.excluded_total;
    }
    void name_clipped(int r) {
        stats_.clipped.push_back(r);
        ++stats_.clipped_total;
    }

    aggregate::rule rule_{};
    bool deadline_on_ = false;
    adaptive_deadline deadline_{};
    aggregation_stats stats_{};
    double arrival_ = std::numeric_limits<double>::quiet_NaN();
    std::vector<worker_report> reports_;
    std::vector<float> gathered_, weights_, center_, factors_;
    std::vector<const float*> rows_;
    std::vector<int> ranks_;
    std::vector<std::uint64_t> counts_;
};

} // namespace detail

TRICKLE_NAMESPACE_END
