// trickle/kernels/device_exchange.hpp: forwarding header. The CUDA agents of one sparse exchange
// (keep_selection, rekey_selection, tile_kernel, random_kernel, increment_kernel)
// live in kernels/exchange/agent.hpp; their launch (device_exchange_state, the tunings,
// tile_lane_shift, device_move, device_increment) in kernels/exchange/dispatch.hpp.
#pragma once

#include <trickle/kernels/exchange/agent.hpp>
#include <trickle/kernels/exchange/dispatch.hpp>
