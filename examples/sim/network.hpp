// examples/sim/network.hpp: trickle-sim's network and compute-time model (--network, --step-time).
//
// A model, not a measurement: the simulated workers are threads on one machine, so their
// exchanges take microseconds. The model turns what each worker really sent (trickle's own
// byte counters, per operation) into the time a link of a given bandwidth and latency would
// take, and adds it to the compute time, less what the strategy can hide behind compute:
//
//   op_time(op)   = k * rounds * latency + bytes / bandwidth
//                   (k: the operations that completed at one step, bytes: what this worker
//                   sent for them, rounds: the topology's sequential message rounds)
//   exposed(op)   = max(0, op_time(op) - hide_steps(op) * step_compute)
//   sim_wall(t)   = t * step_compute + max over workers of the sum of exposed(op), ops up to step t
//
// hide_steps is 0 for a blocking exchange, 1 for an overlapped SPARTA exchange (it runs
// while the next step computes) and tau for a streaming DiLoCo fragment (it runs while tau
// inner steps compute). docs/simulator.md states the model and its limits.
#pragma once

#include "options.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trickle_sim {

// Sequential message rounds of one exchange among `workers` workers: the ring algorithm's
// all-reduce takes 2(N - 1) (a reduce-scatter and an all-gather), the ring topology 2 (one
// message to each neighbour), gossip and exponential 1 (one peer), islands of g an
// all-reduce within the island, 2(g - 1). One worker sends nothing: 0. -1 for a topology
// added to the registry that the model has no count for (check_network_model refuses
// --network with it).
inline int exchange_rounds(topology_kind t, int workers, int island_size) {
    if (workers <= 1) return 0;
    switch (t) {
    case topology_kind::all_reduce: return 2 * (workers - 1);
    case topology_kind::ring: return 2;
    case topology_kind::gossip:
    case topology_kind::exponential: return 1;
    case topology_kind::islands: return 2 * (std::min(island_size, workers) - 1);
    }
    return -1;
}

// What parse_cli leaves to the network model: a count of rounds for the chosen topology.
inline void check_network_model(const sim_config& c) {
    if (!c.networks.empty() && exchange_rounds(c.topology, std::max(c.workers, 2), c.island_size) < 0)
        throw usage_error("--network: the network model has no message-round count for --topology " +
                          std::string(name_of(c.topology)) + " (examples/sim/network.hpp, exchange_rounds)");
}

// Seconds one worker's link is busy for `ops` operations of `rounds` rounds each that sent
// `bytes` bytes in all.
inline double op_seconds(const network_config& net, std::uint64_t ops, int rounds, std::uint64_t bytes) {
    return static_cast<double>(ops) * rounds * net.latency_s + static_cast<double>(bytes) / net.bandwidth_bytes_per_s;
}

// The part of an operation's time that `hide_s` seconds of concurrent compute cannot cover.
inline double exposed_seconds(double op_s, double hide_s) { return std::max(0.0, op_s - std::max(0.0, hide_s)); }

// What completed at one step of one worker: the blocking operations, and those that ran
// behind compute (SPARTA with --overlap, streaming DiLoCo with tau > 0, when trickle really
// starts them without blocking).
struct step_traffic {
    int step = 0;                      // 1-based inner step at which the operations completed
    std::uint64_t blocking_ops = 0, blocking_bytes = 0;
    std::uint64_t hidden_ops = 0, hidden_bytes = 0;
};

// How a strategy's exchanges map onto the model.
struct traffic_shape {
    int rounds = 0;      // per operation
    int hide_steps = 0;  // steps of compute an overlapped operation runs behind
};

// The communication time of one worker's log up to step `upto` that compute cannot hide.
inline double exposed_total(const std::vector<step_traffic>& log, int upto, const traffic_shape& shape,
                            const network_config& net, double step_compute_s) {
    double s = 0;
    for (const step_traffic& e : log) {
        if (e.step > upto) break;
        if (e.blocking_ops > 0 || e.blocking_bytes > 0)
            s += op_seconds(net, e.blocking_ops, shape.rounds, e.blocking_bytes);
        if (e.hidden_ops > 0 || e.hidden_bytes > 0)
            s += exposed_seconds(op_seconds(net, e.hidden_ops, shape.rounds, e.hidden_bytes),
                                 shape.hide_steps * step_compute_s);
    }
    return s;
}

// The modelled wall time at step t: compute plus the busiest worker's exposed communication.
inline double modelled_wall(int t, double step_compute_s, const std::vector<double>& exposed_per_worker) {
    double most = 0;
    for (double e : exposed_per_worker) most = std::max(most, e);
    return t * step_compute_s + most;
}

} // namespace trickle_sim
