// trickle/core/feistel.hpp: a keyed bijection of [0, n) (a Feistel network with cycle walking).
//
// In core because several policy families draw positions with it: the samplers
// (permutation, uniform, block, layerwise) and codec::random_k.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/core/random_batch.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The round functions of the Feistel networks below: mix64 (the splitmix64 finalizer) on
// 64-bit words, the MurmurHash3 finalizer on 32-bit words.
TRICKLE_HOST_DEVICE std::uint64_t feistel_round(std::uint64_t x) { return mix64(x); }
TRICKLE_HOST_DEVICE std::uint32_t feistel_round(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

} // namespace detail

// A pseudo-random permutation of [0, n) chosen by a 64-bit key. Four Feistel rounds
// permute [0, 2^bits) with bits even and 2^bits >= n; values that land at or above n
// are pushed through again (cycle walking), which keeps it a bijection of [0, n). As
// 2^bits < 4n, a position needs fewer than four passes on average. Trivially copyable,
// computed identically on host and device: no table is ever stored.
//
// Word is the width of the network's arithmetic, which bounds n by 2^(bits of Word):
//   feistel_permutation    64-bit words and mix64 rounds, for any n (positions in a group);
//   feistel32_permutation  32-bit words and MurmurHash3 rounds, for n <= 2^32: it serves the
//                          layerwise sampler's per-tensor permutations (tensors stay far below
//                          2^32 elements), whose rounds then need only 32-bit multiplies, which
//                          AVX-512F does natively in 16 lanes, against 8 lanes of emulated
//                          64-bit multiplies, so sampling without replacement inside tensors
//                          costs about what the Philox draws it replaced cost.
template <class Word>
struct basic_feistel_permutation {
    static_assert(std::is_same_v<Word, std::uint64_t> || std::is_same_v<Word, std::uint32_t>,
                  "Feistel networks run on 32- or 64-bit words");
    static constexpr std::uint32_t word_bits = 8 * sizeof(Word);

    std::uint64_t n = 1;
    std::uint32_t half_bits = 1;
    Word keys[4] = {0, 0, 0, 0};

    basic_feistel_permutation() = default;

    // size in [1, 2^word_bits] (0 is taken as 1).
    TRICKLE_HOST_DEVICE basic_feistel_permutation(std::uint64_t size, std::uint64_t key) : n(size == 0 ? 1 : size) {
        std::uint32_t bits = 0;
        while (bits < word_bits && (n - 1) >> bits) ++bits;
        if (bits < 2) bits = 2;
        if (bits & 1u) ++bits;
        half_bits = bits / 2;
        for (int r = 0; r < 4; ++r)
            keys[r] = static_cast<Word>(mix64(key + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(r + 1)));
    }

    TRICKLE_HOST_DEVICE Word round_trip(Word x) const {
        const Word mask = static_cast<Word>((Word{1} << half_bits) - 1u); // half_bits <= word_bits / 2
        Word left = x >> half_bits;
        Word right = x & mask;
        for (int r = 0; r < 4; ++r) {
            const Word next = left ^ (detail::feistel_round(static_cast<Word>(right ^ keys[r])) & mask);
            left = right;
            right = next;
        }
        return static_cast<Word>((left << half_bits) | right);
    }

    // The image of x (x < n) under the permutation.
    TRICKLE_HOST_DEVICE std::uint64_t operator()(std::uint64_t x) const {
        Word y = static_cast<Word>(x);
        do {
            y = round_trip(y);
        } while (y >= n);
        return y;
    }

    // Host only: out[j] = (*this)(x0 + j) for j < m, in AVX-512 lanes where the CPU has
    // them (8 of 64-bit words, which also need AVX-512DQ for their multiplies; 16 of 32-bit
    // words), one at a time otherwise.
    void images(std::uint64_t x0, std::size_t m, std::uint64_t* out) const;
};

using feistel_permutation = basic_feistel_permutation<std::uint64_t>;
using feistel32_permutation = basic_feistel_permutation<std::uint32_t>;

