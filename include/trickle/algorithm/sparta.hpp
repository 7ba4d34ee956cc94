// trickle/algorithm/sparta.hpp: SPARTA, sparse parameter averaging, as one object called after each optimizer step.
//
// At every `interval`-th step, all workers select the same positions (sampler, from the
// shared seed: nothing but values travels), gather them from every tensor of the group
// into one packed fp32 buffer in one pass, combine the buffers over the topology in one
// communication call, and scatter the averages back in place in one pass.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/detail/broadcast.hpp>
#include <trickle/algorithm/detail/codec.hpp>
#include <trickle/comm/async.hpp>
#include <trickle/algorithm/detail/device.hpp>
#include <trickle/algorithm/detail/erased.hpp>
#include <trickle/algorithm/flat_params.hpp>
#include <trickle/algorithm/membership.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/exec/workspace.hpp>
#include <trickle/kernels/device_exchange.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/kernels/sparse_exchange.hpp>
#include <trickle/sampler/sampler.hpp>
#include <trickle/sampler/uniform.hpp>
#include <trickle/schedule/schedule.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/topology/all_reduce.hpp>
#include <trickle/topology/topology.hpp>

#include <cstdint>
#include <istream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// Plain options of a SPARTA exchange; every worker must pass the same values.
struct sparta_options {
    double fraction = 0.005;     // base fraction p of the group averaged per exchange, in (0, 1]
    std::uint64_t interval = 1;  // exchange after every `interval`-th step (H >= 1)
    std::uint64_t seed = 0;      // shared seed of the samplers' random streams
    bool broadcast_initial = true; // at construction, give every worker rank 0's parameters (set false when
                                   // resuming with parameters the trainer restored, or when the replicas
                                   // already start identical and the bytes matter)
    bool stochastic_rounding = false; // a lossy codec rounds with the shared Philox stream instead of to nearest
    CUmemPoolHandle_st* device_pool = nullptr; // cuda_space: a cudaMemPool_t for trickle's buffers (default pool if null)
    bool overlap = false; // host: apply each exchange's average one step later, corrected for the local change
                          // meanwhile, so the exchange can run while the next step computes (docs/streaming.md)
    // Elastic membership (over comm::elastic_local; docs/elastic.md): an exchange runs only with
    // at least min_workers in the view (otherwise the step trains locally and the next exchange
    // tries again); join: this object is built by a worker joining a running group, which takes
    // the parameters, step counter and sampler state of a live member.
    int min_workers = 1;
    bool join = false;
};

