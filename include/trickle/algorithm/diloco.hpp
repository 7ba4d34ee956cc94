// trickle/algorithm/diloco.hpp: DiLoCo as an object called after each optimizer step.
//
// DiLoCo: every worker keeps the snapshot, the parameters at the start of the outer
// round. Every H inner steps, one pass computes the outer gradient
// delta = snapshot - params straight into the send buffer, one communication call
// averages it over the workers (weighted, with dropped contributions renormalized), and
// one pass applies the outer optimizer to the snapshot with the averaged delta as its
// gradient and copies the result into the parameters. The trainer's inner optimizer and
// its state are never touched. Only deltas travel: one reduction per outer step, never
// the parameters plus a broadcast.
//
// The engine composes stages that own their state (algorithm/stage/): the trigger (every
// H, or the trainer's manual outer steps), the exchange route (codec and topology, with
// its scratch, residual and byte accounting), the replica state (what a checkpoint, a
// joiner's transfer, the agreed hash and a round's rollback hold), and Streaming DiLoCo's
// fragments. Each pass is one body (kernels/stream/body.hpp) that the step's execution
// space runs its own way (stream_pass, kernels/stream/dispatch.hpp). SPARTA + DiLoCo is
// algorithm/sparta_diloco.hpp.
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
#include <trickle/algorithm/stage/aggregate.hpp>
#include <trickle/algorithm/stage/fragments.hpp>
#include <trickle/algorithm/stage/replica_state.hpp>
#include <trickle/algorithm/stage/route.hpp>
#include <trickle/algorithm/stage/trigger.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/kernels/prune/dispatch.hpp>
#include <trickle/kernels/stream/body.hpp>
#include <trickle/kernels/stream/dispatch.hpp>
#include <trickle/outer/momentum.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/sampler/sampler.hpp>
#include <trickle/topology/all_reduce.hpp>

#include <cmath>
#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Whether `rank`'s contribution to outer step `outer_index` is dropped: a pure function
// of the shared seed, so every worker computes the same answer for every worker.
inline bool dropped_contribution(std::uint64_t seed, double q, std::uint64_t outer_index, int rank) {
    if (q <= 0.0) return false;
    const std::uint64_t w = random_u64(seed, stream_id(stream_tag::drop, outer_index), static_cast<std::uint64_t>(rank));
    return uniform01_d(w) < q;
}

inline fragment_config fragments_of(const diloco_options& o) {
    return fragment_config{o.fragments, o.fragment_tensors, o.overlap_steps, o.mix, o.carry_local};
}

} // namespace detail

// The DiLoCo engine for parameters of type T in memory space Space over communicator
// Comm, with an outer optimizer Outer (concept outer_optimizer) and a Topology for the
// delta averaging. Most code uses trickle::diloco<...>, which hides T, Space and Comm.
template <class Outer, class Topology, class T, class Space, class Comm, class Codec = codec::fp32>
class diloco_engine : public detail::replica_hooks<diloco_engine<Outer, Topology, T, Space, Comm, Codec>> {
    static_assert(outer_optimizer<Outer>, "Outer must satisfy trickle::outer_optimizer");
    static_assert(topology_policy<Topology>, "Topology must satisfy trickle::topology_policy");
    static_assert(communicator<Comm>, "Comm must satisfy trickle::communicator");
    static_assert(std::is_same_v<typename Comm::memory_space, Space>,
                  "the communicator moves memory in a different space than the parameters live in");
    static_assert(detail::round_protocol_defined<Comm>,
                  "an algorithm over an elastic communicator runs the membership protocol: include "
                  "<trickle/algorithm/membership.hpp> (or <trickle/trickle.hpp>)");
    using wire_codec = codec::resolve_t<Codec, T>; // codec::native becomes the parameters' own type
    using route_type = detail::exchange_route<Topology, wire_codec, Space, Comm>;
    using protocol = detail::round_protocol<Comm>;
    using hooks = detail::replica_hooks<diloco_engine>;
    friend hooks;

public:
    using memory_space = Space;
    using value_type = T;
    using comm_type = Comm;
    static constexpr const char* kind = "diloco";
    static constexpr bool on_device = std::is_same_v<Space, cuda_space>;

