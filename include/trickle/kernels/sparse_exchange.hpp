// trickle/kernels/sparse_exchange.hpp: forwarding header. The bodies of one sparse exchange
// (gather_body, scatter_body, their range forms and make_gather / make_scatter, the host
// pipelines, overlap_correction_body and the neighbour sums add_body / add_neighbours_body)
// live in kernels/exchange/body.hpp; the device agents in kernels/exchange/agent.hpp and
// their launch in kernels/exchange/dispatch.hpp.
#pragma once

#include <trickle/kernels/exchange/body.hpp>
