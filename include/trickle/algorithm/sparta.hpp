// trickle/algorithm/sparta.hpp: SPARTA, sparse parameter averaging, as one object called after each optimizer step.
//
// At every `interval`-th step (or when the schedule says), all workers select the same
// positions (sampler, from the shared seed: nothing but values travels), gather them
// from every tensor of the group into one packed fp32 buffer in one pass, combine the
// buffers through the exchange route (codec and topology) in one communication call, and
// scatter the averages back in place in one pass.
//
// The engine composes stages (algorithm/stage/): the trigger, the exchange route, the
// replica state (checkpoint, a joiner's transfer, the agreed hash, a round's rollback)
// and, for sparta_options::overlap, the overlap stage. The gather and the scatter are
// written once per execution space: the host's range bodies (kernels/exchange/body.hpp)
// and the device's movers (kernels/exchange/dispatch.hpp; the gather plans as it goes).
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/detail/broadcast.hpp>
#include <trickle/algorithm/detail/common.hpp>
#include <trickle/algorithm/detail/device.hpp>
#include <trickle/algorithm/detail/erased.hpp>
#include <trickle/algorithm/detail/pick.hpp>
#include <trickle/algorithm/detail/round.hpp>
#include <trickle/algorithm/flat_params.hpp>
#include <trickle/algorithm/options.hpp>
#include <trickle/algorithm/stage/overlap.hpp>
#include <trickle/algorithm/stage/replica_state.hpp>
#include <trickle/algorithm/stage/route.hpp>
#include <trickle/algorithm/stage/trigger.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/kernels/exchange/body.hpp>
#include <trickle/kernels/exchange/dispatch.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/kernels/stream/body.hpp>
#include <trickle/sampler/sampler.hpp>
#include <trickle/sampler/uniform.hpp>
#include <trickle/schedule/schedule.hpp>
#include <trickle/topology/all_reduce.hpp>
#include <trickle/topology/topology.hpp>

#include <cstdint>
#include <istream>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN


// The SPARTA engine for parameters of type T in memory space Space over communicator
// Comm. Sampler, Schedule and Topology are policies (concepts sampler_policy,
// schedule_policy, topology_policy). Most code uses trickle::sparta<...>, which hides T,
// Space and Comm; the engine is for code that wants them checked at compile time.
template <class Sampler, class Schedule, class Topology, class T, class Space, class Comm, class Codec = codec::fp32>
class sparta_engine : public detail::replica_hooks<sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec>> {
    static_assert(sampler_policy<Sampler>, "Sampler must satisfy trickle::sampler_policy");
    static_assert(schedule_policy<Schedule>, "Schedule must satisfy trickle::schedule_policy");
    static_assert(topology_policy<Topology>, "Topology must satisfy trickle::topology_policy");
    static_assert(communicator<Comm>, "Comm must satisfy trickle::communicator");
    static_assert(std::is_same_v<typename Comm::memory_space, Space>,
                  "the communicator moves memory in a different space than the parameters live in "
                  "(use comm::nccl for cuda_space parameters, comm::local or comm::mpi for host_space)");
    static_assert(detail::round_protocol_defined<Comm>,
                  "an algorithm over an elastic communicator runs the membership protocol: include "
                  "<trickle/algorithm/membership.hpp> (or <trickle/trickle.hpp>)");

    using selection_t =
        std::remove_cvref_t<decltype(std::declval<Sampler&>().select(std::declval<const sampler_context&>()))>;
    using wire_codec = codec::resolve_t<Codec, T>; // codec::native becomes the parameters' own type
    static_assert(codec_policy<wire_codec>, "Codec must satisfy trickle::codec_policy (or be codec::native)");
    using route_type = detail::exchange_route<Topology, wire_codec, Space, Comm>;
    using protocol = detail::round_protocol<Comm>;
    using hooks = detail::replica_hooks<sparta_engine>;
    friend hooks;

public:
    using memory_space = Space;
    using value_type = T;
    using comm_type = Comm;
    using selection_type = selection_t;
    static constexpr const char* kind = "sparta";
    static constexpr bool on_device = std::is_same_v<Space, cuda_space>;