    // Collective. Validates options, agrees on the configuration across workers, checks
    // that the weights do not sum to zero, then (by default) gives every worker rank 0's
    // parameters and takes them as the first snapshot.
    diloco_engine(const param_group<T, Space>& group, Comm& comm, diloco_options options, Outer outer = {},
                  Topology topology = {}, Codec codec = {}, detail::membership_role role = detail::membership_role::own)
        : comm_(comm), options_(options), outer_(std::move(outer)),
          route_(std::move(topology), detail::wire_codec_of<wire_codec>(codec), options.seed, options.stochastic_rounding,
                 options.error_feedback),
          trigger_(options.interval, options.manual_outer), aggregate_(options.aggregate, options.deadline),
          delegated_(role == detail::membership_role::delegated) {
        config_record rec = describe(group);
        // A checkpoint may be restored into an object built with or without the initial
        // broadcast (a resumed run must not overwrite its parameters with rank 0's), so
        // that option is agreed on but not part of the checkpoint's configuration hash.
        this->replica_ = detail::replica_state(kind);
        this->replica_.set_config_hash(detail::fnv1a(rec.serialize()));
        mstats_.workers = comm_.size();
        if (detail::start_membership<Comm>(this->elastic_record_, rec, options_.join, role, kind,
                                           [&] { prepare(group); }, [&] { start_joining(); }))
            return;
        rec.add("broadcast_initial", options_.broadcast_initial);
        agree(comm_, rec);
        check_weights();
        prepare(group);
        if constexpr (on_device) {
            start_cuda();
        } else {
            if (options_.broadcast_initial)
                stats_.initial = detail::broadcast_group_host(comm_, flat_.view(), n_, snapshot_);
            detail::run_ranges(exec::host{}, n_, snapshot_copy_body<T>{flat_.view(), snapshot_, 0});
        }
        comm_.synchronize();
    }

    diloco_engine(const diloco_engine&) = delete;
    diloco_engine& operator=(const diloco_engine&) = delete;

    // Call after every inner optimizer step, on every worker. (On exec::cuda: the overload
    // below.)
    template <class Exec>
    void step(const Exec& ex) {
        static_assert(can_access_v<Exec, Space>, "diloco::step: this execution space cannot reach the parameters");
        detail::check_same_stream(comm_, ex, kind);
        const std::uint64_t t = stats_.steps;
        if (fragments_.active()) {
            fragments_.step(lend(), ex, t);
        } else if (trigger_.due(t)) {
            steps_pending_ = 1; // a joiner admitted now resumes after this step
            outer_round(ex);
            steps_pending_ = 0;
        }
        count_step();
    }
    void step(const exec::cuda& ex) {
        static_assert(can_access_v<exec::cuda, Space>, "diloco::step: this execution space cannot reach the parameters");
        begin_cuda_step(ex, "diloco::step: a DiLoCo step cannot be replayed from a CUDA graph (the outer optimizer's "
                            "constants, the drop draws and the round count live on the host); step it uncaptured");
        const std::uint64_t t = stats_.steps;
        if (fragments_.active())
            streaming_step_cuda(ex, t);
        else if (trigger_.due(t))
            outer_step_cuda(ex);
        count_step();
    }

    // manual_outer: one outer step now, on every worker at once (collective), whatever
    // number of inner steps each worker took since the last one.
    template <class Exec>
    void outer_step(const Exec& ex) {
        static_assert(can_access_v<Exec, Space>, "diloco::outer_step: this execution space cannot reach the parameters");
        check_manual(ex);
        outer_round(ex);
    }
    void outer_step(const exec::cuda& ex) {
        static_assert(can_access_v<exec::cuda, Space>,
                      "diloco::outer_step: this execution space cannot reach the parameters");
        check_manual(ex);
        detail::check_step_exec(ex, ex_, kind);
        outer_step_cuda(ex);
    }

    // Counts an inner step without any outer step (sparta_diloco, below quorum).
    void count_step() {
        ++stats_.steps;
        stats_.dense_bytes += dense_per_step_;
    }

    // This worker's weight in the coming outer steps, e.g. the tokens or samples it processed
    // since the last one (workers at different speeds); finite and >= 0. Local: weights may
    // differ between workers, and travel with the deltas. If every worker's is 0 the outer
    // gradient is 0.
    void set_weight(float w) {
        require(std::isfinite(w) && w >= 0.0f, "diloco::set_weight: the weight must be finite and >= 0, got ", w);
        options_.weight = w;
    }

