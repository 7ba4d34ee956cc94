// trickle/topology/topology.hpp: the topology concept: who averages with whom.
//
// A topology combines each worker's packed buffer with its peers' through a
// communicator, written once against the communicator concept:
//   template <class Exec, class Comm, class Space>
//   int reduce(const Exec& ex, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>& ws)
// On return buf holds the sum of buf over the worker's averaging group, and the result
// is the group's size (so buf / size is the group's mean). Every worker calls it at once.
// The averaging must preserve the mean over all workers (a doubly stochastic mixing),
// so that repeated exchanges drive replicas to consensus rather than drift.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/config.hpp>

#include <concepts>

TRICKLE_NAMESPACE_BEGIN

// A topology policy: a copyable object with a name, describe(config_record&) and the
// reduce() member template described above (a member template cannot be named in a
// concept without fixing its arguments; algorithms check it at instantiation).
template <class T>
concept topology_policy = std::copy_constructible<T> && requires(const T& t, config_record& rec) {
    { T::name } -> std::convertible_to<const char*>;
    t.describe(rec);
};

TRICKLE_NAMESPACE_END
