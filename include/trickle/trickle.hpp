// trickle/trickle.hpp: the whole public surface of trickle.
#pragma once

#include <trickle/core.hpp>
#include <trickle/exec.hpp>
#include <trickle/comm.hpp>
#include <trickle/kernels.hpp>
#include <trickle/sampler.hpp>
#include <trickle/schedule.hpp>
#include <trickle/topology.hpp>
#include <trickle/outer.hpp>
#include <trickle/codec.hpp>
#include <trickle/aggregate.hpp>
#include <trickle/algorithm.hpp>