    // True when the next inner step begins an outer step (of some fragment, when streaming).
    bool outer_step_due() const { return fragments_.active() ? fragments_.due(stats_.steps) : trigger_.due(stats_.steps); }

    // Streaming: the fragments' flat ranges [first, first + count), in group order.
    std::vector<std::pair<std::size_t, std::size_t>> fragment_ranges() const { return fragments_.ranges(); }

    // Streaming with overlap_steps: whether the fragments' exchanges run behind the inner
    // steps (the route's choice) or block the step that starts them, landing late.
    overlap_plan overlap() const {
        return overlap_plan{.outer_steps = fragments_.active() && route_.overlaps() ? options_.overlap_steps : 0};
    }

    // Streaming: fragments whose average has not been applied yet.
    std::size_t fragments_in_flight() const { return fragments_.in_flight(); }

    const exchange_stats& stats() const { return stats_; }
    const diloco_options& options() const { return options_; }
    // How the outer steps combined the contributions: each worker's norm, distance to the
    // aggregate, the workers clipped, trimmed or excluded (docs/robustness.md). Host parameters.
    const aggregation_stats& aggregation() const { return aggregate_.stats(); }
    // diloco_options::deadline: the deadline of the coming round (the same on every worker),
    // and the deadlines so far. This worker's arrival time in the current round (local: the
    // time it finished, or would finish, its round's work; +inf: not by the deadline).
    double deadline() const { return aggregate_.deadline().current(); }
    const deadline_stats& deadlines() const { return aggregate_.deadline().stats(); }
    void report_arrival(double t) {
        require(!std::isnan(t) && t >= 0.0, "diloco::report_arrival: the arrival time must be >= 0 (or +inf), got ", t);
        aggregate_.report_arrival(t);
    }
    // Membership: the view, its changes, quorum, retried and skipped rounds (docs/elastic.md).
    const membership_stats& membership() const { return mstats_; }
    std::uint64_t outer_steps_applied() const { return outer_t_; }
    std::uint64_t outer_steps_skipped() const { return skipped_; }

    // Whether `rank`'s contribution to outer step `outer_index` (0-based) is dropped.
    bool dropped(int rank, std::uint64_t outer_index) const {
        return detail::dropped_contribution(options_.seed, options_.drop_probability, outer_index, rank);
    }

    // The snapshot (fp32) copied to the host, for inspection and tests.
    std::vector<float> snapshot() const {
        comm_.synchronize();
        std::vector<float> out(n_);
        copy_to_host(out.data(), snapshot_, n_);
        return out;
    }

    void save(std::ostream& os) const {
        comm_.synchronize();
        this->replica_.save(os);
    }

    // Collective; every worker throws the same error if any worker's checkpoint is bad or
    // at a different step, and then nothing changes. The parameters are not part of the
    // checkpoint: the trainer restores them with its own state. `trailing`: whether bytes
    // may follow the checkpoint in `is` (checkpoint.hpp); `at_step`, when given, the step
    // the checkpoint must be at (sparta_diloco: its DiLoCo part must be of the same
    // checkpoint as the SPARTA part it already read).
    void load(std::istream& is, const std::string& source = "stream",
              checkpoint_trailing trailing = checkpoint_trailing::refuse,
              std::optional<std::uint64_t> at_step = std::nullopt) {
        this->replica_.load(
            comm_, is, source, trailing,
            [](const detail::staged_sections& st, bool) {
                config_record rec("diloco checkpoint");
                const std::uint64_t steps = st.has("stats") ? st.value<exchange_stats>("stats").steps : 0;
                std::uint64_t c[3] = {};
                if (st.has("outer_counters")) detail::bytes_to(st["outer_counters"], c, 3);
                rec.add("step", steps).add("outer_steps", c[0]).add("outer_attempts", c[2]);
                return rec;
            },
            [&](const detail::staged_sections& st) {
                const std::uint64_t steps = st.value<exchange_stats>("stats").steps;
                if (at_step && steps != *at_step)
                    throw invalid_argument(detail::concat("checkpoint: the DiLoCo part is at step ", steps,
                                                          ", the SPARTA part at ", *at_step,
                                                          " (parts of two different checkpoints)"));
            });
    }

