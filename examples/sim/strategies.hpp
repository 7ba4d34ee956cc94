// examples/sim/strategies.hpp: how each simulated worker communicates: ddp, none, or one of trickle's algorithms.
//
// Every strategy reports the bytes its worker sent from trickle's own counters: the
// communicator's traffic() for ddp, the algorithm's stats() for the others.
#pragma once

#include "model.hpp"
#include "options.hpp"

#include <trickle/trickle.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <variant>

#include <trickle/comm/async.hpp>

namespace trickle_sim {

// What a worker's exchanges have sent so far, for the network model (network.hpp): the
// completed operations and their bytes, split into those that ran behind compute
// (overlapped) and those the worker waited for (blocking).
struct traffic_split {
    std::uint64_t blocking_ops = 0, blocking_bytes = 0;
    std::uint64_t hidden_ops = 0, hidden_bytes = 0;
    bool operator==(const traffic_split&) const = default;
};

class exchanger {
public:
    virtual ~exchanger() = default;
    // Between backward and the optimizer step: may replace the gradient.
    virtual void reduce_gradients(float* /*grads*/, std::size_t /*n*/) {}
    // In place of the trainer's AdamW step, after the gradient is reduced and clipped: an
    // exchanger whose algorithm is the optimizer (DeMo) updates the parameters it was built
    // over from grads (n values) at learning rate lr and returns true; the others return
    // false and the trainer steps AdamW.
    virtual bool optimizer_step(const float* /*grads*/, std::size_t /*n*/, float /*lr*/) { return false; }
    // After the optimizer step: may exchange parameters.
    virtual void after_step() {}
    // After the last step: lands an exchange still waiting to be applied (overlapped SPARTA).
    virtual void finish() {}
    // Bytes this worker has sent for training so far.
    virtual std::uint64_t bytes_sent() const = 0;
    // The completed operations so far, blocking and overlapped.
    virtual traffic_split traffic() const = 0;
    // The most bytes this worker sent in one operation (an outer step, a fragment's outer
    // step, a SPARTA exchange, a ddp all-reduce).
    virtual std::uint64_t peak_bytes() const = 0;
    // Inner steps of compute an overlapped operation runs behind (0: none overlap).
    virtual int hide_steps() const { return 0; }
    // A barrier among the workers (the evaluations' meeting points; it sends nothing). An
    // exchanger over comm::async meets through the wrapper, behind its operations in
    // flight: the wrapped communicator must not be called beside them.
    virtual void barrier(trickle::comm::local& comm) { comm.barrier(); }
    // DiLoCo with manual_outer (--speeds, --round-policy deadline): this worker's weight
    // in the coming outer step, and the outer step itself (collective).
    virtual void set_weight(float /*w*/) { throw std::logic_error("set_weight: not a DiLoCo exchanger"); }
    virtual void outer_step() { throw std::logic_error("outer_step: not a DiLoCo exchanger"); }
    // DiLoCo's adaptive deadline (--round-policy adaptive, diloco_options::deadline): this
    // worker's arrival in the current round (local), the coming round's deadline (the same on
    // every worker, updated inside outer_step) and the deadlines so far.
    virtual void report_arrival(double /*t*/) { throw std::logic_error("report_arrival: not a DiLoCo exchanger"); }
    virtual double deadline() const { throw std::logic_error("deadline: not a DiLoCo exchanger"); }
    virtual trickle::deadline_stats deadlines() const { return {}; }
    // The algorithm's membership over an elastic communicator (zeros otherwise).
    virtual trickle::membership_stats membership() const { return {}; }
    // Inner steps the algorithm has counted (a joiner starts at the step it was admitted at).
    virtual std::uint64_t algorithm_steps() const { return 0; }
    // How DiLoCo's outer steps combined the workers' outer gradients (--aggregate; empty
    // for the strategies without DiLoCo's outer step).
    virtual trickle::aggregation_stats aggregation() const { return {}; }
};

// Fully synchronous data parallelism: the mean gradient over workers, every step.
class ddp_exchanger final : public exchanger {
public:
    explicit ddp_exchanger(trickle::comm::local& comm) : comm_(comm), start_(comm.traffic()) {}

