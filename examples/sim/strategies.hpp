// examples/sim/strategies.hpp: how each simulated worker communicates: ddp, none, or one of trickle's algorithms.
//
// Every strategy reports the bytes its worker sent from trickle's own counters: the
// communicator's traffic() for ddp, the algorithm's stats() for the others.
#pragma once

#include "options.hpp"

#include <trickle/trickle.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <variant>

namespace trickle_sim {

class exchanger {
public:
    virtual ~exchanger() = default;
    // Between backward and the optimizer step: may replace the gradient.
    virtual void reduce_gradients(float* /*grads*/, std::size_t /*n*/) {}
    // After the optimizer step: may exchange parameters.
    virtual void after_step() {}
    // Bytes this worker has sent for training so far.
    virtual std::uint64_t bytes_sent() const = 0;
};

// Fully synchronous data parallelism: the mean gradient over workers, every step.
class ddp_exchanger final : public exchanger {
public:
    explicit ddp_exchanger(trickle::comm::local& comm) : comm_(comm), start_(comm.traffic()) {}

    void reduce_gradients(float* grads, std::size_t n) override {
        comm_.all_reduce_sum(grads, n);
        const float inv = 1.0f / static_cast<float>(comm_.size());
        for (std::size_t i = 0; i < n; ++i) grads[i] *= inv;
    }
    std::uint64_t bytes_sent() const override { return (comm_.traffic() - start_).bytes_sent; }

private:
    trickle::comm::local& comm_;
    trickle::traffic_counters start_;
};

// Independent replicas: nothing is ever sent.
class none_exchanger final : public exchanger {
public:
    std::uint64_t bytes_sent() const override { return 0; }
};

// One of trickle's algorithm objects, stepped after every optimizer step.
template <class Algorithm>
class algorithm_exchanger final : public exchanger {
public:
    template <class... Args>
    explicit algorithm_exchanger(Args&&... args) : algorithm_(std::forward<Args>(args)...) {}

