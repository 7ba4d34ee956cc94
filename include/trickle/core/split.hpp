// trickle/core/split.hpp: the one even split of n items over `parts` chunks, and its inverse.
//
// Chunk r of n items split over `parts` holds n / parts items, and the first n % parts
// chunks one more; the chunks are contiguous and in order. Every all-reduce (comm::local,
// comm::mpi, comm::local_cuda, comm::process_group) hands rank r chunk r of the elements,
// and the encoded all-reduce (codec/reduce.hpp) chunk r of the codec blocks; the device
// kernels that need "which chunk holds item i" use chunk_owner, so host and device agree.
#pragma once

#include <trickle/config.hpp>

#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Items in chunk r.
TRICKLE_HOST_DEVICE constexpr std::size_t chunk_size(std::size_t n, int parts, int r) {
    const auto N = static_cast<std::size_t>(parts);
    return n / N + (static_cast<std::size_t>(r) < n % N ? 1 : 0);
}

// The first item of chunk r.
TRICKLE_HOST_DEVICE constexpr std::size_t chunk_begin(std::size_t n, int parts, int r) {
    const auto N = static_cast<std::size_t>(parts);
    const auto R = static_cast<std::size_t>(r);
    return R * (n / N) + (R < n % N ? R : n % N);
}

// The chunk that holds item i < n: the r with chunk_begin(r) <= i < chunk_begin(r + 1)
// (the first chunk that holds it when some chunks are empty, which only happens when
// n < parts, and then item i is chunk i's only item).
TRICKLE_HOST_DEVICE constexpr int chunk_owner(std::size_t n, int parts, std::size_t i) {
    const auto N = static_cast<std::size_t>(parts);
    const std::size_t q = n / N, extra = n % N;
    const std::size_t big = extra * (q + 1); // items in the chunks that hold one more
    if (i < big) return static_cast<int>(i / (q + 1));
    return static_cast<int>(extra + (i - big) / q);
}

} // namespace detail

TRICKLE_NAMESPACE_END
