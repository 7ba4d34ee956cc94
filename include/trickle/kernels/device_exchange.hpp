// trickle/kernels/device_exchange.hpp: the CUDA agents of one sparse exchange (plan, gather, scatter) and their dispatch.
//
// One SPARTA step on the device is
//   plan     a small pre-pass: the step's selection is written to device memory (re-keyed
//            there from a device-resident step counter when the sampler allows, so that a
//            captured CUDA graph advances by itself), and for run selections (block,
//            rotating window) each tile's first run start and segment (kernels/plan.hpp);
//   gather   run selections: a group of lanes (a warp, or fewer lanes for small blocks) per
//            tile, 16-byte vector loads and stores with an alignment peel; random
//            selections (uniform, permutation, per-tensor layerwise): a thread per value,
//            several values in flight per thread;
//   (the communication call)
//   scatter  the same shapes the other way, rounding to the parameters' type; the first
//            thread advances the device step counter when there is one.
// The agents read the selection from device memory and never search or permute per
// element. Positions within one exchange are distinct (every sampler samples without
// replacement), so no two threads ever write one position.
//
// Launches need nvcc; the declarations of the dispatch functions exist in every build so
// the algorithms can name them (see algorithm/instantiate.hpp for g++ translation units).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/dispatch.hpp>
#include <trickle/kernels/device_access.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/kernels/sparse_exchange.hpp>

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

// Device memory one exchange works in, sized at construction for the largest selection.
template <class Sel>
struct device_exchange_state {
    Sel* selection = nullptr;           // the step's selection
    tile_plan* plans = nullptr;         // run selections: one per tile
    std::uint64_t* step = nullptr;      // the device step counter (re-keyed samplers), else nullptr
};

// Tunings of the agents (exec/dispatch.hpp): threads per block, values per thread, vector bytes.
inline constexpr exec::tuning plan_tuning{128, 1, 16};
inline constexpr exec::tuning tile_tuning{256, 1, 16};
inline constexpr exec::tuning random_tuning{256, 4, 4};

// Lanes that move one tile: enough for one 16-byte vector each (at least 4, at most a warp).
TRICKLE_HOST_DEVICE unsigned tile_lane_shift(std::size_t tile_values, std::size_t value_bytes) {
    const std::size_t vectors = (tile_values * value_bytes + 15) / 16;
    unsigned shift = 2;
    while (shift < 5 && (std::size_t{1} << shift) < vectors) ++shift;
    return shift;
}

} // namespace detail

#if TRICKLE_CUDA_COMPILER

