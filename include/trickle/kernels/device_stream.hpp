// trickle/kernels/device_stream.hpp: forwarding header. The CUDA agents of the DiLoCo passes
// (snapshot_piece, restore_piece, delta_piece, update_piece, device_piece, stream_kernel) live
// in kernels/stream/agent.hpp; their launch (stream_tuning, device_stream, stream_pass) in
// kernels/stream/dispatch.hpp.
#pragma once

#include <trickle/kernels/stream/agent.hpp>
#include <trickle/kernels/stream/dispatch.hpp>