    // ---- The membership protocol's hooks (algorithm/membership.hpp), over an elastic
    // communicator: elastic_record, transfer_state, receive_state, global_hash,
    // round_backup and round_rollback come from the replica state (detail::replica_hooks).
    // The global state every replica shares: the snapshot, the outer optimizer's state and
    // the round counters; the step counter travels to joiners too.
    void view_changed() {
        dense_per_step_ = detail::dense_bytes_of(comm_, n_);
        route_.view_changed(comm_);
    }

private:
    static constexpr bool elastic = comm::elastic_communicator<Comm>;

    // One outer step; over an elastic communicator under the membership protocol.
    template <class Exec>
    void outer_round(const Exec& ex) {
        if (delegated_)
            run_outer_step(ex);
        else
            protocol::run(comm_, *this, mstats_, options_.min_workers, kind, [&] { run_outer_step(ex); });
    }

    // A joiner with its own role, after prepare (detail::start_membership): admitted at the
    // members' next outer step, it takes the state and then takes part in that outer step
    // with weight 0 (its delta is zero).
    // (Compiled for elastic communicators only: nvcc's explicit instantiations compile
    // every member, and a joiner's round runs on the host.)
    void start_joining() {
        if constexpr (elastic) {
            const float weight = options_.weight;
            options_.weight = 0.0f;
            try {
                protocol::join(comm_, *this, mstats_, options_.min_workers, kind,
                               [&] { run_outer_step(exec::host{}); });
            } catch (...) {
                options_.weight = weight;
                throw;
            }
            options_.weight = weight;
        }
    }

    // After a joiner applied the donor's state: it starts from the global model.
    void state_received() { detail::run_ranges(exec::host{}, n_, params_from_snapshot_body<T>{flat_.view(), snapshot_, 0}); }

    template <class Exec>
    void check_manual(const Exec& ex) {
        require(options_.manual_outer, "diloco::outer_step: outer steps are triggered by step() every interval steps; "
                                       "set diloco_options::manual_outer to trigger them yourself");
        detail::check_same_stream(comm_, ex, kind);
    }

    void begin_cuda_step(const exec::cuda& ex, const char* no_capture) {
        detail::check_same_stream(comm_, ex, kind);
        detail::check_step_exec(ex, ex_, kind);
        detail::refuse_capture(ex, no_capture);
    }

    config_record describe(const param_group<T, Space>& group) const {
        config_record rec(kind);
        rec.add("trickle", detail::concat(TRICKLE_VERSION_MAJOR, '.', TRICKLE_VERSION_MINOR));
        detail::describe_group(rec, group, elastic ? -1 : comm_.size());
        const auto& o = options_;
        detail::describe_options(rec, o, std::is_same_v<Space, cuda_space>);
        outer_.describe(rec);
        route_.describe(rec, comm_.size(), kind);
        const detail::fragment_config frag = detail::fragments_of(o);
        detail::fragment_stream<T, Space>::describe(frag, o.interval, o.manual_outer, o.prune_fraction > 0.0,
                                                          group, rec);
        detail::describe_membership(rec, comm_, o.min_workers, o.join, kind, route_.all_reduce(), frag.streams(),
                                    "streaming (fragments, overlap_steps, mix)");
        detail::outer_aggregate::describe(rec, o.aggregate, o.deadline, elastic ? -1 : comm_.size(), route_.all_reduce(),
                                          detail::plain_codec(route_.codec()), frag.streams(), on_device, o.manual_outer,
                                          kind);
        if (!(o.error_feedback >= 0.0 && o.error_feedback <= 1.0))
            rec.set_error(detail::concat("diloco: error_feedback must be in [0, 1], got ", o.error_feedback));
        else if (o.error_feedback > 0.0 && detail::plain_codec(route_.codec()))
            rec.set_error("diloco: error_feedback needs a lossy codec (the fp32 codec loses nothing to feed back)");
        return rec;
    }

    // Checkpoint copies: on the algorithm's stream for cuda_space (never the legacy stream).
    void copy_to_host(float* dst, const float* src, std::size_t n) const {
        if constexpr (on_device)
            copy_elements<host_space, Space>(dst, src, n, ex_);
        else
            copy_elements<host_space, Space>(dst, src, n);
    }
    void copy_from_host(float* dst, const float* src, std::size_t n) const {
        if constexpr (on_device)
            copy_elements<Space, host_space>(dst, src, n, ex_);
        else
            copy_elements<Space, host_space>(dst, src, n);
    }

