// trickle/algorithm/diloco.hpp: DiLoCo, and SPARTA + DiLoCo, as objects called after each optimizer step.
//
// DiLoCo: every worker keeps the snapshot, the parameters at the start of the outer
// round. Every H inner steps, one pass computes the outer gradient
// delta = snapshot - params straight into the send buffer, one communication call
// averages it over the workers (weighted, with dropped contributions renormalized), and
// one pass applies the outer optimizer to the snapshot with the averaged delta as its
// gradient and copies the result into the parameters. The trainer's inner optimizer and
// its state are never touched. Only deltas travel: one reduction per outer step, never
// the parameters plus a broadcast.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/detail/broadcast.hpp>
#include <trickle/algorithm/detail/codec.hpp>
#include <trickle/comm/async.hpp>
#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/detail/device.hpp>
#include <trickle/algorithm/detail/erased.hpp>
#include <trickle/kernels/prune.hpp>
#include <trickle/algorithm/flat_params.hpp>
#include <trickle/algorithm/membership.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/kernels/device_stream.hpp>
#include <trickle/kernels/diloco.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/outer/momentum.hpp>
#include <trickle/outer/outer_optimizer.hpp>
#include <trickle/sampler/sampler.hpp>
#include <trickle/topology/all_reduce.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <istream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// Options of DiLoCo's outer step. All but `weight` must be equal on every worker.
struct diloco_options {
    std::uint64_t interval = 500;     // H: an outer step after every H-th inner step (>= 1)
    std::uint64_t seed = 0;           // shared seed (dropped-communication draws)
    float weight = 1.0f;              // this worker's weight in the average (e.g. its shard size); >= 0
    double drop_probability = 0.0;    // q in [0, 1): each worker's contribution to an outer step is dropped with probability q
    double prune_fraction = 0.0;      // in [0, 1): zero this fraction of each tensor's delta, smallest magnitudes first
    double error_feedback = 0.0;      // beta in [0, 1]: with a codec other than fp32, add beta times the previous
                                      // outer gradient's compression error to the next one (0: off)
    bool broadcast_initial = true;    // at construction, give every worker rank 0's parameters (set false when
                                      // resuming from a checkpoint with parameters the trainer restored)
    bool state_in_pinned_host = false; // cuda_space only: keep snapshot and optimizer state in pinned host memory
    bool stochastic_rounding = false;  // a lossy codec rounds with the shared Philox stream instead of to nearest
    CUmemPoolHandle_st* device_pool = nullptr; // cuda_space: a cudaMemPool_t for trickle's buffers (default pool if null)
    // Streaming DiLoCo (host parameters; see docs/streaming.md): the group split at tensor
    // boundaries into fragments whose outer steps are staggered over the round, each
    // fragment's average applied overlap_steps inner steps after its outer step began.
    std::uint64_t fragments = 1;                 // F >= 1 (1 with overlap_steps 0: DiLoCo as above, bit for bit)
    std::vector<std::uint32_t> fragment_tensors{}; // tensors per fragment, in group order (summing to the group's
                                                 // tensors); empty: F fragments balanced by size
    std::uint64_t overlap_steps = 0;             // tau in [0, H): the inner steps between a fragment's outer step
                                                 // and the application of its average
    double mix = 0.0;                            // alpha in [0, 1]: a late average is merged as
                                                 // params = alpha local + (1 - alpha) global (0: replacement)
    // Workers at different speeds: the trainer decides when outer steps happen (a deadline,
    // say) and calls outer_step(exec) on every worker at once; step() only counts inner
    // steps, which may then differ between workers. Pair with set_weight(tokens).
    bool manual_outer = false;
    // Elastic membership (over comm::elastic_local; docs/elastic.md): an outer step runs only
    // with at least min_workers in the view (otherwise training goes on locally and the next
    // outer step tries again); join: this object is built by a worker joining a running
    // group, which takes the global state from a live member instead of the initial broadcast.
    int min_workers = 1;
    bool join = false;
};

namespace detail {

// Whether `rank`'s contribution to outer step `outer_index` is dropped: a pure function
// of the shared seed, so every worker computes the same answer for every worker.
inline bool dropped_contribution(std::uint64_t seed, double q, std::uint64_t outer_index, int rank) {
    if (q <= 0.0) return false;
    const std::uint64_t w = random_u64(seed, stream_id(stream_tag::drop, outer_index), static_cast<std::uint64_t>(rank));
    return uniform01_d(w) < q;
}

} // namespace detail

// The DiLoCo engine for parameters of type T in memory space Space over communicator
// Comm, with an outer optimizer Outer (concept outer_optimizer) and a Topology for the
// delta averaging. Most code uses trickle::diloco<...>, which hides T, Space and Comm.
template <class Outer, class Topology, class T, class Space, class Comm, class Codec = codec::fp32>
class diloco_engine {
    static_assert(outer_optimizer<Outer>, "Outer must satisfy trickle::outer_optimizer");
    static_assert(topology_policy<Topology>, "Topology must satisfy trickle::topology_policy");
    static_assert(communicator<Comm>, "Comm must satisfy trickle::communicator");
    static_assert(std::is_same_v<typename Comm::memory_space, Space>,
                  "the communicator moves memory in a different space than the parameters live in");
    static constexpr bool on_device = std::is_same_v<Space, cuda_space>;
    using wire_codec = codec::resolve_t<Codec, T>; // codec::native becomes the parameters' own type
    static constexpr bool sparsified = codec::sparsifier_policy<wire_codec>;
    static_assert(codec_policy<wire_codec> || sparsified,
                  "Codec must satisfy trickle::codec_policy or codec::sparsifier_policy (or be codec::native)");
    using codec_scratch = std::conditional_t<sparsified, codec::sparse_scratch, codec::reduce_scratch>;

public:
    using memory_space = Space;
    using value_type = T;
    static constexpr const char* kind = "diloco";

