// trickle/kernels/prune.hpp: forwarding header. Outer-gradient pruning's bodies and host
// reference (prune_key, prune_count, prune_key_body, prune_zero_body, prune_host) live in
// kernels/prune/body.hpp; its device launch (prune_scratch, prune_sort, prune_reserve,
// prune_device) in kernels/prune/dispatch.hpp.
#pragma once

#include <trickle/kernels/prune/body.hpp>
#include <trickle/kernels/prune/dispatch.hpp>