namespace detail {

inline void describe_options(config_record& rec, const sparta_options& o) {
    rec.add("fraction", o.fraction).add("interval", o.interval).add("seed", o.seed).add("overlap", o.overlap);
    if (!valid_fraction(o.fraction))
        rec.set_error(concat("sparta: fraction must be in (0, 1], got ", o.fraction));
    if (o.interval < 1) rec.set_error("sparta: interval must be >= 1, got 0");
}

template <class T, class Space>
void describe_group(config_record& rec, const param_group<T, Space>& g, int workers) {
    std::ostringstream hash;
    hash << std::hex << g.layout_hash();
    // Over an elastic communicator the world's size changes between rounds: "elastic".
    if (workers < 0)
        rec.add("workers", "elastic");
    else
        rec.add("workers", workers);
    rec
        .add("dtype", dtype_traits<T>::name)
        .add("memory_space", Space::name)
        .add("tensors", g.tensor_count())
        .add("elements", g.total_size())
        .add("layout_hash", hash.str());
    if (g.empty()) rec.set_error("the parameter group is empty (no tensor with elements)");
}

// Launches body.run() over [0, n) in chunks sized for the execution space.
template <class Exec, class Body>
void run_ranges(const Exec& ex, std::size_t n, const Body& body) {
    const auto r = ranges<typename Exec::memory_space>(body, n);
    for_each_index(ex, r.calls(), r);
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
template <class Sampler, class Schedule, class Topology, class T, class Space, class Comm, class Codec = codec::fp32>
class sparta_engine {
    static_assert(sampler_policy<Sampler>, "Sampler must satisfy trickle::sampler_policy");
    static_assert(schedule_policy<Schedule>, "Schedule must satisfy trickle::schedule_policy");
    static_assert(topology_policy<Topology>, "Topology must satisfy trickle::topology_policy");
    static_assert(communicator<Comm>, "Comm must satisfy trickle::communicator");
    static_assert(std::is_same_v<typename Comm::memory_space, Space>,
                  "the communicator moves memory in a different space than the parameters live in "
                  "(use comm::nccl for cuda_space parameters, comm::local or comm::mpi for host_space)");

    using selection_t =
        std::remove_cvref_t<decltype(std::declval<Sampler&>().select(std::declval<const sampler_context&>()))>;
    static constexpr bool on_device = std::is_same_v<Space, cuda_space>;
    using wire_codec = codec::resolve_t<Codec, T>; // codec::native becomes the parameters' own type
    static_assert(codec_policy<wire_codec>, "Codec must satisfy trickle::codec_policy (or be codec::native)");

public:
    using memory_space = Space;
    using value_type = T;
    static constexpr const char* kind = "sparta";

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
          topology_(std::move(topology)), codec_(detail::wire_codec_of<wire_codec>(codec)),
          delegated_(role == detail::membership_role::delegated) {
        config_record rec = describe(group);
        // As in DiLoCo, the initial broadcast is agreed on but is not part of the
        // checkpoint's configuration hash (a resumed run must not overwrite its parameters).
        config_hash_ = detail::fnv1a(rec.serialize());
        mstats_.workers = comm_.size();
        if (detail::start_membership<Comm>(elastic_record_, rec, options_.join, role, kind,
                                           [&] { prepare_joiner(group); }, [&] { start_joining(); }))
            return;
        rec.add("broadcast_initial", options_.broadcast_initial);
        agree(comm_, rec);
        ex_ = detail::place_group(comm_, group, kind, flat_, ws_, options_.device_pool);
        dense_per_step_ = detail::all_reduce_bytes(group.total_size(), sizeof(float), comm_.size(), comm_.rank());
        allocate();
        if (options_.broadcast_initial) {
            if constexpr (on_device) {
                start_cuda();
            } else {
                buffer<float, host_space> staging(flat_.total());
                stats_.initial = detail::broadcast_group_host(comm_, flat_.view(), flat_.total(), staging.data());
            }
        }
    }

    // An overlapped exchange still running on the communicator's progress thread writes
    // into this object's buffers: wait for it before they go.
    ~sparta_engine() { pending_.reset(); }

    sparta_engine(const sparta_engine&) = delete;
    sparta_engine& operator=(const sparta_engine&) = delete;

    // Call after every optimizer step, on every worker. Exchanges at steps
    // interval-1, 2·interval-1, ...; otherwise only counts the step.
    //
    // On exec::cuda the step is enqueued on the stream and never waits: a plan pre-pass, one
    // gather, one communication call and one scatter; it allocates nothing (every buffer is
    // sized at construction) and runs on the parameters' device whatever device is current.
    // With a sampler that re-keys on the device (uniform, block), the constant schedule,
    // interval 1 and a topology with fixed groups (all_reduce, ring), the step is replayable: capture it in a CUDA graph, replay it k times and
    // call replayed(k); the replicas get the bits uncaptured steps give.
    template <class Exec>
    void step(const Exec& ex) {
        static_assert(can_access_v<Exec, Space>, "sparta::step: this execution space cannot reach the parameters");
        detail::check_same_stream(comm_, ex, kind);
        if constexpr (std::is_same_v<Exec, exec::cuda>) {
            detail::check_step_exec(ex, ex_, kind);
            // Refused before anything is recorded, on every step: a step without an exchange
            // would otherwise record an empty graph.
            if (!rekeyed_)
                detail::refuse_capture(ex, "sparta::step: this configuration cannot be replayed from a CUDA graph (it needs a "
                                           "sampler that re-keys on the device, uniform or block, the constant schedule, "
                                           "interval 1 and a topology without per-exchange groups); step it uncaptured");
        }
        const std::uint64_t t = stats_.steps;
        if constexpr (!std::is_same_v<Exec, exec::cuda>) flush(ex);
        if ((t + 1) % options_.interval == 0) {
            if constexpr (std::is_same_v<Exec, exec::cuda>) {
                exchange_cuda(ex, t);
            } else if constexpr (elastic) {
                if (delegated_)
                    exchange(ex, t);
                else
                    detail::elastic_round(comm_, *this, mstats_, options_.min_workers, std::nullopt, kind,
                                          [&] { exchange(ex, t); });
            } else {
                exchange(ex, t);
            }
        }
        stats_.steps = t + 1;
        stats_.dense_bytes += dense_per_step_;
    }

    // Overlap: applies the pending exchange now (waiting for it if it still runs); nothing
    // otherwise. step() calls it first; call it before save(), and sparta_diloco before an
    // outer step. Local: every worker's exchange was started together.
    template <class Exec>
    void flush(const Exec& ex) {
        if constexpr (!on_device)
            if (pending_) apply_pending(ex);
    }

    // Whether an overlapped exchange waits to be applied.
    bool exchange_pending() const { return pending_.has_value(); }

    // Counts a step without exchanging (used by sparta_diloco at the end of an outer round).
    void skip_step() {
        if constexpr (on_device)
            if (rekeyed_) advance_device_step();
        ++stats_.steps;
        stats_.dense_bytes += dense_per_step_;
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
        require(!pending_, "sparta::save: an overlapped exchange is pending; call flush(exec) on every worker first");
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
    // corrupt, foreign, or at a different step; the state is then unchanged. `trailing`:
    // whether bytes may follow the checkpoint in `is` (checkpoint.hpp).
    void load(std::istream& is, const std::string& source = "stream",
              checkpoint_trailing trailing = checkpoint_trailing::refuse) {
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
            r.finish(trailing);
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
        st.initial = stats_.initial; // what this object's construction sent, not the saved run's
        stats_ = st;
        sampler_ = std::move(sam);
        if constexpr (on_device)
            if (rekeyed_) copy_elements<cuda_space, host_space>(device_step_.data(), &stats_.steps, 1, ex_);
    }

    // ---- The membership protocol's hooks (algorithm/membership.hpp), over an elastic
    // communicator. The state every replica shares: the step and exchange counters and the
    // sampler's state; a joiner also takes the donor's parameters.
    config_record elastic_record() const { return elastic_record_; }

    std::string transfer_state() const {
        std::ostringstream os;
        detail::checkpoint_writer w(os);
        w.header("sparta-transfer", config_hash_);
        const std::uint64_t counters[2] = {stats_.steps, stats_.exchanges};
        w.section("counters", counters, sizeof counters);
        const std::string sam = sampler_state(sampler_);
        w.section("sampler", sam.data(), sam.size());
        std::vector<float> params(flat_.total());
        detail::run_ranges(exec::host{}, flat_.total(), snapshot_copy_body<T>{flat_.view(), params.data(), 0});
        w.section("parameters", params.data(), params.size() * sizeof(float));
        w.finish();
        return os.str();
    }

    void receive_state(const std::string& blob) {
        std::istringstream is(blob);
        detail::checkpoint_reader r(is);
        r.header("sparta-transfer", config_hash_);
        std::uint64_t counters[2] = {};
        r.section("counters", counters, sizeof counters);
        Sampler sam = sampler_;
        std::istringstream ss(r.blob("sampler"));
        if constexpr (requires { sam.load(ss); }) sam.load(ss);
        std::vector<float> params(flat_.total());
        r.section("parameters", params.data(), params.size() * sizeof(float));
        r.finish();
        stats_.steps = counters[0];
        stats_.exchanges = counters[1];
        sampler_ = std::move(sam);
        detail::run_ranges(exec::host{}, flat_.total(), params_from_snapshot_body<T>{flat_.view(), params.data(), 0});
    }

    std::uint32_t global_hash() const {
        const std::uint64_t counters[2] = {stats_.steps, stats_.exchanges};
        return crc32c(sampler_state(sampler_), crc32c(counters, sizeof counters));
    }

    void round_backup() { backup_.emplace(round_state{sampler_, stats_}); }
    void round_rollback() {
        sampler_ = backup_->sampler;
        stats_ = backup_->stats;
    }
    void view_changed() {
        dense_per_step_ = detail::all_reduce_bytes(flat_.total(), sizeof(float), comm_.size(), comm_.rank());
        if constexpr (!on_device && byte_communicator<Comm>)
            if (summed_) codec_scratch_.reserve(codec_, capacity_, comm_.size());
    }

private:
    static constexpr bool elastic = comm::elastic_communicator<Comm>;

    static std::string sampler_state(const Sampler& s) {
        std::ostringstream ss;
        if constexpr (requires { s.save(ss); }) s.save(ss);
        return ss.str();
    }

    // A joiner's construction: admitted at the members' next exchange (inside their step t),
    // it takes the state, then takes part in exchange t, and resumes after step t.
    void prepare_joiner(const param_group<T, Space>& group) {
        ex_ = detail::place_group(comm_, group, kind, flat_, ws_, options_.device_pool);
        dense_per_step_ = detail::all_reduce_bytes(group.total_size(), sizeof(float), comm_.size(), comm_.rank());
        allocate();
    }

    // A joiner with its own role, after prepare_joiner (detail::start_membership).
    void start_joining() {
        if constexpr (elastic) { // (explicit instantiations compile every member)
            const comm::membership_change admitted = comm_.join();
            detail::elastic_round(comm_, *this, mstats_, options_.min_workers, admitted, kind,
                                  [&] { exchange(exec::host{}, stats_.steps); });
            stats_.steps += 1;
            stats_.dense_bytes += dense_per_step_;
        }
    }

    config_record describe(const param_group<T, Space>& group) const {
        config_record rec(kind);
        rec.add("trickle", detail::concat(TRICKLE_VERSION_MAJOR, '.', TRICKLE_VERSION_MINOR));
        detail::describe_group(rec, group, elastic ? -1 : comm_.size());
        detail::describe_options(rec, options_);
        sampler_.describe(rec);
        schedule_.describe(rec);
        detail::describe_topology(topology_, rec, comm_.size());
        detail::describe_codec<Comm, Space>(codec_, topology_, rec, kind, options_.stochastic_rounding);
        if constexpr (on_device)
            if (options_.overlap) rec.set_error("sparta: overlap runs on host parameters in this version");
        detail::describe_membership(rec, comm_, options_.min_workers, options_.join, kind,
                                    detail::is_all_reduce(topology_), options_.overlap, "overlap");
        return rec;
    }

    // Sizes every buffer a step uses, once: the exchange buffer and the topology's scratch
    // for the largest selection the schedule can ask for, and on the device the planned
    // selection, the tile plans and (re-keyed samplers) the step counter.
    void allocate() {
        const double pmax = detail::schedule_max_fraction(schedule_, options_.fraction);
        capacity_ = detail::selection_capacity(sampler_, pmax, flat_.total());
        ws_.reserve(0, capacity_);
        detail::reserve_topology_scratch<Topology>(ws_, capacity_);
        encoded_ = !detail::plain_codec(codec_);
        summed_ = encoded_ && detail::is_all_reduce(topology_);
        if (options_.overlap) gathered_.assign(2 * capacity_, 0.0f);
        if constexpr (!on_device && byte_communicator<Comm>)
            if (summed_) codec_scratch_.reserve(codec_, capacity_, comm_.size());
        if constexpr (on_device && byte_communicator<Comm>)
            if (summed_) device_codec_scratch_.reserve(codec_, capacity_, comm_.size(), ex_);
        if (encoded_ && !summed_) link_.reserve(codec_, capacity_, ex_);
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

    // Counts an exchange of `count` values; its bytes by part: through a codec, what the
    // encoded all-reduce or the link sent; plain fp32, every byte a code.
    void count_exchange(const traffic_counters& before, std::size_t count) { count_traffic(comm_.traffic() - before, count); }

    void count_traffic(const traffic_counters& last, std::size_t count) {
        stats_.last = last;
        if (summed_)
            stats_.sent += codec::encoded_all_reduce_parts(codec_, count, comm_.size(), comm_.rank());
        else if (encoded_)
            stats_.sent += link_.take_sent();
        else
            stats_.sent.codes += stats_.last.bytes_sent;
        stats_.total += stats_.last;
        stats_.last_values = count;
        stats_.values += count;
        ++stats_.exchanges;
    }

    // The CUDA exchange (defined below for nvcc; g++ translation units reach it through an
    // explicit instantiation, algorithm/instantiate.hpp).
    void exchange_cuda(const exec::cuda& ex, std::uint64_t t);
    void advance_device_step();
    void start_cuda(); // the initial broadcast

    // Overlap: the exchange of step t is gathered and started here and applied at the next
    // step (apply_pending). Over a communicator that can start operations (comm::async), a
    // plain fp32 all-reduce runs while the worker computes; any other exchange runs at once
    // and its result waits, with the same bits.
    struct pending_exchange {
        selection_t sel;
        std::size_t count = 0;
        int group = 0;
        bool async = false;
        traffic_counters traffic{};
        comm::request request{};
    };

    template <class Exec>
    void start_overlapped(const Exec& ex, std::uint64_t t) {
        selection_t sel = select(t);
        const std::size_t count = sel.count();
        float* buf = ws_.get(0, count);
        const auto gather = make_gather(flat_.view(), sel, buf);
        for_each_index(ex, gather.calls(), gather);
        std::copy(buf, buf + count, gathered_.data());
        pending_.emplace(pending_exchange{std::move(sel), count});
        pending_exchange& p = *pending_;
        if constexpr (comm::async_communicator<Comm>) {
            if (!encoded_ && detail::is_all_reduce(topology_)) {
                p.request = comm_.start_all_reduce_sum(buf, count);
                p.async = true;
                p.group = comm_.size();
                return;
            }
        }
        const traffic_counters before = comm_.traffic();
        p.group = reduce_now(ex, buf, count);
        p.traffic = comm_.traffic() - before;
    }

    template <class Exec>
    void apply_pending(const Exec& ex) {
        pending_exchange& p = *pending_;
        if (p.async) {
            p.request.wait();
            const std::uint64_t bytes = detail::all_reduce_bytes(p.count, sizeof(float), comm_.size(), comm_.rank());
            p.traffic = traffic_counters{bytes, bytes, 1};
        }
        float* buf = ws_.get(0, p.count);
        float* now = gathered_.data() + capacity_;
        const auto gather = make_gather(flat_.view(), p.sel, now);
        for_each_index(ex, gather.calls(), gather);
        for_each_index(ex, p.count,
                       overlap_correction_body{buf, now, gathered_.data(), 1.0f / static_cast<float>(p.group)});
        const auto scatter = make_scatter(flat_.view(), p.sel, buf, 1.0f);
        for_each_index(ex, scatter.calls(), scatter);
        const traffic_counters traffic = p.traffic;
        const std::size_t count = p.count;
        pending_.reset();
        count_traffic(traffic, count);
    }

    // The sum over the topology's group of buf[0, count) (through the codec), at once: the
    // encoded all-reduce (tiled on the host, block-parallel on the device), or the
    // topology's rounds.
    template <class Exec>
    int reduce_now(const Exec& ex, float* buf, std::size_t count) {
        if constexpr (byte_communicator<Comm>) {
            if (summed_) {
                if constexpr (on_device)
                    return codec::encoded_all_reduce_blocks(codec_, comm_, ex, buf, count, device_codec_scratch_,
                                                            nullptr, 0.0f, rounding());
                else
                    return codec::encoded_all_reduce(codec_, comm_, buf, count, codec_scratch_, nullptr, 0.0f,
                                                     rounding());
            }
        }
        return reduce_through_topology(ex, buf, count);
    }

    template <class Exec>
    void exchange(const Exec& ex, std::uint64_t t) {
        if (options_.overlap) {
            start_overlapped(ex, t);
            return;
        }
        const selection_t sel = select(t);
        const std::size_t count = sel.count();
        float* buf = ws_.get(0, count);
        const traffic_counters before = comm_.traffic();
        // Range bodies: a run of positions or a prefetched batch per call (kernels/sparse_exchange.hpp).
        const auto gather = make_gather(flat_.view(), sel, buf);
        for_each_index(ex, gather.calls(), gather);
        const int group = reduce_now(ex, buf, count);
        const auto scatter = make_scatter(flat_.view(), sel, buf, 1.0f / static_cast<float>(group));
        for_each_index(ex, scatter.calls(), scatter);
        count_exchange(before, count);
    }

    codec::rounding rounding() const {
        return codec::rounding{options_.stochastic_rounding, options_.seed, stats_.exchanges};
    }

    // The exchange through the topology's rounds: plain fp32, or the codec's bytes through
    // the link (any topology but all_reduce).
    template <class Exec>
    int reduce_through_topology(const Exec& ex, float* buf, std::size_t count) {
        const reduce_context ctx{options_.seed, stats_.exchanges};
        if (!encoded_) return detail::topology_reduce(topology_, ex, comm_, buf, count, ws_, ctx);
        using link_type = detail::codec_link_t<wire_codec, Space>;
        if constexpr (detail::reduce_takes_link<Topology, Exec, Comm, Space, link_type>) {
            link_.begin(nullptr, 0.0f, rounding(), comm_.rank());
            return detail::topology_reduce(topology_, ex, comm_, buf, count, ws_, ctx, link_);
        } else {
            throw invalid_argument("sparta: this topology cannot carry a codec"); // refused at construction
        }
    }

    Comm& comm_;
    sparta_options options_;
    Sampler sampler_;
    Schedule schedule_;
    Topology topology_;
    wire_codec codec_;
    bool encoded_ = false; // a codec other than fp32
    bool summed_ = false;  // ... with the all_reduce topology: the exchange is codec::encoded_all_reduce
    detail::codec_link_t<wire_codec, Space> link_; // ... with another topology: the codec's bytes in its rounds
    codec::reduce_scratch codec_scratch_;
    codec::block_reduce_scratch<cuda_space> device_codec_scratch_; // cuda_space with a codec
    std::optional<pending_exchange> pending_; // overlap: the exchange started, not yet applied
    std::vector<float> gathered_;             // overlap: its gathered values, then the values at apply time
    flat_params<T, Space> flat_;
    workspace<float, Space, 4> ws_;
    exchange_stats stats_{};
    // Membership (elastic communicators).
    bool delegated_ = false; // sparta_diloco runs the protocol for both its parts
    membership_stats mstats_{};
    config_record elastic_record_;
    struct round_state {
        Sampler sampler;
        exchange_stats stats;
    };
    std::optional<round_state> backup_;
    std::uint64_t dense_per_step_ = 0;
    std::uint64_t config_hash_ = 0;
    std::size_t capacity_ = 0;
    // cuda_space only: where the CUDA work runs, and the device memory of the plan.
    exec::cuda ex_{};
    bool rekeyed_ = false;
    buffer<selection_t, cuda_space> device_selection_;
    buffer<detail::tile_plan, cuda_space> device_plans_;
    buffer<std::uint64_t, cuda_space> device_step_;
    detail::device_exchange_state<selection_t> device_state_{};
};

#if TRICKLE_CUDA_COMPILER
template <class Sampler, class Schedule, class Topology, class T, class Space, class Comm, class Codec>
void sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec>::exchange_cuda(const exec::cuda& step_ex, std::uint64_t t) {
    if constexpr (on_device) {
        const exec::cuda ex{step_ex.stream, ex_.device};
        detail::device_scope on(ex.device);
        const selection_t sel = select(t);
        const std::size_t count = sel.count();
        float* buf = ws_.get(0, count);
        const traffic_counters before = comm_.traffic();
        if (rekeyed_) {
            if constexpr (rekeyable_sampler)
                detail::device_plan(ex, flat_.view(), sel, detail::rekey_selection<Sampler>{options_.seed}, device_state_);
        } else {
            detail::device_plan(ex, flat_.view(), sel, detail::keep_selection{}, device_state_);
        }
        detail::device_move<true>(ex, flat_.view(), sel, device_state_, buf, 1.0f);
        if (encoded_ && options_.stochastic_rounding)
            detail::refuse_capture(ex, "sparta::step: stochastic rounding draws new words at every exchange, "
                                       "which a captured CUDA graph would replay unchanged");
        const int group = reduce_now(ex, buf, count);
        detail::device_move<false>(ex, flat_.view(), sel, device_state_, buf, 1.0f / static_cast<float>(group));
        count_exchange(before, count);
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
// sparta_engine for a compile-time one). The communicator must outlive the object.
template <class Sampler = sampler::uniform, class Schedule = schedule::constant, class Topology = topology::all_reduce,
          class Codec = codec::fp32>
class sparta : public detail::erased_handle {
public:
    sparta() = default;
    template <class T, class Space, class Comm>
    sparta(const param_group<T, Space>& group, Comm& comm, sparta_options options = {}, Sampler sampler = {},
           Schedule schedule = {}, Topology topology = {}, Codec codec = {})
        : erased_handle(detail::make_erased<sparta_engine<Sampler, Schedule, Topology, T, Space, Comm, Codec>>(
              group, comm, options, std::move(sampler), std::move(schedule), std::move(topology), std::move(codec))) {}
};

TRICKLE_NAMESPACE_END
