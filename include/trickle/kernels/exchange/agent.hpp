// trickle/kernels/exchange/agent.hpp: the CUDA agents of one sparse exchange: the tile
// movers of run selections, the thread-per-value movers of random ones.
//
//   tile_kernel    run selections (block, rotating window): a group of lanes (a warp, or
//                  fewer lanes for small blocks) per tile, 16-byte vector loads and stores
//                  with an alignment peel (kernels/device_access.hpp);
//   random_kernel  random selections (uniform, permutation, per-tensor layerwise): a thread
//                  per value, several values in flight per thread.
//
// The gather plans as it goes, so a step moves its data in two launches and plans in
// none of its own: every thread re-keys the host's selection from the device step counter
// when the sampler allows (rekey_selection: what lets a captured CUDA graph advance by
// itself), the first thread stores that selection, and each tile's group of lanes computes
// the tile's plan (plan_tile, kernels/plan.hpp: where its first run starts and in which
// tensor), moves the tile with it, and its first lane stores it. The scatter reads back the stored
// selection and plans, rounds to the parameters' type, and its first thread advances the
// device step counter when there is one. Neither searches or permutes per element. What a
// value is and where it goes are the selections and bodies of kernels/exchange/body.hpp,
// the host's reference; the launches (tunings, grids, device_move) are
// kernels/exchange/dispatch.hpp.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/kernels/device_access.hpp>
#include <trickle/kernels/exchange/body.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/plan.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Re-keys a selection for another step on the device (a sampler's static rekey(sel, seed,
// step)), or leaves it as the host computed it.
struct keep_selection {
    template <class Sel>
    TRICKLE_HOST_DEVICE void operator()(Sel&, std::uint64_t) const {}
};

template <class Sampler>
struct rekey_selection {
    std::uint64_t seed = 0;
    template <class Sel>
    TRICKLE_HOST_DEVICE void operator()(Sel& sel, std::uint64_t step) const {
        Sampler::rekey(sel, seed, step);
    }
};

} // namespace detail

#if TRICKLE_CUDA_COMPILER

