// examples/sim/strategies_impl.hpp: the bodies of the algorithm factories, over comm::local or comm::async<comm::local>.
//
// Each strategies_*.cpp instantiates one of these for one communicator (Async false: the
// worker's comm::local, or comm::elastic_local for the elastic runs; true: a comm::async
// wrapper of comm::local the exchanger owns), so the policy combinations of each are
// compiled once, in their own translation unit.
#pragma once

#include "strategies.hpp"

namespace trickle_sim::detail {

// The exchanger for an Algorithm built by make(comm): over the worker's communicator, or
// over a comm::async wrapper of it that lives as long as the algorithm.
template <bool Async, class Algorithm, class Comm, class Make>
std::unique_ptr<exchanger> wrap_algorithm(Comm& comm, const Make& make) {
    if constexpr (Async)
        return std::make_unique<async_algorithm_exchanger<Algorithm>>(comm, make);
    else
        return std::make_unique<algorithm_exchanger<Algorithm>>(make(comm));
}

template <bool Async, class Comm>
std::unique_ptr<exchanger> sparta_exchanger(const sim_config& c, const trickle::param_group<float>& group, Comm& comm,
                                            const trickle::sparta_options& options) {
    const topology_choice top = make_topology(c);
    const runtime_schedule sch = make_runtime_schedule(c);
    return std::visit(
        [&](auto sam) -> std::unique_ptr<exchanger> {
            using algorithm = trickle::sparta<decltype(sam), runtime_schedule, topology_choice, trickle::codec::any>;
            return wrap_algorithm<Async, algorithm>(comm, [&](auto& on) {
                return algorithm(group, on, options, sam, sch, top, make_codec(c.codec, c.codec_block));
            });
        },
        make_sampler(c));
}

template <bool Async, class Comm>
std::unique_ptr<exchanger> diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group, Comm& comm,
                                            const trickle::diloco_options& options) {
    const topology_choice top = make_topology(c);
    const outer_choice out = make_outer(c);
    return std::visit(
        [&](auto wire) -> std::unique_ptr<exchanger> {
            using algorithm = trickle::diloco<outer_choice, topology_choice, decltype(wire)>;
            return wrap_algorithm<Async, algorithm>(comm,
                                                    [&](auto& on) { return algorithm(group, on, options, out, top, wire); });
        },
        make_outer_wire(c));
}

template <bool Async, class Comm>
std::unique_ptr<exchanger> sparta_diloco_exchanger(const sim_config& c, const trickle::param_group<float>& group,
                                                   Comm& comm, const trickle::sparta_options& sparse,
                                                   const trickle::diloco_options& outer_options) {
    const topology_choice top = make_topology(c);
    const runtime_schedule sch = make_runtime_schedule(c);
    const outer_choice out = make_outer(c);
    return std::visit(
        [&](auto sam, auto wire) -> std::unique_ptr<exchanger> {
            using algorithm = trickle::sparta_diloco<decltype(sam), runtime_schedule, topology_choice, outer_choice,
                                                     trickle::codec::any, decltype(wire)>;
            return wrap_algorithm<Async, algorithm>(comm, [&](auto& on) {
                return algorithm(group, on, sparse, outer_options, sam, sch, top, out, make_codec(c.codec, c.codec_block),
                                 wire);
            });
        },
        make_sampler(c), make_outer_wire(c));
}

} // namespace trickle_sim::detail
