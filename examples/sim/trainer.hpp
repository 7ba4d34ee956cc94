// examples/sim/trainer.hpp: one simulated training run: N workers as threads over comm::local, one strategy.
//
// Each worker owns a replica (same initialisation everywhere), its AdamW state, its shard
// and its batch stream. At each evaluation the workers meet at barriers (which send
// nothing) and measure through shared memory: the averaged model's held-out loss, split
// over the workers, and the replicas' pairwise correlation.
#pragma once

#include "corpus.hpp"
#include "gpt.hpp"
#include "model.hpp"
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
#include <string>
#include <vector>

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
};

// Told about every step of rank 0, from rank 0's thread.
class step_observer {
public:
    virtual ~step_observer() = default;
    virtual void on_step(int step, double train_loss) = 0;
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
    std::vector<std::uint64_t> bytes_part(W);
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
        const auto ex = make_exchanger(kind, cfg, group, comm, static_cast<float>(shard.size()));

        adamw opt(model, cfg.weight_decay);
        auto ws = make_workspace(model, cfg);
        rng batches = rng::stream(cfg.seed, 0x6261746368000000ull + static_cast<std::uint64_t>(r));
        std::vector<std::uint32_t> batch(static_cast<std::size_t>(cfg.batch));
        double loss_sum = 0;
        int loss_count = 0;

        comm.barrier();
        if (r == 0) start = std::chrono::steady_clock::now();
        for (int t = 1; t <= cfg.steps; ++t) {
            for (auto& p : batch) p = shard[batches.below(shard.size())];
            const float loss = ws.train_step(params.data(), grads.data(), data.tokens.data(), batch.data(), cfg.batch);
            ex->reduce_gradients(grads.data(), n);
            if (cfg.clip > 0) clip_global_norm(grads.data(), n, cfg.clip);
            opt.step(params.data(), grads.data(), learning_rate(cfg, t));
            ex->after_step();
            loss_sum += loss;
            ++loss_count;
            if (r == 0 && observer != nullptr) observer->on_step(t, loss);
            if (t % cfg.eval_every != 0 && t != cfg.steps) continue;

            // Evaluation. Barrier 1: every replica is at step t.
            comm.barrier();
            train_part[R] = loss_sum / loss_count;
            bytes_part[R] = ex->bytes_sent();
            loss_sum = 0;
            loss_count = 0;
            average_slice(replicas, average.data(), R * n / W, (R + 1) * n / W);
            comm.barrier(); // 2: the averaged model is complete
            const std::size_t b = R * M / W, e = (R + 1) * M / W;
            eval_part[R] = ws.loss_sum(average.data(), data.tokens.data(), data.eval_positions.data() + b, e - b);
            double corr = 0;
            for (std::size_t q = R; q < pairs.size(); q += W)
                corr += change_correlation(replicas[static_cast<std::size_t>(pairs[q].first)],
                                           replicas[static_cast<std::size_t>(pairs[q].second)], origin.data(), n);
            corr_part[R] = corr;
            comm.barrier(); // 3: every part is written and nobody reads the replicas any more
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
            }
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

// Trains every worker for cfg.steps steps under one strategy and evaluates every
// cfg.eval_every steps and at the end. Throws what a worker threw (trickle's errors,
// usage_error for a strategy this build cannot run).
inline run_result run_strategy(const sim_config& cfg, const dataset& data, strategy_kind kind,
                               step_observer* observer = nullptr) {
    single_threaded_blas();
    if (cfg.model.kind == model_kind::gpt)
        return detail::run_strategy_with(gpt(cfg.model, data.vocab()), cfg, data, kind, observer);
    return detail::run_strategy_with(mlp(cfg.model, data.vocab()), cfg, data, kind, observer);
}

} // namespace trickle_sim
