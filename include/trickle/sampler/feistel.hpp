// trickle/sampler/feistel.hpp: a keyed bijection of [0, n) (a Feistel network with cycle walking).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/philox.hpp>

#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

// A pseudo-random permutation of [0, n) chosen by a 64-bit key. Four Feistel rounds
// permute [0, 2^bits) with bits even and 2^bits >= n; values that land at or above n
// are pushed through again (cycle walking), which keeps it a bijection of [0, n). As
// 2^bits < 4n, a position needs fewer than four passes on average. Trivially copyable,
// computed identically on host and device: no table is ever stored.
struct feistel_permutation {
    std::uint64_t n = 1;
    std::uint32_t half_bits = 1;
    std::uint64_t keys[4] = {0, 0, 0, 0};

    feistel_permutation() = default;

    TRICKLE_HOST_DEVICE feistel_permutation(std::uint64_t size, std::uint64_t key) : n(size == 0 ? 1 : size) {
        std::uint32_t bits = 0;
        while (bits < 64 && (n - 1) >> bits) ++bits;
        if (bits < 2) bits = 2;
        if (bits & 1u) ++bits;
        half_bits = bits / 2;
        for (int r = 0; r < 4; ++r) keys[r] = mix64(key + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(r + 1));
    }

    TRICKLE_HOST_DEVICE std::uint64_t round_trip(std::uint64_t x) const {
        const std::uint64_t mask = half_bits >= 64 ? ~0ull : (1ull << half_bits) - 1;
        std::uint64_t left = x >> half_bits;
        std::uint64_t right = x & mask;
        for (int r = 0; r < 4; ++r) {
            const std::uint64_t f = mix64(right ^ keys[r]) & mask;
            const std::uint64_t next = left ^ f;
            left = right;
            right = next;
        }
        return (left << half_bits) | right;
    }

    // The image of x (x < n) under the permutation.
    TRICKLE_HOST_DEVICE std::uint64_t operator()(std::uint64_t x) const {
        do {
            x = round_trip(x);
        } while (x >= n);
        return x;
    }
};

TRICKLE_NAMESPACE_END
