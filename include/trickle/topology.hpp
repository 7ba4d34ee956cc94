// trickle/topology.hpp: every topology (who averages with whom).
#pragma once

#include <trickle/topology/all_reduce.hpp>
#include <trickle/topology/ring.hpp>
#include <trickle/topology/topology.hpp>
