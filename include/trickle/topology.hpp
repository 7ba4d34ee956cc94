// trickle/topology.hpp: every topology (who averages with whom) and their registry.
#pragma once

#include <trickle/topology/all_reduce.hpp>
#include <trickle/topology/any.hpp>
#include <trickle/topology/exponential.hpp>
#include <trickle/topology/gossip.hpp>
#include <trickle/topology/groups.hpp>
#include <trickle/topology/islands.hpp>
#include <trickle/topology/registry.hpp>
#include <trickle/topology/ring.hpp>
#include <trickle/topology/topology.hpp>
