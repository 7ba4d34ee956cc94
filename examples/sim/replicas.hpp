// examples/sim/replicas.hpp: measurements across the workers' replicas: their mean and their correlation.
//
// These read the replicas through shared memory (the workers are threads), never through
// the communicator: measuring must not add to the bytes the strategies are judged by.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace trickle_sim {

// out[i] = mean over replicas of replica[i], for i in [begin, end). Summed in replica
// order in double, so the result does not depend on which thread computes which slice.
inline void average_slice(std::span<const float* const> replicas, float* out, std::size_t begin, std::size_t end) {
    const double inv = 1.0 / static_cast<double>(replicas.size());
    for (std::size_t i = begin; i < end; ++i) {
        double s = 0;
        for (const float* r : replicas) s += r[i];
        out[i] = static_cast<float>(s * inv);
    }
}

// Pearson correlation of (x - origin) and (y - origin) over n values.
//
// All replicas start from the same initialisation, so their raw parameters correlate at
// ~1 for a long time whatever the strategy: the shared starting values dominate. The
// changes since the start are what training made of each replica; their correlation is
// low when replicas learn different things and 1 when they are kept identical. Identical
// changes give exactly 1 (also when they have no variance); a constant, different change
// gives NaN.
inline double change_correlation(const float* x, const float* y, const float* origin, std::size_t n) {
    if (n == 0 || std::memcmp(x, y, n * sizeof(float)) == 0) return 1.0;
    double mx = 0, my = 0;
    for (std::size_t i = 0; i < n; ++i) {
        mx += static_cast<double>(x[i]) - origin[i];
        my += static_cast<double>(y[i]) - origin[i];
    }
    mx /= static_cast<double>(n);
    my /= static_cast<double>(n);
    double sxx = 0, syy = 0, sxy = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double dx = static_cast<double>(x[i]) - origin[i] - mx;
        const double dy = static_cast<double>(y[i]) - origin[i] - my;
        sxx += dx * dx;
        syy += dy * dy;
        sxy += dx * dy;
    }
    if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();
    return sxy / std::sqrt(sxx * syy);
}

// The pairs (a, b), a < b, of `replicas` replicas, in a fixed order; pair q is measured by
// worker q % workers.
inline std::vector<std::pair<int, int>> replica_pairs(int replicas) {
    std::vector<std::pair<int, int>> pairs;
    for (int a = 0; a < replicas; ++a)
        for (int b = a + 1; b < replicas; ++b) pairs.emplace_back(a, b);
    return pairs;
}

// Mean over all pairs of change_correlation; 1 for a single replica.
inline double mean_pairwise_correlation(std::span<const float* const> replicas, const float* origin, std::size_t n) {
    const auto pairs = replica_pairs(static_cast<int>(replicas.size()));
    if (pairs.empty()) return 1.0;
    double s = 0;
    for (auto [a, b] : pairs)
        s += change_correlation(replicas[static_cast<std::size_t>(a)], replicas[static_cast<std::size_t>(b)], origin, n);
    return s / static_cast<double>(pairs.size());
}

} // namespace trickle_sim