    // Collective. Validates options, agrees on the configuration across workers, checks
    // that the weights do not sum to zero, then (by default) gives every worker rank 0's
    // parameters and takes them as the first snapshot.
    diloco_engine(const param_group<T, Space>& group, Comm& comm, diloco_options options, Outer outer = {},
                  Topology topology = {}, Codec codec = {}, detail::membership_role role = detail::membership_role::own)
        : comm_(comm), options_(options), outer_(std::move(outer)), topology_(std::move(topology)),
          codec_(detail::wire_codec_of<wire_codec>(codec)), delegated_(role == detail::membership_role::delegated) {
        config_record rec = describe(group);
        // A checkpoint may be restored into an object built with or without the initial
        // broadcast (a resumed run must not overwrite its parameters with rank 0's), so
        // that option is agreed on but not part of the checkpoint's configuration hash.
        config_hash_ = detail::fnv1a(rec.serialize());
        mstats_.workers = comm_.size();
        if (detail::start_membership<Comm>(elastic_record_, rec, options_.join, role, kind,
                                           [&] { prepare_joiner(group); }, [&] { start_joining(); }))
            return;
        rec.add("broadcast_initial", options_.broadcast_initial);
        agree(comm_, rec);
        check_weights();
        n_ = group.total_size();
        ex_ = detail::place_group(comm_, group, kind, flat_, ws_, options_.device_pool);
        allocate();
        dense_per_step_ = detail::all_reduce_bytes(n_, sizeof(float), comm_.size(), comm_.rank());
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
    // A fragment's exchange still running on the communicator's progress thread writes into
    // this object's buffers: wait for it before they go.
    ~diloco_engine() {
        for (fragment& f : frags_) f.request = comm::request{};
    }

    // Call after every inner optimizer step, on every worker.
    template <class Exec>
    void step(const Exec& ex) {
        static_assert(can_access_v<Exec, Space>, "diloco::step: this execution space cannot reach the parameters");
        detail::check_same_stream(comm_, ex, kind);
        if constexpr (std::is_same_v<Exec, exec::cuda>) {
            detail::check_step_exec(ex, ex_, kind);
            detail::refuse_capture(ex, "diloco::step: a DiLoCo step cannot be replayed from a CUDA graph (the outer "
                                       "optimizer's constants, the drop draws and the round count live on the host); "
                                       "step it uncaptured");
        }
        const std::uint64_t t = stats_.steps;
        const bool due = !options_.manual_outer && (t + 1) % options_.interval == 0;
        if constexpr (std::is_same_v<Exec, exec::cuda>) {
            if (streaming_)
                streaming_step_cuda(ex, t);
            else if (due)
                outer_step_cuda(ex);
        } else {
            if (streaming_) {
                streaming_step(ex, t);
            } else if (due) {
                steps_pending_ = 1; // a joiner admitted now resumes after this step
                outer_round(ex);
                steps_pending_ = 0;
            }
        }
        stats_.steps = t + 1;
        stats_.dense_bytes += dense_per_step_;
    }

    // manual_outer: one outer step now, on every worker at once (collective), whatever
    // number of inner steps each worker took since the last one.
    template <class Exec>
    void outer_step(const Exec& ex) {
        static_assert(can_access_v<Exec, Space>, "diloco::outer_step: this execution space cannot reach the parameters");
        require(options_.manual_outer, "diloco::outer_step: outer steps are triggered by step() every interval steps; "
                                       "set diloco_options::manual_outer to trigger them yourself");
        detail::check_same_stream(comm_, ex, kind);
        if constexpr (std::is_same_v<Exec, exec::cuda>) {
            detail::check_step_exec(ex, ex_, kind);
            outer_step_cuda(ex);
        } else {
            outer_round(ex);
        }
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
    bool outer_step_due() const {
        if (options_.manual_outer) return false;
        if (!streaming_) return (stats_.steps + 1) % options_.interval == 0;
        for (const fragment& f : frags_)
            if (sync_due(f, stats_.steps)) return true;
        return false;
    }

    // Streaming: the fragments' flat ranges [first, first + count), in group order.
    std::vector<std::pair<std::size_t, std::size_t>> fragment_ranges() const {
        std::vector<std::pair<std::size_t, std::size_t>> out;
        for (const fragment& f : frags_) out.emplace_back(f.first, f.count);
        return out;
    }

    // Streaming: fragments whose average has not been applied yet.
    std::size_t fragments_in_flight() const {
        std::size_t k = 0;
        for (const fragment& f : frags_) k += f.pending ? 1 : 0;
        return k;
    }

    const exchange_stats& stats() const { return stats_; }
    const diloco_options& options() const { return options_; }
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
        detail::checkpoint_writer w(os);
        w.header(kind, config_hash_);
        w.section("stats", &stats_, sizeof stats_);
        const std::uint64_t counters[3] = {outer_t_, skipped_, attempts_};
        w.section("outer_counters", counters, sizeof counters);
        const std::vector<float> snap = snapshot();
        w.section("snapshot", snap.data(), snap.size() * sizeof(float));
        std::vector<float> st(state_floats_);
        copy_to_host(st.data(), state_, state_floats_);
        w.section("outer_state", st.data(), st.size() * sizeof(float));
        if (feedback()) {
            const std::vector<float> res = residual();
            w.section("residual", res.data(), res.size() * sizeof(float));
        }
        if (streaming_) {
            const std::vector<std::uint64_t> rec = fragment_record();
            w.section("fragments", rec.data(), rec.size() * sizeof(std::uint64_t));
            const std::vector<float> late = in_flight_values();
            w.section("in_flight", late.data(), late.size() * sizeof(float));
        }
        w.finish();
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
        std::string err;
        exchange_stats st{};
        std::uint64_t outer_t = 0, skipped = 0, attempts = 0;
        std::vector<float> snap(n_), state(state_floats_), residual(feedback() ? n_ : 0), late;
        std::vector<std::uint64_t> frag_record(streaming_ ? frags_.size() * fragment_fields : 0);
        try {
            if (!is) throw invalid_argument("checkpoint: cannot read " + source);
            detail::checkpoint_reader r(is);
            r.header(kind, config_hash_);
            r.section("stats", &st, sizeof st);
            std::uint64_t counters[3] = {};
            r.section("outer_counters", counters, sizeof counters);
            outer_t = counters[0];
            skipped = counters[1];
            attempts = counters[2];
            r.section("snapshot", snap.data(), snap.size() * sizeof(float));
            r.section("outer_state", state.data(), state.size() * sizeof(float));
            if (feedback()) r.section("residual", residual.data(), residual.size() * sizeof(float));
            if (streaming_) {
                r.section("fragments", frag_record.data(), frag_record.size() * sizeof(std::uint64_t));
                for (std::size_t f = 0; f < frags_.size(); ++f) {
                    const std::uint64_t* v = frag_record.data() + f * fragment_fields;
                    if (v[1] > 1 || (v[1] == 1 && (v[2] < st.steps || v[2] >= st.steps + options_.overlap_steps)))
                        throw invalid_argument(detail::concat("checkpoint: fragment ", f,
                                                              "'s in-flight state does not fit step ", st.steps));
                }
                late.resize(in_flight_size(frag_record));
                r.section("in_flight", late.data(), late.size() * sizeof(float));
            }
            r.finish(trailing);
            if (at_step && st.steps != *at_step)
                throw invalid_argument(detail::concat("checkpoint: the DiLoCo part is at step ", st.steps,
                                                      ", the SPARTA part at ", *at_step,
                                                      " (parts of two different checkpoints)"));
        } catch (const error& e) {
            err = e.what();
        }
        config_record rec("diloco checkpoint");
        rec.add("step", st.steps).add("outer_steps", outer_t).add("outer_attempts", attempts);
        if (!err.empty()) rec.set_error(err);
        agree(comm_, rec);
        comm_.synchronize();
        copy_from_host(snapshot_, snap.data(), n_);
        copy_from_host(state_, state.data(), state_floats_);
        set_residual(std::move(residual));
        if (streaming_) restore_fragments(frag_record, late);
        st.initial = stats_.initial; // what this object's construction sent, not the saved run's
        stats_ = st;
        outer_t_ = outer_t;
        skipped_ = skipped;
        attempts_ = attempts;
    }

    // ---- The membership protocol's hooks (algorithm/membership.hpp), over an elastic
    // communicator. The global state every replica shares: the snapshot, the outer
    // optimizer's state and the round counters; the step counter travels to joiners too.
    config_record elastic_record() const { return elastic_record_; }

    std::string transfer_state() const {
        std::ostringstream os;
        detail::checkpoint_writer w(os);
        w.header("diloco-transfer", config_hash_);
        const std::uint64_t counters[5] = {stats_.steps + steps_pending_, stats_.exchanges, outer_t_, skipped_,
                                           attempts_};
        w.section("counters", counters, sizeof counters);
        w.section("snapshot", snapshot_, n_ * sizeof(float));
        w.section("outer_state", state_, state_floats_ * sizeof(float));
        w.finish();
        return os.str();
    }

    void receive_state(const std::string& blob) {
        std::istringstream is(blob);
        detail::checkpoint_reader r(is);
        r.header("diloco-transfer", config_hash_);
        std::uint64_t counters[5] = {};
        r.section("counters", counters, sizeof counters);
        std::vector<float> snap(n_), state(state_floats_);
        r.section("snapshot", snap.data(), n_ * sizeof(float));
        r.section("outer_state", state.data(), state_floats_ * sizeof(float));
        r.finish();
        std::copy(snap.begin(), snap.end(), snapshot_);
        std::copy(state.begin(), state.end(), state_);
        stats_.steps = counters[0];
        stats_.exchanges = counters[1];
        outer_t_ = counters[2];
        skipped_ = counters[3];
        attempts_ = counters[4];
        // The joiner starts from the global model.
        detail::run_ranges(exec::host{}, n_, params_from_snapshot_body<T>{flat_.view(), snapshot_, 0});
    }

    std::uint32_t global_hash() const {
        const std::uint64_t counters[3] = {outer_t_, skipped_, attempts_};
        std::uint32_t h = crc32c(counters, sizeof counters);
        h = crc32c(snapshot_, n_ * sizeof(float), h);
        return crc32c(state_, state_floats_ * sizeof(float), h);
    }

    void round_backup() {
        backup_ = {outer_t_, skipped_, attempts_, stats_};
        if (feedback()) residual_backup_ = residual_;
    }
    void round_rollback() {
        outer_t_ = backup_.outer_t;
        skipped_ = backup_.skipped;
        attempts_ = backup_.attempts;
        stats_ = backup_.stats;
        if (feedback()) residual_ = residual_backup_;
    }
    void view_changed() {
        dense_per_step_ = detail::all_reduce_bytes(n_, sizeof(float), comm_.size(), comm_.rank());
        if constexpr (!on_device && byte_communicator<Comm>) {
            if constexpr (sparsified) {
                if (codec_.error().empty()) codec_.reserve_scratch(codec_scratch_, n_, comm_.size());
            } else if (summed_) {
                codec_scratch_.reserve(codec_, n_, comm_.size());
            }
        }
    }

private:
    static constexpr bool elastic = comm::elastic_communicator<Comm>;

    // One outer step; over an elastic communicator under the membership protocol.
    template <class Exec>
    void outer_round(const Exec& ex) {
        if constexpr (elastic)
            if (!delegated_) {
                detail::elastic_round(comm_, *this, mstats_, options_.min_workers, std::nullopt, kind,
                                      [&] { run_outer_step(ex); });
                return;
            }
        run_outer_step(ex);
    }

    // A joiner's construction: admitted at the members' next outer step, it takes the state
    // and then takes part in that outer step with weight 0 (its delta is zero).
    void prepare_joiner(const param_group<T, Space>& group) {
        n_ = group.total_size();
        ex_ = detail::place_group(comm_, group, kind, flat_, ws_, options_.device_pool);
        allocate();
    }

    // A joiner with its own role, after prepare_joiner (detail::start_membership).
    void start_joining() {
        if constexpr (elastic) { // (explicit instantiations compile every member)
            const comm::membership_change admitted = comm_.join();
            const float weight = options_.weight;
            options_.weight = 0.0f;
            try {
                detail::elastic_round(comm_, *this, mstats_, options_.min_workers, admitted, kind,
                                      [&] { run_outer_step(exec::host{}); });
            } catch (...) {
                options_.weight = weight;
                throw;
            }
            options_.weight = weight;
        }
    }

    config_record describe(const param_group<T, Space>& group) const {
        config_record rec(kind);
        rec.add("trickle", detail::concat(TRICKLE_VERSION_MAJOR, '.', TRICKLE_VERSION_MINOR));
        detail::describe_group(rec, group, elastic ? -1 : comm_.size());
        const auto& o = options_;
        rec.add("interval", o.interval)
            .add("seed", o.seed)
            .add("drop_probability", o.drop_probability)
            .add("prune_fraction", o.prune_fraction)
            .add("error_feedback", o.error_feedback)
            .add("state_in_pinned_host", o.state_in_pinned_host);
        if (o.interval < 1) rec.set_error("diloco: interval (H) must be >= 1, got 0");
        if (!(std::isfinite(o.weight) && o.weight >= 0.0f))
            rec.set_error(detail::concat("diloco: weight must be finite and >= 0, got ", o.weight));
        if (!(o.drop_probability >= 0.0 && o.drop_probability < 1.0))
            rec.set_error(detail::concat("diloco: drop_probability must be in [0, 1), got ", o.drop_probability));
        if (!(o.prune_fraction >= 0.0 && o.prune_fraction < 1.0))
            rec.set_error(detail::concat("diloco: prune_fraction must be in [0, 1), got ", o.prune_fraction));
        if constexpr (std::is_same_v<Space, host_space>)
            if (o.state_in_pinned_host) rec.set_error("diloco: state_in_pinned_host applies to cuda_space parameters only");
        outer_.describe(rec);
        detail::describe_topology(topology_, rec, comm_.size());
        detail::describe_codec<Comm, Space>(codec_, topology_, rec, kind, options_.stochastic_rounding);
        describe_streaming(group, rec);
        detail::describe_membership(rec, comm_, o.min_workers, o.join, kind, detail::is_all_reduce(topology_),
                                    o.fragments > 1 || o.fragment_tensors.size() > 1 || o.overlap_steps > 0 ||
                                        o.mix > 0.0,
                                    "streaming (fragments, overlap_steps, mix)");
        if (!(o.error_feedback >= 0.0 && o.error_feedback <= 1.0))
            rec.set_error(detail::concat("diloco: error_feedback must be in [0, 1], got ", o.error_feedback));
        else if (o.error_feedback > 0.0 && detail::plain_codec(codec_))
            rec.set_error("diloco: error_feedback needs a lossy codec (the fp32 codec loses nothing to feed back)");
        return rec;
    }

    // Streaming's fields and their errors.
    void describe_streaming(const param_group<T, Space>& group, config_record& rec) const {
        const auto& o = options_;
        std::string lists;
        for (std::uint32_t k : o.fragment_tensors) lists += detail::concat(lists.empty() ? "" : ",", k);
        rec.add("fragments", o.fragments).add("fragment_tensors", lists).add("overlap_steps", o.overlap_steps).add("mix", o.mix);
        std::size_t tensors = 0;
        for (const auto& e : group.entries()) tensors += e.view.size() != 0 ? 1 : 0;
        if (o.fragments < 1) rec.set_error("diloco: fragments must be >= 1, got 0");
        if (!o.fragment_tensors.empty()) {
            std::uint64_t sum = 0;
            bool zero = false;
            for (std::uint32_t k : o.fragment_tensors) {
                sum += k;
                zero = zero || k == 0;
            }
            if (o.fragments != 1 && o.fragments != o.fragment_tensors.size())
                rec.set_error(detail::concat("diloco: fragments is ", o.fragments, " but fragment_tensors lists ",
                                             o.fragment_tensors.size(), " fragments"));
            if (zero) rec.set_error("diloco: every entry of fragment_tensors must be >= 1");
            if (sum != tensors)
                rec.set_error(detail::concat("diloco: fragment_tensors sums to ", sum, " tensors, the group has ",
                                             tensors));
        } else if (o.fragments > tensors && o.fragments > 1) {
            rec.set_error(detail::concat("diloco: ", o.fragments, " fragments but the group has only ", tensors,
                                         " tensors (fragments split at tensor boundaries)"));
        }
        if (o.interval >= 1 && o.overlap_steps >= o.interval)
            rec.set_error(detail::concat("diloco: overlap_steps (tau) must be < interval (H = ", o.interval, "), got ",
                                         o.overlap_steps));
        if (!(o.mix >= 0.0 && o.mix <= 1.0)) rec.set_error(detail::concat("diloco: mix must be in [0, 1], got ", o.mix));
        rec.add("manual_outer", o.manual_outer);
        const bool streams = o.fragments > 1 || o.fragment_tensors.size() > 1 || o.overlap_steps > 0 || o.mix > 0.0;
        if (streams && o.manual_outer)
            rec.set_error("diloco: manual_outer does not combine with streaming (fragments, overlap_steps, mix), whose "
                          "schedule follows the inner steps");
        if constexpr (on_device)
            if (streams && o.prune_fraction > 0.0)
                rec.set_error("diloco: streaming (fragments > 1, overlap_steps > 0 or mix > 0) with pruning runs on host "
                              "parameters in this version");
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

    // Every buffer a step uses, sized once: snapshot, optimizer state, the send buffer (n + 1
    // values: the weight travels last), the topology's scratch, and on the device the
    // tile -> segment table of the passes and the pruning scratch (start_cuda).
    void allocate() {
        state_floats_ = outer_state_floats<Outer>(n_);
        streaming_ = options_.fragments > 1 || options_.fragment_tensors.size() > 1 || options_.overlap_steps > 0 ||
                     options_.mix > 0.0;
        if (streaming_) {
            build_fragments();
            std::size_t largest = 0;
            for (const fragment& f : frags_) largest = std::max(largest, f.count);
            if (options_.mix > 0.0) {
                if constexpr (on_device)
                    mix_local_ = buffer<float, Space>(largest, ex_);
                else
                    mix_local_ = buffer<float, Space>(largest);
            }
        }
        ws_.reserve(0, ws_values());
        detail::reserve_topology_scratch<Topology>(ws_, n_ + 1);
        encoded_ = !detail::plain_codec(codec_);
        summed_ = encoded_ && detail::is_all_reduce(topology_);
        if constexpr (!on_device && byte_communicator<Comm>) {
            if constexpr (sparsified) {
                if (codec_.error().empty()) codec_.reserve_scratch(codec_scratch_, n_, comm_.size());
            } else if (summed_) {
                codec_scratch_.reserve(codec_, n_, comm_.size());
            }
        }
        if constexpr (!sparsified)
            if (encoded_ && !summed_) link_.reserve(codec_, n_, ex_);
        if constexpr (on_device) {
            if constexpr (byte_communicator<Comm> && !sparsified)
                if (summed_) device_codec_scratch_.reserve(codec_, n_, comm_.size(), ex_);
            if (feedback()) residual_dev_ = buffer<float, Space>(n_, ex_);
        } else {
            if (feedback()) residual_.assign(n_, 0.0f);
        }
        if constexpr (on_device) {
            const std::vector<std::uint32_t> tiles = detail::tile_segments(flat_.host_view());
            tile_seg_ = buffer<std::uint32_t, cuda_space>(tiles.size(), ex_);
            copy_elements<cuda_space, host_space>(tile_seg_.data(), tiles.data(), tiles.size(), ex_);
            if (options_.state_in_pinned_host) {
                snap_pinned_ = buffer<float, host_space>(n_, host_alloc::pinned);
                state_pinned_ = buffer<float, host_space>(state_floats_, host_alloc::pinned);
                snapshot_ = snap_pinned_.data();
                state_ = state_pinned_.data();
                return;
            }
            snap_ = buffer<float, Space>(n_, ex_);
            state_buf_ = buffer<float, Space>(state_floats_, ex_);
        } else {
            snap_ = buffer<float, Space>(n_);
            state_buf_ = buffer<float, Space>(state_floats_);
        }
        snapshot_ = snap_.data();
        state_ = state_buf_.data();
    }

    // The CUDA parts (defined below for nvcc; g++ translation units reach them through an
    // explicit instantiation, algorithm/instantiate.hpp): the first snapshot, and an outer step.
    void start_cuda();
    void outer_step_cuda(const exec::cuda& ex);
    void streaming_step_cuda(const exec::cuda& ex, std::uint64_t t);

    // The participants of the coming outer step, or -1 when every contribution is dropped
    // (the round then simply continues); this worker's weight in it. Counts the round
    // (attempts_), so a topology's reduce_context names it attempts_ - 1.
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

    // Counts an outer step; its bytes by part: through a codec, what the encoded all-reduce,
    // the sparsifier or the link sent, the rest (the weights' exact sum) as scales; plain
    // fp32, every byte a code.
    void count_outer_step(const traffic_counters& before) { count_round(comm_.traffic() - before, n_, wire_parts_sent(n_)); }

    // What an exchange of n deltas (and the weight) sent, by part, once it has completed.
    codec::wire_parts wire_parts_sent(std::size_t n) {
        codec::wire_parts parts;
        if (summed_) {
            if constexpr (sparsified)
                parts = codec::sparse_all_reduce_parts(codec_, n, comm_.size(), comm_.rank());
            else
                parts = codec::encoded_all_reduce_parts(codec_, n, comm_.size(), comm_.rank());
        } else if (encoded_) {
            if constexpr (!sparsified) parts = link_.take_sent();
        }
        if (encoded_) parts.scales += std::exchange(weight_bytes_, 0); // the weights' sum
        return parts;
    }

    // Counts one completed exchange of n deltas and the weight: `last` its traffic, `parts`
    // its bytes by part (plain fp32: every byte sent is a code).
    void count_round(const traffic_counters& last, std::size_t n, codec::wire_parts parts) {
        stats_.last = last;
        if (!encoded_) parts = codec::wire_parts{.codes = last.bytes_sent};
        stats_.sent += parts;
        stats_.total += last;
        stats_.last_values = n + 1;
        stats_.values += n + 1;
        ++stats_.exchanges;
    }

    template <class Exec>
    void run_outer_step(const Exec& ex) {
        float w = 0.0f;
        if (!begin_outer_step(w)) return;
        float* buf = ws_.get(0, n_ + 1);
        const traffic_counters before = comm_.traffic();
        if constexpr (!on_device && byte_communicator<Comm> && !sparsified) {
            // Through a codec and the all-reduce, without pruning (which needs the whole
            // outer gradient at once): the delta pass and the encoding, and the decoding
            // and the outer update, run tile by tile, and the fp32 outer gradient is never
            // stored.
            // (Not over an elastic communicator: a round there must leave the snapshot
            // untouched until its collectives have all completed.)
            if (summed_ && options_.prune_fraction == 0.0 && !elastic) {
                fused_outer_step(w, buf + n_);
                count_outer_step(before);
                return;
            }
        }
        detail::run_ranges(ex, n_, outer_delta_body<T>{flat_.view(), snapshot_, dense_wire<float>{buf}, w, buf + n_, 0});
        if (options_.prune_fraction > 0.0) detail::prune_host(buf, flat_.host_layout(), options_.prune_fraction, prune_keys_);
        exchange(ex, buf, 0, n_);
        const auto rule = outer_.prepare(++outer_t_);
        using rule_type = std::remove_cvref_t<decltype(rule)>;
        detail::run_ranges(ex, n_,
                           outer_update_body<T, rule_type>{flat_.view(), snapshot_, state_, dense_wire<float>{buf}, rule,
                                                            1.0f, buf + n_, 0});
        count_outer_step(before);
    }

    bool feedback() const { return options_.error_feedback > 0.0 && !detail::plain_codec(codec_); }

    // ---- Streaming DiLoCo (host parameters)
    //
    // Fragment f holds elements [first, first + count) (whole tensors) and takes its outer
    // step after inner step t when (t + 1) = phase + k H for some k >= 0 (phase = f H / F, and
    // t + 1 >= 1): the fragments' outer steps are spread evenly over the round. The step
    // computes the fragment's weighted deltas into its own buffer and exchanges them; the
    // average is applied overlap_steps inner steps later (at once for 0): the outer rule
    // (with the fragment's own step count for the optimizer's bias corrections) updates the
    // fragment's snapshot, and the parameters become the new snapshot, or with mix = alpha
    // alpha (the parameters as trained meanwhile) + (1 - alpha) (the new snapshot). Over a
    // communicator that can start operations (comm::async) a plain fp32 all-reduce runs
    // while the worker trains; any other exchange runs at once and its result waits, which
    // gives the same bits. Rounds (attempts_) count fragment outer steps, so drop draws and
    // rounding words stay distinct.
    struct fragment {
        std::size_t first = 0;
        std::size_t count = 0;
        std::size_t slot = 0;          // its buffer: ws_ slot 0 at [slot, slot + count + 1)
        std::uint64_t phase = 0;
        std::uint64_t outer_t = 0;     // outer steps applied to this fragment
        bool pending = false;          // exchanged (or exchanging), not applied
        std::uint64_t due = 0;         // the inner step after which it is applied
        bool async = false;            // its all-reduce is running on the communicator's progress thread
        traffic_counters traffic{};    // what its exchange sent (counted when applied)
        codec::wire_parts parts{};
        comm::request request{};
        std::vector<std::size_t> offsets; // its tensors' offsets, relative to first (pruning)
    };

    bool sync_due(const fragment& f, std::uint64_t t) const {
        const std::uint64_t s = t + 1;
        return s >= f.phase && (s - f.phase) % options_.interval == 0;
    }

    // Streaming state in a checkpoint: per fragment its counters, and the exchanged (not yet
    // applied) deltas of the fragments in flight; an exchange still running is waited for
    // first (its result is part of the state).
    static constexpr std::size_t fragment_fields = 10;
    std::vector<std::uint64_t> fragment_record() const {
        std::vector<std::uint64_t> out;
        for (fragment& f : frags_) {
            const_cast<diloco_engine*>(this)->finish_exchange(f);
            const std::uint64_t v[fragment_fields] = {f.outer_t,       f.pending ? 1u : 0u, f.due,          f.traffic.bytes_sent,
                                                      f.traffic.bytes_received, f.traffic.calls, f.parts.codes, f.parts.scales,
                                                      f.parts.indices, f.parts.padding};
            out.insert(out.end(), v, v + fragment_fields);
        }
        return out;
    }
    std::vector<float> in_flight_values() const {
        std::vector<float> out;
        const float* ws = const_cast<diloco_engine*>(this)->ws_.get(0, ws_values());
        for (const fragment& f : frags_)
            if (f.pending) {
                out.resize(out.size() + f.count + 1);
                copy_to_host(out.data() + out.size() - (f.count + 1), ws + f.slot, f.count + 1);
            }
        return out;
    }
    std::size_t in_flight_size(const std::vector<std::uint64_t>& record) const {
        std::size_t k = 0;
        for (std::size_t f = 0; f < frags_.size(); ++f)
            if (record[f * fragment_fields + 1] != 0) k += frags_[f].count + 1;
        return k;
    }
    void restore_fragments(const std::vector<std::uint64_t>& record, const std::vector<float>& values) {
        float* ws = ws_.get(0, ws_values());
        std::size_t at = 0;
        for (std::size_t k = 0; k < frags_.size(); ++k) {
            fragment& f = frags_[k];
            if (f.async) f.request = comm::request{}; // waits; its result is replaced below
            f.async = false;
            const std::uint64_t* v = record.data() + k * fragment_fields;
            f.outer_t = v[0];
            f.pending = v[1] != 0;
            f.due = v[2];
            f.traffic = traffic_counters{v[3], v[4], v[5]};
            f.parts = codec::wire_parts{v[6], v[7], v[8], v[9]};
            if (f.pending) {
                copy_from_host(ws + f.slot, values.data() + at, f.count + 1);
                at += f.count + 1;
            }
        }
    }

    // Splits the group at tensor boundaries: the listed tensor counts, or F fragments of
    // about total / F elements each (a fragment ends at the first tensor boundary at or past
    // its share, leaving at least one tensor for each later fragment).
    void build_fragments() {
        const layout_view L = flat_.host_layout();
        std::vector<std::uint32_t> ends; // one past each fragment's last segment
        if (!options_.fragment_tensors.empty()) {
            std::uint32_t s = 0;
            for (std::uint32_t k : options_.fragment_tensors) ends.push_back(s += k);
        } else {
            const auto F = static_cast<std::uint32_t>(options_.fragments);
            std::uint32_t s = 0;
            for (std::uint32_t f = 0; f + 1 < F; ++f) {
                const std::size_t share = (n_ * (f + 1) + F - 1) / F;
                ++s; // at least one tensor
                while (s < L.count - (F - 1 - f) && L.offsets[s] < share) ++s;
                ends.push_back(s);
            }
            ends.push_back(L.count);
        }
        frags_.clear();
        std::uint32_t s0 = 0;
        std::size_t slot = 0;
        const std::uint64_t F = ends.size(), H = options_.interval;
        for (std::uint64_t f = 0; f < F; ++f) {
            fragment g;
            g.first = L.offsets[s0];
            g.count = L.offsets[ends[f]] - g.first;
            g.slot = slot;
            slot += g.count + 1;
            g.phase = f * H / F;
            for (std::uint32_t s = s0; s <= ends[f]; ++s) g.offsets.push_back(L.offsets[s] - g.first);
            s0 = ends[f];
            frags_.push_back(std::move(g));
        }
    }

    template <class Exec>
    void streaming_step(const Exec& ex, std::uint64_t t) {
        for (fragment& f : frags_)
            if (f.pending && f.due == t) apply_fragment(ex, f);
        for (fragment& f : frags_)
            if (sync_due(f, t)) start_fragment(ex, f, t);
    }

    template <class Exec>
    void start_fragment(const Exec& ex, fragment& f, std::uint64_t t) {
        float w = 0.0f;
        if (!begin_outer_step(w)) return;
        float* buf = ws_.get(0, ws_values()) + f.slot;
        const traffic_counters before = comm_.traffic();
        detail::run_ranges(ex, f.count,
                           outer_delta_body<T>{flat_.view(), snapshot_, dense_wire<float>{buf}, w, buf + f.count, f.first});
        if constexpr (!on_device) {
            if (options_.prune_fraction > 0.0) {
                const layout_view L{f.offsets.data(), static_cast<std::uint32_t>(f.offsets.size() - 1), f.count};
                detail::prune_host(buf, L, options_.prune_fraction, prune_keys_);
            }
        }
        f.pending = true;
        f.due = t + options_.overlap_steps;
        f.async = false;
        if constexpr (comm::async_communicator<Comm>) {
            if (!encoded_ && detail::is_all_reduce(topology_) && options_.overlap_steps > 0) {
                f.request = comm_.start_all_reduce_sum(buf, f.count + 1);
                f.async = true;
                return;
            }
        }
        exchange(ex, buf, f.first, f.count);
        f.traffic = comm_.traffic() - before;
        f.parts = wire_parts_sent(f.count);
        if (options_.overlap_steps == 0) apply_fragment(ex, f);
    }

    // Waits for a fragment's exchange if it is running (its bytes are counted then).
    void finish_exchange(fragment& f) {
        if (!f.async) return;
        f.request.wait();
        f.async = false;
        const std::uint64_t bytes = detail::all_reduce_bytes(f.count + 1, sizeof(float), comm_.size(), comm_.rank());
        f.traffic = traffic_counters{bytes, bytes, 1};
        f.parts = codec::wire_parts{};
    }

    template <class Exec>
    void apply_fragment(const Exec& ex, fragment& f) {
        finish_exchange(f);
        float* buf = ws_.get(0, ws_values()) + f.slot;
        const auto view = flat_.view();
        if (options_.mix > 0.0)
            detail::run_ranges(ex, f.count, local_copy_body<T>{view, mix_local_.data(), f.first});
        const auto rule = outer_.prepare(++f.outer_t);
        ++outer_t_;
        using rule_type = std::remove_cvref_t<decltype(rule)>;
        detail::run_ranges(ex, f.count,
                           outer_update_body<T, rule_type>{view, snapshot_, state_, dense_wire<float>{buf}, rule, 1.0f,
                                                            buf + f.count, f.first});
        if (options_.mix > 0.0)
            detail::run_ranges(ex, f.count,
                               mix_body<T>{view, snapshot_, mix_local_.data(), static_cast<float>(options_.mix), f.first});
        f.pending = false;
        count_round(f.traffic, f.count, f.parts);
    }

    // Values of workspace slot 0: the whole group and its weight, or every fragment's
    // deltas and weight side by side (n + F).
    std::size_t ws_values() const { return n_ + (frags_.empty() ? 1 : frags_.size()); }

    codec::rounding rounding() const {
        return codec::rounding{options_.stochastic_rounding, options_.seed, attempts_ - 1};
    }

    // The sum over the topology's group of the weighted deltas buf[0, n) and of the weights
    // (buf[n]). Plain fp32: one reduce, the weight travelling as the last element. Through a
    // lossy codec the deltas are encoded (with error feedback) and the weight is summed
    // apart, exactly: by an all-reduce with the all_reduce topology, or by the topology's
    // own rounds (the same groups, drawn from the same context) with any other.
    // (Streaming: the deltas of one fragment, elements [first, first + n) of the group.)
    template <class Exec>
    void exchange(const Exec& ex, float* buf, std::size_t first, std::size_t n) {
        const reduce_context ctx{options_.seed, attempts_ - 1};
        if (!encoded_) {
            detail::topology_reduce(topology_, ex, comm_, buf, n + 1, ws_, ctx);
            return;
        }
        float* residual = nullptr;
        if (feedback()) residual = (on_device ? residual_dev_.data() : residual_.data()) + first;
        const auto beta = static_cast<float>(options_.error_feedback);
        if (summed_) {
            if constexpr (byte_communicator<Comm>) {
                if constexpr (sparsified) {
                    if constexpr (!on_device)
                        codec::sparse_all_reduce(codec_, comm_, buf, n, codec_scratch_, residual, beta, options_.seed,
                                                 attempts_ - 1);
                } else if constexpr (on_device) {
                    codec::encoded_all_reduce_blocks(codec_, comm_, ex, buf, n, device_codec_scratch_, residual, beta,
                                                     rounding());
                } else {
                    codec::encoded_all_reduce(codec_, comm_, buf, n, codec_scratch_, residual, beta, rounding());
                }
            }
            sum_weights(buf + n, [&](float* w) { comm_.all_reduce_sum(w, 1); });
            return;
        }
        using link_type = detail::codec_link_t<wire_codec, Space>;
        if constexpr (!sparsified && detail::reduce_takes_link<Topology, Exec, Comm, Space, link_type>) {
            link_.begin(residual, beta, rounding(), comm_.rank());
            detail::topology_reduce(topology_, ex, comm_, buf, n, ws_, ctx, link_);
            sum_weights(buf + n, [&](float* w) { detail::topology_reduce(topology_, ex, comm_, w, 1, ws_, ctx); });
        } else {
            throw invalid_argument("diloco: this topology cannot carry the codec"); // refused at construction
        }
    }

    // The error-feedback residual on the host (empty without feedback), and its restore.
    std::vector<float> residual() const {
        if constexpr (on_device) {
            std::vector<float> out(residual_dev_.size());
            copy_to_host(out.data(), residual_dev_.data(), out.size());
            return out;
        } else {
            return residual_;
        }
    }
    void set_residual(std::vector<float> r) {
        if constexpr (on_device)
            copy_from_host(residual_dev_.data(), r.data(), r.size());
        else
            residual_ = std::move(r);
    }

    // The weights' exact sum (apart from encoded deltas), its bytes noted for stats().
    template <class Sum>
    void sum_weights(float* w, Sum&& sum) {
        const std::uint64_t before = comm_.traffic().bytes_sent;
        sum(w);
        weight_bytes_ += comm_.traffic().bytes_sent - before;
    }

    // One outer step through the codec with the passes fused into the encoding and the
    // decoding (codec::encoded_all_reduce_tiled); the same bits and bytes as the unfused
    // path. The weights' sum goes first, so that the update can divide by it.
    void fused_outer_step(float w, float* weight_sum) {
        if constexpr (!on_device && byte_communicator<Comm> && !sparsified) {
            *weight_sum = w;
            sum_weights(weight_sum, [&](float* x) { comm_.all_reduce_sum(x, 1); });
            const auto rule = outer_.prepare(++outer_t_);
            using rule_type = std::remove_cvref_t<decltype(rule)>;
            const auto view = flat_.view();
            codec::encoded_all_reduce_tiled(
                codec_, comm_, n_, codec_scratch_,
                [&](std::size_t i0, std::size_t m, float* out) {
                    outer_delta_body<T>{view, snapshot_, dense_wire<float>{out}, w, nullptr, i0}.run(0, m);
                },
                [&](std::size_t i0, std::size_t m, const float* in) {
                    // The update only reads the wire.
                    outer_update_body<T, rule_type>{view,  snapshot_,  state_, dense_wire<float>{const_cast<float*>(in)},
                                                    rule,  1.0f,       weight_sum, i0}
                        .run(0, m);
                },
                feedback() ? residual_.data() : nullptr, static_cast<float>(options_.error_feedback),
                codec::rounding{options_.stochastic_rounding, options_.seed, attempts_ - 1});
        } else {
            (void)w, (void)weight_sum;
        }
    }

    Comm& comm_;
    diloco_options options_;
    Outer outer_;
    Topology topology_;
    wire_codec codec_;
    bool encoded_ = false; // a codec other than fp32
    bool summed_ = false;  // ... with the all_reduce topology: the deltas go through codec::encoded_all_reduce
    std::uint64_t weight_bytes_ = 0; // bytes of the weights' separate sum in the current outer step
    bool streaming_ = false;         // fragments, late application or mixing (host only)
    mutable std::vector<fragment> frags_;
    buffer<float, Space> mix_local_; // mix > 0: a fragment's parameters before its late update
    detail::codec_link_t<wire_codec, Space> link_; // ... with another topology: the codec's bytes in its rounds
    codec_scratch codec_scratch_;
    std::vector<float> residual_; // error feedback: this worker's compression error of the last outer step (host)
    buffer<float, Space> residual_dev_; // the same for cuda_space parameters, on the device
    codec::block_reduce_scratch<cuda_space> device_codec_scratch_; // cuda_space with a value codec
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
    config_record elastic_record_;
    std::uint64_t steps_pending_ = 0; // 1 inside step(): the step a joiner resumes after
    struct round_state {
        std::uint64_t outer_t = 0, skipped = 0, attempts = 0;
        exchange_stats stats{};
    } backup_{};
    std::vector<float> residual_backup_;
    std::uint64_t config_hash_ = 0;
    std::vector<std::uint64_t> prune_keys_;
    detail::prune_scratch prune_scratch_;
    // cuda_space only: where the CUDA work runs, and the tile -> segment table of the passes.
    exec::cuda ex_{};
    buffer<std::uint32_t, cuda_space> tile_seg_;
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
        detail::device_stream(ex_, flat_.view(), tile_seg_.data(), 0, n_, detail::snapshot_piece<T>{snapshot_});
    }
}

// Streaming on the device: the host's code (streaming_step) with exec::cuda, the passes as
// generic grid-stride launches of the same bodies, every exchange enqueued on the stream.
template <class Outer, class Topology, class T, class Space, class Comm, class Codec>
void diloco_engine<Outer, Topology, T, Space, Comm, Codec>::streaming_step_cuda(const exec::cuda& step_ex,
                                                                                std::uint64_t t) {
    if constexpr (on_device) {
        const exec::cuda ex{step_ex.stream, ex_.device};
        detail::device_scope on(ex.device);
        streaming_step(ex, t);
    } else {
        (void)step_ex, (void)t;
    }
}

template <class Outer, class Topology, class T, class Space, class Comm, class Codec>
void diloco_engine<Outer, Topology, T, Space, Comm, Codec>::outer_step_cuda(const exec::cuda& step_ex) {
    if constexpr (on_device) {
        const exec::cuda ex{step_ex.stream, ex_.device};
        detail::device_scope on(ex.device);
        float w = 0.0f;
        if (!begin_outer_step(w)) return;
        float* buf = ws_.get(0, n_ + 1);
        const traffic_counters before = comm_.traffic();
        const outer_delta_body<T> delta{flat_.view(), snapshot_, dense_wire<float>{buf}, w, buf + n_, 0};
        detail::device_stream(ex, flat_.view(), tile_seg_.data(), 0, n_, detail::delta_piece<T>{delta});
        if (options_.prune_fraction > 0.0)
            detail::prune_device(ex, buf, flat_.layout(), options_.prune_fraction, prune_scratch_);
        if (encoded_ && options_.stochastic_rounding)
            detail::refuse_capture(ex, "diloco::step: stochastic rounding draws new words at every outer step, which a "
                                       "captured CUDA graph would replay unchanged");
        exchange(ex, buf, 0, n_);
        const auto rule = outer_.prepare(++outer_t_);
        using rule_type = std::remove_cvref_t<decltype(rule)>;
        const outer_update_body<T, rule_type> update{flat_.view(), snapshot_, state_, dense_wire<float>{buf}, rule,
                                                     1.0f, buf + n_, 0};
        detail::device_stream(ex, flat_.view(), tile_seg_.data(), 0, n_, detail::update_piece<T, rule_type>{update});
        count_outer_step(before);
    } else {
        (void)step_ex;
    }
}
#endif

// SPARTA during the inner steps and a DiLoCo outer step every H: the sparse exchange
// keeps the replicas correlated inside a round; at a step that ends a round, only the
// outer step runs (it leaves every worker with the same parameters, so a sparse
// exchange there would move bytes for nothing). stats() adds both parts' traffic.
// The replicas start from rank 0's parameters once, by the DiLoCo part's broadcast
// (diloco_options::broadcast_initial); the SPARTA part's broadcast_initial is ignored.
template <class Sampler, class Schedule, class Topology, class Outer, class T, class Space, class Comm,
          class Codec = codec::fp32, class OuterCodec = codec::fp32>
class sparta_diloco_engine {
    // The SPARTA part's options (no broadcast of its own). Checked before either part is
    // built, on every worker alike: both parts' constructors are collective.
    static sparta_options sparta_part(sparta_options o, const diloco_options& d) {
        if (o.join != d.join)
            throw invalid_argument("sparta_diloco: join must be set in both the SPARTA and the DiLoCo options, or in neither");
        o.broadcast_initial = false;
        return o;
    }
    static constexpr bool elastic = comm::elastic_communicator<Comm>;
    static constexpr detail::membership_role part_role =
        elastic ? detail::membership_role::delegated : detail::membership_role::own;

public:
    using memory_space = Space;
    static constexpr const char* kind = "sparta_diloco";

