// trickle/kernels/stream/dispatch.hpp: one pass of a body over a flat parameter group, run the way
// the execution space moves bytes best.
//
// The engines write each pass once, as a body of kernels/stream/body.hpp (what each element
// computes), and call stream_pass with the step's execution space: a host space runs the
// body's range form in chunks (kernels/chunking.hpp), exec::cuda runs its vector agent
// (kernels/stream/agent.hpp) through device_stream, the tiled launch below (defined for
// nvcc), with the grid sized from stream_tuning (exec/dispatch.hpp). `first` is where the
// pass starts in the group; the body carries the same offset.
#pragma once

#include <trickle/config.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/dispatch.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/chunking.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/kernels/stream/agent.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The stream agent's tuning (exec/dispatch.hpp): threads per block, values per thread, vector bytes.
inline constexpr exec::tuning stream_tuning{256, 4, 16};

// A pass of a kernels/stream/body.hpp body over elements [first, first + count) of the group, on
// a host space: its range form in chunks.
template <class Exec, class T, class Body>
void stream_pass(const Exec& ex, const flat_view<T>&, const std::uint32_t*, std::size_t, std::size_t count,
                 const Body& body) {
    const auto r = ranges<typename Exec::memory_space>(body, count);
    for_each_index(ex, r.calls(), r);
}

// Whether stream_pass runs Body on Exec: any body on a host space; on the device, a body
// with a vector agent (agent.hpp's device_piece). A caller that may hold another body runs
// it as ranges instead.
template <class Exec, class Body>
inline constexpr bool streams_on = !std::is_same_v<Exec, exec::cuda> || requires(const Body& b) { device_piece(b); };

#if TRICKLE_CUDA_COMPILER

// Launches Piece over elements [first, first + count) of the group on ex's stream.
template <class T, class Piece>
void device_stream(const exec::cuda& ex, const flat_view<T>& params, const std::uint32_t* tile_seg, std::size_t first,
                   std::size_t count, const Piece& op) {
    if (count == 0) return;
    auto kernel = device::stream_kernel<T, Piece>;
    const std::size_t tiles = (count + stream_tile - 1) / stream_tile;
    const exec::grid_shape g = plan_grid(kernel, stream_tuning, tiles);
    kernel<<<g.blocks, g.threads, 0, ex.stream>>>(params, tile_seg, first, count, stream_tile, op);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
}

// A pass of a kernels/stream/body.hpp body over elements [first, first + count) of the group, on
// the device: its vector agent (device_piece). The host's overload is above.
template <class T, class Body>
void stream_pass(const exec::cuda& ex, const flat_view<T>& params, const std::uint32_t* tile_seg, std::size_t first,
                 std::size_t count, const Body& body) {
    device_stream(ex, params, tile_seg, first, count, device_piece(body));
}

#endif // TRICKLE_CUDA_COMPILER

} // namespace detail

TRICKLE_NAMESPACE_END
