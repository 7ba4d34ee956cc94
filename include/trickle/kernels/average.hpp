// trickle/kernels/average.hpp: the kernel body that writes an all-reduced sum back as the mean.
//
// A dense average (trickle::ddp, algorithm/ddp.hpp) copies the group into an fp32 array
// (snapshot_copy_body, kernels/diloco.hpp), sums it over the workers in one all-reduce, and
// writes each element back as
//     params[i] = T(sum[i] * scale),   scale = 1 / workers,
// the product SPARTA's scatter writes for the values it averaged (kernels/sparse_exchange.hpp),
// so a dense average and SPARTA at fraction 1 give the same bits.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/kernels/flat_view.hpp>

#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

// params[i] = T(sum[i] * scale), i = first + k.
template <element_type T>
struct mean_body {
    flat_view<T> params;
    const float* sum = nullptr;
    float scale = 1.0f;
    std::size_t first = 0;

    TRICKLE_HOST_DEVICE void operator()(std::size_t k) const {
        const std::size_t i = first + k;
        params[i] = from_float<T>(sum[i] * scale);
    }

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        params.for_each_piece(first + k0, first + k1, [&](T* p, std::size_t i, std::size_t m) {
            const float* s = sum + i;
            for (std::size_t j = 0; j < m; ++j) p[j] = from_float<T>(s[j] * scale);
        });
    }
};

TRICKLE_NAMESPACE_END