    sparta_diloco_engine(const param_group<T, Space>& group, Comm& comm, sparta_options sparse, diloco_options outer_opts,
                         Sampler sampler = {}, Schedule schedule = {}, Topology topology = {}, Outer outer = {},
                         Codec codec = {}, OuterCodec outer_codec = {})
        : comm_(comm), sparse_(group, comm, sparta_part(sparse, outer_opts), std::move(sampler), std::move(schedule), topology,
                  std::move(codec), part_role),
          outer_(group, comm, outer_opts, std::move(outer), topology, std::move(outer_codec), part_role),
          min_workers_(std::max(sparse.min_workers, outer_opts.min_workers)) {
        mstats_.workers = comm.size();
        if constexpr (elastic) {
            if (outer_opts.join) {
                // Admitted at the members' next round: a step of theirs. It takes both parts'
                // states, then that step with weight 0 in an outer step.
                const comm::membership_change admitted = comm_.join();
                const float weight = outer_.options().weight;
                outer_.set_weight(0.0f);
                try {
                    run_elastic(exec::host{}, admitted);
                } catch (...) {
                    outer_.set_weight(weight);
                    throw;
                }
                outer_.set_weight(weight);
            }
        }
        combine();
    }

    template <class Exec>
    void step(const Exec& ex) {
        if constexpr (elastic && !std::is_same_v<Exec, exec::cuda>) {
            // One renewal per step that communicates (an exchange or an outer step), for both parts.
            const std::uint64_t t = outer_.stats().steps;
            if (outer_.outer_step_due() || (t + 1) % sparse_.options().interval == 0)
                run_elastic(ex, std::nullopt);
            else
                step_parts(ex);
        } else {
            step_parts(ex);
        }
        combine();
    }