    void reduce_gradients(float* grads, std::size_t n) override {
        const std::uint64_t before = comm_.traffic().bytes_sent;
        comm_.all_reduce_sum(grads, n);
        peak_ = std::max(peak_, comm_.traffic().bytes_sent - before);
        ++reductions_;
        const float inv = 1.0f / static_cast<float>(comm_.size());
        for (std::size_t i = 0; i < n; ++i) grads[i] *= inv;
    }
    std::uint64_t bytes_sent() const override { return (comm_.traffic() - start_).bytes_sent; }
    traffic_split traffic() const override { return {.blocking_ops = reductions_, .blocking_bytes = bytes_sent()}; }
    std::uint64_t peak_bytes() const override { return peak_; }

private:
    trickle::comm::local& comm_;
    trickle::traffic_counters start_;
    std::uint64_t reductions_ = 0, peak_ = 0;
};

// Independent replicas: nothing is ever sent.
class none_exchanger final : public exchanger {
public:
    std::uint64_t bytes_sent() const override { return 0; }
    traffic_split traffic() const override { return {}; }
    std::uint64_t peak_bytes() const override { return 0; }
};

namespace detail {
inline void tally(const trickle::exchange_stats& s, bool hidden, traffic_split& out) {
    (hidden ? out.hidden_ops : out.blocking_ops) += s.exchanges;
    (hidden ? out.hidden_bytes : out.blocking_bytes) += s.total.bytes_sent;
}
} // namespace detail

// One of trickle's algorithm objects, stepped after every optimizer step.
template <class Algorithm>
class algorithm_exchanger : public exchanger {
public:
    // How its exchanges count in the network model is the algorithm's own answer
    // (trickle::overlap_plan: the steps its route runs an exchange behind compute).
    template <class... Args>
    explicit algorithm_exchanger(Args&&... args)
        : algorithm_(std::forward<Args>(args)...), plan_(algorithm_.overlap()) {}

    void after_step() override {
        algorithm_.step(trickle::exec::host{});
        note_peak();
    }
    void finish() override {
        algorithm_.flush();
        note_peak();
    }
    std::uint64_t bytes_sent() const override { return algorithm_.stats().total.bytes_sent; }
    std::uint64_t peak_bytes() const override { return peak_; }
    int hide_steps() const override { return static_cast<int>(std::max(plan_.sparse_steps, plan_.outer_steps)); }
    traffic_split traffic() const override {
        traffic_split t;
        if constexpr (requires { algorithm_.sparse_stats(); }) {
            // sparta_diloco: the SPARTA part may overlap, the outer steps block.
            detail::tally(algorithm_.sparse_stats(), plan_.sparse_steps > 0, t);
            detail::tally(algorithm_.outer_stats(), plan_.outer_steps > 0, t);
        } else {
            detail::tally(algorithm_.stats(), hide_steps() > 0, t);
        }
        return t;
    }
    const trickle::exchange_stats& stats() const { return algorithm_.stats(); }
    void set_weight(float w) override { algorithm_.set_weight(w); }
    void outer_step() override {
        algorithm_.outer_step(trickle::exec::host{});
        note_peak();
    }
    void report_arrival(double t) override {
        if constexpr (requires { algorithm_.report_arrival(t); })
            algorithm_.report_arrival(t);
        else
            exchanger::report_arrival(t);
    }
    double deadline() const override {
        if constexpr (requires { algorithm_.deadline(); })
            return algorithm_.deadline();
        else
            return exchanger::deadline();
    }
    trickle::deadline_stats deadlines() const override {
        if constexpr (requires { algorithm_.deadlines(); })
            return algorithm_.deadlines();
        else
            return {};
    }
    trickle::membership_stats membership() const override { return algorithm_.membership(); }
    std::uint64_t algorithm_steps() const override { return algorithm_.stats().steps; }
    trickle::aggregation_stats aggregation() const override {
        if constexpr (requires { algorithm_.aggregation(); })
            return algorithm_.aggregation();
        else
            return {};
    }

private:
    // stats().last is the latest completed operation; looked at after every step.
    void note_peak() {
        if constexpr (requires { algorithm_.sparse_stats(); }) {
            see(algorithm_.sparse_stats());
            see(algorithm_.outer_stats());
        } else {
            see(algorithm_.stats());
        }
    }
    void see(const trickle::exchange_stats& s) { peak_ = std::max(peak_, s.last.bytes_sent); }