    // Collective: the weights (which differ between workers) must not sum to zero.
    void check_weights() {
        const int N = comm_.size();
        std::vector<float> all(static_cast<std::size_t>(N));
        comm_.all_gather_bytes(&options_.weight, all.data(), sizeof(float));
        double sum = 0;
        for (float w : all) sum += w;
        if (!(sum > 0.0)) throw invalid_argument("diloco: the workers' weights sum to zero");
    }

    // Where the group lives and every buffer a step uses, sized once: snapshot, optimizer
    // state, the send buffer (n + 1 values: the weight travels last; streaming: every
    // fragment's side by side), the route's scratch, and on the device the tile -> segment
    // table of the passes and the pruning scratch (start_cuda). Then the replica state's
    // sections.
    void prepare(const param_group<T, Space>& group) {
        n_ = group.total_size();
        ex_ = detail::place_group(comm_, group, kind, flat_, ws_, options_.device_pool);
        dense_per_step_ = detail::dense_bytes_of(comm_, n_);
        state_floats_ = outer_state_floats(outer_, n_);
        const detail::fragment_config frag = detail::fragments_of(options_);
        const std::size_t slot0 =
            frag.streams() ? detail::fragment_stream<T, Space>::workspace_values(frag, flat_.host_layout(), n_) : n_ + 1;
        ws_.reserve(0, slot0);
        route_.reserve(comm_, ws_, n_, n_ + 1, ex_);
        if (frag.streams()) fragments_.build(frag, trigger_, flat_.host_layout(), n_, ws_.get(0, slot0), ex_);
        if constexpr (on_device) {
            const std::vector<std::uint32_t> tiles = detail::tile_segments(flat_.host_view());
            tile_seg_ = buffer<std::uint32_t, cuda_space>(tiles.size(), ex_);
            copy_elements<cuda_space, host_space>(tile_seg_.data(), tiles.data(), tiles.size(), ex_);
            if (options_.state_in_pinned_host) {
                snap_pinned_ = buffer<float, host_space>(n_, host_alloc::pinned);
                state_pinned_ = buffer<float, host_space>(state_floats_, host_alloc::pinned);
                snapshot_ = snap_pinned_.data();
                state_ = state_pinned_.data();
            } else {
                snap_ = buffer<float, Space>(n_, ex_);
                state_buf_ = buffer<float, Space>(state_floats_, ex_);
            }
        } else {
            snap_ = buffer<float, Space>(n_);
            state_buf_ = buffer<float, Space>(state_floats_);
        }
        if (snapshot_ == nullptr) {
            snapshot_ = snap_.data();
            state_ = state_buf_.data();
        }
        describe_state();
    }

    // The replica state, in the checkpoint's order (format version 3, unchanged): stats,
    // outer counters, snapshot, optimizer state, the residual (error feedback) and the
    // fragments (streaming). A joiner gets the step and round counters, the snapshot and the
    // optimizer state; the replicas agree on the hash of the last three.
    void describe_state() {
        auto& rs = this->replica_;
        detail::add_stats_sections(rs, stats_, detail::sent, &steps_pending_);
        rs.add("outer_counters", detail::saved | detail::sent | detail::hashed | detail::backed_up, 3 * sizeof(std::uint64_t),
               [this] {
                   const std::uint64_t c[3] = {outer_t_, skipped_, attempts_};
                   return detail::bytes_of(c, 3);
               },
               [this](const std::string& b) {
                   std::uint64_t c[3] = {};
                   detail::bytes_to(b, c, 3);
                   outer_t_ = c[0];
                   skipped_ = c[1];
                   attempts_ = c[2];
               });
        rs.add("snapshot", detail::saved | detail::sent | detail::hashed, n_ * sizeof(float), [this] { return host_floats(snapshot_, n_); },
               [this](const std::string& b) { copy_from_host(snapshot_, reinterpret_cast<const float*>(b.data()), n_); });
        if constexpr (!on_device) rs.in_host_memory([this] { return std::span<float>(snapshot_, n_); });
        rs.add("outer_state", detail::saved | detail::sent | detail::hashed, state_floats_ * sizeof(float),
               [this] { return host_floats(state_, state_floats_); },
               [this](const std::string& b) {
                   copy_from_host(state_, reinterpret_cast<const float*>(b.data()), state_floats_);
               });
        if constexpr (!on_device) rs.in_host_memory([this] { return std::span<float>(state_, state_floats_); });
        if (route_.feedback())
            rs.add("residual", detail::saved | detail::backed_up, n_ * sizeof(float),
                   [this] {
                       const std::vector<float> r = route_.residual();
                       return detail::bytes_of(r.data(), r.size());
                   },
                   [this](const std::string& b) {
                       std::vector<float> r(b.size() / sizeof(float));
                       detail::bytes_to(b, r.data(), r.size());
                       route_.set_residual(r);
                   });
        if (fragments_.active()) fragments_.add_sections(rs, lend());
        aggregate_.add_sections(rs, n_);
    }

