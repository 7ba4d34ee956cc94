// trickle/kernels.hpp: kernel bodies (functors run by for_each_index on any execution space).
#pragma once

#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/sparse_exchange.hpp>
