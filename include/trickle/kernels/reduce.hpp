// trickle/kernels/reduce.hpp: rank_sum_body, the rank-ordered sum of N ranks' buffers (comm::local_cuda's all-reduce).
#pragma once

#include <trickle/config.hpp>

#include <cstddef>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

// For index i of a launch over [0, count), the element k = begin + i of every rank's
// buffer becomes the sum over ranks, added in rank order in fp32:
//
//   s = src[0][k];  s += src[1][k];  ...  s += src[ranks - 1][k];
//   dst[0][k] = dst[1][k] = ... = dst[ranks - 1][k] = s;
//
// which is exactly what comm::local's all_reduce_sum computes for one element, so the
// bits are the same on every backend that rounds fp32 additions to nearest and keeps
// subnormals (the host, and nvcc without -ftz=true / --use_fast_math; there is no
// multiplication for a compiler to fuse).
//
// src[r] may equal dst[r] (in place): one index reads all its sources before it writes
// any destination, and distinct indices touch distinct elements. comm::local_cuda runs
// one launch per rank, over that rank's chunk (detail::chunk_begin / chunk_size), on
// that rank's stream; the chunks are disjoint, so the launches never race.
//
// The pointers are held by value (a kernel parameter of about 1 KiB), so a launch needs
// no device-side table that would have to be rewritten, and ordered, at every call.
struct rank_sum_body {
    static constexpr int max_ranks = 64;

    const float* src[max_ranks];
    float* dst[max_ranks];
    int ranks;          // 1 <= ranks <= max_ranks
    std::size_t begin;  // first element of this launch in every buffer

    TRICKLE_HOST_DEVICE void operator()(std::size_t i) const {
        const std::size_t k = begin + i;
        float s = src[0][k];
        for (int r = 1; r < ranks; ++r) s += src[r][k];
        for (int r = 0; r < ranks; ++r) dst[r][k] = s;
    }
};

static_assert(std::is_trivially_copyable_v<rank_sum_body>);

TRICKLE_NAMESPACE_END