    std::string host_floats(const float* src, std::size_t n) const {
        std::string out(n * sizeof(float), '\0');
        copy_to_host(reinterpret_cast<float*>(out.data()), src, n);
        return out;
    }

    // The CUDA parts (defined below for nvcc; g++ translation units reach them through an
    // explicit instantiation, algorithm/instantiate.hpp): the first snapshot, an outer step,
    // a streaming step.
    void start_cuda();
    void outer_step_cuda(const exec::cuda& ex);
    void streaming_step_cuda(const exec::cuda& ex, std::uint64_t t);

    // The participants of the coming outer step, or -1 when every contribution is dropped
    // (the round then simply continues); this worker's weight in it. Counts the round
    // (attempts_), so the route names it attempts_ - 1.
    bool begin_outer_step(float& w) {
        const std::uint64_t attempt = attempts_++;
        const int N = comm_.size();
        int participants = 0;
        for (int r = 0; r < N; ++r) participants += !dropped(r, attempt);
        if (participants == 0) {
            ++skipped_;
            return false;
        }
        w = dropped(comm_.rank(), attempt) ? 0.0f : options_.weight;
        return true;
    }

    // The pass of an outer step over elements [first, first + n) with buf (n + 1 values)
    // and weight w: what it produces and consumes (stage/outer_pass.hpp). The whole group's
    // passes run through the device's vector agents, a fragment's as generic ranges.
    detail::outer_pass<T> pass(float* buf, std::size_t first, std::size_t n, float w, bool whole) const {
        return detail::outer_pass<T>{flat_.view(), snapshot_, state_, whole ? tile_seg_.data() : nullptr, first, n, buf, w};
    }

    // Counts one completed exchange of n deltas and the weight: `last` its traffic, `parts`
    // its bytes by part (the route's, of `last` less the reports), `report_bytes` what the
    // round's reports sent before it (within `last`; counted as scales, the part of the
    // weights and other per-round metadata), so that the parts still sum to the bytes sent.
    void count_exchange(const traffic_counters& last, codec::wire_parts parts, std::size_t n,
                        std::uint64_t report_bytes = 0) {
        parts.scales += report_bytes;
        stats_.add_exchange(last, parts, n + 1);
    }

    // Pruning of a pass's deltas buf (layout L), on the step's execution space.
    void prune(const exec::host&, float* buf, const layout_view& L) {
        detail::prune_host(buf, L, options_.prune_fraction, prune_keys_);
    }
    void prune(const exec::openmp&, float* buf, const layout_view& L) { prune(exec::host{}, buf, L); }
#if TRICKLE_CUDA_COMPILER
    void prune(const exec::cuda& ex, float* buf, const layout_view&) {
        detail::prune_device(ex, buf, flat_.layout(), options_.prune_fraction, prune_scratch_);
    }
#endif

