// trickle/kernels/sparse_exchange.hpp: kernel bodies of one sparse exchange: gather, scatter, neighbour sums.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/kernels/flat_view.hpp>

#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

// buf[k] = value at position sel(k), in fp32 (0 for padding). One pass over the
// selection: positions are computed, never read from an index array.
template <class T, class Selection>
struct gather_body {
    flat_view<T> params;
    Selection sel;
    float* buf;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t pos = sel(k);
        buf[k] = pos < params.total ? to_float(params[pos]) : 0.0f;
    }
};

// value at position sel(k) = buf[k] * scale, rounded to T (padding is skipped). A
// position selected twice receives the same value twice.
template <class T, class Selection>
struct scatter_body {
    flat_view<T> params;
    Selection sel;
    const float* buf;
    float scale;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t pos = sel(k);
        if (pos < params.total) params[pos] = from_float<T>(buf[k] * scale);
    }
};

// buf[k] += other[k]
struct add_body {
    float* buf;
    const float* other;
    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const { buf[k] += other[k]; }
};

// buf[k] = left[k] + buf[k] + right[k]
struct add_neighbours_body {
    float* buf;
    const float* left;
    const float* right;
    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const { buf[k] = left[k] + buf[k] + right[k]; }
};

TRICKLE_NAMESPACE_END
