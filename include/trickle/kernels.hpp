// trickle/kernels.hpp: kernel bodies (functors run by for_each_index on any execution space).
#pragma once

#include <trickle/kernels/device_access.hpp>
#include <trickle/kernels/device_exchange.hpp>
#include <trickle/kernels/device_stream.hpp>
#include <trickle/kernels/average.hpp>
#include <trickle/kernels/diloco.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/outer_rule.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/kernels/prune.hpp>
#include <trickle/kernels/reduce.hpp>
#include <trickle/kernels/sparse_exchange.hpp>