    Algorithm algorithm_;
    trickle::overlap_plan plan_;
    std::uint64_t peak_ = 0;
};

// The wrapper the overlapping strategies talk through: comm::async runs their operations
// on a progress thread of its own. Held in a base class so that it is built before the
// algorithm and destroyed after it.
struct async_comm_holder {
    explicit async_comm_holder(trickle::comm::local& comm) : async_comm(comm) {}
    trickle::comm::async<trickle::comm::local> async_comm;
};

using async_local = trickle::comm::async<trickle::comm::local>;

// An algorithm over comm::async<comm::local> (SPARTA with --overlap, streaming DiLoCo with
// tau > 0): the same bits as over comm::local, with the exchange running behind compute.
template <class Algorithm>
class async_algorithm_exchanger final : private async_comm_holder, public algorithm_exchanger<Algorithm> {
public:
    template <class Build>
    async_algorithm_exchanger(trickle::comm::local& comm, const Build& build)
        : async_comm_holder(comm), algorithm_exchanger<Algorithm>(build(async_comm)) {}

    void barrier(trickle::comm::local& /*comm*/) override { async_comm.barrier(); }
};

// The runtime choices, as the policy objects trickle takes at compile time: each is built
// from its registry (options.hpp, registry_of), so a policy added to a registry is offered
// here without a change.
using sampler_choice = trickle::sampler::registry::apply<std::variant>;

// The topology, chosen at run time: trickle::topology::any holds every registered one, so
// they add no instantiations (each algorithm is compiled once for it).
using topology_choice = trickle::topology::any;

inline sampler_choice make_sampler(const sim_config& c) {
    return visit_kind(c.sampler, [&](auto t) -> sampler_choice {
        typename decltype(t)::type s{};
        if constexpr (block_size_field<decltype(s)>::value) s.block_size = static_cast<std::size_t>(c.block_size);
        return s;
    });
}

// A schedule of kind k that decays to `end` over `steps` (when it decays at all), held by
// the library's run-time schedule (trickle::schedule::any): the algorithms are compiled
// once for it rather than once per schedule (a third of the sparta and sparta_diloco
// instantiations), for one variant visit per exchange; its fractions and its describe()
// are the held schedule's, so the bits and the configuration hash are those of the
// schedule itself.
using runtime_schedule = trickle::schedule::any;

inline runtime_schedule make_runtime_schedule(schedule_kind k, double end, std::uint64_t steps, std::string_view opt) {
    return visit_kind(k, [&](auto t) -> runtime_schedule {
        using S = typename decltype(t)::type;
        if constexpr (cli_schedule<S>::value) {
            S s{};
            if constexpr (decay_fields<S>::value) {
                s.end_fraction = end;
                s.steps = steps;
            }
            return s;
        } else {
            throw usage_error(std::string(opt) + ": " + S::name + " has no options of trickle-sim's to build it from");
        }
    });
}

inline runtime_schedule make_runtime_schedule(const sim_config& c) {
    return make_runtime_schedule(c.fraction_schedule, c.fraction_end, static_cast<std::uint64_t>(c.steps),
                                 "--fraction-schedule");
}

inline topology_choice make_topology(const sim_config& c) {
    return visit_kind(c.topology, [&](auto t) -> topology_choice {
        typename decltype(t)::type top{};
        if constexpr (group_size_field<decltype(top)>::value) top.size = c.island_size;
        return top;
    });
}

// A codec chosen at run time (one codec::any, so codecs add no instantiations).
inline trickle::codec::any make_codec(codec_kind k, int block) {
    return visit_kind(k, [&](auto t) -> trickle::codec::any {
        typename decltype(t)::type codec{};
        if constexpr (block_size_field<decltype(codec)>::value) codec.block_size = static_cast<std::size_t>(block);
        return codec;
    });
}

// DiLoCo's outer gradient on the wire: a codec, or a sparsifier with that codec for the
// values (the library's codec::any_sparsifier, built by name: --outer-topk C:K is
// chunk_topk).
using outer_wire_choice = std::variant<trickle::codec::any, trickle::codec::any_sparsifier>;

inline outer_wire_choice make_outer_wire(const sim_config& c) {
    const trickle::codec::any values = make_codec(c.outer_codec, c.codec_block);
    if (c.topk_k == 0) return values;
    return trickle::codec::any_sparsifier::from_name(trickle::codec::chunk_topk<>::name,
                                                     {.chunk = static_cast<std::size_t>(c.topk_chunk),
                                                      .k = static_cast<std::size_t>(c.topk_k),
                                                      .values = values},
                                                     "--outer-topk");
}

inline trickle::sparta_options make_sparta_options(const sim_config& c) {
    return {.fraction = c.fraction,
            .interval = static_cast<std::uint64_t>(c.interval),
            .seed = c.seed,
            .overlap = c.sparta_overlap};
}


// The outer learning-rate schedule is a runtime_schedule too, so that scheduling the outer
// lr adds no instantiations: every optimizer with an lr is wrapped in lr_scheduled with
// it. Its multiplier is exactly 1 when constant, so an unscheduled run gives the bits of
// the bare optimizer.
//
// An optimizer with a learning rate runs as outer::maybe_lr_scheduled (the library's
// front-end type: its schedule always set here); average, which has none, as itself.
template <class Opt>
using scheduled = trickle::outer::maybe_lr_scheduled<Opt, runtime_schedule>;

// The optimizer is held by the library's outer::any (one engine for every optimizer: the
// passes visit its rule once each), which holds exactly these types.
using outer_choice = trickle::outer::any;
static_assert(std::is_same_v<trickle::outer::choice::held<trickle::outer::nesterov>, scheduled<trickle::outer::nesterov>>);

inline runtime_schedule make_outer_lr_schedule(const sim_config& c) {
    // Outer steps in the run: the schedule's steps count them.
    const auto outer_steps = static_cast<std::uint64_t>(std::max(1, c.steps / c.outer_interval));
    return make_runtime_schedule(c.outer_lr_schedule, c.outer_lr_end, outer_steps, "--outer-lr-schedule");
}

// The library builds the optimizer by name (outer::any::named): --outer-lr and
// --outer-momentum reach the fields it has.
inline outer_choice make_outer(const sim_config& c) {
    std::optional<runtime_schedule> lrs;
    if (kind_has<outer_kind, trickle::fields::lr>(c.outer)) lrs = make_outer_lr_schedule(c);
    return outer_choice::named(name_of(c.outer), {.lr = c.outer_lr, .momentum = c.outer_momentum}, lrs);
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
            .broadcast_initial = false,
            .aggregate = c.aggregate};
}