namespace detail::device {

template <class T, class Sel, class Rekey>
__global__ void __launch_bounds__(128) plan_kernel(flat_view<T> params, Sel base, Rekey rekey, const std::uint64_t* step,
                                                    Sel* out, tile_plan* plans, std::size_t count, std::size_t L,
                                                    std::size_t tiles) {
    Sel sel = base;
    if (step != nullptr) rekey(sel, *step);
    if (blockIdx.x == 0 && threadIdx.x == 0) *out = sel;
    if constexpr (run_selection<Sel>) {
        const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
        for (std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tiles; t += stride)
            plans[t] = plan_tile(params, sel, count, L, t);
    }
}

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
template <bool Gather, class T, class Sel>
__global__ void __launch_bounds__(256, 4) tile_kernel(flat_view<T> params, const Sel* sel, const tile_plan* plans, float* buf,
                                                    float scale, std::size_t count, std::size_t L, std::size_t tiles,
                                                    unsigned lane_shift, std::uint64_t* advance) {
    const unsigned lanes = 1u << lane_shift;
    const unsigned lane = threadIdx.x & (lanes - 1);
    const std::size_t groups = (static_cast<std::size_t>(gridDim.x) * blockDim.x) >> lane_shift;
    const std::size_t first = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> lane_shift;
    for (std::size_t t = first; t < tiles; t += groups) {
        const tile_plan pl = plans[t];
        const std::size_t k0 = t * L;
        const std::size_t k1 = count - k0 < L ? count : k0 + L;
        move_run<Gather>(params, pl.seg, pl.pos, k0, pl.len, buf, scale, lane, lanes);
        // The rest of a tile that outlives its first run (rare: a wrapping window, a long block).
        for (std::size_t k = k0 + pl.len; k < k1;) {
            const auto r = sel->run_at(k);
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
template <bool Gather, class T, class Sel, class Index, int Items>
__global__ void __launch_bounds__(256) random_kernel(flat_view<T> params, const Sel* selp, float* buf, float scale,
                                                      Index count, std::uint64_t* advance) {
    const Sel sel = *selp;
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

namespace detail {

inline void device_increment(const exec::cuda& ex, std::uint64_t* counter) {
    device::increment_kernel<<<1, 1, 0, ex.stream>>>(counter);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
}

// The plan pre-pass of one exchange: writes the selection (re-keyed from *st.step when
// st.step is set) and, for run selections, the tile plans.
template <class T, class Sel, class Rekey>
void device_plan(const exec::cuda& ex, const flat_view<T>& params, const Sel& sel, const Rekey& rekey,
                 const device_exchange_state<Sel>& st) {
    const std::size_t count = sel.count();
    const bool runs = uses_runs(sel);
    const std::size_t L = runs ? tile_length(sel) : 1;
    const std::size_t tiles = runs ? tile_count(count, L) : 0;
    auto kernel = device::plan_kernel<T, Sel, Rekey>;
    const exec::grid_shape g =
        runs ? plan_grid(kernel, plan_tuning, (tiles + plan_tuning.threads - 1) / plan_tuning.threads,
                         static_cast<std::size_t>(plan_tuning.threads) * sizeof(tile_plan))
             : exec::grid_shape{1, 32};
    kernel<<<g.blocks < 1 ? 1 : g.blocks, g.threads, 0, ex.stream>>>(params, sel, rekey, st.step, st.selection,
                                                                     st.plans, count, L, tiles);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
}

// The run-selection form of device_move: a group of lanes per tile.
template <bool Gather, class T, class Sel>
void device_move_tiles(const exec::cuda& ex, const flat_view<T>& params, const Sel& sel,
                       const device_exchange_state<Sel>& st, float* buf, float scale, std::uint64_t* advance) {
    const std::size_t count = sel.count();
    const std::size_t L = tile_length(sel);
    const std::size_t tiles = tile_count(count, L);
    const unsigned shift = tile_lane_shift(L, sizeof(T));
    auto kernel = device::tile_kernel<Gather, T, Sel>;
    const std::size_t per_block = static_cast<std::size_t>(tile_tuning.threads) >> shift;
    const exec::grid_shape g = plan_grid(kernel, tile_tuning, (tiles + per_block - 1) / per_block,
                                         per_block * L * (sizeof(T) + sizeof(float)));
    kernel<<<g.blocks, g.threads, 0, ex.stream>>>(params, st.selection, st.plans, buf, scale, count, L, tiles, shift,
                                                  advance);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
}

// Gather (Gather) or scatter of one exchange; sel is the host's copy (for its count and
// shape), the agents read the planned one in st.
template <bool Gather, class T, class Sel>
void device_move(const exec::cuda& ex, const flat_view<T>& params, const Sel& sel,
                 const device_exchange_state<Sel>& st, float* buf, float scale) {
    const std::size_t count = sel.count();
    if (count == 0) return;
    std::uint64_t* advance = Gather ? nullptr : st.step;
    if constexpr (run_selection<Sel>) {
        if (uses_runs(sel)) {
            device_move_tiles<Gather>(ex, params, sel, st, buf, scale, advance);
            return;
        }
    }
    {
        constexpr int items = random_tuning.items_per_thread;
        const std::size_t per_block = static_cast<std::size_t>(random_tuning.threads) * items;
        const std::size_t blocks = (count + per_block - 1) / per_block;
        // A random value moves a 32-byte sector on each side, whatever its width.
        const std::size_t bytes = per_block * 64;
        if (exec::fits_32bit(count) && count < (std::size_t{1} << 30)) {
            auto kernel = device::random_kernel<Gather, T, Sel, std::uint32_t, items>;
            const exec::grid_shape g = plan_grid(kernel, random_tuning, blocks, bytes);
            kernel<<<g.blocks, g.threads, 0, ex.stream>>>(params, st.selection, buf, scale,
                                                          static_cast<std::uint32_t>(count), advance);
        } else {
            auto kernel = device::random_kernel<Gather, T, Sel, std::size_t, items>;
            const exec::grid_shape g = plan_grid(kernel, random_tuning, blocks, bytes);
            kernel<<<g.blocks, g.threads, 0, ex.stream>>>(params, st.selection, buf, scale, count, advance);
        }
    }
    TRICKLE_CUDA_CHECK(cudaGetLastError());
}

} // namespace detail

#endif // TRICKLE_CUDA_COMPILER

TRICKLE_NAMESPACE_END
