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
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The arithmetic of the split in an unsigned type U wide enough for n. The functions below
// use 32-bit arithmetic whenever n < 2^32: the same results, and on a GPU a 32-bit division
// is a few instructions where a 64-bit one is a long subroutine. The codec passes ask for
// a block's chunk for every block (kernels/codec_pass.hpp), and on the first profile on a
// GPU (one H200) those 64-bit divisions made the element codecs' passes instruction-bound
// (63% of issue slots busy, 19% of DRAM bandwidth).
template <class U>
TRICKLE_HOST_DEVICE constexpr U split_size(U n, U N, U r) {
    return n / N + (r < n % N ? 1 : 0);
}
template <class U>
TRICKLE_HOST_DEVICE constexpr U split_begin(U n, U N, U r) {
    return r * (n / N) + (r < n % N ? r : n % N);
}
template <class U>
TRICKLE_HOST_DEVICE constexpr U split_owner(U n, U N, U i) {
    const U q = n / N, extra = n % N;
    const U big = extra * (q + 1); // items in the chunks that hold one more (at most n)
    if (i < big) return i / (q + 1);
    return extra + (i - big) / q;
}
constexpr bool split_fits_32bit(std::size_t n) { return n <= std::size_t{0xffffffffu}; }

// Items in chunk r.
TRICKLE_HOST_DEVICE constexpr std::size_t chunk_size(std::size_t n, int parts, int r) {
    if (split_fits_32bit(n))
        return split_size<std::uint32_t>(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(parts),
                                         static_cast<std::uint32_t>(r));
    return split_size<std::size_t>(n, static_cast<std::size_t>(parts), static_cast<std::size_t>(r));
}

// The first item of chunk r.
TRICKLE_HOST_DEVICE constexpr std::size_t chunk_begin(std::size_t n, int parts, int r) {
    if (split_fits_32bit(n))
        return split_begin<std::uint32_t>(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(parts),
                                          static_cast<std::uint32_t>(r));
    return split_begin<std::size_t>(n, static_cast<std::size_t>(parts), static_cast<std::size_t>(r));
}

// The chunk that holds item i < n: the r with chunk_begin(r) <= i < chunk_begin(r + 1)
// (the first chunk that holds it when some chunks are empty, which only happens when
// n < parts, and then item i is chunk i's only item).
TRICKLE_HOST_DEVICE constexpr int chunk_owner(std::size_t n, int parts, std::size_t i) {
    if (split_fits_32bit(n))
        return static_cast<int>(split_owner<std::uint32_t>(static_cast<std::uint32_t>(n),
                                                           static_cast<std::uint32_t>(parts),
                                                           static_cast<std::uint32_t>(i)));
    return static_cast<int>(split_owner<std::size_t>(n, static_cast<std::size_t>(parts), i));
}

} // namespace detail

TRICKLE_NAMESPACE_END