// DeMo's options: the sign step starts at --lr (the trainer sets each step's through
// optimizer_step), the weight decay is --weight-decay, demo-shared's positions follow --seed.
inline trickle::demo_options make_demo_options(const sim_config& c) {
    return {.lr = c.lr,
            .compression_decay = c.demo_decay,
            .weight_decay = c.weight_decay,
            .chunk = static_cast<std::size_t>(c.demo_chunk),
            .k = static_cast<std::size_t>(c.demo_k),
            .seed = c.seed};
}

// How DeMo chunks each of the model's tensors: its rows x cols (the biases' single row: 1-D chunks).
inline std::vector<trickle::demo_shape> demo_shapes(const std::vector<tensor_slot>& tensors) {
    std::vector<trickle::demo_shape> shapes;
    for (const auto& t : tensors) shapes.push_back({.rows = t.rows, .cols = t.cols});
    return shapes;
}

// Streaming DiLoCo: DiLoCo's options with --fragments, --overlap-steps, --mix and --carry-local.
inline trickle::diloco_options make_streaming_options(const sim_config& c, float weight) {
    trickle::diloco_options o = make_diloco_options(c, weight);
    o.fragments = static_cast<std::uint64_t>(c.fragments);
    o.overlap_steps = static_cast<std::uint64_t>(c.overlap_steps);
    o.mix = c.mix;
    o.carry_local = c.carry_local;
    return o;
}