namespace detail {

#if TRICKLE_PHILOX_SIMD
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// The same rounds as round_trip and mix64 for eight values at once. The cycle walk goes on
// in lanes while more than two lanes still walk, and the last ones finish one at a time:
// in lanes every lane waits for the slowest (for n just above a power of four most values
// walk, about four passes each, and the slowest of eight about ten), while one at a time
// costs a full scalar pass per value. Everything stays inside this one function, built for
// AVX-512F+DQ, so no vector register crosses a call between instruction sets.
__attribute__((target("avx512f,avx512dq"))) inline void feistel_images_avx512(const feistel_permutation& f,
                                                                               std::uint64_t x0, std::size_t steps,
                                                                               std::uint64_t* out) {
    const __m128i half = _mm_cvtsi32_si128(static_cast<int>(f.half_bits));
    const __m512i mask = _mm512_set1_epi64(
        static_cast<long long>(f.half_bits >= 64 ? ~0ull : (1ull << f.half_bits) - 1));
    const __m512i n = _mm512_set1_epi64(static_cast<long long>(f.n));
    const __m512i c1 = _mm512_set1_epi64(static_cast<long long>(0xbf58476d1ce4e5b9ull));
    const __m512i c2 = _mm512_set1_epi64(static_cast<long long>(0x94d049bb133111ebull));
    __m512i key[4];
    for (int r = 0; r < 4; ++r) key[r] = _mm512_set1_epi64(static_cast<long long>(f.keys[r]));
    const __m512i iota = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    for (std::size_t v = 0; v < steps; ++v) {
        __m512i x = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(x0 + v * 8)), iota);
        __mmask8 walking = 0xff;
        while (__builtin_popcount(walking) > 2) {
            __m512i left = _mm512_srl_epi64(x, half);
            __m512i right = _mm512_and_si512(x, mask);
            for (int r = 0; r < 4; ++r) {
                __m512i h = _mm512_xor_si512(right, key[r]);
                h = _mm512_xor_si512(h, _mm512_srli_epi64(h, 30));
                h = _mm512_mullo_epi64(h, c1);
                h = _mm512_xor_si512(h, _mm512_srli_epi64(h, 27));
                h = _mm512_mullo_epi64(h, c2);
                h = _mm512_xor_si512(h, _mm512_srli_epi64(h, 31));
                const __m512i next = _mm512_xor_si512(left, _mm512_and_si512(h, mask));
                left = right;
                right = next;
            }
            const __m512i y = _mm512_or_si512(_mm512_sll_epi64(left, half), right);
            x = _mm512_mask_mov_epi64(x, walking, y);                                 // walking lanes move on
            walking = static_cast<__mmask8>(_mm512_cmpge_epu64_mask(x, n) & walking); // still outside [0, n)
        }
        _mm512_storeu_si512(reinterpret_cast<void*>(out + v * 8), x);
        // The last walkers continue, one at a time, from where their lanes left them (at or
        // above n, so at least one more pass).
        while (walking != 0) {
            const auto lane = static_cast<std::size_t>(__builtin_ctz(walking));
            walking = static_cast<__mmask8>(walking & (walking - 1));
            std::uint64_t z = out[v * 8 + lane];
            do {
                z = f.round_trip(z);
            } while (z >= f.n);
            out[v * 8 + lane] = z;
        }
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// What the CPU offers the bulk Feistel images: AVX-512F (the 32-bit network), and with
// AVX-512DQ too (the 64-bit network's multiplies); probed once.
struct avx512_support {
    bool f = false;
    bool dq = false;
};

inline avx512_support cpu_avx512() {
    static const avx512_support s = [] {
        avx512_support a;
        __builtin_cpu_init();
        a.f = __builtin_cpu_supports("avx512f");
        a.dq = a.f && __builtin_cpu_supports("avx512dq");
        return a;
    }();
    return s;
}

inline bool feistel_simd() { return cpu_avx512().dq; }
#endif // TRICKLE_PHILOX_SIMD

// out[j] = perm(x0 + j) for j < m: `Lanes` at a time through simd(perm, x0, m / Lanes, out)
// when use_simd, the rest one at a time. The one loop of both networks' images().
template <std::size_t Lanes, class Perm, class Simd>
void bulk_images(const Perm& perm, std::uint64_t x0, std::size_t m, std::uint64_t* out, bool use_simd,
                 const Simd& simd) {
    std::size_t j = 0;
    if (use_simd) {
        simd(perm, x0, m / Lanes, out);
        j = m / Lanes * Lanes;
    }
    for (std::size_t t = j; t < m; ++t) out[t] = perm(x0 + t);
}

// The SIMD images of a network, on hosts without them: never called.
struct no_simd_images {
    template <class Perm>
    void operator()(const Perm&, std::uint64_t, std::size_t, std::uint64_t*) const {}
};

} // namespace detail

