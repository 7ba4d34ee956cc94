// trickle/kernels/plan.hpp: what the device path computes once per step or once per group, as plain functions.
//
// The CUDA agents (kernels/exchange/agent.hpp, kernels/stream/agent.hpp) only move bytes.
// What they move is decided here, by functions that run on the host too and are tested
// there (tests/kernels/test_plan.cpp):
//   tile_plan / plan_tile       a run selection's values cut into tiles of at most L
//                               values; for each tile, where its first run starts and in
//                               which tensor. Computed once per step by the gather's
//                               lane group of each tile and stored for the scatter, so
//                               the movers never repeat a Feistel image or a segment
//                               search per element;
//   tile_length                 L for a selection (a block, or a fixed length for long runs);
//   tile_segments               for a pass over the whole group (the DiLoCo passes): the
//                               segment of each tile's first element, built once per group;
//   vector_split                how a contiguous piece splits into a scalar head, 16-byte
//                               vectors and a scalar tail, and whether the other arrays it
//                               pairs with allow vectors at all.
#pragma once

#include <trickle/config.hpp>
#include <trickle/kernels/flat_view.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// A tile of a run selection: values [t·L, min((t+1)·L, count)). Its first run starts at
// flat position pos, in segment seg (no_segment when the run is padding), and covers the
// tile's first len values; a tile whose values continue past that run (a rotating window
// that wraps, a block longer than L that is not a multiple of it) finds the rest with
// run_at on the device.
inline constexpr std::uint32_t no_segment = 0xffffffffu;

struct tile_plan {
    std::uint64_t pos = 0;
    std::uint32_t seg = no_segment;
    std::uint32_t len = 0;
};

// Longest tile of a selection with long runs: a warp moves 2048 fp32 values (8 KB) as 16
// rounds of one 16-byte access per lane.
inline constexpr std::size_t long_run_tile = 2048;

// Values per tile: a block sampler's block when it is no longer than long_run_tile (a tile
// is then exactly one run, and tiles never straddle runs), otherwise long_run_tile.
template <class S>
TRICKLE_HOST_DEVICE std::size_t tile_length(const S& sel) {
    if constexpr (requires { sel.block_size; }) {
        const std::size_t b = sel.block_size;
        return b >= 1 && b <= long_run_tile ? b : long_run_tile;
    } else {
        (void)sel;
        return long_run_tile;
    }
}

TRICKLE_HOST_DEVICE std::size_t tile_count(std::size_t count, std::size_t L) { return (count + L - 1) / L; }

// The plan of tile t of selection sel (count values, tiles of L) over params.
template <class T, class S>
TRICKLE_HOST_DEVICE tile_plan plan_tile(const flat_view<T>& params, const S& sel, std::size_t count, std::size_t L,
                                        std::size_t t) {
    const std::size_t k0 = t * L;
    const std::size_t k1 = count - k0 < L ? count : k0 + L;
    const auto r = sel.run_at(k0);
    const std::size_t len = r.len < k1 - k0 ? r.len : k1 - k0;
    tile_plan p;
    p.pos = r.pos;
    p.len = static_cast<std::uint32_t>(len);
    p.seg = r.pos < params.total ? params.segment_of(r.pos) : no_segment;
    return p;
}

// Elements per tile of a pass over the whole group, and the segment holding each tile's
// first element (tiles of `tile` flat elements; the last may be partial). Built once per
// group on the host and copied to the device.
inline constexpr std::size_t stream_tile = 4096;

template <class T>
std::vector<std::uint32_t> tile_segments(const flat_view<T>& host_params, std::size_t tile = stream_tile) {
    std::vector<std::uint32_t> out((host_params.total + tile - 1) / tile);
    for (std::size_t t = 0; t < out.size(); ++t) out[t] = host_params.segment_of(t * tile);
    return out;
}

// How m contiguous elements of E at address p split for 16-byte accesses: `head` scalar
// elements until p is 16-byte aligned, then `vectors` groups of 16 / sizeof(E), then the
// rest. Elements are assumed aligned to their own size.
struct vector_split {
    std::size_t head = 0;
    std::size_t vectors = 0;
    std::size_t tail = 0;
};

template <class E>
TRICKLE_HOST_DEVICE vector_split split_for_vectors(const E* p, std::size_t m) {
    constexpr std::size_t per = 16 / sizeof(E);
    const std::size_t misalign = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(p) & 15u);
    std::size_t head = misalign == 0 ? 0 : (16 - misalign) / sizeof(E);
    if (head > m) head = m;
    vector_split s;
    s.head = head;
    s.vectors = (m - head) / per;
    s.tail = m - head - s.vectors * per;
    return s;
}

// Whether a float array paired element for element with a piece starting at its element
// `head` (after the piece's own head) is 16-byte aligned there too: then both sides move
// with vector accesses.
TRICKLE_HOST_DEVICE bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

} // namespace detail

TRICKLE_NAMESPACE_END
