// trickle/algorithm/ddp.hpp: the dense all-reduce baseline: every parameter averaged every `interval` steps.
//
// What data-parallel training without compression does (PyTorch's DDP averages gradients;
// averaging the parameters after every step is the same when every replica starts equal
// and takes the same optimizer step): at every `interval`-th step, the whole group is
// copied into one fp32 array, summed over all workers in one all-reduce through the
// communicator, and written back as the mean. It has the public face of sparta and
// diloco (step(exec), stats() counted from the communicator's traffic(), checkpoints,
// the initial broadcast, configuration agreement), so a run can put it side by side with
// them: with interval 1 its bytes are the dense_bytes every algorithm reports, and its
// reduction() is 1.
//
// The mean of element i is T(sum_i * (1 / workers)), the product SPARTA's scatter writes
// (kernels/average.hpp), so ddp gives the bits of SPARTA at fraction 1 with the same
// interval. fp16 and bf16 parameters travel as the exact fp32 images of their values.
//
// This version averages host_space parameters (exec::host, exec::openmp); cuda_space
// parameters are refused at construction, on every worker.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/checkpoint.hpp>
#include <trickle/algorithm/detail/broadcast.hpp>
#include <trickle/algorithm/detail/erased.hpp>
#include <trickle/algorithm/detail/common.hpp>
#include <trickle/algorithm/flat_params.hpp>
#include <trickle/algorithm/stage/replica_state.hpp>
#include <trickle/algorithm/stage/trigger.hpp>
#include <trickle/comm/view.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/average.hpp>
#include <trickle/kernels/chunking.hpp>
#include <trickle/kernels/diloco.hpp>

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// Options of the dense baseline; every worker must pass the same values.
struct ddp_options {
    std::uint64_t interval = 1;    // average after every `interval`-th step (>= 1), as sparta_options::interval
    bool broadcast_initial = true; // at construction, give every worker rank 0's parameters (set false when
                                   // resuming with parameters the trainer restored)
};

// The dense baseline for parameters of type T in memory space Space over communicator
// Comm. Most code uses trickle::ddp, which hides T, Space and Comm.
template <class T, class Space, class Comm>
class ddp_engine {
    static_assert(communicator<Comm>, "Comm must satisfy trickle::communicator");
    static_assert(std::is_same_v<typename Comm::memory_space, Space>,
                  "the communicator moves memory in a different space than the parameters live in");
    static constexpr bool on_device = std::is_same_v<Space, cuda_space>;
    // A communicator whose membership changes between rounds (comm/view.hpp).
    static constexpr bool elastic = comm::elastic_communicator<Comm>;

public:
    using memory_space = Space;
    using value_type = T;
    static constexpr const char* kind = "ddp";

    // Collective: every worker constructs at once. Validates the options, checks that all
    // workers agree on them and on the layout (the same error on every worker otherwise:
    // invalid_argument or mismatch_error), then by default gives every worker rank 0's
    // parameters.
    ddp_engine(const param_group<T, Space>& group, Comm& comm, ddp_options options = {})
        : comm_(comm), options_(options), trigger_(options.interval), replica_(kind) {
        config_record rec = describe(group);
        // As in SPARTA and DiLoCo, the initial broadcast is agreed on but is not part of
        // the checkpoint's configuration hash (a resumed run must not overwrite its parameters).
        replica_.set_config_hash(detail::fnv1a(rec.serialize()));
        // The replica state: the stats (what a checkpoint holds).
        detail::add_stats_sections(replica_, stats_, 0);
        rec.add("broadcast_initial", options_.broadcast_initial);
        agree(comm_, rec);
        if constexpr (!on_device) {
            flat_ = flat_params<T, Space>(group);
            sum_.assign(flat_.total(), 0.0f);
            dense_per_step_ = detail::dense_bytes_of(comm_, flat_.total());
            if (options_.broadcast_initial)
                stats_.initial = detail::broadcast_group_host(comm_, flat_.view(), flat_.total(), sum_.data());
        }
    }

    ddp_engine(const ddp_engine&) = delete;
    ddp_engine& operator=(const ddp_engine&) = delete;

