// trickle/exec/dispatch.hpp: how a CUDA kernel's grid is sized, as plain arithmetic shared by every device launch.
//
// The CUDA backend launches in the manner of CUB (dispatch -> agent -> kernel): an agent
// (a kernel body that moves one tile of work with a block, a warp or a thread) has a
// tuning policy, and the dispatch sizes the grid from two facts about the device: how
// many blocks of the kernel fit on one multiprocessor (an occupancy query) and how many
// multiprocessors there are. The grid is every block that fits (full occupancy), capped
// by the work; kernels walk their work grid-stride, so any grid covers any n.
//
// Until 2026-12-04 the grid was the fewest blocks per multiprocessor that kept a
// bytes-in-flight target (bandwidth x latency / SMs: 48 KB per SM on sm_90) in flight.
// The first profile on a GPU (one H200, Nsight Compute) showed that model starving the
// exchange kernels: the random-position gather got one block per SM (12% achieved
// occupancy, 33% of DRAM bandwidth, 100 us for 2.3M values), the tile gather three (34%
// occupancy, 0.75 waves, latency-bound on its per-tile chain of dependent loads). A
// block's pass never keeps its whole byte count in flight (it computes positions, reads
// plans, waits on dependent loads), so the model's arithmetic overstated what each block
// hides; filling the multiprocessor is what hides the latency.
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
};

// The grid of a launch: blocks x threads.
struct grid_shape {
    unsigned blocks = 0;
    unsigned threads = 0;
};

// The grid for `tiles` units of work (a unit: one block pass) when `resident` blocks of
// the kernel fit on one multiprocessor (from the occupancy query; at least 1 is assumed):
// every block that fits on every multiprocessor, never more blocks than units (no idle
// blocks for small launches), at least one block when there is work.
constexpr grid_shape size_grid(std::size_t tiles, const tuning& t, const device_facts& d, int resident) {
    if (tiles == 0) return {0, static_cast<unsigned>(t.threads)};
    const std::size_t per_sm = resident < 1 ? 1 : static_cast<std::size_t>(resident);
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