    // Whether the sampler can re-key a selection for another step on the device (uniform, block).
    static constexpr bool rekeyable_sampler = requires(selection_t& s) {
        Sampler::rekey(s, std::uint64_t{}, std::uint64_t{});
    };

    // Collective: every worker constructs at once. Validates the options and policies,
    // and checks that all workers agree on them and on the layout; throws the same
    // error on every worker otherwise (invalid_argument or mismatch_error).
    sparta_engine(const param_group<T, Space>& group, Comm& comm, sparta_options options, Sampler sampler = {},
                  Schedule schedule = {}, Topology topology = {}, Codec codec = {},
                  detail::membership_role role = detail::membership_role::own)
        : comm_(comm), options_(options), sampler_(std::move(sampler)), schedule_(std::move(schedule)),
          route_(std::move(topology), detail::wire_codec_of<wire_codec>(codec), options.seed, options.stochastic_rounding),
          trigger_(options.interval), delegated_(role == detail::membership_role::delegated) {
        config_record rec = describe(group);
        // As in DiLoCo, the initial broadcast is agreed on but is not part of the
        // checkpoint's configuration hash (a resumed run must not overwrite its parameters).
        this->replica_ = detail::replica_state(kind);
        this->replica_.set_config_hash(detail::fnv1a(rec.serialize()));
        mstats_.workers = comm_.size();
        if (detail::start_membership<Comm>(this->elastic_record_, rec, options_.join, role, kind,
                                           [&] { prepare(group); }, [&] { start_joining(); }))
            return;
        rec.add("broadcast_initial", options_.broadcast_initial);
        agree(comm_, rec);
        prepare(group);
        if (options_.broadcast_initial) {
            if constexpr (on_device) {
                start_cuda();
            } else {
                buffer<float, host_space> staging(flat_.total());
                stats_.initial = detail::broadcast_group_host(comm_, flat_.view(), flat_.total(), staging.data());
            }
        }
    }

    sparta_engine(const sparta_engine&) = delete;
    sparta_engine& operator=(const sparta_engine&) = delete;

    // Call after every optimizer step, on every worker. Exchanges at steps
    // interval-1, 2·interval-1, ... (or where the schedule says); otherwise only counts the
    // step. An overlapped exchange of the previous step is applied first.
    template <class Exec>
    void step(const Exec& ex) {
        static_assert(can_access_v<Exec, Space>, "sparta::step: this execution space cannot reach the parameters");
        detail::check_same_stream(comm_, ex, kind);
        const std::uint64_t t = stats_.steps;
        flush(ex);
        if (exchange_due(t)) {
            if (delegated_)
                exchange(ex, t);
            else
                protocol::run(comm_, *this, mstats_, options_.min_workers, kind, [&] { exchange(ex, t); });
        }
        count_step();
    }

    // On exec::cuda the step is enqueued on the stream and never waits: one gather (which
    // plans), one communication call and one scatter; it allocates nothing (every buffer is
    // sized at construction) and runs on the parameters' device whatever device is current.
    // With a sampler that re-keys on the device (uniform, block), the constant schedule,
    // interval 1 and a topology with fixed groups (all_reduce, ring), the step is replayable:
    // capture it in a CUDA graph, replay it k times and call replayed(k); the replicas get the
    // bits uncaptured steps give.
    void step(const exec::cuda& ex) {
        static_assert(can_access_v<exec::cuda, Space>, "sparta::step: this execution space cannot reach the parameters");
        detail::check_same_stream(comm_, ex, kind);
        detail::check_step_exec(ex, ex_, kind);
        // Refused before anything is recorded, on every step: a step without an exchange
        // would otherwise record an empty graph.
        if (!rekeyed_)
            detail::refuse_capture(ex, "sparta::step: this configuration cannot be replayed from a CUDA graph (it needs a "
                                       "sampler that re-keys on the device, uniform or block, the constant schedule, "
                                       "interval 1 and a topology without per-exchange groups); step it uncaptured");
        const std::uint64_t t = stats_.steps;
        if (exchange_due(t)) exchange_cuda(ex, t);
        count_step();
    }

