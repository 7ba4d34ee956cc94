// trickle/topology/topology.hpp: the topology concept: who averages with whom.
//
// A topology combines each worker's packed buffer with its peers' through a
// communicator, written once against the communicator concept:
//   template <class Exec, class Comm, class Space>
//   int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws)
// It may use workspace slots 2 and 3 (and 1) as scratch of n floats; a topology that says
// how many with `static constexpr int scratch_buffers` gets exactly those reserved at the
// algorithm's construction (slots 2, 3, ...), others get all three, so no step allocates.
// On return buf holds the sum of buf over the worker's averaging group, and the result
// is the group's size (so buf / size is the group's mean). Every worker calls it at once.
// The averaging must preserve the mean over all workers (a doubly stochastic mixing),
// so that repeated exchanges drive replicas to consensus rather than drift.
#pragma once

#include <trickle/core/config_record.hpp>
#include <trickle/config.hpp>

#include <concepts>
#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

// A topology policy: a copyable object with a name, describe(config_record&) and the
// reduce() member template described above (a member template cannot be named in a
// concept without fixing its arguments; algorithms check it at instantiation).
template <class T>
concept topology_policy = std::copy_constructible<T> && requires(const T& t, config_record& rec) {
    { T::name } -> std::convertible_to<const char*>;
    t.describe(rec);
};

namespace detail {

// Reserves, at construction, the workspace slots topology Top's reduce() uses for n values.
template <class Top, class Workspace>
void reserve_topology_scratch(Workspace& ws, std::size_t n) {
    if constexpr (requires { Top::scratch_buffers; }) {
        for (int s = 0; s < Top::scratch_buffers; ++s) ws.reserve(static_cast<std::size_t>(2 + s), n);
    } else {
        for (std::size_t s = 1; s < 4; ++s) ws.reserve(s, n);
    }
}

} // namespace detail

TRICKLE_NAMESPACE_END
