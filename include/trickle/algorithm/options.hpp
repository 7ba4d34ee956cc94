// trickle/algorithm/options.hpp: the options of SPARTA and DiLoCo, and their fields in the
// configuration record every worker agrees on.
//
// `interval` is the one word for "every k-th step" in both: SPARTA exchanges after every
// interval-th step, DiLoCo takes an outer step after every interval-th inner step (the
// paper's H). Options a worker may set differently from the others say so.
#pragma once

#include <trickle/aggregate/aggregate.hpp>
#include <trickle/algorithm/stage/deadline.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/schedule/schedule.hpp>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <type_traits>
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
    bool carry_local = false;                    // a late average lands with the worker's progress since its
                                                 // exchange began: params = global + (params - params at start);
                                                 // needs overlap_steps > 0 and mix = 0
    // Workers at different speeds: the trainer decides when outer steps happen (a deadline,
    // say) and calls outer_step(exec) on every worker at once; step() only counts inner
    // steps, which may then differ between workers. Pair with set_weight(tokens).
    bool manual_outer = false;
    // How the outer step combines the workers' outer gradients (aggregate/aggregate.hpp,
    // docs/robustness.md): the weighted mean (default), or a robust rule (trimmed mean,
    // median, centered clipping) over an all-gather of every contribution.
    aggregate::rule aggregate{};
    // manual_outer: the deadline of each round adapted to the reported arrival times
    // (report_arrival; stage/deadline.hpp). Off while deadline.cap is 0.
    deadline_options deadline{};
    // Elastic membership (over comm::elastic_local; docs/elastic.md): an outer step runs only
    // with at least min_workers in the view (otherwise training goes on locally and the next
    // outer step tries again); join: this object is built by a worker joining a running
    // group, which takes the global state from a live member instead of the initial broadcast.
    int min_workers = 1;
    bool join = false;
};

// The plain fields of the options that front ends set by name, each as f(name, field):
// Python's keyword arguments of the same names (the binding reads them in this loop, and
// trickle._C.option_defaults hands the defaults below to the Python layer, so a default
// lives here only). The other fields (device_pool, aggregate, deadline, manual_outer,
// min_workers, join) are set by the code that knows them. O is the options type, const or
// not; adding a field a front end should set is one line here.
template <class O, class F>
    requires std::same_as<std::remove_const_t<O>, sparta_options>
void for_each_option(O& o, F&& f) {
    f("fraction", o.fraction);
    f("interval", o.interval);
    f("seed", o.seed);
    f("broadcast_initial", o.broadcast_initial);
    f("stochastic_rounding", o.stochastic_rounding);
    f("overlap", o.overlap);
}

template <class O, class F>
    requires std::same_as<std::remove_const_t<O>, diloco_options>
void for_each_option(O& o, F&& f) {
    f("interval", o.interval);
    f("seed", o.seed);
    f("weight", o.weight);
    f("drop_probability", o.drop_probability);
    f("prune_fraction", o.prune_fraction);
    f("error_feedback", o.error_feedback);
    f("broadcast_initial", o.broadcast_initial);
    f("stochastic_rounding", o.stochastic_rounding);
    f("state_in_pinned_host", o.state_in_pinned_host);
    // Streaming DiLoCo (docs/streaming.md).
    f("fragments", o.fragments);
    f("fragment_tensors", o.fragment_tensors);
    f("overlap_steps", o.overlap_steps);
    f("mix", o.mix);
    f("carry_local", o.carry_local);
}

namespace detail {

inline void describe_options(config_record& rec, const sparta_options& o) {
    rec.add("fraction", o.fraction).add("interval", o.interval).add("seed", o.seed).add("overlap", o.overlap);
    if (!valid_fraction(o.fraction))
        rec.set_error(concat("sparta: fraction must be in (0, 1], got ", o.fraction));
    if (o.interval < 1) rec.set_error("sparta: interval must be >= 1, got 0");
}

inline void describe_options(config_record& rec, const diloco_options& o, bool device_params) {
    rec.add("interval", o.interval)
        .add("seed", o.seed)
        .add("drop_probability", o.drop_probability)
        .add("prune_fraction", o.prune_fraction)
        .add("error_feedback", o.error_feedback)
        .add("state_in_pinned_host", o.state_in_pinned_host);
    if (o.interval < 1) rec.set_error("diloco: interval (H) must be >= 1, got 0");
    if (!(std::isfinite(o.weight) && o.weight >= 0.0f))
        rec.set_error(concat("diloco: weight must be finite and >= 0, got ", o.weight));
    if (!(o.drop_probability >= 0.0 && o.drop_probability < 1.0))
        rec.set_error(concat("diloco: drop_probability must be in [0, 1), got ", o.drop_probability));
    if (!(o.prune_fraction >= 0.0 && o.prune_fraction < 1.0))
        rec.set_error(concat("diloco: prune_fraction must be in [0, 1), got ", o.prune_fraction));
    if (!device_params && o.state_in_pinned_host)
        rec.set_error("diloco: state_in_pinned_host applies to cuda_space parameters only");
}

} // namespace detail

TRICKLE_NAMESPACE_END
