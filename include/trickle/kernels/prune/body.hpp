// trickle/kernels/prune/body.hpp: outer-gradient pruning: zero each tensor's smallest-magnitude delta entries.
//
// Each entry gets the 64-bit key (magnitude bits << 32) | index-in-tensor, so ordering
// by key is a total order (smaller magnitude first, ties by position; NaN counts as
// larger than everything) and host and device prune exactly the same entries. Tensor s
// loses its floor(q·size_s) smallest keys. The host selects them with nth_element
// (prune_host, the reference, here); CUDA computes the keys with prune_key_body, sorts them
// per tensor with CUB's segmented radix sort and zeroes with prune_zero_body
// (prune_device, kernels/prune/dispatch.hpp). There is no agent of trickle's own: the
// bodies run through the generic launch and the sort is CUB's.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/kernels/flat_view.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

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

} // namespace detail

TRICKLE_NAMESPACE_END
