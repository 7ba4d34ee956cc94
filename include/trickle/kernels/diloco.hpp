// trickle/kernels/diloco.hpp: forwarding header. The DiLoCo pass bodies (outer_delta_body,
// outer_update_body, snapshot_copy_body, local_copy_body, mix_body, params_from_snapshot_body,
// dense_wire and the wire concepts) live in kernels/stream/body.hpp; their device agents in
// kernels/stream/agent.hpp and their launch in kernels/stream/dispatch.hpp.
#pragma once

#include <trickle/kernels/stream/body.hpp>
