// trickle/algorithm/sparta.hpp: SPARTA, sparse parameter averaging, as one object called after each optimizer step.
//
// At every `interval`-th step, all workers select the same positions (sampler, from the
// shared seed: nothing but values travels), gather them from every tensor of the group
// into one packed fp32 buffer in one pass, combine the buffers over the topology in one
// communication call, and scatter the averages back in place in one pass.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/detail/erased.hpp>
#include <trickle/algorithm/flat_params.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/kernels/sparse_exchange.hpp>
#include <trickle/sampler/sampler.hpp>
#include <trickle/sampler/uniform.hpp>
#include <trickle/schedule/schedule.hpp>
#include <trickle/topology/all_reduce.hpp>
#include <trickle/topology/topology.hpp>

#include <cstdint>
#include <istream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

// Plain options of a SPARTA exchange; every worker must pass the same values.
struct sparta_options {
    double fraction = 0.005;     // base fraction p of the group averaged per exchange, in (0, 1]
    std::uint64_t interval = 1;  // exchange after every `interval`-th step (H >= 1)
    std::uint64_t seed = 0;      // shared seed of the samplers' random streams
};

namespace detail {

inline void describe_options(config_record& rec, const sparta_options& o) {
    rec.add("fraction", o.fraction).add("interval", o.interval).add("seed", o.seed);
    if (!valid_fraction(o.fraction))
        rec.set_error(concat("sparta: fraction must be in (0, 1], got ", o.fraction));
    if (o.interval < 1) rec.set_error("sparta: interval must be >= 1, got 0");
}

template <class T, class Space>
void describe_group(config_record& rec, const param_group<T, Space>& g, int workers) {
    std::ostringstream hash;
    hash << std::hex << g.layout_hash();
    rec.add("workers", workers)
        .add("dtype", dtype_traits<T>::name)
        .add("memory_space", Space::name)
        .add("tensors", g.tensor_count())
        .add("elements", g.total_size())
        .add("layout_hash", hash.str());
    if (g.empty()) rec.set_error("the parameter group is empty (no tensor with elements)");
}

// When the communicator is bound to a CUDA stream, kernels must run on that stream so
// the exchange is ordered without a host synchronization.
template <class Comm, class Exec>
void check_same_stream(const Comm& comm, const Exec& ex, const char* kind) {
    if constexpr (requires { comm.stream(); ex.stream; }) {
        if (static_cast<const void*>(comm.stream()) != static_cast<const void*>(ex.stream))
            throw invalid_argument(concat(kind, "::step: exec::cuda's stream differs from the communicator's stream"));
    }
}

} // namespace detail

// The SPARTA engine for parameters of type T in memory space Space over communicator
// Comm. Sampler, Schedule and Topology are policies (concepts sampler_policy,
// schedule_policy, topology_policy). Most code uses trickle::sparta<...>, which hides T,
// Space and Comm; the engine is for code that wants them checked at compile time.
template <class Sampler, class Schedule, class Topology, class T, class Space, class Comm>
class sparta_engine {
    static_assert(sampler_policy<Sampler>, "Sampler must satisfy trickle::sampler_policy");
    static_assert(schedule_policy<Schedule>, "Schedule must satisfy trickle::schedule_policy");
    static_assert(topology_policy<Topology>, "Topology must satisfy trickle::topology_policy");
    static_assert(communicator<Comm>, "Comm must satisfy trickle::communicator");
    static_assert(std::is_same_v<typename Comm::memory_space, Space>,
                  "the communicator moves memory in a different space than the parameters live in "
                  "(use comm::nccl for cuda_space parameters, comm::local or comm::mpi for host_space)");

public:
    using memory_space = Space;
    using value_type = T;
    static constexpr const char* kind = "sparta";

    // Collective: every worker constructs at once. Validates the options and policies,
    // and checks that all workers agree on them and on the layout; throws the same
    // error on every worker otherwise (invalid_argument or mismatch_error).
    sparta_engine(const param_group<T, Space>& group, Comm& comm, sparta_options options, Sampler sampler = {},
                  Schedule schedule = {}, Topology topology = {})
        : comm_(comm), options_(options), sampler_(std::move(sampler)), schedule_(std::move(schedule)),
          topology_(std::move(topology)) {
        config_record rec = describe(group);
        agree(comm_, rec);
        config_hash_ = detail::fnv1a(rec.serialize());
        flat_ = flat_params<T, Space>(group);
        dense_per_step_ = detail::all_reduce_bytes(group.total_size(), sizeof(float), comm_.size(), comm_.rank());
    }

    sparta_engine(const sparta_engine&) = delete;
    sparta_engine& operator=(const sparta_engine&) = delete;

    // Call after every optimizer step, on every worker. Exchanges at steps
    // interval-1, 2·interval-1, ...; otherwise only counts the step.
    template <class Exec>
    void step(const Exec& ex) {
        static_assert(can_access_v<Exec, Space>, "sparta::step: this execution space cannot reach the parameters");
        detail::check_same_stream(comm_, ex, kind);
        const std::uint64_t t = stats_.steps;
        if ((t + 1) % options_.interval == 0) exchange(ex, t);
        stats_.steps = t + 1;
        stats_.dense_bytes += dense_per_step_;
    }

