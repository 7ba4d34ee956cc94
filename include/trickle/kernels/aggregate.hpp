// trickle/kernels/aggregate.hpp: robust combinations of the workers' outer gradients,
// coordinate by coordinate (DiLoCo's robust aggregation, aggregate/aggregate.hpp).
//
// Every body reads m contributions as rows (rows[r] points to row r: the participants
// only, in rank order) with a weight per row (> 0), and writes one value per
// coordinate. Each coordinate is independent and its result depends only on the m values
// of that coordinate and the rows' order, so the bits are the same on every worker that
// gathered the same rows, whatever the chunking of the launch. Ties in a sort are broken
// by row, so the order is a total one. The rows hold finite values (the stage excludes a
// non-finite contribution before any body runs).
#pragma once

#include <trickle/config.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

// The most contributions a robust body combines per coordinate (its sort is in a local
// array of this size).
inline constexpr int max_robust_rows = 256;

struct robust_rows {
    const float* const* rows = nullptr; // m pointers, in memory the body can read
    const float* weights = nullptr;     // one per row, > 0
    int m = 0;                          // 1 <= m <= max_robust_rows
};

namespace detail {

// The m values of coordinate k, sorted ascending, ties by row: order[0..m) holds rows.
TRICKLE_HOST_DEVICE void sort_coordinate(const robust_rows& in, std::size_t k, float* v, int* order) {
    for (int r = 0; r < in.m; ++r) {
        const float x = in.rows[r][k];
        int j = r;
        // Insertion: rows come in ascending order, so an equal value already placed stays first.
        while (j > 0 && v[j - 1] > x) {
            v[j] = v[j - 1];
            order[j] = order[j - 1];
            --j;
        }
        v[j] = x;
        order[j] = r;
    }
}

} // namespace detail

// Coordinate-wise trimmed mean: of coordinate k's m values, sorted, the `trim` lowest and
// the `trim` highest are dropped (0 <= 2 trim < m) and the rest averaged with the rows'
// weights, summed in sorted order in double:
//     out[k] = sum_{j in [trim, m - trim)} w(j) v(j) / sum w(j).
// trimmed_count, when set, counts per row the coordinates where that row was dropped (the
// body then runs on one thread).
struct trimmed_mean_body {
    robust_rows in{};
    int trim = 0;
    float* out = nullptr;
    std::uint64_t* trimmed_count = nullptr;

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        float v[max_robust_rows];
        int order[max_robust_rows];
        for (std::size_t k = k0; k < k1; ++k) {
            detail::sort_coordinate(in, k, v, order);
            double s = 0.0, ws = 0.0;
            for (int j = trim; j < in.m - trim; ++j) {
                const double w = in.weights[order[j]];
                s += w * static_cast<double>(v[j]);
                ws += w;
            }
            out[k] = static_cast<float>(s / ws);
            if (trimmed_count != nullptr)
                for (int j = 0; j < trim; ++j) {
                    ++trimmed_count[order[j]];
                    ++trimmed_count[order[in.m - 1 - j]];
                }
        }
    }
};

// Coordinate-wise median of the m values (weights are not used): the middle value when m
// is odd, the mean of the two middle values (in double) when it is even.
struct median_body {
    robust_rows in{};
    float* out = nullptr;

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        float v[max_robust_rows];
        int order[max_robust_rows];
        for (std::size_t k = k0; k < k1; ++k) {
            detail::sort_coordinate(in, k, v, order);
            const int h = in.m / 2;
            out[k] = (in.m % 2 == 1) ? v[h]
                                     : static_cast<float>(0.5 * (static_cast<double>(v[h - 1]) + static_cast<double>(v[h])));
        }
    }
};

// Centered clipping: each row's difference to the center c (the previous round's
// aggregate) scaled by its factor s_r = min(1, tau / ||row_r - c||) (the caller computes
// them: clip_factor), then averaged with the rows' weights, in row order in double:
//     out[k] = c[k] + sum_r w_r s_r (row_r[k] - c[k]) / sum_r w_r.
struct clipped_mean_body {
    robust_rows in{};
    const float* center = nullptr;
    const float* factors = nullptr; // s_r, one per row
    float* out = nullptr;

    TRICKLE_HOST_DEVICE void run(std::size_t k0, std::size_t k1) const {
        double ws = 0.0;
        for (int r = 0; r < in.m; ++r) ws += in.weights[r];
        for (std::size_t k = k0; k < k1; ++k) {
            const double c = center[k];
            double s = 0.0;
            for (int r = 0; r < in.m; ++r) {
                const double d = static_cast<double>(in.rows[r][k]) - c;
                s += static_cast<double>(in.weights[r]) * static_cast<double>(factors[r]) * d;
            }
            out[k] = static_cast<float>(c + s / ws);
        }
    }
};

// The clipping factor of a row at distance `dist` from the center: 1 inside the radius,
// tau / dist outside it.
TRICKLE_HOST_DEVICE float clip_factor(double dist, double tau) {
    return dist <= tau ? 1.0f : static_cast<float>(tau / dist);
}

// ||a - b|| over n floats (b may be null: ||a||), summed in order in double; the host
// reference of the norms a robust round reports. Non-finite when a holds inf or NaN.
inline double distance(const float* a, const float* b, std::size_t n) {
    double s = 0.0;
    for (std::size_t k = 0; k < n; ++k) {
        const double d = static_cast<double>(a[k]) - (b != nullptr ? static_cast<double>(b[k]) : 0.0);
        s += d * d;
    }
    return std::sqrt(s);
}

// Whether all n floats are finite.
inline bool all_finite(const float* a, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k)
        if (!std::isfinite(a[k])) return false;
    return true;
}

TRICKLE_NAMESPACE_END