template <>
inline void feistel_permutation::images(std::uint64_t x0, std::size_t m, std::uint64_t* out) const {
#if TRICKLE_PHILOX_SIMD
    detail::bulk_images<8>(*this, x0, m, out, detail::feistel_simd(), detail::feistel_images_avx512);
#else
    detail::bulk_images<8>(*this, x0, m, out, false, detail::no_simd_images{});
#endif
}

namespace detail {

#if TRICKLE_PHILOX_SIMD
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// The rounds of feistel32_permutation for sixteen values at once, walking in lanes while
// more than one lane walks (a pass of 16 lanes costs about one scalar pass), the last one alone (as feistel_images_avx512).
__attribute__((target("avx512f"))) inline void feistel32_images_avx512(const feistel32_permutation& f, std::uint64_t x0,
                                                                       std::size_t steps, std::uint64_t* out) {
    const __m128i half = _mm_cvtsi32_si128(static_cast<int>(f.half_bits));
    const __m512i mask = _mm512_set1_epi32(static_cast<int>((1u << f.half_bits) - 1u));
    const __m512i last = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(f.n - 1))); // n <= 2^32
    const __m512i c1 = _mm512_set1_epi32(static_cast<int>(0x85ebca6bu));
    const __m512i c2 = _mm512_set1_epi32(static_cast<int>(0xc2b2ae35u));
    __m512i key[4];
    for (int r = 0; r < 4; ++r) key[r] = _mm512_set1_epi32(static_cast<int>(f.keys[r]));
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    alignas(64) std::uint32_t lanes[16];
    for (std::size_t v = 0; v < steps; ++v) {
        __m512i x = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(x0 + v * 16))), iota);
        __mmask16 walking = 0xffff;
        while (__builtin_popcount(walking) > 1) {
            __m512i left = _mm512_srl_epi32(x, half);
            __m512i right = _mm512_and_si512(x, mask);
            for (int r = 0; r < 4; ++r) {
                __m512i h = _mm512_xor_si512(right, key[r]);
                h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
                h = _mm512_mullo_epi32(h, c1);
                h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 13));
                h = _mm512_mullo_epi32(h, c2);
                h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
                const __m512i next = _mm512_xor_si512(left, _mm512_and_si512(h, mask));
                left = right;
                right = next;
            }
            const __m512i y = _mm512_or_si512(_mm512_sll_epi32(left, half), right);
            x = _mm512_mask_mov_epi32(x, walking, y);
            walking = static_cast<__mmask16>(_mm512_cmpgt_epu32_mask(x, last) & walking); // still outside [0, n)
        }
        _mm512_store_si512(reinterpret_cast<void*>(lanes), x);
        while (walking != 0) {
            const auto lane = static_cast<std::size_t>(__builtin_ctz(walking));
            walking = static_cast<__mmask16>(walking & (walking - 1));
            std::uint32_t z = lanes[lane];
            do {
                z = f.round_trip(z);
            } while (z >= f.n);
            lanes[lane] = z;
        }
        for (int j = 0; j < 16; ++j) out[v * 16 + static_cast<std::size_t>(j)] = lanes[j];
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif // TRICKLE_PHILOX_SIMD

} // namespace detail

template <>
inline void feistel32_permutation::images(std::uint64_t x0, std::size_t m, std::uint64_t* out) const {
#if TRICKLE_PHILOX_SIMD
    detail::bulk_images<16>(*this, x0, m, out, detail::cpu_avx512().f, detail::feistel32_images_avx512);
#else
    detail::bulk_images<16>(*this, x0, m, out, false, detail::no_simd_images{});
#endif
}

// A selection (sampler/sampler.hpp) made of `size` consecutive images of a Feistel
// permutation, from image `start` on: value k sits at perm(start + k). All positions are
// distinct, as perm is a bijection. The selection of both sampler::permutation (start = the
// cursor in its cycle) and sampler::uniform (start = 0, a fresh permutation every step).
struct feistel_range {
    feistel_permutation perm;
    std::size_t start;
    std::size_t size;

    TRICKLE_HOST_DEVICE std::size_t count() const { return size; }
    TRICKLE_HOST_DEVICE std::size_t operator()(std::size_t k) const {
        return static_cast<std::size_t>(perm(start + k));
    }
    // The same positions in bulk (SIMD Feistel rounds where the CPU allows).
    void positions(std::size_t k0, std::size_t m, std::uint64_t* out) const { perm.images(start + k0, m, out); }
};

TRICKLE_NAMESPACE_END
