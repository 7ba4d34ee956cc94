// examples/sim/trainer.hpp: one simulated training run: N workers as threads over comm::local, one strategy.
//
// Each worker owns a replica (same initialisation everywhere), its AdamW state, its shard
// and its batch stream. At each evaluation the workers meet at barriers (which send
// nothing) and measure through shared memory: the averaged model's held-out loss, split
// over the workers, and the replicas' pairwise correlation.
#pragma once

#include "byzantine.hpp"
#include "corpus.hpp"
#include "gpt.hpp"
#include "model.hpp"
#include "network.hpp"
#include "options.hpp"
#include "replicas.hpp"
#include "rng.hpp"
#include "strategies.hpp"

#include <trickle/trickle.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <time.h>

namespace trickle_sim {

// One evaluation: one CSV row.
struct eval_row {
    std::string strategy;
    int step = 0;
    double eval_loss = 0;   // mean cross-entropy (nats) of the averaged model on held-out text
    double eval_ppl = 0;    // exp(eval_loss)
    double train_loss = 0;  // mean over workers of their training loss since the previous evaluation
    double correlation = 0; // mean pairwise correlation of the replicas' changes since initialisation
    std::uint64_t bytes_sent_per_worker = 0; // the busiest worker's bytes so far, from trickle's counters
    double reduction_vs_ddp = 0;             // ddp's bytes for the same steps / bytes_sent_per_worker
    double wall_s = 0;                       // seconds since training started
    std::uint64_t peak_bytes = 0;            // the most one worker sent in one operation so far
    double step_compute_s = 0;               // the model's compute per step: --step-time or measured so far
    std::vector<double> sim_wall_s;          // the modelled wall time on each --network (network.hpp)
    // Elastic and --speeds runs (trainer_elastic.cpp); the CSV has them only for those.
    int live_workers = 0;       // members after this step
    std::uint64_t epoch = 0;    // the membership epoch of their view
    double model_time = 0;      // modelled time so far, in inner steps of a speed-1 worker
    double goodput = 0;         // useful inner steps / worker time, were training to stop here
};

// What an elastic or --speeds run adds to its result (docs/simulator.md gives the formula).
struct membership_summary {
    bool present = false;               // an elastic or --speeds run
    bool elastic = false;               // over comm::elastic_local
    std::string rounds = "fixed";       // fixed (no --speeds), deadline or wait
    int final_workers = 0;              // members at the end
    std::uint64_t epoch = 0;            // the epoch of the last view
    std::uint64_t changes = 0, joined = 0, left = 0, joins_refused = 0; // most seen by one worker
    std::uint64_t rounds_retried = 0, rounds_below_quorum = 0;          // most seen by one worker
    std::uint64_t state_bytes = 0;      // state received by the joiners, in all
    double useful_steps = 0;            // inner steps whose work reached the evaluated model
    double lost_steps = 0;              // inner steps of failed workers since their last round
    double worker_time = 0;             // the workers' time, idle included, in speed-1 steps
    double model_time = 0;              // the run's modelled duration, in speed-1 steps
    double goodput = 0;                 // useful_steps / worker_time
    std::vector<double> round_times;    // each round's modelled duration, in speed-1 steps (with --network: + its communication)
    // --round-policy adaptive: the deadline each round closed at (speed-1 steps) and the
    // arrivals after their round's deadline (DiLoCo's deadline_stats).
    bool adaptive = false;
    std::vector<double> deadlines;
    std::uint64_t late_arrivals = 0;
};

struct run_result {
    strategy_kind strategy{};
    std::vector<eval_row> rows;
    std::vector<std::vector<float>> replicas;  // each worker's final parameters
    std::vector<std::uint64_t> bytes_sent;     // each worker's final bytes, from trickle's counters
    std::vector<double> replica_eval_loss;     // each worker's own replica on the held-out text, at the end
    std::uint64_t ddp_bytes_per_step = 0;      // the dense gradient all-reduce, busiest worker
    std::size_t parameters = 0;
    double wall_s = 0;
    std::vector<std::vector<step_traffic>> traffic; // each worker's completed operations, step by step
    traffic_shape shape{};                          // how they count in the network model
    // Elastic runs: the ids of the workers alive at the end, whose replicas, bytes and
    // replica losses the vectors above hold, in this order (empty: ids 0 .. N-1).
    std::vector<int> final_ids;
    membership_summary membership;
    // diloco and sparta-diloco: how the outer steps combined the workers' outer gradients
    // (the first worker's view, identical on every worker; --aggregate, --byzantine).
    trickle::aggregation_stats aggregation;
};

// The compute-time clock of one worker: the CPU time of its own thread, which a shared
// or oversubscribed machine does not inflate; the GPT's OpenMP threads (--threads > 1) do
// work on other threads, so there the wall clock.
inline double compute_clock(bool wall) {
    if (wall) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Told about every step of rank 0, from rank 0's thread.
class step_observer {
public:
    virtual ~step_observer() = default;
    virtual void on_step(int step, double train_loss) = 0;
    // Elastic runs, before on_step: the members and the epoch of their view.
    virtual void on_membership(int /*workers*/, std::uint64_t /*epoch*/) {}
};

// ddp's bytes per step for the busiest worker: the communicator's cost model for an fp32
// all-reduce of every parameter (the test suite checks ddp's counted bytes against it).
inline std::uint64_t ddp_bytes_per_step(std::size_t parameters, int workers) {
    std::uint64_t most = 0;
    for (int r = 0; r < workers; ++r)
        most = std::max(most, trickle::detail::all_reduce_bytes(parameters, sizeof(float), workers, r));
    return most;
}

inline double reduction(std::uint64_t reference, std::uint64_t bytes) {
    if (bytes == 0)
        return reference == 0 ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    return static_cast<double>(reference) / static_cast<double>(bytes);
}

// The targets one example trains: 1 for the MLP, a window's --context for the GPT.
inline int targets_per_example(const model_config& m) { return m.kind == model_kind::gpt ? m.context : 1; }

// What trickle-sim trains: the model of --model, and a workspace for one worker.
inline std::size_t parameter_count(const model_config& m, int vocab) {
    return m.kind == model_kind::gpt ? gpt(m, vocab).size() : mlp(m, vocab).size();
}

// The compute per inner step the network model uses: --step-time, or the workers' measured
// compute over their first t steps (mean over workers).
inline double step_compute_seconds(const sim_config& cfg, const std::vector<double>& compute_per_worker, int t) {
    if (cfg.step_time_s > 0) return cfg.step_time_s;
    double s = 0;
    for (double c : compute_per_worker) s += c;
    return s / (static_cast<double>(compute_per_worker.size()) * t);
}

namespace detail {

// One worker's workspace: the MLP evaluates in batches of 256 examples, the GPT in
// batches of about 1024 targets, both at least a training batch.
inline mlp_workspace make_workspace(const mlp& model, const sim_config& cfg) {
    return mlp_workspace(model, std::max(cfg.batch, 256));
}
inline gpt_workspace make_workspace(const gpt& model, const sim_config& cfg) {
    return gpt_workspace(model, std::max(cfg.batch, std::max(1, 1024 / cfg.model.context)), cfg.threads);
}

template <class Model>
run_result run_strategy_with(const Model& model, const sim_config& cfg, const dataset& data, strategy_kind kind,
                             step_observer* observer) {
    const std::size_t n = model.size();
    const int N = cfg.workers;
    const auto W = static_cast<std::size_t>(N);

    run_result result;
    result.strategy = kind;
    result.parameters = n;
    result.replicas.resize(W);
    result.bytes_sent.resize(W);
    result.replica_eval_loss.resize(W);
    result.ddp_bytes_per_step = ddp_bytes_per_step(n, N);

    // What the workers share for measuring.
    std::vector<const float*> replicas(W, nullptr);
    std::vector<float> origin(n), average(n);
    model.init(origin, cfg.seed);
    std::vector<double> eval_part(W), corr_part(W), train_part(W);
    std::vector<std::uint64_t> bytes_part(W), peak_part(W);
    std::vector<double> compute_part(W);
    std::vector<std::vector<double>> exposed_part(cfg.networks.size(), std::vector<double>(W));
    result.traffic.resize(W);
    // ddp and DeMo exchange among all the workers whatever --topology says.
    result.shape.rounds = kind == strategy_kind::ddp || uses_demo(kind)
                              ? exchange_rounds(topology_kind::all_reduce, N, 0)
                              : exchange_rounds(cfg.topology, N, cfg.island_size);
    const bool wall_clock = cfg.model.kind == model_kind::gpt && cfg.threads > 1;
    const auto pairs = replica_pairs(N);
    const std::size_t M = data.eval_positions.size();
    // Held-out targets: M examples of targets_per_example each.
    const double eval_targets = static_cast<double>(M) * targets_per_example(cfg.model);
    std::chrono::steady_clock::time_point start;

    trickle::comm::run_local(N, [&](trickle::comm::local& comm) {
        const int r = comm.rank();
        const auto R = static_cast<std::size_t>(r);
        std::vector<float> params(n), grads(n);
        model.init(params, cfg.seed);
        replicas[R] = params.data();

        trickle::param_group<float> group;
        for (const auto& t : model.tensors()) group.add(t.name, params.data() + t.offset, t.size());
        const std::vector<std::uint32_t>& shard = data.shards[R];
        const auto ex = make_exchanger(kind, cfg, group, model.tensors(), comm, static_cast<float>(shard.size()));
        std::optional<byzantine_worker> byz; // --byzantine: corrupts what it sends at each outer step
        if (const byzantine_spec* b = byzantine_of(cfg.byzantine, r)) byz.emplace(*b, cfg.seed, params);

        adamw opt(model, cfg.weight_decay);
        auto ws = make_workspace(model, cfg);
        rng batches = rng::stream(cfg.seed, 0x6261746368000000ull + static_cast<std::uint64_t>(r));
        std::vector<std::uint32_t> batch(static_cast<std::size_t>(cfg.batch));
        double loss_sum = 0;
        int loss_count = 0;
        double compute_s = 0;          // this worker's measured compute (forward, backward, optimizer)
        traffic_split seen{};          // its exchanges' traffic up to the previous step
        std::vector<step_traffic>& log = result.traffic[R];
        if (r == 0) result.shape.hide_steps = ex->hide_steps();
        // Records what completed since the previous call; `blocking`: count all of it as
        // blocking (the final flush, which has no compute left to run behind).
        auto note_traffic = [&](int t, bool blocking) {
            const traffic_split now = ex->traffic();
            if (now == seen) return;
            step_traffic e{.step = t,
                           .blocking_ops = now.blocking_ops - seen.blocking_ops,
                           .blocking_bytes = now.blocking_bytes - seen.blocking_bytes,
                           .hidden_ops = now.hidden_ops - seen.hidden_ops,
                           .hidden_bytes = now.hidden_bytes - seen.hidden_bytes};
            if (blocking) {
                e.blocking_ops += std::exchange(e.hidden_ops, 0);
                e.blocking_bytes += std::exchange(e.hidden_bytes, 0);
            }
            log.push_back(e);
            seen = now;
        };

        ex->barrier(comm);
        if (r == 0) start = std::chrono::steady_clock::now();
        for (int t = 1; t <= cfg.steps; ++t) {
            for (auto& p : batch) p = shard[batches.below(shard.size())];
            double c0 = compute_clock(wall_clock);
            const float loss = ws.train_step(params.data(), grads.data(), data.tokens.data(), batch.data(), cfg.batch);
            compute_s += compute_clock(wall_clock) - c0;
            ex->reduce_gradients(grads.data(), n);
            c0 = compute_clock(wall_clock);
            if (cfg.clip > 0) clip_global_norm(grads.data(), n, cfg.clip);
            const float lr = learning_rate(cfg, t);
            if (!ex->optimizer_step(grads.data(), n, lr)) opt.step(params.data(), grads.data(), lr);
            compute_s += compute_clock(wall_clock) - c0;
            const bool corrupt = byz && t % cfg.outer_interval == 0;
            if (corrupt) byz->before_outer(params);
            ex->after_step();
            if (corrupt) byz->after_outer(params);
            note_traffic(t, false);
            if (t == cfg.steps) {
                ex->finish();
                note_traffic(t, true);
            }
            loss_sum += loss;
            ++loss_count;
            if (r == 0 && observer != nullptr) observer->on_step(t, loss);
            if (t % cfg.eval_every != 0 && t != cfg.steps) continue;

            // Evaluation. Barrier 1: every replica is at step t.
            ex->barrier(comm);
            train_part[R] = loss_sum / loss_count;
            bytes_part[R] = ex->bytes_sent();
            peak_part[R] = ex->peak_bytes();
            compute_part[R] = compute_s;
            loss_sum = 0;
            loss_count = 0;
            average_slice(replicas, average.data(), R * n / W, (R + 1) * n / W);
            ex->barrier(comm); // 2: the averaged model is complete, every compute_part written
            // The network model: this worker's exposed communication on each network,
            // with the compute per step the model uses (given, or measured so far).
            const double step_compute = step_compute_seconds(cfg, compute_part, t);
            for (std::size_t k = 0; k < cfg.networks.size(); ++k)
                exposed_part[k][R] = exposed_total(log, t, result.shape, cfg.networks[k].slowest(N), step_compute);
            const std::size_t b = R * M / W, e = (R + 1) * M / W;
            eval_part[R] = ws.loss_sum(average.data(), data.tokens.data(), data.eval_positions.data() + b, e - b);
            double corr = 0;
            for (std::size_t q = R; q < pairs.size(); q += W)
                corr += change_correlation(replicas[static_cast<std::size_t>(pairs[q].first)],
                                           replicas[static_cast<std::size_t>(pairs[q].second)], origin.data(), n);
            corr_part[R] = corr;
            ex->barrier(comm); // 3: every part is written and nobody reads the replicas any more
            if (r != 0) continue;
            eval_row row;
            row.strategy = std::string(name_of(kind));
            row.step = t;
            double eval_sum = 0, train = 0, corr_sum = 0;
            for (std::size_t w = 0; w < W; ++w) {
                eval_sum += eval_part[w];
                train += train_part[w];
                corr_sum += corr_part[w];
                row.bytes_sent_per_worker = std::max(row.bytes_sent_per_worker, bytes_part[w]);
                row.peak_bytes = std::max(row.peak_bytes, peak_part[w]);
            }
            row.step_compute_s = step_compute_seconds(cfg, compute_part, t);
            for (const auto& exposed : exposed_part) row.sim_wall_s.push_back(modelled_wall(t, row.step_compute_s, exposed));
            row.eval_loss = eval_sum / eval_targets;
            row.eval_ppl = std::exp(row.eval_loss);
            row.train_loss = train / static_cast<double>(W);
            row.correlation = pairs.empty() ? 1.0 : corr_sum / static_cast<double>(pairs.size());
            row.reduction_vs_ddp =
                reduction(result.ddp_bytes_per_step * static_cast<std::uint64_t>(t), row.bytes_sent_per_worker);
            row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            result.rows.push_back(std::move(row));
        }
        result.bytes_sent[R] = ex->bytes_sent();
        if (r == 0) result.aggregation = ex->aggregation();
        // Each replica alone, to set against the averaged model: when replicas have drifted
        // apart, their average is worse than any of them.
        result.replica_eval_loss[R] =
            ws.loss_sum(params.data(), data.tokens.data(), data.eval_positions.data(), M) / eval_targets;
        result.replicas[R] = std::move(params);
    });
    result.wall_s = result.rows.empty() ? 0.0 : result.rows.back().wall_s;
    return result;
}

} // namespace detail

// The trainer of elastic and --speeds runs (trainer_elastic.cpp): workers that fail, join,
// or run at different speeds, meeting at round boundaries instead of in lock step.
run_result run_rounds(const sim_config& cfg, const dataset& data, strategy_kind kind, step_observer* observer);

// Trains every worker for cfg.steps steps under one strategy and evaluates every
// cfg.eval_every steps and at the end. Throws what a worker threw (trickle's errors,
// usage_error for a strategy this build cannot run).
inline run_result run_strategy(const sim_config& cfg, const dataset& data, strategy_kind kind,
                               step_observer* observer = nullptr) {
    single_threaded_blas();
    if (round_trained(cfg)) return run_rounds(cfg, data, kind, observer);
    if (cfg.model.kind == model_kind::gpt)
        return detail::run_strategy_with(gpt(cfg.model, data.vocab()), cfg, data, kind, observer);
    return detail::run_strategy_with(mlp(cfg.model, data.vocab()), cfg, data, kind, observer);
}

} // namespace trickle_sim
