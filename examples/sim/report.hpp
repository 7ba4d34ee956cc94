// examples/sim/report.hpp: what trickle-sim prints: the CSV, the comparison table and the progress line.
#pragma once

#include "options.hpp"
#include "trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace trickle_sim {

inline constexpr const char* csv_header = "strategy,step,eval_loss,eval_ppl,train_loss,correlation,"
                                          "bytes_sent_per_worker,reduction_vs_ddp,wall_s,peak_bytes,sim_wall_s";

// The CSV column of a further --network: sim_wall_s_<preset>, or of BW,LAT sim_wall_s_BW_LAT.
inline std::string network_column(const network_config& net) {
    std::string s = "sim_wall_s_";
    s += net.label;
    for (char& ch : s)
        if (ch == ',' || ch == ';' || ch == '=') ch = '_'; // BW,LAT and per-worker links ("internet;2=...")
    return s;
}

// The columns elastic and --speeds runs add at the end (docs/simulator.md).
inline constexpr const char* membership_columns = "live_workers,epoch,model_time,goodput";

// The header: the fixed columns, sim_wall_s for the first network, a column for each
// other, and the membership columns of an elastic or --speeds run.
inline std::string csv_header_for(const std::vector<network_config>& networks, bool membership = false) {
    std::string h = csv_header;
    for (std::size_t k = 1; k < networks.size(); ++k) {
        h += ',';
        h += network_column(networks[k]);
    }
    if (membership) {
        h += ',';
        h += membership_columns;
    }
    return h;
}

namespace detail {
// "inf" and "nan" as Python's float() and pandas read them.
inline std::string number(double v, int precision) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    std::ostringstream os;
    os << std::fixed << std::setprecision(precision) << v;
    return os.str();
}
} // namespace detail

inline std::string csv_line(const eval_row& r, bool membership = false) {
    std::ostringstream os;
    os << r.strategy << ',' << r.step << ',' << detail::number(r.eval_loss, 6) << ',' << detail::number(r.eval_ppl, 4)
       << ',' << detail::number(r.train_loss, 6) << ',' << detail::number(r.correlation, 6) << ','
       << r.bytes_sent_per_worker << ',' << detail::number(r.reduction_vs_ddp, 3) << ','
       << detail::number(r.wall_s, 3) << ',' << r.peak_bytes << ','
       << detail::number(r.sim_wall_s.empty() ? std::numeric_limits<double>::quiet_NaN() : r.sim_wall_s[0], 4);
    for (std::size_t k = 1; k < r.sim_wall_s.size(); ++k) os << ',' << detail::number(r.sim_wall_s[k], 4);
    if (membership)
        os << ',' << r.live_workers << ',' << r.epoch << ',' << detail::number(r.model_time, 3) << ','
           << detail::number(r.goodput, 6);
    return os.str();
}

// The CSV file, opened before training so a bad path fails at once; rows are flushed
// after each run, so an interrupted comparison keeps the runs that finished.
class csv_writer {
public:
    // Opens the file and writes the header through to it, so a file that cannot be written
    // (a full disk, /dev/full) is a usage_error now rather than after the first run.
    explicit csv_writer(const std::string& path, const std::vector<network_config>& networks = {},
                        bool membership = false)
        : out_(path, std::ios::trunc), membership_(membership) {
        if (!out_) throw usage_error("--csv: cannot open " + quoted_value(path) + " for writing");
        out_ << csv_header_for(networks, membership) << '\n';
        out_.flush();
        if (!out_) throw usage_error("--csv: cannot write to " + quoted_value(path));
    }
    void write(const run_result& run) {
        for (const auto& r : run.rows) out_ << csv_line(r, membership_) << '\n';
        out_.flush();
        if (!out_) throw std::runtime_error("--csv: write failed");
    }

private:
    std::ofstream out_;
    bool membership_ = false;
};

// 1536 -> "1.5 KiB".
inline std::string human_bytes(std::uint64_t b) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(b);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    std::ostringstream os;
    os << std::fixed << std::setprecision(u == 0 ? 0 : 1) << v << ' ' << units[u];
    return os.str();
}

inline std::string human_reduction(double x) {
    if (std::isnan(x)) return "-";
    if (std::isinf(x)) return "no traffic";
    std::ostringstream os;
    os << std::fixed << std::setprecision(x < 9.995 ? 2 : x < 99.95 ? 1 : 0) << x << 'x';
    return os.str();
}