    // Call after every optimizer step, on every worker. Averages at steps interval-1,
    // 2·interval-1, ...; otherwise only counts the step.
    template <class Exec>
    void step(const Exec& ex) {
        static_assert(can_access_v<Exec, Space>, "ddp::step: this execution space cannot reach the parameters");
        if (trigger_.due(stats_.steps)) average(ex);
        ++stats_.steps;
        stats_.dense_bytes += dense_per_step_;
    }

    const exchange_stats& stats() const { return stats_; }
    const ddp_options& options() const { return options_; }
    // A fixed world: its size and epoch 0.
    membership_stats membership() const {
        membership_stats m{};
        m.workers = comm_.size();
        return m;
    }
    std::size_t size() const { return flat_.total(); }

    // Writes the step and traffic counters.
    void save(std::ostream& os) const { replica_.save(os); }

    // Collective: reads a checkpoint written by save() under the same configuration.
    // Every worker throws the same error if any worker's checkpoint is unreadable,
    // corrupt, foreign, or at a different step; the state is then unchanged. `trailing`:
    // whether bytes may follow the checkpoint in `is` (checkpoint.hpp).
    void load(std::istream& is, const std::string& source = "stream",
              checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        replica_.load(comm_, is, source, trailing, [](const detail::staged_sections& st, bool) {
            config_record rec("ddp checkpoint");
            const exchange_stats s = st.has("stats") ? st.value<exchange_stats>("stats") : exchange_stats{};
            rec.add("step", s.steps).add("exchanges", s.exchanges);
            return rec;
        });
    }

private:
    config_record describe(const param_group<T, Space>& group) const {
        config_record rec(kind);
        // What this version cannot run at all comes first (the first error is the one reported).
        if constexpr (on_device)
            rec.set_error("ddp: cuda_space parameters are not supported in this version (the dense baseline averages "
                          "host_space parameters; for CUDA ones, compare against sparta with fraction 1, which moves "
                          "the same bytes)");
        if constexpr (elastic)
            rec.set_error("ddp: a communicator whose membership changes (comm::elastic_local) is not supported; "
                          "sparta and diloco run over it");
        rec.add("trickle", detail::concat(TRICKLE_VERSION_MAJOR, '.', TRICKLE_VERSION_MINOR));
        detail::describe_group(rec, group, comm_.size());
        rec.add("interval", options_.interval);
        if (options_.interval < 1) rec.set_error("ddp: interval must be >= 1, got 0");
        return rec;
    }

    // One dense average: the group into fp32, one all-reduce, the mean back.
    template <class Exec>
    void average(const Exec& ex) {
        if constexpr (on_device) {
            (void)ex; // refused at construction
        } else {
            const std::size_t n = flat_.total();
            const traffic_counters before = comm_.traffic();
            detail::run_ranges(ex, n, snapshot_copy_body<T>{flat_.view(), sum_.data(), 0});
            comm_.all_reduce_sum(sum_.data(), n);
            detail::run_ranges(ex, n, mean_body<T>{flat_.view(), sum_.data(), 1.0f / static_cast<float>(comm_.size()), 0});
            comm_.synchronize();
            const traffic_counters last = comm_.traffic() - before;
            stats_.add_exchange(last, codec::wire_parts{.codes = last.bytes_sent}, n); // fp32 values: every byte a code
        }
    }

    Comm& comm_;
    ddp_options options_;
    flat_params<T, Space> flat_;
    std::vector<float> sum_; // the fp32 images of the group, then their sum over the workers
    exchange_stats stats_{};
    std::uint64_t dense_per_step_ = 0;
    detail::round_trigger trigger_;
    detail::replica_state replica_;
};

// The dense baseline as a concrete object, built and stepped as sparta and diloco are:
//   trickle::ddp base{params, comm};                 // every step
//   trickle::ddp every4{params, comm, {.interval = 4}};
//   base.step(trickle::exec::host{});               // after every optimizer step
// The parameter type, memory space and communicator are hidden; the communicator must
// outlive the object.
class ddp : public detail::erased_handle {
public:
    ddp() = default;
    template <class T, class Space, class Comm>
    ddp(const param_group<T, Space>& group, Comm& comm, ddp_options options = {})
        : erased_handle(detail::make_erased<ddp_engine<T, Space, Comm>>(group, comm, options)) {}
};

TRICKLE_NAMESPACE_END