    // Counts a step without exchanging (used by sparta_diloco at the end of an outer round).
    void skip_step() {
        ++stats_.steps;
        stats_.dense_bytes += dense_per_step_;
    }

    const exchange_stats& stats() const { return stats_; }
    const sparta_options& options() const { return options_; }
    const Sampler& sampler() const { return sampler_; }
    std::size_t size() const { return flat_.total(); }

    // The fraction the exchange at step t would use.
    double fraction_at(std::uint64_t t) const { return schedule_.fraction(t, options_.fraction); }

    // Writes the step counters, traffic counts and sampler state.
    void save(std::ostream& os) const {
        detail::checkpoint_writer w(os);
        w.header(kind, config_hash_);
        w.section("stats", &stats_, sizeof stats_);
        std::ostringstream ss;
        if constexpr (requires { sampler_.save(ss); }) sampler_.save(ss);
        const std::string s = ss.str();
        w.section("sampler", s.data(), s.size());
        w.finish();
    }

    // Collective: reads a checkpoint written by save() under the same configuration.
    // Every worker throws the same error if any worker's checkpoint is unreadable,
    // corrupt, foreign, or at a different step; the state is then unchanged.
    void load(std::istream& is, const std::string& source = "stream") {
        std::string err;
        exchange_stats st{};
        Sampler sam = sampler_;
        try {
            if (!is) throw invalid_argument("checkpoint: cannot read " + source);
            detail::checkpoint_reader r(is);
            r.header(kind, config_hash_);
            r.section("stats", &st, sizeof st);
            std::istringstream ss(r.blob("sampler"));
            if constexpr (requires { sam.load(ss); }) sam.load(ss);
            r.finish();
        } catch (const error& e) {
            err = e.what();
        }
        config_record rec("sparta checkpoint");
        rec.add("step", st.steps).add("exchanges", st.exchanges);
        config_record sampler_state;
        sam.describe(sampler_state);
        for (const auto& [k, v] : sampler_state.fields()) rec.add(k, v);
        if (!err.empty()) rec.set_error(err);
        agree(comm_, rec);
        stats_ = st;
        sampler_ = std::move(sam);
    }

private:
    config_record describe(const param_group<T, Space>& group) const {
        config_record rec(kind);
        rec.add("trickle", detail::concat(TRICKLE_VERSION_MAJOR, '.', TRICKLE_VERSION_MINOR));
        detail::describe_group(rec, group, comm_.size());
        detail::describe_options(rec, options_);
        sampler_.describe(rec);
        schedule_.describe(rec);
        topology_.describe(rec);
        return rec;
    }

    template <class Exec>
    void exchange(const Exec& ex, std::uint64_t t) {
        const double p = schedule_.fraction(t, options_.fraction);
        if (!detail::valid_fraction(p))
            throw invalid_argument(detail::concat("sparta: the ", Schedule::name, " schedule gave fraction ", p,
                                                  " at step ", t, "; it must be in (0, 1]"));
        const sampler_context ctx{options_.seed, t, stats_.exchanges, p, flat_.layout(), flat_.host_layout()};
        const auto sel = sampler_.select(ctx);
        const std::size_t count = sel.count();
        float* buf = ws_.get(0, count);
        const traffic_counters before = comm_.traffic();
        // Range bodies: a run of positions or a prefetched batch per call (kernels/sparse_exchange.hpp).
        using space = typename Exec::memory_space;
        const auto gather = make_gather<space>(flat_.view(), sel, buf);
        for_each_index(ex, gather.calls(), gather);
        const int group = topology_.reduce(ex, comm_, buf, count, ws_);
        const auto scatter = make_scatter<space>(flat_.view(), sel, buf, 1.0f / static_cast<float>(group));
        for_each_index(ex, scatter.calls(), scatter);
        stats_.last = comm_.traffic() - before;
        stats_.total += stats_.last;
        stats_.last_values = count;
        stats_.values += count;
        ++stats_.exchanges;
    }

    Comm& comm_;
    sparta_options options_;
    Sampler sampler_;
    Schedule schedule_;
    Topology topology_;
    flat_params<T, Space> flat_;
    workspace<float, Space, 4> ws_;
    exchange_stats stats_{};
    std::uint64_t dense_per_step_ = 0;
    std::uint64_t config_hash_ = 0;
};

// SPARTA as a concrete object: build it from a param_group, a communicator and options,
// then call step(exec) after every optimizer step on every worker.
//   trickle::sparta<trickle::sampler::permutation> s{params, comm, {.fraction = 0.005, .seed = 42}};
//   s.step(trickle::exec::host{});
// The parameter type, memory space and communicator are hidden; stepping with an
// execution space that cannot reach the parameters is a runtime error (use
// sparta_engine for a compile-time one). The communicator must outlive the object.
template <class Sampler = sampler::uniform, class Schedule = schedule::constant, class Topology = topology::all_reduce>
class sparta : public detail::erased_handle {
public:
    template <class T, class Space, class Comm>
    sparta(const param_group<T, Space>& group, Comm& comm, sparta_options options = {}, Sampler sampler = {},
           Schedule schedule = {}, Topology topology = {})
        : erased_handle(detail::make_erased<sparta_engine<Sampler, Schedule, Topology, T, Space, Comm>>(
              group, comm, options, std::move(sampler), std::move(schedule), std::move(topology))) {}
};

TRICKLE_NAMESPACE_END