// One line per strategy: its last evaluation, and its replicas' own held-out loss.
inline void print_table(std::ostream& os, const std::vector<run_result>& runs) {
    os << std::left << std::setw(15) << "strategy" << std::right << std::setw(10) << "eval loss" << std::setw(9)
       << "eval ppl" << std::setw(13) << "replica loss" << std::setw(11) << "train loss" << std::setw(8) << "corr"
       << std::setw(13) << "sent/worker" << std::setw(12) << "vs ddp" << std::setw(8) << "wall s" << '\n';
    for (const auto& run : runs) {
        if (run.rows.empty()) continue;
        const eval_row& r = run.rows.back();
        double replica = 0;
        for (double l : run.replica_eval_loss) replica += l;
        replica /= static_cast<double>(std::max<std::size_t>(1, run.replica_eval_loss.size()));
        os << std::left << std::setw(15) << r.strategy << std::right << std::setw(10) << detail::number(r.eval_loss, 4)
           << std::setw(9) << detail::number(r.eval_ppl, 3) << std::setw(13) << detail::number(replica, 4)
           << std::setw(11) << detail::number(r.train_loss, 4) << std::setw(8) << detail::number(r.correlation, 3)
           << std::setw(13) << human_bytes(r.bytes_sent_per_worker) << std::setw(12)
           << human_reduction(r.reduction_vs_ddp) << std::setw(8) << detail::number(r.wall_s, 1) << '\n';
    }
}

// The network model's table: each strategy's modelled wall time on each --network at its
// last evaluation, with the compute part and the communication it could not hide.
inline void print_network_table(std::ostream& os, const std::vector<run_result>& runs,
                                const std::vector<network_config>& networks) {
    if (networks.empty()) return;
    os << "\nmodelled wall time (network model, docs/simulator.md): compute + communication not hidden, seconds\n";
    os << std::left << std::setw(18) << "strategy" << std::right << std::setw(14) << "compute/step" << std::setw(11)
       << "peak op";
    for (const auto& net : networks) os << std::setw(std::max<int>(14, static_cast<int>(net.label.size()) + 2)) << net.label;
    os << '\n';
    for (const auto& run : runs) {
        if (run.rows.empty()) continue;
        const eval_row& r = run.rows.back();
        std::ostringstream per_step;
        per_step << detail::number(r.step_compute_s * 1e3, 3) << " ms";
        os << std::left << std::setw(18) << r.strategy << std::right << std::setw(14) << per_step.str() << std::setw(11)
           << human_bytes(r.peak_bytes);
        for (std::size_t k = 0; k < networks.size(); ++k)
            os << std::setw(std::max<int>(14, static_cast<int>(networks[k].label.size()) + 2))
               << detail::number(r.sim_wall_s[k], 2);
        os << '\n';
    }
}

// Elastic and --speeds runs: membership and the modelled goodput of each strategy
// (docs/simulator.md gives the formula).
inline void print_membership_table(std::ostream& os, const std::vector<run_result>& runs) {
    bool any = false;
    for (const auto& run : runs) any = any || run.membership.present;
    if (!any) return;
    os << "\nmembership and goodput (modelled time in inner steps of a speed-1 worker; docs/simulator.md)\n";
    os << std::left << std::setw(15) << "strategy" << std::right << std::setw(9) << "rounds" << std::setw(8) << "alive"
       << std::setw(7) << "epoch" << std::setw(9) << "changes" << std::setw(7) << "joins" << std::setw(7) << "left"
       << std::setw(10) << "<quorum" << std::setw(9) << "retried" << std::setw(12) << "state sent" << std::setw(10)
       << "useful" << std::setw(8) << "lost" << std::setw(12) << "worker time" << std::setw(11) << "model time"
       << std::setw(9) << "goodput" << '\n';
    for (const auto& run : runs) {
        if (!run.membership.present || run.rows.empty()) continue;
        const membership_summary& m = run.membership;
        os << std::left << std::setw(15) << run.rows.back().strategy << std::right << std::setw(9) << m.rounds
           << std::setw(8) << m.final_workers << std::setw(7) << m.epoch << std::setw(9) << m.changes << std::setw(7)
           << m.joined << std::setw(7) << m.left << std::setw(10) << m.rounds_below_quorum << std::setw(9)
           << m.rounds_retried << std::setw(12) << human_bytes(m.state_bytes) << std::setw(10)
           << detail::number(m.useful_steps, 0) << std::setw(8) << detail::number(m.lost_steps, 0) << std::setw(12)
           << detail::number(m.worker_time, 0) << std::setw(11) << detail::number(m.model_time, 0) << std::setw(9)
           << detail::number(m.goodput, 4) << '\n';
    }
    // --round-policy adaptive: the deadlines the rounds closed at.
    for (const auto& run : runs) {
        const membership_summary& m = run.membership;
        if (!m.present || !m.adaptive || run.rows.empty() || m.deadlines.empty()) continue;
        double sum = 0, lo = m.deadlines.front(), hi = m.deadlines.front();
        for (double d : m.deadlines) {
            sum += d;
            lo = std::min(lo, d);
            hi = std::max(hi, d);
        }
        os << run.rows.back().strategy << ": adaptive deadline over " << m.deadlines.size() << " rounds: mean "
           << detail::number(sum / static_cast<double>(m.deadlines.size()), 2) << " (min " << detail::number(lo, 2)
           << ", max " << detail::number(hi, 2) << ", last " << detail::number(m.deadlines.back(), 2)
           << ") speed-1 steps; late arrivals " << m.late_arrivals << '\n';
    }
}