    // Whether the step after step t exchanges (the trigger, through the schedule).
    bool exchange_due(std::uint64_t t) const { return trigger_.due_with(schedule_, t); }

    // Overlap: applies the pending exchange now (waiting for it if it still runs); nothing
    // otherwise. step() calls it first; call it before save(), and sparta_diloco before an
    // outer step. Local: every worker's exchange was started together.
    template <class Exec>
    void flush(const Exec& ex) {
        if constexpr (!on_device)
            if (overlap_.pending()) overlap_.apply(lend(), ex);
    }

    // Whether an overlapped exchange waits to be applied.
    bool exchange_pending() const { return overlap_.pending(); }

    // sparta_options::overlap: whether the exchange runs behind the next step (the route's
    // choice) or lands late after blocking the step that started it.
    overlap_plan overlap() const {
        return overlap_plan{.sparse_steps = !on_device && options_.overlap && route_.overlaps() ? 1u : 0u};
    }

    // Counts a step without exchanging (used by sparta_diloco at the end of an outer round).
    void skip_step() {
        if constexpr (on_device)
            if (rekeyed_) advance_device_step();
        count_step();
    }

    // Whether a CUDA step replays correctly from a captured graph (see step()).
    bool replayable() const { return rekeyed_; }

    // Accounts for k replays of a captured step: the host's step and traffic counters move
    // on as if step() had run k more times (each replay exchanged exactly what the
    // captured step did; the communicator itself never saw the replays).
    void replayed(std::uint64_t k) {
        require(rekeyed_, "sparta::replayed: this configuration is not replayable (see sparta::step)");
        for (std::uint64_t j = 0; j < k; ++j) {
            stats_.steps += 1;
            stats_.dense_bytes += dense_per_step_;
            stats_.total += stats_.last;
            stats_.values += stats_.last_values;
            ++stats_.exchanges;
        }
    }

    // Values the exchange buffer holds: enough for any step (sized at construction from
    // the schedule's largest fraction).
    std::size_t capacity() const { return capacity_; }

    const exchange_stats& stats() const { return stats_; }
    const sparta_options& options() const { return options_; }
    // Membership: the view, its changes, quorum, retried and skipped rounds (docs/elastic.md).
    const membership_stats& membership() const { return mstats_; }
    const Sampler& sampler() const { return sampler_; }
    std::size_t size() const { return flat_.total(); }

    // The fraction the exchange at step t would use.
    double fraction_at(std::uint64_t t) const { return schedule_.fraction(t, options_.fraction); }

    // Writes the step counters, traffic counts and sampler state.
    void save(std::ostream& os) const {
        require(!overlap_.pending(), "sparta::save: an overlapped exchange is pending; call flush(exec) on every worker first");
        this->replica_.save(os);
    }

    // Collective: reads a checkpoint written by save() under the same configuration.
    // Every worker throws the same error if any worker's checkpoint is unreadable,
    // corrupt, foreign, or at a different step; the state is then unchanged. `trailing`:
    // whether bytes may follow the checkpoint in `is` (checkpoint.hpp).
    void load(std::istream& is, const std::string& source = "stream",
              checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        this->replica_.load(comm_, is, source, trailing, [this](const detail::staged_sections& st, bool) {
            config_record rec("sparta checkpoint");
            const exchange_stats s = st.has("stats") ? st.value<exchange_stats>("stats") : exchange_stats{};
            rec.add("step", s.steps).add("exchanges", s.exchanges);
            Sampler sam = sampler_;
            if (st.has("sampler")) {
                try {
                    load_sampler(sam, st["sampler"]);
                } catch (const error&) {
                    sam = sampler_; // refused by its check already
                }
            }
            config_record sampler_state;
            sam.describe(sampler_state);
            rec.add_fields("", sampler_state);
            return rec;
        });
    }