    // One outer step over the whole group, on any execution space: the reports (who takes
    // part), then the pass through the route, which chooses how it travels (fused into a
    // codec's passes, or producer, pruning or a robust rule's combine, sum and consumer).
    template <class Exec>
    void run_outer_step(const Exec& ex) {
        float w = 0.0f;
        if (!begin_outer_step(w)) return;
        float* buf = ws_.get(0, n_ + 1);
        const traffic_counters before = comm_.traffic();
        traffic_counters reports{};
        if constexpr (!on_device) {
            // The reports: who takes part (a non-finite outer gradient is excluded).
            w = aggregate_.begin(comm_, w, own_delta_norm());
            reports = comm_.traffic() - before;
            if (w < 0.0f) { // every contribution excluded: the round is skipped, its reports counted
                ++skipped_;
                aggregate_.end();
                stats_.add_exchange(reports, codec::wire_parts{.scales = reports.bytes_sent}, 0);
                return;
            }
        }
        const detail::pass_wrap wrap{options_.prune_fraction > 0.0, aggregate_.robust(),
                                     [this](const auto& e, float* b) { prune(e, b, flat_.host_layout()); },
                                     [this](float* b, std::size_t n) {
                                         if constexpr (!on_device) aggregate_.combine(comm_, b, n);
                                         else (void)b, (void)n;
                                     }};
        // (Over an elastic communicator a round must leave the snapshot untouched until its
        // collectives have all completed: the route never fuses there, and the prepare
        // below commits the round first.)
        route_.outer_step(ex, comm_, ws_, attempts_ - 1, pass(buf, 0, n_, w, true), wrap, [this] {
            protocol::commit(comm_);
            return outer_.prepare(++outer_t_);
        });
        aggregate_.end();
        const traffic_counters last = comm_.traffic() - before;
        count_exchange(last, route_.parts_sent(comm_, n_, last - reports), n_, reports.bytes_sent);
    }

    // What the streaming stage borrows for a fragment's outer step (stage/fragments.hpp):
    // the participants, the pass, pruning, the route and the accounting; nothing else of
    // the engine.
    struct fragment_lender {
        diloco_engine& e;
        bool participants(float& w) const { return e.begin_outer_step(w); }
        detail::outer_pass<T> pass(float* buf, std::size_t first, std::size_t n, float w) const {
            return e.pass(buf, first, n, w, false);
        }
        bool prunes() const { return e.options_.prune_fraction > 0.0; }
        void prune(float* buf, const layout_view& L) const {
            if constexpr (!on_device) e.prune(exec::host{}, buf, L);
            else (void)buf, (void)L;
        }
        route_type& route() const { return e.route_; }
        Comm& comm() const { return e.comm_; }
        workspace<float, Space, 4>& ws() const { return e.ws_; }
        std::uint64_t round() const { return e.attempts_ - 1; }
        // The rule of a fragment's outer step number k (its own count, for the optimizer's
        // bias corrections); counts an outer step applied.
        auto rule(std::uint64_t k) const {
            ++e.outer_t_;
            return e.outer_.prepare(k);
        }
        void count(const traffic_counters& last, const codec::wire_parts& parts, std::size_t n) const {
            e.count_exchange(last, parts, n);
        }
    };
    fragment_lender lend() { return fragment_lender{*this}; }

    // ||snapshot - params|| of this worker, in double (inf or NaN when not finite).
    double own_delta_norm() const {
        double s = 0.0;
        flat_.view().for_each_piece(0, n_, [&](const T* p, std::size_t i, std::size_t m) {
            for (std::size_t j = 0; j < m; ++j) {
                const double d = static_cast<double>(snapshot_[i + j]) - static_cast<double>(to_float(p[j]));
                s += d * d;
            }
        });
        return std::sqrt(s);
    }

    Comm& comm_;
    diloco_options options_;
    Outer outer_;
    route_type route_;
    detail::round_trigger trigger_;
    detail::outer_aggregate aggregate_;
    flat_params<T, Space> flat_;
    std::size_t n_ = 0;
    std::size_t state_floats_ = 0;
    buffer<float, Space> snap_, state_buf_;
    buffer<float, host_space> snap_pinned_, state_pinned_;
    float* snapshot_ = nullptr;
    float* state_ = nullptr;
    workspace<float, Space, 4> ws_;
    exchange_stats stats_{};
    std::uint64_t outer_t_ = 0;   // outer steps applied (the optimizer's t)
    std::uint64_t skipped_ = 0;   // outer steps skipped because every contribution was dropped
    std::uint64_t attempts_ = 0;  // outer rounds completed (applied + skipped)
    std::uint64_t dense_per_step_ = 0;
    // Membership (elastic communicators).
    bool delegated_ = false; // sparta_diloco runs the protocol for both its parts
    membership_stats mstats_{};
    std::uint64_t steps_pending_ = 0; // 1 inside step(): the step a joiner resumes after
    std::vector<std::uint64_t> prune_keys_;
    detail::prune_scratch prune_scratch_;
    // cuda_space only: where the CUDA work runs, and the tile -> segment table of the passes.
    exec::cuda ex_{};
    buffer<std::uint32_t, cuda_space> tile_seg_;
    // Last, so that it goes first: a fragment's exchange still running on the
    // communicator's progress thread writes into ws_, and its destructor waits for it.
    detail::fragment_stream<T, Space> fragments_;
};