    // manual_outer: the DiLoCo part's outer step now (collective), after the SPARTA part's
    // pending exchange lands; and this worker's weight in the coming outer steps.
    template <class Exec>
    void outer_step(const Exec& ex) {
        sparse_.flush(ex);
        if constexpr (elastic && !std::is_same_v<Exec, exec::cuda>)
            detail::elastic_round(comm_, *this, mstats_, min_workers_, std::nullopt, kind,
                                  [&] { outer_.outer_step(ex); });
        else
            outer_.outer_step(ex);
        combine();
    }

    // Membership (over an elastic communicator): one protocol for both parts.
    const membership_stats& membership() const { return mstats_; }

    // ---- The membership protocol's hooks (algorithm/membership.hpp): both parts' records,
    // states and hashes together.
    config_record elastic_record() const {
        config_record rec(kind);
        const config_record a = sparse_.elastic_record(), b = outer_.elastic_record();
        for (const auto& [k, v] : a.fields()) rec.add("sparta." + k, v);
        for (const auto& [k, v] : b.fields()) rec.add("diloco." + k, v);
        if (!a.error().empty()) rec.set_error(a.error());
        if (!b.error().empty()) rec.set_error(b.error());
        return rec;
    }
    std::string transfer_state() const {
        const std::string a = sparse_.transfer_state();
        const std::uint64_t len = a.size();
        std::string out(reinterpret_cast<const char*>(&len), sizeof len);
        return out + a + outer_.transfer_state();
    }
    void receive_state(const std::string& blob) {
        std::uint64_t len = 0;
        if (blob.size() < sizeof len) throw invalid_argument("sparta_diloco: the transferred state is truncated");
        std::memcpy(&len, blob.data(), sizeof len);
        if (len > blob.size() - sizeof len) throw invalid_argument("sparta_diloco: the transferred state is truncated");
        // DiLoCo first (it sets the parameters to the snapshot), then SPARTA (the donor's parameters).
        outer_.receive_state(blob.substr(sizeof len + len));
        sparse_.receive_state(blob.substr(sizeof len, len));
    }
    std::uint32_t global_hash() const {
        const std::uint32_t h[2] = {sparse_.global_hash(), outer_.global_hash()};
        return crc32c(h, sizeof h);
    }
    void round_backup() {
        sparse_.round_backup();
        outer_.round_backup();
    }
    void round_rollback() {
        sparse_.round_rollback();
        outer_.round_rollback();
    }
    void view_changed() {
        sparse_.view_changed();
        outer_.view_changed();
    }
    void set_weight(float w) { outer_.set_weight(w); }

