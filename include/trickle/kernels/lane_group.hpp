// trickle/kernels/lane_group.hpp: for_each_lane_group, units of work that a group of lanes shares, with one reduction between two phases.
//
// A lane-group body does one unit (a codec block, say) with G lanes (a power of two, at
// most a warp) in two phases around a reduction of a small value over the group:
//
//   struct Body {
//       using extent_type = ...;   // trivially copyable; empty when nothing is reduced
//       static extent_type combine(const extent_type&, const extent_type&);   // associative, commutative
//       extent_type first(std::size_t unit, unsigned lane, unsigned G) const;
//       void second(std::size_t unit, unsigned lane, unsigned G, const extent_type& total) const;
//   };
//
// Every lane of the group runs first(), the G results are combined by a butterfly (lane l
// takes combine(e_l, e_{l xor d}) for d = G/2, G/4, ..., 1: __shfl_xor_sync on the device),
// and every lane then runs second() with the group's total. A lane must touch only memory
// of its own in first() and read only that in second() (the lanes of a group see no
// writes of one another between the phases).
//
// for_each_lane_group(ex, units, shift, body) runs units [0, units) with G = 2^shift lanes
// each: on exec::cuda as one kernel (a warp holds 32 / G groups, every lane of a warp runs
// the same number of rounds so the shuffles see the whole warp); on a host execution space
// by emulating the lanes, phase by phase and the butterfly step by step, so the host tests
// of a body check the arithmetic the device runs (tests/kernels/test_lane_group.cpp,
// tests/codec/test_lanes.cpp).
#pragma once

#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/dispatch.hpp>
#include <trickle/exec/execution_space.hpp>

#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

inline constexpr unsigned max_lane_shift = 5; // a warp

// Threads per block of the device agent.
inline constexpr exec::tuning lane_group_tuning{256, 1, 16};

// The host's emulation of one unit: every lane's first phase, the butterfly, every lane's
// second phase.
template <class Body>
void emulate_lane_group(const Body& body, std::size_t unit, unsigned shift) {
    using E = typename Body::extent_type;
    const unsigned G = 1u << shift;
    std::array<E, 1u << max_lane_shift> e{}, next{};
    for (unsigned l = 0; l < G; ++l) e[l] = body.first(unit, l, G);
    for (unsigned d = G / 2; d >= 1; d /= 2) {
        for (unsigned l = 0; l < G; ++l) next[l] = Body::combine(e[l], e[l ^ d]);
        e = next;
    }
    for (unsigned l = 0; l < G; ++l) body.second(unit, l, G, e[l]);
}

#if TRICKLE_CUDA_COMPILER

namespace device {

// v from lane (this lane xor d) of its group of `width` lanes, word by word.
template <class E>
__device__ __forceinline__ E shuffle_xor(const E& v, unsigned d, unsigned width) {
    static_assert(std::is_trivially_copyable_v<E> && sizeof(E) % 4 == 0, "an extent travels as 32-bit words");
    constexpr int words = static_cast<int>(sizeof(E) / 4);
    int w[words];
    std::memcpy(w, &v, sizeof(E));
#pragma unroll
    for (int k = 0; k < words; ++k) w[k] = __shfl_xor_sync(0xffffffffu, w[k], static_cast<int>(d), static_cast<int>(width));
    E out;
    std::memcpy(&out, w, sizeof(E));
    return out;
}

// At most 256 threads and at least 4 blocks per multiprocessor: a budget of 64 registers.
// With __launch_bounds__(256) alone, ptxas kept sum_slots_lanes<int8_block> at 40 registers
// on sm_80 and spilled 8 bytes (the thread index) to local memory; it needs 55
// (scripts/check_sass.py prints the counts).
template <class Body>
__global__ void __launch_bounds__(256, 4) lane_group_kernel(std::size_t units, unsigned shift, Body body) {
    using E = typename Body::extent_type;
    const unsigned G = 1u << shift;
    const unsigned lane = threadIdx.x & (G - 1);
    const std::size_t groups = (static_cast<std::size_t>(gridDim.x) * blockDim.x) >> shift;
    const std::size_t first = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> shift;
    // Rounds are counted per warp: units rounded up to whole warps of groups, so that every
    // lane of a warp takes part in every shuffle.
    const std::size_t per_warp = std::size_t{32} >> shift;
    const std::size_t rounded = (units + per_warp - 1) / per_warp * per_warp;
    for (std::size_t u = first; u < rounded; u += groups) {
        const bool live = u < units;
        E e{};
        if (live) e = body.first(u, lane, G);
        if constexpr (!std::is_empty_v<E>)
            for (unsigned d = G / 2; d >= 1; d /= 2) e = Body::combine(e, shuffle_xor(e, d, G));
        if (live) body.second(u, lane, G, e);
    }
}

} // namespace device

#endif // TRICKLE_CUDA_COMPILER

} // namespace detail

// Runs body over units [0, units), 2^shift lanes a unit (shift <= 5), on ex: a kernel on
// ex.stream for exec::cuda, the lane emulation for a host execution space.
template <class Exec, class Body>
void for_each_lane_group(const Exec& ex, std::size_t units, unsigned shift, const Body& body) {
    static_assert(std::is_trivially_copyable_v<Body>, "a lane-group body must be trivially copyable");
    require(shift <= detail::max_lane_shift, "for_each_lane_group: at most 2^", detail::max_lane_shift,
            " lanes a unit, asked for 2^", shift);
    if (units == 0) return;
    if constexpr (std::is_same_v<Exec, exec::cuda>) {
#if TRICKLE_CUDA_COMPILER
        detail::device_scope on(ex.device);
        const auto kernel = detail::device::lane_group_kernel<Body>;
        const std::size_t per_block = static_cast<std::size_t>(detail::lane_group_tuning.threads) >> shift;
        const exec::grid_shape g = detail::plan_grid(kernel, detail::lane_group_tuning, (units + per_block - 1) / per_block);
        kernel<<<g.blocks, g.threads, 0, ex.stream>>>(units, shift, body);
        TRICKLE_CUDA_CHECK(cudaGetLastError());
#else
        static_assert(detail::dependent_false<Body>,
                      "for_each_lane_group(exec::cuda, ...) launches a kernel: compile this translation unit with nvcc");
#endif
    } else {
        (void)ex;
        for (std::size_t u = 0; u < units; ++u) detail::emulate_lane_group(body, u, shift);
    }
}

TRICKLE_NAMESPACE_END
