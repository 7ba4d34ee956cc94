// trickle/kernels/prune.hpp: outer-gradient pruning: zero each tensor's smallest-magnitude delta entries.
//
// Each entry gets the 64-bit key (magnitude bits << 32) | index-in-tensor, so ordering
// by key is a total order (smaller magnitude first, ties by position; NaN counts as
// larger than everything) and host and device prune exactly the same entries. Tensor s
// loses its floor(q·size_s) smallest keys. The host selects them with nth_element; CUDA
// sorts the keys per tensor with CUB's segmented radix sort.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/kernels/flat_view.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#if TRICKLE_CUDA_COMPILER
#include <cub/device/device_segmented_radix_sort.cuh>
#endif

TRICKLE_NAMESPACE_BEGIN

namespace detail {

TRICKLE_HOST_DEVICE std::uint64_t prune_key(float v, std::size_t local) {
    std::uint32_t mag = float_bits(v) & 0x7fffffffu;
    if (mag > 0x7f800000u) mag = 0xffffffffu; // NaN: never pruned before a number
    return (static_cast<std::uint64_t>(mag) << 32) | static_cast<std::uint32_t>(local);
}

TRICKLE_HOST_DEVICE std::size_t prune_count(double q, std::size_t size) {
    return static_cast<std::size_t>(floor(q * static_cast<double>(size)));
}

// keys[i] = prune_key(delta[i], position of i in its tensor)
struct prune_key_body {
    const float* delta;
    layout_view layout;
    std::uint64_t* keys;
    TRICKLE_HOST_DEVICE void operator()(std::size_t i) const {
        const std::uint32_t s = layout.tensor_of(i);
        keys[i] = prune_key(delta[i], i - layout.offsets[s]);
    }
};

// With each tensor's keys sorted ascending, zero the entries of its first floor(q·size).
struct prune_zero_body {
    float* delta;
    layout_view layout;
    const std::uint64_t* sorted;
    double q;
    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::uint32_t s = layout.tensor_of(k);
        const std::size_t begin = layout.offsets[s];
        if (k - begin < prune_count(q, layout.offsets[s + 1] - begin))
            delta[begin + static_cast<std::uint32_t>(sorted[k])] = 0.0f;
    }
};

// Host pruning of delta[0 .. layout.total).
inline void prune_host(float* delta, const layout_view& layout, double q, std::vector<std::uint64_t>& keys) {
    for (std::uint32_t s = 0; s < layout.count; ++s) {
        const std::size_t begin = layout.offsets[s], size = layout.offsets[s + 1] - begin;
        const std::size_t drop = prune_count(q, size);
        if (drop == 0) continue;
        keys.resize(size);
        for (std::size_t j = 0; j < size; ++j) keys[j] = prune_key(delta[begin + j], j);
        std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(drop - 1), keys.end());
        for (std::size_t j = 0; j < drop; ++j) delta[begin + static_cast<std::uint32_t>(keys[j])] = 0.0f;
    }
}

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
