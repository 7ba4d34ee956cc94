// trickle/topology/registry.hpp: the topologies a run-time choice can name: topology::any's alternatives, trickle-sim's --topology, Python's topology=.
//
// One list, in the order the front ends list the names. topology::any is a variant of
// exactly these, and every front end finds one by the name it declares (its `name`), so
// adding a topology is its header and one line here (docs/extending.md).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/topology/all_reduce.hpp>
#include <trickle/topology/exponential.hpp>
#include <trickle/topology/gossip.hpp>
#include <trickle/topology/islands.hpp>
#include <trickle/topology/ring.hpp>
#include <trickle/topology/topology.hpp>

TRICKLE_NAMESPACE_BEGIN

namespace topology {

using registry = type_list<all_reduce, ring, gossip, exponential, islands>;

static_assert(names_unique<registry>(), "topology::registry: two topologies share a name");
static_assert([]<class... T>(type_list<T...>*) { return (topology_policy<T> && ...); }(static_cast<registry*>(nullptr)),
              "topology::registry: every entry must satisfy topology_policy");

} // namespace topology

TRICKLE_NAMESPACE_END