    // ---- The membership protocol's hooks (algorithm/membership.hpp), over an elastic
    // communicator: elastic_record, transfer_state, receive_state, global_hash,
    // round_backup and round_rollback come from the replica state (detail::replica_hooks).
    // The state every replica shares: the step and exchange counters and the sampler's
    // state; a joiner also takes the donor's parameters.
    void view_changed() {
        dense_per_step_ = detail::dense_bytes_of(comm_, flat_.total());
        route_.view_changed(comm_);
    }

private:
    static constexpr bool elastic = comm::elastic_communicator<Comm>;

    void count_step() {
        ++stats_.steps;
        stats_.dense_bytes += dense_per_step_;
    }

    static std::string sampler_bytes(const Sampler& s) {
        std::ostringstream ss;
        if constexpr (requires { s.save(ss); }) s.save(ss);
        return ss.str();
    }
    static void load_sampler(Sampler& s, const std::string& b) {
        std::istringstream ss(b);
        if constexpr (requires { s.load(ss); }) s.load(ss);
    }

    // A joiner with its own role, after prepare (detail::start_membership): admitted at the
    // members' next exchange (inside their step t), it takes the state, then takes part in
    // exchange t, and resumes after step t.
    // (Compiled for elastic communicators only: nvcc's explicit instantiations compile
    // every member, and a joiner's round runs on the host.)
    void start_joining() {
        if constexpr (elastic) {
            protocol::join(comm_, *this, mstats_, options_.min_workers, kind,
                           [&] { exchange(exec::host{}, stats_.steps); });
            count_step();
        }
    }

    config_record describe(const param_group<T, Space>& group) const {
        config_record rec(kind);
        rec.add("trickle", detail::concat(TRICKLE_VERSION_MAJOR, '.', TRICKLE_VERSION_MINOR));
        detail::describe_group(rec, group, elastic ? -1 : comm_.size());
        detail::describe_options(rec, options_);
        sampler_.describe(rec);
        schedule_.describe(rec);
        route_.describe(rec, comm_.size(), kind);
        if constexpr (on_device)
            if (options_.overlap) rec.set_error("sparta: overlap runs on host parameters in this version");
        detail::describe_membership(rec, comm_, options_.min_workers, options_.join, kind, route_.all_reduce(),
                                    options_.overlap, "overlap");
        return rec;
    }

    // Where the group lives and every buffer a step uses, sized once: the exchange buffer
    // and the route's scratch for the largest selection the schedule can ask for, and on the
    // device the planned selection, the tile plans and (re-keyed samplers) the step counter.
    // Then the replica state's sections.
    void prepare(const param_group<T, Space>& group) {
        ex_ = detail::place_group(comm_, group, kind, flat_, ws_, options_.device_pool);
        dense_per_step_ = detail::dense_bytes_of(comm_, group.total_size());
        const double pmax = detail::schedule_max_fraction(schedule_, options_.fraction);
        capacity_ = detail::selection_capacity(sampler_, pmax, flat_.total());
        ws_.reserve(0, capacity_);
        route_.reserve(comm_, ws_, capacity_, capacity_, ex_);
        if (options_.overlap) overlap_.reserve(capacity_);
        if constexpr (on_device) {
            // A topology that draws its groups per exchange (gossip, islands, exponential) decides
            // on the host at every step, which a captured graph would freeze.
            rekeyed_ = rekeyable_sampler && std::is_same_v<Schedule, schedule::constant> && options_.interval == 1 &&
                       !detail::reduce_takes_context<Topology, exec::cuda, Comm, Space>;
            Sampler probe = sampler_;
            const selection_t sel =
                probe.select(sampler_context{options_.seed, 0, 0, pmax, flat_.layout(), flat_.host_layout()});
            std::size_t tiles = 1;
            if constexpr (detail::run_selection<selection_t>) tiles = detail::tile_count(capacity_, detail::tile_length(sel));
            device_selection_ = buffer<selection_t, cuda_space>(1, ex_);
            device_plans_ = buffer<detail::tile_plan, cuda_space>(tiles, ex_);
            if (rekeyed_) device_step_ = buffer<std::uint64_t, cuda_space>(1, ex_);
            device_state_ = {device_selection_.data(), device_plans_.data(), rekeyed_ ? device_step_.data() : nullptr};
#if TRICKLE_HAS_CUDA
            detail::device_scope on(ex_.device);
            TRICKLE_CUDA_CHECK(cudaStreamSynchronize(ex_.stream));
#endif
        }
        describe_state();
    }