    // Applies the SPARTA part's overlapped exchange still waiting, if any (before save()).
    template <class Exec>
    void flush(const Exec& ex) {
        sparse_.flush(ex);
        combine();
    }

    const exchange_stats& stats() const { return stats_; }
    const exchange_stats& sparse_stats() const { return sparse_.stats(); }
    const exchange_stats& outer_stats() const { return outer_.stats(); }
    sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec>& sparse() { return sparse_; }
    diloco_engine<Outer, Topology, T, Space, Comm, OuterCodec>& outer() { return outer_; }

    void save(std::ostream& os) const {
        sparse_.save(os);
        outer_.save(os);
    }

    // Collective. The two parts are two checkpoints in a row: the SPARTA part is read
    // leaving what follows it, the DiLoCo part under the caller's trailing rule, and it
    // must be at the SPARTA part's step (each part's checksums cover only that part, and
    // the two count the same steps). If the DiLoCo part fails after the SPARTA part
    // loaded, the SPARTA part is put back as it was, on every worker alike (the failure
    // is collective).
    void load(std::istream& is, const std::string& source = "stream",
              checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        std::ostringstream backup;
        sparse_.save(backup);
        sparse_.load(is, source, checkpoint_trailing::leave);
        try {
            outer_.load(is, source, trailing, sparse_.stats().steps);
        } catch (...) {
            std::istringstream restore(backup.str());
            sparse_.load(restore, "backup");
            throw;
        }
        combine();
    }

private:
    template <class Exec>
    void step_parts(const Exec& ex) {
        if (outer_.outer_step_due()) {
            sparse_.flush(ex); // an overlapped SPARTA exchange lands before the outer step
            sparse_.skip_step();
        } else {
            sparse_.step(ex);
        }
        outer_.step(ex);
    }