namespace detail::device {

// Moves values [k, k + len) of a run starting at flat position pos in segment seg.
template <bool Gather, class T>
__device__ __forceinline__ void move_run(const flat_view<T>& params, std::uint32_t seg, std::size_t pos, std::size_t k,
                                         std::size_t len, float* buf, float scale, unsigned lane, unsigned lanes) {
    if (seg == no_segment) { // padding: travels as zeros, never written back
        if constexpr (Gather)
            for (std::size_t j = lane; j < len; j += lanes) buf[k + j] = 0.0f;
        return;
    }
    for_each_piece_from(params.segments + seg, pos, pos + len, [&](T* p, std::size_t i, std::size_t m) {
        float* w = buf + k + (i - pos);
        if constexpr (Gather)
            gather_piece(p, w, m, lane, lanes);
        else
            scatter_piece<T, true>(p, w, scale, m, lane, lanes);
    });
}

// At most 256 threads and at least 4 blocks per multiprocessor: a budget of 64 registers.
// With __launch_bounds__(256) alone, ptxas kept the bf16 agents at 48 registers and spilled
// 8-16 bytes to local memory; they need 50-56 (scripts/check_sass.py prints the counts).
template <bool Gather, class T, class Sel, class Rekey>
__global__ void __launch_bounds__(256, 4) tile_kernel(flat_view<T> params, Sel base, Rekey rekey, const std::uint64_t* step,
                                                    Sel* planned, tile_plan* plans, float* buf, float scale,
                                                    std::size_t count, std::size_t L, std::size_t tiles,
                                                    unsigned lane_shift, std::uint64_t* advance) {
    const unsigned lanes = 1u << lane_shift;
    const unsigned lane = threadIdx.x & (lanes - 1);
    const std::size_t groups = (static_cast<std::size_t>(gridDim.x) * blockDim.x) >> lane_shift;
    const std::size_t first = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> lane_shift;
    // The gather holds the selection in registers; the scatter reads the stored one only
    // for the rare rest of a tile, which keeps it within its register budget.
    [[maybe_unused]] Sel sel = base;
    if constexpr (Gather) {
        if (step != nullptr) rekey(sel, *step);
        if (blockIdx.x == 0 && threadIdx.x == 0) *planned = sel;
    } else {
        (void)rekey, (void)step;
    }
    for (std::size_t t = first; t < tiles; t += groups) {
        tile_plan pl;
        if constexpr (Gather) {
            pl = plan_tile(params, sel, count, L, t);
            if (lane == 0) plans[t] = pl;
        } else {
            pl = plans[t];
        }
        const std::size_t k0 = t * L;
        const std::size_t k1 = count - k0 < L ? count : k0 + L;
        move_run<Gather>(params, pl.seg, pl.pos, k0, pl.len, buf, scale, lane, lanes);
        // The rest of a tile that outlives its first run (rare: a wrapping window, a long block).
        for (std::size_t k = k0 + pl.len; k < k1;) {
            const auto r = [&] {
                if constexpr (Gather) return sel.run_at(k);
                else return planned->run_at(k);
            }();
            const std::size_t len = r.len < k1 - k ? r.len : k1 - k;
            const std::size_t pos = r.pos;
            const std::uint32_t seg = pos < params.total ? params.segment_of(pos) : no_segment;
            move_run<Gather>(params, seg, pos, k, len, buf, scale, lane, lanes);
            k += len;
        }
    }
    if (advance != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *advance += 1;
}

// Random positions: a thread per value, Items values in flight per thread.
template <bool Gather, class T, class Sel, class Rekey, class Index, int Items>
__global__ void __launch_bounds__(256) random_kernel(flat_view<T> params, Sel given, Rekey rekey, const std::uint64_t* step,
                                                      Sel* planned, float* buf, float scale, Index count,
                                                      std::uint64_t* advance) {
    Sel sel = given;
    if constexpr (Gather) {
        if (step != nullptr) rekey(sel, *step);
        if (blockIdx.x == 0 && threadIdx.x == 0) *planned = sel;
    } else {
        (void)rekey, (void)step;
        sel = *planned;
    }
    const Index stride = static_cast<Index>(gridDim.x) * blockDim.x * Items;
    for (Index base = static_cast<Index>(blockIdx.x) * blockDim.x * Items + threadIdx.x; base < count; base += stride) {
        T* at[Items];
#pragma unroll
        for (int q = 0; q < Items; ++q) {
            const Index k = base + static_cast<Index>(q) * blockDim.x;
            at[q] = nullptr;
            if (k < count) {
                const std::size_t pos = sel(k);
                if (pos < params.total) {
                    const segment<T>* s = params.segment_holding(pos);
                    at[q] = s->data + (pos - s->offset);
                }
            }
        }
        if constexpr (Gather) {
            float v[Items];
#pragma unroll
            for (int q = 0; q < Items; ++q) v[q] = at[q] != nullptr ? load_nc(at[q]) : 0.0f;
#pragma unroll
            for (int q = 0; q < Items; ++q) {
                const Index k = base + static_cast<Index>(q) * blockDim.x;
                if (k < count) buf[k] = v[q];
            }
        } else {
#pragma unroll
            for (int q = 0; q < Items; ++q) {
                const Index k = base + static_cast<Index>(q) * blockDim.x;
                if (at[q] != nullptr) *at[q] = from_float<T>(__ldg(buf + k) * scale);
            }
        }
    }
    if (advance != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *advance += 1;
}

// Advances a device step counter by one (a step that skips its exchange).
template <int = 0>
__global__ void increment_kernel(std::uint64_t* counter) {
    *counter += 1;
}

} // namespace detail::device

#endif // TRICKLE_CUDA_COMPILER

TRICKLE_NAMESPACE_END