    // The replica state, in the checkpoint's order (format version 3, unchanged): the stats
    // and the sampler's state. A joiner gets the step and exchange counters, the sampler's
    // state and the donor's parameters; the replicas agree on the hash of the first two.
    void describe_state() {
        auto& rs = this->replica_;
        detail::add_stats_sections(rs, stats_, detail::sent | detail::hashed, nullptr, [this] {
            if constexpr (on_device) {
                if (rekeyed_) copy_elements<cuda_space, host_space>(device_step_.data(), &stats_.steps, 1, ex_);
            } else {
                (void)this; // (the capture is for the device's branch)
            }
        });
        rs.add(detail::replica_state::section{
            "sampler", detail::saved | detail::sent | detail::hashed | detail::backed_up, [this] { return sampler_bytes(sampler_); },
            [this](const std::string& b) { load_sampler(sampler_, b); },
            [](const detail::staged_sections&) { return detail::replica_state::any_size; },
            [this](const detail::staged_sections& st) {
                Sampler probe = sampler_;
                load_sampler(probe, st["sampler"]);
            }});
        rs.add("parameters", detail::sent, flat_.total() * sizeof(float),
               [this] {
                   std::string out(flat_.total() * sizeof(float), '\0');
                   detail::run_ranges(exec::host{}, flat_.total(),
                                      snapshot_copy_body<T>{flat_.view(), reinterpret_cast<float*>(out.data()), 0});
                   return out;
               },
               [this](const std::string& b) {
                   detail::run_ranges(exec::host{}, flat_.total(),
                                      params_from_snapshot_body<T>{flat_.view(), reinterpret_cast<const float*>(b.data()), 0});
               });
    }

    // The fraction and selection of the exchange at step t (the sampler's state moves on).
    selection_t select(std::uint64_t t) {
        const double p = schedule_.fraction(t, options_.fraction);
        if (!detail::valid_fraction(p))
            throw invalid_argument(detail::concat("sparta: the ", Schedule::name, " schedule gave fraction ", p,
                                                  " at step ", t, "; it must be in (0, 1]"));
        const sampler_context ctx{options_.seed, t, stats_.exchanges, p, flat_.layout(), flat_.host_layout()};
        selection_t sel = sampler_.select(ctx);
        require(sel.count() <= capacity_, "sparta: the ", Sampler::name, " sampler selected ", sel.count(),
                " values at step ", t, ", more than the ", capacity_, " its max_count() promised at construction");
        return sel;
    }

    // What the overlap stage borrows (stage/overlap.hpp): the selection, the group's view,
    // the exchange buffer, the route and the accounting; nothing else of the engine.
    struct overlap_lender {
        sparta_engine& e;
        selection_t select(std::uint64_t t) const { return e.select(t); }
        auto view() const { return e.flat_.view(); }
        float* buffer(std::size_t count) const { return e.ws_.get(0, count); }
        route_type& route() const { return e.route_; }
        Comm& comm() const { return e.comm_; }
        workspace<float, Space, 4>& ws() const { return e.ws_; }
        std::uint64_t round() const { return e.stats_.exchanges; }
        void count(const traffic_counters& last, const codec::wire_parts& parts, std::size_t count) const {
            e.stats_.add_exchange(last, parts, count);
        }
    };
    overlap_lender lend() { return overlap_lender{*this}; }

