// trickle/core/stream.hpp: the purposes of trickle's Philox streams, and the stream id of each draw.
//
// Every random choice trickle makes is drawn from the workers' shared seed: a sampler's
// positions, DiLoCo's dropped contributions, a topology's groups, a codec's stochastic
// rounding, random-k's positions. Each purpose has its own tag in the top byte of the
// stream id, so no two of them ever draw the same numbers. The tags live in core because
// every policy family uses them; their values are part of every run's bits (a sampler's
// selection, a checkpoint resumed) and must never change.
#pragma once

#include <trickle/config.hpp>

#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Purposes for Philox streams, so no two uses of the shared seed ever draw the same numbers.
enum class stream_tag : std::uint64_t {
    uniform = 1,
    permutation = 2,
    block = 3,
    layerwise = 4,
    drop = 5,
    topology = 6, // the groups of gossip and islands (topology/groups.hpp)
    codec = 7,    // stochastic rounding of the codecs (codec::philox_words), per exchange
    random_k = 16, // codec::random_k's positions, per outer round
    chunk_random_k = 17, // codec::chunk_randk's positions, per round (DeMo's shared-index variant)
    user = 64,
};

// A Philox stream id for (purpose, index): the tag in the top byte, the index below.
TRICKLE_HOST_DEVICE std::uint64_t stream_id(stream_tag tag, std::uint64_t index) {
    return (static_cast<std::uint64_t>(tag) << 56) ^ (index & 0x00ffffffffffffffull);
}

} // namespace detail

TRICKLE_NAMESPACE_END
