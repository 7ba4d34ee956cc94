// trickle/kernels/stream/agent.hpp: the CUDA agents of the passes over the whole group (DiLoCo's delta,
// outer update, snapshot copy and restore): one piece per body, and the kernel that walks tiles.
//
// A pass walks the group in tiles of stream_tile elements (kernels/plan.hpp); each tile's
// first segment comes from a table built once per group, so no element searches the
// segment table. A block moves a tile; each contiguous piece of it goes as a scalar head,
// 16-byte vectors (parameters, snapshot, optimizer state and wire alike) and a scalar
// tail. A piece whose paired arrays are not 16-byte aligned where the parameters' vectors
// start (a tensor whose start is not a multiple of 4 elements from the snapshot's, or a
// state slot stride that is not) moves element by element. What each element computes
// comes from the bodies of kernels/stream/body.hpp, the same functions the host runs; the
// launch (grid, tuning, the pass of a body) is kernels/stream/dispatch.hpp.
//
// Only the fp32 wire (dense_wire<float>) has vector agents; other wires run the bodies'
// run() through the generic launch.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/kernels/device_access.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/outer_rule.hpp>
#include <trickle/kernels/plan.hpp>
#include <trickle/kernels/stream/body.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The pieces of a pass, one struct each: piece(p, i, m, lane, lanes) moves elements
// [i, i + m) whose parameters start at p.
template <class T>
struct snapshot_piece {
    float* snapshot;
#if TRICKLE_CUDA_COMPILER
    __device__ void piece(T* p, std::size_t i, std::size_t m, unsigned lane, unsigned lanes) const {
        device::gather_piece(p, snapshot + i, m, lane, lanes);
    }
#endif
};

template <class T>
struct restore_piece {
    const float* snapshot;
#if TRICKLE_CUDA_COMPILER
    __device__ void piece(T* p, std::size_t i, std::size_t m, unsigned lane, unsigned lanes) const {
        device::scatter_piece<T, false>(p, snapshot + i, 1.0f, m, lane, lanes);
    }
#endif
};

template <class T>
struct delta_piece {
    outer_delta_body<T, dense_wire<float>> body;
#if TRICKLE_CUDA_COMPILER
    __device__ void piece(T* p, std::size_t i, std::size_t m, unsigned lane, unsigned lanes) const {
        const float* snap = body.snapshot + i;
        float* send = body.send.data + (i - body.first);
        if (i == body.first && lane == 0 && body.weight_out != nullptr) *body.weight_out = body.weight;
        constexpr int V = device::per_vector<T>;
        device::walk_piece(
            p, m, lane, lanes, [&](std::size_t h) { return aligned16(snap + h) && aligned16(send + h); },
            [&](std::size_t j) { send[j] = body.value(snap[j], p[j]); },
            [&](std::size_t j) {
                float x[V], s[V];
                device::load_params_nc(p + j, x);
                device::load_floats_nc<V>(snap + j, s);
                for (int q = 0; q < V; ++q) x[q] = body.value_f(s[q], x[q]);
                device::store_floats<V>(send + j, x);
            });
    }
#endif
};

template <class T, class Rule>
struct update_piece {
    outer_update_body<T, Rule, dense_wire<float>> body;
#if TRICKLE_CUDA_COMPILER
    __device__ void piece(T* p, std::size_t i, std::size_t m, unsigned lane, unsigned lanes) const {
        const float factor = body.factor(); // reads the reduced weight sum, after the communication
        constexpr int slots = Rule::state_slots;
        constexpr int V = device::per_vector<T>;
        const std::size_t n = body.params.total;
        float* snap = body.snapshot + i;
        const float* recv = body.recv.data + (i - body.first);
        float* state = body.state;
        auto slot = [&](int q) { return state + outer_state_index(q, i, n); };
        device::walk_piece(
            p, m, lane, lanes,
            [&](std::size_t h) {
                bool ok = aligned16(snap + h) && aligned16(recv + h);
                for (int q = 0; q < slots; ++q) ok = ok && aligned16(slot(q) + h);
                return ok;
            },
            [&](std::size_t j) {
                float st[slots > 0 ? slots : 1];
                for (int q = 0; q < slots; ++q) st[q] = slot(q)[j];
                float s = snap[j];
                body.update(recv[j], factor, s, st);
                for (int q = 0; q < slots; ++q) slot(q)[j] = st[q];
                snap[j] = s;
                p[j] = from_float<T>(s);
            },
            [&](std::size_t j) {
                float r[V], s[V], st[slots > 0 ? slots : 1][V];
                device::load_floats_nc<V>(recv + j, r);
                device::load_floats<V>(snap + j, s);
                for (int q = 0; q < slots; ++q) device::load_floats<V>(slot(q) + j, st[q]);
                for (int e = 0; e < V; ++e) {
                    float one[slots > 0 ? slots : 1];
                    for (int q = 0; q < slots; ++q) one[q] = st[q][e];
                    body.update(r[e], factor, s[e], one);
                    for (int q = 0; q < slots; ++q) st[q][e] = one[q];
                }
                for (int q = 0; q < slots; ++q) device::store_floats<V>(slot(q) + j, st[q]);
                device::store_floats<V>(snap + j, s);
                device::store_params(p + j, s);
            });
    }
#endif
};

// The device piece of each host body of kernels/stream/body.hpp (the same element arithmetic).
template <class T>
delta_piece<T> device_piece(const outer_delta_body<T, dense_wire<float>>& b) {
    return {b};
}
template <class T, class Rule>
update_piece<T, Rule> device_piece(const outer_update_body<T, Rule, dense_wire<float>>& b) {
    return {b};
}
template <class T>
snapshot_piece<T> device_piece(const snapshot_copy_body<T>& b) {
    return {b.snapshot};
}
template <class T>
restore_piece<T> device_piece(const params_from_snapshot_body<T>& b) {
    return {b.snapshot};
}

#if TRICKLE_CUDA_COMPILER

namespace device {

// A block per tile of `tile` elements of [first, first + count): its pieces, in order.
template <class T, class Piece>
__global__ void __launch_bounds__(256) stream_kernel(flat_view<T> params, const std::uint32_t* tile_seg, std::size_t first,
                                                     std::size_t count, std::size_t tile, Piece op) {
    const std::size_t tiles = (count + tile - 1) / tile;
    for (std::size_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const std::size_t i0 = first + t * tile;
        const std::size_t i1 = first + (count - t * tile < tile ? count : (t + 1) * tile);
        // The table holds the segment of each whole-group tile's first element; a tile of a
        // pass that starts at `first` (a chunk) begins at the table entry of its own start.
        const std::uint32_t seg = first == 0 ? tile_seg[t] : params.segment_of(i0);
        for_each_piece_from(params.segments + seg, i0, i1, [&](T* p, std::size_t i, std::size_t m) {
            op.piece(p, i, m, threadIdx.x, blockDim.x);
        });
    }
}

} // namespace device

#endif // TRICKLE_CUDA_COMPILER

} // namespace detail

TRICKLE_NAMESPACE_END