    // The gather of the selected values into buf, and the scatter of buf * scale back: the
    // host's range bodies; on the device the two movers (the gather plans as it goes).
    template <class Exec>
    void gather(const Exec& ex, const selection_t& sel, float* buf) {
        const auto g = make_gather(flat_.view(), sel, buf);
        for_each_index(ex, g.calls(), g);
    }
    template <class Exec>
    void scatter(const Exec& ex, const selection_t& sel, float* buf, float scale) {
        const auto s = make_scatter(flat_.view(), sel, buf, scale);
        for_each_index(ex, s.calls(), s);
    }
#if TRICKLE_CUDA_COMPILER
    void gather(const exec::cuda& ex, const selection_t& sel, float* buf) {
        if constexpr (rekeyable_sampler) {
            if (rekeyed_) {
                detail::device_move<true>(ex, flat_.view(), sel, device_state_, buf, 1.0f,
                                          detail::rekey_selection<Sampler>{options_.seed});
                return;
            }
        }
        detail::device_move<true>(ex, flat_.view(), sel, device_state_, buf, 1.0f);
    }
    void scatter(const exec::cuda& ex, const selection_t& sel, float* buf, float scale) {
        detail::device_move<false>(ex, flat_.view(), sel, device_state_, buf, scale);
    }
#endif

    // One exchange on any execution space: select, gather, sum through the route, scatter
    // the mean. With overlap (host) it is started here and applied at the next step.
    template <class Exec>
    void exchange(const Exec& ex, std::uint64_t t) {
        if constexpr (!on_device) {
            if (options_.overlap) {
                overlap_.start(lend(), ex, t);
                return;
            }
        }
        const selection_t sel = select(t);
        const std::size_t count = sel.count();
        float* buf = ws_.get(0, count);
        gather(ex, sel, buf);
        route_.refuse_capture_if_stochastic(ex, "sparta::step: stochastic rounding draws new words at every exchange, "
                                                "which a captured CUDA graph would replay unchanged");
        // Not overlapped: the route runs the exchange now, and the flight comes back landed.
        const detail::route_flight f = route_.start(ex, comm_, buf, count, ws_, stats_.exchanges, 0, false, false);
        protocol::commit(comm_);
        scatter(ex, sel, buf, 1.0f / static_cast<float>(f.group));
        stats_.add_exchange(f.traffic, f.parts, count);
    }

    // The CUDA parts (defined below for nvcc; g++ translation units reach them through an
    // explicit instantiation, algorithm/instantiate.hpp).
    void exchange_cuda(const exec::cuda& ex, std::uint64_t t);
    void advance_device_step();
    void start_cuda(); // the initial broadcast

    Comm& comm_;
    sparta_options options_;
    Sampler sampler_;
    Schedule schedule_;
    route_type route_;
    detail::round_trigger trigger_;
    flat_params<T, Space> flat_;
    workspace<float, Space, 4> ws_;
    exchange_stats stats_{};
    // Membership (elastic communicators).
    bool delegated_ = false; // sparta_diloco runs the protocol for both its parts
    membership_stats mstats_{};
    std::uint64_t dense_per_step_ = 0;
    std::size_t capacity_ = 0;
    // cuda_space only: where the CUDA work runs, and the device memory of the plan.
    exec::cuda ex_{};
    bool rekeyed_ = false;
    buffer<selection_t, cuda_space> device_selection_;
    buffer<detail::tile_plan, cuda_space> device_plans_;
    buffer<std::uint64_t, cuda_space> device_step_;
    detail::device_exchange_state<selection_t> device_state_{};
    // Last, so that it goes first: an overlapped exchange still running writes into ws_.
    detail::overlap_stage<selection_t> overlap_;
};