// The factories for trickle's algorithms, one translation unit each (strategies_*.cpp):
// every combination of policies is a separate instantiation, and keeping them out of the
// headers means they are compiled once, in parallel, instead of in every file that
// includes the trainer. The bodies are in strategies_impl.hpp; the *_async factories
// build the same algorithms over comm::async<comm::local> (SPARTA with --overlap, streaming
// DiLoCo with tau > 0), so that their exchanges really run on a progress thread.
std::unique_ptr<exchanger> make_sparta_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm);
std::unique_ptr<exchanger> make_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                 trickle::comm::local& comm, const trickle::diloco_options& options);
std::unique_ptr<exchanger> make_sparta_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                        trickle::comm::local& comm, float weight);
std::unique_ptr<exchanger> make_sparta_exchanger_async(const sim_config& c, const trickle::param_group<float>& group,
                                                       trickle::comm::local& comm);
std::unique_ptr<exchanger> make_diloco_exchanger_async(const sim_config& c, const trickle::param_group<float>& group,
                                                       trickle::comm::local& comm,
                                                       const trickle::diloco_options& options);
std::unique_ptr<exchanger> make_sparta_diloco_exchanger_async(const sim_config& c,
                                                              const trickle::param_group<float>& group,
                                                              trickle::comm::local& comm, float weight);

// The same algorithms over comm::elastic_local (strategies_elastic.cpp), for the elastic
// runs (--fail, --join, --min-workers): the options carry min_workers and join.
std::unique_ptr<exchanger> make_diloco_exchanger_elastic(const sim_config& c, const trickle::param_group<float>& group,
                                                         trickle::comm::elastic_local& comm,
                                                         const trickle::diloco_options& options);
std::unique_ptr<exchanger> make_sparta_exchanger_elastic(const sim_config& c, const trickle::param_group<float>& group,
                                                         trickle::comm::elastic_local& comm,
                                                         const trickle::sparta_options& options);
// (strategies_elastic_sparta_diloco.cpp: its own unit, being the largest set of instantiations.)
std::unique_ptr<exchanger> make_sparta_diloco_exchanger_elastic(const sim_config& c,
                                                                const trickle::param_group<float>& group,
                                                                trickle::comm::elastic_local& comm,
                                                                const trickle::sparta_options& sparse,
                                                                const trickle::diloco_options& outer_options);

// DeMo (strategies_demo.cpp), demo or demo-shared, over the model's tensors (group holds
// them, in this order).
std::unique_ptr<exchanger> make_demo_exchanger(const sim_config& c, strategy_kind kind,
                                               const trickle::param_group<float>& group,
                                               const std::vector<tensor_slot>& tensors, trickle::comm::local& comm);

// Collective (trickle's algorithms check at construction that all workers agree): every
// worker calls it at once with the same configuration (the weight aside). tensors: the
// model's, which group holds.
inline std::unique_ptr<exchanger> make_exchanger(strategy_kind kind, const sim_config& c,
                                                 const trickle::param_group<float>& group,
                                                 const std::vector<tensor_slot>& tensors, trickle::comm::local& comm,
                                                 float weight = 1.0f) {
    switch (kind) {
    case strategy_kind::ddp: return std::make_unique<ddp_exchanger>(comm);
    case strategy_kind::none: return std::make_unique<none_exchanger>();
    case strategy_kind::sparta:
        return c.sparta_overlap ? make_sparta_exchanger_async(c, group, comm) : make_sparta_exchanger(c, group, comm);
    case strategy_kind::diloco: return make_diloco_exchanger(c, group, comm, make_diloco_options(c, weight));
    case strategy_kind::streaming_diloco:
        return c.overlap_steps > 0 ? make_diloco_exchanger_async(c, group, comm, make_streaming_options(c, weight))
                                   : make_diloco_exchanger(c, group, comm, make_streaming_options(c, weight));
    case strategy_kind::sparta_diloco:
        return c.sparta_overlap ? make_sparta_diloco_exchanger_async(c, group, comm, weight)
                                : make_sparta_diloco_exchanger(c, group, comm, weight);
    case strategy_kind::demo:
    case strategy_kind::demo_shared: return make_demo_exchanger(c, kind, group, tensors, comm);
    }
    throw usage_error("--strategy: unhandled value");
}

} // namespace trickle_sim
