// trickle/exec/dispatch.hpp: how a CUDA kernel's grid is sized, as plain arithmetic shared by every device launch.
//
// The CUDA backend launches in the manner of CUB (dispatch -> agent -> kernel): an agent
// (a kernel body that moves one tile of work with a block, a warp or a thread) has a
// tuning policy, and the dispatch sizes the grid from three facts about the device:
//   - how many blocks of the kernel fit on one multiprocessor (an occupancy query);
//   - how many multiprocessors there are;
//   - how many bytes must be in flight per multiprocessor to cover the memory latency
//     (Little's law: bandwidth x latency / multiprocessors, with a margin), per architecture.
// A grid larger than needed only adds blocks that find no work; a smaller one leaves
// bandwidth unused. Kernels walk their work grid-stride, so any grid covers any n.
//
// Everything here is host arithmetic, tested on the host (tests/core/test_dispatch.cpp);
// the CUDA queries that feed it are in exec/cuda.hpp.
#pragma once

#include <trickle/config.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace exec {

// An agent's tuning policy: threads per block, work items per thread per pass, and the
// width of its vector accesses in bytes (16: one 128-bit load or store per item).
struct tuning {
    int threads = 256;
    int items_per_thread = 4;
    int vector_bytes = 16;
};

// What the dispatch knows of a device.
struct device_facts {
    int multiprocessors = 1;
    int cc_major = 8;          // compute capability
    int cc_minor = 0;
};

// Bytes a multiprocessor should keep in flight to run at the memory's bandwidth: about
// bandwidth x latency / multiprocessors, doubled for margin. A100 (sm_80): ~2 TB/s x ~600
// ns / 108 ~ 11 KB; H100/H200 (sm_90): 3.35-4.8 TB/s x ~650 ns / 132 ~ 16-24 KB.
constexpr std::size_t bytes_in_flight_per_sm(const device_facts& d) {
    if (d.cc_major >= 9) return std::size_t{48} << 10;
    if (d.cc_major == 8 && d.cc_minor == 0) return std::size_t{24} << 10;
    return std::size_t{16} << 10; // consumer parts: less bandwidth per SM
}

// The grid of a launch: blocks x threads.
struct grid_shape {
    unsigned blocks = 0;
    unsigned threads = 0;
};

// The grid for `tiles` units of work, each unit handled by one block pass that moves
// `bytes_per_block_pass` bytes, when `resident` blocks of the kernel fit on one
// multiprocessor (from the occupancy query; at least 1 is assumed). Blocks per SM are the
// fewest that keep the target in flight, capped by what fits; the grid never exceeds the
// work (no idle blocks for small launches) and is at least one block when there is work.
constexpr grid_shape size_grid(std::size_t tiles, const tuning& t, const device_facts& d, int resident,
                               std::size_t bytes_per_block_pass) {
    if (tiles == 0) return {0, static_cast<unsigned>(t.threads)};
    const std::size_t target = bytes_in_flight_per_sm(d);
    const std::size_t per_pass = bytes_per_block_pass == 0 ? 1 : bytes_per_block_pass;
    std::size_t per_sm = (target + per_pass - 1) / per_pass;
    const std::size_t fit = resident < 1 ? 1 : static_cast<std::size_t>(resident);
    if (per_sm > fit) per_sm = fit;
    if (per_sm < 1) per_sm = 1;
    std::size_t blocks = per_sm * static_cast<std::size_t>(d.multiprocessors < 1 ? 1 : d.multiprocessors);
    if (blocks > tiles) blocks = tiles;
    constexpr std::size_t max_blocks = 0x7fffffffu; // gridDim.x limit
    if (blocks > max_blocks) blocks = max_blocks;
    return {static_cast<unsigned>(blocks), static_cast<unsigned>(t.threads)};
}

// Whether a launch over n items can index with 32-bit offsets inside the kernel (cheaper
// address arithmetic) or needs 64-bit ones.
constexpr bool fits_32bit(std::size_t n) { return n < (std::size_t{1} << 31); }

} // namespace exec

TRICKLE_NAMESPACE_END
