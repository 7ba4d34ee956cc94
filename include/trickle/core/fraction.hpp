// trickle/core/fraction.hpp: how many of n positions a fraction p of them is.
//
// The samplers and codec::random_k keep round(p n) positions; they share this one rounding
// so that a sampler and a sparsifier at the same fraction keep the same count.
#pragma once

#include <trickle/config.hpp>

#include <cstddef>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// Rounds p * n to the nearest count, at least 1 and at most n.
inline std::size_t fraction_count(double p, std::size_t n) {
    const double c = p * static_cast<double>(n) + 0.5;
    std::size_t k = c >= static_cast<double>(n) ? n : static_cast<std::size_t>(c);
    return k == 0 && n != 0 ? 1 : k;
}

} // namespace detail

TRICKLE_NAMESPACE_END
