// trickle/kernels/exchange/dispatch.hpp: the launches of one sparse exchange on the device: the
// gather (which plans as it goes) and the scatter, with the memory they work in and their
// tunings.
//
// One SPARTA step on the device is two launches around its communication:
//   device_move<true>    the gather: the tile agent for run selections, the random agent
//                        otherwise (kernels/exchange/agent.hpp), the grid sized from each
//                        agent's tuning, an occupancy query and a bytes-in-flight target
//                        (exec/dispatch.hpp). It re-keys the selection from *st.step when
//                        given a rekey_selection, and stores the selection and tile plans;
//   (the communication call)
//   device_move<false>   the scatter, the same shapes the other way, reading what the
//                        gather stored and advancing the device step counter;
// and device_increment advances the device step counter of a step that skips its exchange.
// The host runs the range bodies of kernels/exchange/body.hpp instead (make_gather,
// make_scatter); the engine (algorithm/sparta.hpp) picks one or the other by execution space.
//
// Launches need nvcc; the memory they work in (device_exchange_state), the tunings and the
// lane arithmetic exist in every build so the algorithms can name them (see
// algorithm/instantiate.hpp for g++ translation units).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/dispatch.hpp>
#include <trickle/kernels/exchange/agent.hpp>
#include <trickle/kernels/exchange/body.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/plan.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Device memory one exchange works in, sized at construction for the largest selection.
template <class Sel>
struct device_exchange_state {
    Sel* selection = nullptr;           // the step's selection
    tile_plan* plans = nullptr;         // run selections: one per tile
    std::uint64_t* step = nullptr;      // the device step counter (re-keyed samplers), else nullptr
};

// Tunings of the agents (exec/dispatch.hpp): threads per block, values per thread, vector bytes.
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

namespace detail {

inline void device_increment(const exec::cuda& ex, std::uint64_t* counter) {
    device::increment_kernel<<<1, 1, 0, ex.stream>>>(counter);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
}

// The run-selection form of device_move: a group of lanes per tile.
template <bool Gather, class T, class Sel, class Rekey>
void device_move_tiles(const exec::cuda& ex, const flat_view<T>& params, const Sel& sel, const Rekey& rekey,
                       const std::uint64_t* step, const device_exchange_state<Sel>& st, float* buf, float scale,
                       std::uint64_t* advance) {
    const std::size_t count = sel.count();
    const std::size_t L = tile_length(sel);
    const std::size_t tiles = tile_count(count, L);
    const unsigned shift = tile_lane_shift(L, sizeof(T));
    auto kernel = device::tile_kernel<Gather, T, Sel, Rekey>;
    const std::size_t per_block = static_cast<std::size_t>(tile_tuning.threads) >> shift;
    const exec::grid_shape g = plan_grid(kernel, tile_tuning, (tiles + per_block - 1) / per_block);
    kernel<<<g.blocks, g.threads, 0, ex.stream>>>(params, sel, rekey, step, st.selection, st.plans, buf, scale, count,
                                                  L, tiles, shift, advance);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
}

// Gather (Gather) or scatter of one exchange. sel is the host's selection: the gather
// starts from it (re-keyed on the device from *st.step when rekey is a rekey_selection and
// st.step is set) and stores what it moved, with the tile plans, in st; the scatter moves
// what the gather stored and uses sel only for its count and shape, so it must follow a
// gather of the same selection on the same stream.
template <bool Gather, class T, class Sel, class Rekey = keep_selection>
void device_move(const exec::cuda& ex, const flat_view<T>& params, const Sel& sel,
                 const device_exchange_state<Sel>& st, float* buf, float scale, const Rekey& rekey = {}) {
    const std::size_t count = sel.count();
    if (count == 0) return;
    // The gather reads the step counter, the scatter advances it; neither does both.
    const std::uint64_t* step = Gather ? st.step : nullptr;
    std::uint64_t* advance = Gather ? nullptr : st.step;
    if constexpr (run_selection<Sel>) {
        if (uses_runs(sel)) {
            device_move_tiles<Gather>(ex, params, sel, rekey, step, st, buf, scale, advance);
            return;
        }
    }
    {
        constexpr int items = random_tuning.items_per_thread;
        const std::size_t per_block = static_cast<std::size_t>(random_tuning.threads) * items;
        const std::size_t blocks = (count + per_block - 1) / per_block;
        if (exec::fits_32bit(count) && count < (std::size_t{1} << 30)) {
            auto kernel = device::random_kernel<Gather, T, Sel, Rekey, std::uint32_t, items>;
            const exec::grid_shape g = plan_grid(kernel, random_tuning, blocks);
            kernel<<<g.blocks, g.threads, 0, ex.stream>>>(params, sel, rekey, step, st.selection, buf, scale,
                                                          static_cast<std::uint32_t>(count), advance);
        } else {
            auto kernel = device::random_kernel<Gather, T, Sel, Rekey, std::size_t, items>;
            const exec::grid_shape g = plan_grid(kernel, random_tuning, blocks);
            kernel<<<g.blocks, g.threads, 0, ex.stream>>>(params, sel, rekey, step, st.selection, buf, scale, count,
                                                          advance);
        }
    }
    TRICKLE_CUDA_CHECK(cudaGetLastError());
}

} // namespace detail

#endif // TRICKLE_CUDA_COMPILER

TRICKLE_NAMESPACE_END