    // A step under the membership protocol; below quorum it trains locally (counted only).
    template <class Exec>
    void run_elastic(const Exec& ex, std::optional<comm::membership_change> admitted) {
        if (!detail::elastic_round(comm_, *this, mstats_, min_workers_, std::move(admitted), kind,
                                   [&] { step_parts(ex); })) {
            sparse_.skip_step();
            outer_.count_step();
        }
    }

    void combine() {
        stats_ = outer_.stats();
        stats_ += sparse_.stats();
        stats_.steps = outer_.stats().steps;
    }

    Comm& comm_;
    sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec> sparse_;
    diloco_engine<Outer, Topology, T, Space, Comm, OuterCodec> outer_;
    int min_workers_ = 1;
    membership_stats mstats_{};
    exchange_stats stats_{};
};

// DiLoCo as a concrete object:
//   trickle::diloco<trickle::outer::nesterov> d{params, comm, {.interval = 500}, {.lr = 0.7, .momentum = 0.9}};
//   d.step(trickle::exec::host{});   // after every inner optimizer step
template <class Outer = outer::nesterov, class Topology = topology::all_reduce, class Codec = codec::fp32>
class diloco : public detail::erased_handle {
public:
    diloco() = default;
    template <class T, class Space, class Comm>
    diloco(const param_group<T, Space>& group, Comm& comm, diloco_options options = {}, Outer outer = {},
           Topology topology = {}, Codec codec = {})
        : erased_handle(detail::make_erased<diloco_engine<Outer, Topology, T, Space, Comm, Codec>>(
              group, comm, options, std::move(outer), std::move(topology), std::move(codec))) {}
};

// SPARTA + DiLoCo as a concrete object.
template <class Sampler = sampler::uniform, class Schedule = schedule::constant, class Topology = topology::all_reduce,
          class Outer = outer::nesterov, class Codec = codec::fp32, class OuterCodec = codec::fp32>
class sparta_diloco : public detail::erased_handle {
public:
    sparta_diloco() = default;
    template <class T, class Space, class Comm>
    sparta_diloco(const param_group<T, Space>& group, Comm& comm, sparta_options sparse = {}, diloco_options outer_opts = {},
                  Sampler sampler = {}, Schedule schedule = {}, Topology topology = {}, Outer outer = {},
                  Codec codec = {}, OuterCodec outer_codec = {})
        : erased_handle(detail::make_erased<
                        sparta_diloco_engine<Sampler, Schedule, Topology, Outer, T, Space, Comm, Codec, OuterCodec>>(
              group, comm, sparse, outer_opts, std::move(sampler), std::move(schedule), std::move(topology),
              std::move(outer), std::move(codec), std::move(outer_codec))) {}

    // Each part's own account (stats() is their sum); `initial` is on the DiLoCo part.
    const exchange_stats& sparse_stats() const { return get("sparse_stats").sparse_stats(); }
    const exchange_stats& outer_stats() const { return get("outer_stats").outer_stats(); }
};

TRICKLE_NAMESPACE_END