#if TRICKLE_CUDA_COMPILER
template <class Sampler, class Schedule, class Topology, class T, class Space, class Comm, class Codec>
void sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec>::exchange_cuda(const exec::cuda& step_ex, std::uint64_t t) {
    if constexpr (on_device) {
        const exec::cuda ex{step_ex.stream, ex_.device};
        detail::device_scope on(ex.device);
        exchange(ex, t);
    } else {
        (void)step_ex, (void)t;
    }
}

template <class Sampler, class Schedule, class Topology, class T, class Space, class Comm, class Codec>
void sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec>::start_cuda() {
    if constexpr (on_device) {
        detail::device_scope on(ex_.device);
        const std::vector<std::uint32_t> tiles = detail::tile_segments(flat_.host_view());
        buffer<std::uint32_t, cuda_space> tile_seg(tiles.size(), ex_);
        copy_elements<cuda_space, host_space>(tile_seg.data(), tiles.data(), tiles.size(), ex_);
        buffer<float, cuda_space> staging(flat_.total(), ex_);
        stats_.initial =
            detail::broadcast_group_device(ex_, comm_, flat_.view(), tile_seg.data(), flat_.total(), staging.data());
        // The table and the staging array are freed in stream order; the host vector must
        // outlive the copy that reads it.
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(ex_.stream));
    }
}

template <class Sampler, class Schedule, class Topology, class T, class Space, class Comm, class Codec>
void sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec>::advance_device_step() {
    if constexpr (on_device) {
        detail::device_scope on(ex_.device);
        detail::device_increment(ex_, device_step_.data());
    }
}
#endif

// SPARTA as a concrete object: build it from a param_group, a communicator and options,
// then call step(exec) after every optimizer step on every worker.
//   trickle::sparta<trickle::sampler::permutation> s{params, comm, {.fraction = 0.005, .seed = 42}};
//   s.step(trickle::exec::host{});
// The parameter type, memory space and communicator are hidden; stepping with an
// execution space that cannot reach the parameters is a runtime error (use
// sparta_engine for a compile-time one). The communicator must outlive the object. The
// policies after the options may also be given in any order, each by its type, the others
// defaulted: sparta<sampler::uniform, schedule::constant, topology::ring> s{params, comm, opts, topology::ring{}}.
template <class Sampler = sampler::uniform, class Schedule = schedule::constant, class Topology = topology::all_reduce,
          class Codec = codec::fp32>
class sparta : public detail::erased_handle {
    template <class T, class Space, class Comm>
    using engine = sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec>;

public:
    sparta() = default;
    template <class T, class Space, class Comm>
    sparta(const param_group<T, Space>& group, Comm& comm, sparta_options options = {}, Sampler sampler = {},
           Schedule schedule = {}, Topology topology = {}, Codec codec = {})
        : erased_handle(detail::make_erased<engine<T, Space, Comm>>(group, comm, options, std::move(sampler),
                                                                     std::move(schedule), std::move(topology),
                                                                     std::move(codec))) {}
    template <class T, class Space, class Comm, class First, class... Rest>
        requires detail::by_type_policies<detail::policy_slots<Sampler, Schedule, Topology, Codec>, First, Rest...>
    sparta(const param_group<T, Space>& group, Comm& comm, sparta_options options, First&& first, Rest&&... rest)
        : sparta(group, comm, options, detail::pick<Sampler>(std::forward<First>(first), std::forward<Rest>(rest)...),
                 detail::pick<Schedule>(std::forward<First>(first), std::forward<Rest>(rest)...),
                 detail::pick<Topology>(std::forward<First>(first), std::forward<Rest>(rest)...),
                 detail::pick<Codec>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}
};

TRICKLE_NAMESPACE_END
