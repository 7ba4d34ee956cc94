// trickle/core/philox.hpp: the Philox4x32-10 counter-based generator, identical on host and device.
//
// Every worker derives the positions it exchanges from (seed, step, k) through this
// generator, so no index list or mask ever crosses the network. The output matches
// Random123's philox4x32_10 bit for bit (tests check the published known-answer vectors
// and, where Random123 is installed, millions of draws against it).
#pragma once

#include <trickle/config.hpp>

#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

struct u32x4 {
    std::uint32_t v[4];
    TRICKLE_HOST_DEVICE std::uint32_t operator[](int i) const { return v[i]; }
};

struct u32x2 {
    std::uint32_t v[2];
};

namespace detail {

TRICKLE_HOST_DEVICE void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
#if TRICKLE_ON_DEVICE
    lo = a * b;
    hi = __umulhi(a, b);
#else
    const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
    lo = static_cast<std::uint32_t>(p);
    hi = static_cast<std::uint32_t>(p >> 32);
#endif
}

// High 64 bits of a 64x64-bit product.
TRICKLE_HOST_DEVICE std::uint64_t mulhi64(std::uint64_t a, std::uint64_t b) {
#if TRICKLE_ON_DEVICE
    return __umul64hi(a, b);
#else
    __extension__ typedef unsigned __int128 u128; // GCC and Clang; __extension__ keeps -Wpedantic quiet
    return static_cast<std::uint64_t>((static_cast<u128>(a) * b) >> 64);
#endif
}

} // namespace detail

// Philox4x32 with R rounds (R = 10 is the standard, crush-resistant choice).
template <int R = 10>
struct philox4x32 {
    static constexpr std::uint32_t m0 = 0xD2511F53u;
    static constexpr std::uint32_t m1 = 0xCD9E8D57u;
    static constexpr std::uint32_t w0 = 0x9E3779B9u;
    static constexpr std::uint32_t w1 = 0xBB67AE85u;

    TRICKLE_HOST_DEVICE static u32x4 generate(u32x4 ctr, u32x2 key) {
        for (int r = 0; r < R; ++r) {
            if (r > 0) {
                key.v[0] += w0;
                key.v[1] += w1;
            }
            std::uint32_t hi0, lo0, hi1, lo1;
            detail::mulhilo32(m0, ctr.v[0], hi0, lo0);
            detail::mulhilo32(m1, ctr.v[2], hi1, lo1);
            ctr = u32x4{{hi1 ^ ctr.v[1] ^ key.v[0], lo1, hi0 ^ ctr.v[3] ^ key.v[1], lo0}};
        }
        return ctr;
    }
};

using philox4x32_10 = philox4x32<10>;

// Four random words for (seed, stream, index): the key is the 64-bit seed, the counter is
// the 64-bit index followed by the 64-bit stream. Distinct (stream, index) pairs give
// independent draws; trickle uses stream for (purpose, step) and index for k.
TRICKLE_HOST_DEVICE u32x4 random_words(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
    const u32x4 ctr{{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                     static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}};
    const u32x2 key{{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
    return philox4x32_10::generate(ctr, key);
}

// A 64-bit random value for (seed, stream, index).
TRICKLE_HOST_DEVICE std::uint64_t random_u64(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
    const u32x4 w = random_words(seed, stream, index);
    return (static_cast<std::uint64_t>(w.v[1]) << 32) | w.v[0];
}

// Maps a uniform 64-bit value to [0, n) by multiply-high (Lemire); the bias is below
// n / 2^64, far under anything a sampler can observe.
TRICKLE_HOST_DEVICE std::uint64_t bounded(std::uint64_t r, std::uint64_t n) {
    return detail::mulhi64(r, n);
}

// A uniform float in [0, 1) from the top 24 bits of a word.
TRICKLE_HOST_DEVICE float uniform01(std::uint32_t w) {
    return static_cast<float>(w >> 8) * (1.0f / 16777216.0f);
}

// A uniform double in [0, 1) from 53 bits.
TRICKLE_HOST_DEVICE double uniform01_d(std::uint64_t w) {
    return static_cast<double>(w >> 11) * (1.0 / 9007199254740992.0);
}

// Mixes a sequence of 64-bit values into one stream id (splitmix64 finalizer per step),
// for deriving independent streams such as (purpose, step, epoch).
TRICKLE_HOST_DEVICE std::uint64_t mix64(std::uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

TRICKLE_NAMESPACE_END