#if TRICKLE_CUDA_COMPILER
template <class Outer, class Topology, class T, class Space, class Comm, class Codec>
void diloco_engine<Outer, Topology, T, Space, Comm, Codec>::start_cuda() {
    if constexpr (on_device) {
        detail::device_scope on(ex_.device);
        if (options_.prune_fraction > 0.0) detail::prune_reserve(ex_, flat_.layout(), prune_scratch_);
        // Rank 0's parameters, in fp32, through device memory (the snapshot may be pinned
        // host memory, which communicators over device memory refuse): the send buffer.
        if (options_.broadcast_initial)
            stats_.initial =
                detail::broadcast_group_device(ex_, comm_, flat_.view(), tile_seg_.data(), n_, ws_.get(0, n_ + 1));
        detail::stream_pass(ex_, flat_.view(), tile_seg_.data(), 0, n_, snapshot_copy_body<T>{flat_.view(), snapshot_, 0});
    }
}

// Streaming on the device: the host's stage with exec::cuda, the passes as generic
// grid-stride launches of the same bodies, every exchange enqueued on the stream.
template <class Outer, class Topology, class T, class Space, class Comm, class Codec>
void diloco_engine<Outer, Topology, T, Space, Comm, Codec>::streaming_step_cuda(const exec::cuda& step_ex,
                                                                                std::uint64_t t) {
    if constexpr (on_device) {
        const exec::cuda ex{step_ex.stream, ex_.device};
        detail::device_scope on(ex.device);
        fragments_.step(lend(), ex, t);
    } else {
        (void)step_ex, (void)t;
    }
}

// A whole-group outer step on the device: run_outer_step with exec::cuda, the passes
// through the device's vector agents.
template <class Outer, class Topology, class T, class Space, class Comm, class Codec>
void diloco_engine<Outer, Topology, T, Space, Comm, Codec>::outer_step_cuda(const exec::cuda& step_ex) {
    if constexpr (on_device) {
        const exec::cuda ex{step_ex.stream, ex_.device};
        detail::device_scope on(ex.device);
        run_outer_step(ex);
    } else {
        (void)step_ex;
    }
}
#endif

// DiLoCo as a concrete object:
//   trickle::diloco<trickle::outer::nesterov> d{params, comm, {.interval = 500}, {.lr = 0.7, .momentum = 0.9}};
//   d.step(trickle::exec::host{});   // after every inner optimizer step
// The policies after the options may also be given in any order, each by its type, the
// others defaulted: diloco<outer::nesterov, topology::ring> d{params, comm, opts, topology::ring{}}.
template <class Outer = outer::nesterov, class Topology = topology::all_reduce, class Codec = codec::fp32>
class diloco : public detail::erased_handle {
    template <class T, class Space, class Comm>
    using engine = diloco_engine<Outer, Topology, T, Space, Comm, Codec>;

public:
    diloco() = default;
    template <class T, class Space, class Comm>
    diloco(const param_group<T, Space>& group, Comm& comm, diloco_options options = {}, Outer outer = {},
           Topology topology = {}, Codec codec = {})
        : erased_handle(detail::make_erased<engine<T, Space, Comm>>(group, comm, options, std::move(outer),
                                                                     std::move(topology), std::move(codec))) {}
    template <class T, class Space, class Comm, class First, class... Rest>
        requires detail::by_type_policies<detail::policy_slots<Outer, Topology, Codec>, First, Rest...>
    diloco(const param_group<T, Space>& group, Comm& comm, diloco_options options, First&& first, Rest&&... rest)
        : diloco(group, comm, options,
                 detail::pick<Outer>(std::forward<First>(first), std::forward<Rest>(rest)...),
                 detail::pick<Topology>(std::forward<First>(first), std::forward<Rest>(rest)...),
                 detail::pick<Codec>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}
};

TRICKLE_NAMESPACE_END
