// trickle/kernels/prune/dispatch.hpp: outer-gradient pruning on the device: its scratch, CUB's
// segmented radix sort and the launch of the bodies of kernels/prune/body.hpp around it.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/flat_view.hpp>
#include <trickle/kernels/prune/body.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#if TRICKLE_CUDA_COMPILER
#include <cub/device/device_segmented_radix_sort.cuh>
#endif

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Scratch for device pruning, sized once (reserve) before any step: keys in and out, and
// CUB's temporary storage, all stream-ordered on the algorithm's stream.
struct prune_scratch {
    buffer<std::uint64_t, cuda_space> keys_in, keys_out;
    buffer<unsigned char, cuda_space> temp;
    std::size_t temp_bytes = 0;
};

#if TRICKLE_CUDA_COMPILER
// The segmented radix sort of pruning: with s.temp empty and temp_bytes 0, only asks CUB
// how much temporary storage it needs.
inline void prune_sort(const exec::cuda& ex, const layout_view& layout, prune_scratch& s, std::size_t& temp_bytes) {
    const int items = static_cast<int>(layout.total), segments = static_cast<int>(layout.count);
    TRICKLE_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeys(s.temp.empty() ? nullptr : s.temp.data(), temp_bytes,
                                                               s.keys_in.data(), s.keys_out.data(), items, segments,
                                                               layout.offsets, layout.offsets + 1, 0, 64, ex.stream));
}

// Sizes s for pruning a group of layout.total elements (layout in device memory).
inline void prune_reserve(const exec::cuda& ex, const layout_view& layout, prune_scratch& s) {
    const std::size_t n = layout.total;
    require(n < (1ull << 31), "diloco: outer-gradient pruning on CUDA handles up to 2^31 - 1 parameters per group");
    s.keys_in = buffer<std::uint64_t, cuda_space>(n, ex);
    s.keys_out = buffer<std::uint64_t, cuda_space>(n, ex);
    std::size_t bytes = 0;
    prune_sort(ex, layout, s, bytes);
    s.temp = buffer<unsigned char, cuda_space>(bytes == 0 ? 1 : bytes, ex);
    s.temp_bytes = s.temp.size();
}
#endif

// Device pruning of delta[0 .. layout.total) on ex.stream (layout in device memory), with
// scratch sized by prune_reserve. Needs nvcc, like every kernel launch.
template <class Exec>
void prune_device(const Exec& ex, float* delta, const layout_view& layout, double q, prune_scratch& s) {
    static_assert(std::is_same_v<Exec, exec::cuda>, "prune_device runs on exec::cuda");
#if TRICKLE_CUDA_COMPILER
    const std::size_t n = layout.total;
    require(s.keys_in.size() >= n && !s.temp.empty(), "diloco: pruning scratch was not reserved at construction");
    for_each_index(ex, n, prune_key_body{delta, layout, s.keys_in.data()});
    std::size_t temp_bytes = s.temp_bytes;
    prune_sort(ex, layout, s, temp_bytes);
    for_each_index(ex, n, prune_zero_body{delta, layout, s.keys_out.data(), q});
#else
    (void)ex, (void)delta, (void)layout, (void)q, (void)s;
    static_assert(dependent_false<Exec>, "pruning CUDA parameters launches kernels: compile this translation unit with nvcc");
#endif
}

} // namespace detail

TRICKLE_NAMESPACE_END