    void after_step() override { algorithm_.step(trickle::exec::host{}); }
    std::uint64_t bytes_sent() const override { return algorithm_.stats().total.bytes_sent; }
    const trickle::exchange_stats& stats() const { return algorithm_.stats(); }

private:
    Algorithm algorithm_;
};

// The runtime choices, as the policy objects trickle takes at compile time.
using sampler_choice = std::variant<trickle::sampler::uniform, trickle::sampler::permutation, trickle::sampler::block,
                                    trickle::sampler::layerwise>;
using schedule_choice = std::variant<trickle::schedule::constant, trickle::schedule::linear, trickle::schedule::cosine>;

// The topology, chosen at run time: trickle::topology::any holds one of the five, so they
// add no instantiations (each algorithm is compiled once for it).
using topology_choice = trickle::topology::any;

inline sampler_choice make_sampler(const sim_config& c) {
    switch (c.sampler) {
    case sampler_kind::uniform: return trickle::sampler::uniform{};
    case sampler_kind::permutation: return trickle::sampler::permutation{};
    case sampler_kind::block: return trickle::sampler::block{.block_size = static_cast<std::size_t>(c.block_size)};
    case sampler_kind::layerwise: return trickle::sampler::layerwise{};
    }
    throw usage_error("--sampler: unhandled value");
}

inline schedule_choice make_schedule(const sim_config& c) {
    const auto steps = static_cast<std::uint64_t>(c.steps);
    switch (c.fraction_schedule) {
    case schedule_kind::constant: return trickle::schedule::constant{};
    case schedule_kind::linear: return trickle::schedule::linear{.end_fraction = c.fraction_end, .steps = steps};
    case schedule_kind::cosine: return trickle::schedule::cosine{.end_fraction = c.fraction_end, .steps = steps};
    }
    throw usage_error("--fraction-schedule: unhandled value");
}

inline topology_choice make_topology(const sim_config& c) {
    switch (c.topology) {
    case topology_kind::all_reduce: return {trickle::topology::all_reduce{}};
    case topology_kind::ring: return {trickle::topology::ring{}};
    case topology_kind::gossip: return {trickle::topology::gossip{}};
    case topology_kind::exponential: return {trickle::topology::exponential{}};
    case topology_kind::islands: return {trickle::topology::islands{.size = c.island_size}};
    }
    throw usage_error("--topology: unhandled value");
}

// A codec chosen at run time (one codec::any, so codecs add no instantiations).
inline trickle::codec::any make_codec(codec_kind k, int block) {
    const auto B = static_cast<std::size_t>(block);
    switch (k) {
    case codec_kind::fp32: return trickle::codec::fp32{};
    case codec_kind::bf16: return trickle::codec::bf16{};
    case codec_kind::fp16: return trickle::codec::fp16{};
    case codec_kind::fp8_e4m3: return trickle::codec::fp8_e4m3{};
    case codec_kind::fp8_e5m2: return trickle::codec::fp8_e5m2{};
    case codec_kind::fp8_block: return trickle::codec::fp8_block{.block_size = B};
    case codec_kind::int8: return trickle::codec::int8_block{.block_size = B};
    case codec_kind::int4: return trickle::codec::int4_block{.block_size = B};
    case codec_kind::sign2: return trickle::codec::sign2_block{.block_size = B};
    }
    throw usage_error("--codec: unhandled value");
}

// DiLoCo's outer gradient on the wire: a codec, or chunk top-k with that codec for the values.
using outer_wire_choice = std::variant<trickle::codec::any, trickle::codec::chunk_topk<trickle::codec::any>>;

inline outer_wire_choice make_outer_wire(const sim_config& c) {
    const trickle::codec::any values = make_codec(c.outer_codec, c.codec_block);
    if (c.topk_k == 0) return values;
    return trickle::codec::chunk_topk<trickle::codec::any>{.chunk = static_cast<std::size_t>(c.topk_chunk),
                                                           .k = static_cast<std::size_t>(c.topk_k),
                                                           .values = values};
}

inline trickle::sparta_options make_sparta_options(const sim_config& c) {
    return {.fraction = c.fraction, .interval = static_cast<std::uint64_t>(c.interval), .seed = c.seed};
}

// The outer learning-rate schedule, chosen at run time (trickle::schedule::any), so that
// scheduling the outer lr adds no instantiations: every optimizer with an lr is wrapped in
// lr_scheduled with it. Its multiplier is exactly 1 when constant, so an unscheduled run
// gives the bits of the bare optimizer.
using runtime_lr_schedule = trickle::schedule::any;

template <class Opt>
using scheduled = trickle::outer::lr_scheduled<Opt, runtime_lr_schedule>;

using outer_choice = std::variant<scheduled<trickle::outer::nesterov>, scheduled<trickle::outer::sgd>,
                                  scheduled<trickle::outer::momentum>, scheduled<trickle::outer::adam>,
                                  trickle::outer::average>;

inline runtime_lr_schedule make_outer_lr_schedule(const sim_config& c) {
    // Outer steps in the run: the schedule's steps count them.
    const auto outer_steps = static_cast<std::uint64_t>(std::max(1, c.steps / c.outer_interval));
    switch (c.outer_lr_schedule) {
    case schedule_kind::constant: return trickle::schedule::constant{};
    case schedule_kind::linear: return trickle::schedule::linear{.end_fraction = c.outer_lr_end, .steps = outer_steps};
    case schedule_kind::cosine: return trickle::schedule::cosine{.end_fraction = c.outer_lr_end, .steps = outer_steps};
    }
    throw usage_error("--outer-lr-schedule: unhandled value");
}

inline outer_choice make_outer(const sim_config& c) {
    const runtime_lr_schedule lrs = make_outer_lr_schedule(c);
    switch (c.outer) {
    case outer_kind::nesterov:
        return scheduled<trickle::outer::nesterov>{{.lr = c.outer_lr, .momentum = c.outer_momentum}, lrs};
    case outer_kind::sgd: return scheduled<trickle::outer::sgd>{{.lr = c.outer_lr}, lrs};
    case outer_kind::momentum:
        return scheduled<trickle::outer::momentum>{{.lr = c.outer_lr, .momentum = c.outer_momentum}, lrs};
    case outer_kind::adam: return scheduled<trickle::outer::adam>{{.lr = c.outer_lr}, lrs};
    case outer_kind::average: return trickle::outer::average{};
    }
    throw usage_error("--outer: unhandled value");
}

// `weight` is this worker's weight in DiLoCo's average: its shard size, so that uneven
// (non-iid) shards count in proportion to their data, as the DiLoCo paper does.
inline trickle::diloco_options make_diloco_options(const sim_config& c, float weight) {
    return {.interval = static_cast<std::uint64_t>(c.outer_interval),
            .seed = c.seed,
            .weight = weight,
            .drop_probability = c.drop_prob,
            .prune_fraction = c.prune,
            .error_feedback = c.error_feedback,
            // Every worker initialises from the same seed, so they already agree; rank 0's
            // parameters need not be sent to them (the tests check the replicas start equal).
            .broadcast_initial = false};
}

// The factories for trickle's algorithms, one translation unit each (strategies_*.cpp):
// every combination of policies is a separate instantiation, and keeping them out of the
// headers means they are compiled once, in parallel, instead of in every file that
// includes the trainer.
std::unique_ptr<exchanger> make_sparta_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm);
std::unique_ptr<exchanger> make_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm, float weight);
std::unique_ptr<exchanger> make_sparta_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                        trickle::comm::local& comm, float weight);

// Collective (trickle's algorithms check at construction that all workers agree): every
// worker calls it at once with the same configuration (the weight aside).
inline std::unique_ptr<exchanger> make_exchanger(strategy_kind kind, const sim_config& c,
                                                 const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm, float weight = 1.0f) {
    switch (kind) {
    case strategy_kind::ddp: return std::make_unique<ddp_exchanger>(comm);
    case strategy_kind::none: return std::make_unique<none_exchanger>();
    case strategy_kind::sparta: return make_sparta_exchanger(c, group, comm);
    case strategy_kind::diloco: return make_diloco_exchanger(c, group, comm, weight);
    case strategy_kind::sparta_diloco: return make_sparta_diloco_exchanger(c, group, comm, weight);
    }
    throw usage_error("--strategy: unhandled value");
}

} // namespace trickle_sim