// DiLoCo's aggregation under --aggregate or --byzantine (the first worker's view, the same
// on every worker): the rule, the outer rounds aggregated, the exclusions (non-finite
// contributions), the entries clipped (clip) or workers trimmed in most coordinates
// (trimmed), the rounds skipped (every contribution excluded), and the last round's mean
// outer-gradient norm of the honest and of the byzantine workers. Nothing otherwise.
inline void print_aggregation_table(std::ostream& os, const std::vector<run_result>& runs, const sim_config& cfg) {
    if (!cfg.aggregate.robust() && cfg.byzantine.empty()) return;
    os << "\naggregation (DiLoCo's outer steps; the last round's mean outer-gradient norm by kind of worker)\n";
    os << std::left << std::setw(15) << "strategy" << std::right << std::setw(14) << "rule" << std::setw(8) << "rounds"
       << std::setw(10) << "excluded" << std::setw(17) << "clipped/trimmed" << std::setw(9) << "skipped"
       << std::setw(13) << "norm honest" << std::setw(16) << "norm byzantine" << '\n';
    for (const auto& run : runs) {
        if (run.rows.empty()) continue;
        const trickle::aggregation_stats& a = run.aggregation;
        double sum[2] = {0, 0};
        int count[2] = {0, 0};
        for (std::size_t w = 0; w < a.norm.size(); ++w) {
            const int bad = byzantine_of(cfg.byzantine, static_cast<int>(w)) != nullptr ? 1 : 0;
            sum[bad] += a.norm[w];
            ++count[bad];
        }
        const auto mean = [&](int k) { return count[k] > 0 ? detail::number(sum[k] / count[k], 4) : std::string("-"); };
        os << std::left << std::setw(15) << run.rows.back().strategy << std::right << std::setw(14) << a.rule
           << std::setw(8) << a.rounds << std::setw(10) << a.excluded_total << std::setw(17) << a.clipped_total
           << std::setw(9) << a.skipped << std::setw(13) << mean(0) << std::setw(16) << mean(1) << '\n';
    }
    if (!cfg.byzantine.empty()) {
        os << "byzantine:";
        for (const auto& b : cfg.byzantine) os << " worker " << b.worker << ' ' << byzantine_kind_name(b) << ';';
        os << " each corrupts every outer gradient it sends\n";
    }
}

// The progress line on stderr: rewritten in place at most 5 times a second on a terminal;
// otherwise one line every 15 s, so a redirected log stays short.
class progress_line final : public step_observer {
public:
    explicit progress_line(bool enabled) : enabled_(enabled), tty_(isatty(fileno(stderr)) == 1) {}

    // tokens_per_step: targets trained per step over all workers, for the throughput.
    void begin(std::string label, int steps, double tokens_per_step) {
        label_ = std::move(label);
        steps_ = steps;
        tokens_per_step_ = tokens_per_step;
        start_ = last_ = std::chrono::steady_clock::now();
        loss_ = 0;
        seen_ = 0;
        workers_ = -1;
        epoch_ = 0;
    }

    void on_membership(int workers, std::uint64_t epoch) override {
        workers_ = workers;
        epoch_ = epoch;
    }

    void on_step(int step, double train_loss) override {
        // A smoothed loss: single batches are noisy.
        loss_ = seen_ == 0 ? train_loss : 0.95 * loss_ + 0.05 * train_loss;
        ++seen_;
        if (!enabled_) return;
        const auto now = std::chrono::steady_clock::now();
        const double since = std::chrono::duration<double>(now - last_).count();
        if (since < (tty_ ? 0.2 : 15.0) && step != steps_) return;
        last_ = now;
        const double elapsed = std::chrono::duration<double>(now - start_).count();
        const double eta = elapsed / step * (steps_ - step);
        // Training tokens (predicted characters) per second, all workers together; the
        // evaluations inside the elapsed time count against it.
        const double rate = elapsed > 0 ? tokens_per_step_ * step / elapsed : 0.0;
        char line[320];
        // Elastic runs name the members and the epoch of their view.
        char members[64] = "";
        if (workers_ >= 0)
            std::snprintf(members, sizeof members, "  workers %d  epoch %llu", workers_,
                          static_cast<unsigned long long>(epoch_));
        std::snprintf(line, sizeof line, "%s  step %d/%d%s  loss %.4f  %.0f tok/s  elapsed %.1fs  ETA %.1fs",
                      label_.c_str(), step, steps_, members, loss_, rate, elapsed, eta);
        if (tty_)
            std::fprintf(stderr, "\r\033[K%s", line);
        else
            std::fprintf(stderr, "%s\n", line);
        std::fflush(stderr);
    }

    void end() {
        if (enabled_ && tty_) {
            std::fprintf(stderr, "\r\033[K");
            std::fflush(stderr);
        }
    }

private:
    bool enabled_, tty_;
    std::string label_;
    int steps_ = 0;
    double tokens_per_step_ = 0;
    std::chrono::steady_clock::time_point start_, last_;
    double loss_ = 0;
    long seen_ = 0;
    int workers_ = -1; // elastic runs: the members (-1: not reported)
    std::uint64_t epoch_ = 0;
};

} // namespace trickle_sim
