// trickle/kernels/pass.hpp: forwarding header. detail::stream_pass, one pass of a DiLoCo body
// on the host or the device, lives in kernels/stream/dispatch.hpp (the bodies in
// kernels/stream/body.hpp, the device agents in kernels/stream/agent.hpp).
#pragma once

#include <trickle/kernels/stream/dispatch.hpp>
