// trickle/core/search.hpp: the one search of a sorted table ("which tensor holds flat index i").
#pragma once

#include <trickle/config.hpp>

#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The last s in [0, count) for which at_or_below(s) holds, where at_or_below is true for
// a prefix of the indices and false after it; index 0 is the answer when the prefix is
// empty (count must be >= 1). Every table lookup of trickle goes through here: a segment
// table (flat_view), a layout's offsets (layout_view), a group's entries (param_group),
// a layerwise sampler's cumulative counts.
//
// Branch-free: the number of steps depends on count alone, so random positions cost no
// mispredictions (each of which also flushes the loads in flight behind it), and a GPU
// warp never diverges in it.
template <class Pred>
TRICKLE_HOST_DEVICE std::uint32_t last_where(std::uint32_t count, const Pred& at_or_below) {
    std::uint32_t base = 0, len = count;
    while (len > 1) {
        const std::uint32_t half = len / 2;
        base = at_or_below(base + half) ? base + half : base;
        len -= half;
    }
    return base;
}

} // namespace detail

TRICKLE_NAMESPACE_END
