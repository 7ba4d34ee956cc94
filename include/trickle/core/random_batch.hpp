// trickle/core/random_batch.hpp: random_u64 for a run of consecutive indices, several lanes at a time on x86-64 hosts.
//
// A host gather draws one Philox value per exchanged position; done one at a time, the ten
// dependent multiply rounds cost more than the cache miss they feed. Philox is the same
// arithmetic for every index, so lanes of a SIMD register compute consecutive indices
// together. Results are bit for bit those of random_u64: the rounds are the same 32x32->64
// multiplies and xors, only spread over lanes (unsigned integer arithmetic has no rounding).
//
// On x86-64 with GCC or Clang the widest of AVX-512F, AVX2 and SSE2 (which every x86-64
// has) is chosen at run time from the CPU, so a build without -march flags still gets the
// wide lanes; a build for AVX-512F uses it directly. Elsewhere, and in code nvcc compiles,
// a scalar loop.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/philox.hpp>

#include <cstddef>
#include <cstdint>

#if !defined(__CUDACC__) && (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define TRICKLE_PHILOX_SIMD 1
#include <immintrin.h>
#else
#define TRICKLE_PHILOX_SIMD 0
#endif

TRICKLE_NAMESPACE_BEGIN

namespace detail {

#if TRICKLE_PHILOX_SIMD

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// GCC 12 reports the deliberately undefined registers inside its own AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// One register type's operations, each lane holding one 32-bit Philox word zero-extended
// to 64 bits (so the 32x32->64 multiply is a single mul_epu32, which reads the low half).
// The wider sets carry target attributes and are reached only through random_u64_avx2 /
// random_u64_avx512 below, after a CPU check. Registers go in and out by reference: where
// the generic rounds are not inlined (unoptimized builds), a register passed by value
// between code built for different instruction sets would not travel the same way on
// both sides.
#define TRICKLE_LANES(Target, Reg, Width, Unroll, Set1, Add, Mul, Srl, Sll, Xor, And, Or, Store)                   \
    using reg = Reg;                                                                                               \
    static constexpr int width = Width;                                                                            \
    static constexpr int unroll = Unroll;                                                                          \
    Target static void splat(reg& r, std::uint64_t v) { r = Set1(static_cast<long long>(v)); }                    \
    Target static void add(reg& r, const reg& a, const reg& b) { r = Add(a, b); }                                  \
    Target static void mul(reg& r, const reg& a, const reg& b) { r = Mul(a, b); }                                  \
    Target static void shr32(reg& r, const reg& a) { r = Srl(a, 32); }                                             \
    Target static void shl32(reg& r, const reg& a) { r = Sll(a, 32); }                                             \
    Target static void bxor(reg& r, const reg& a, const reg& b) { r = Xor(a, b); }                                 \
    Target static void band(reg& r, const reg& a, const reg& b) { r = And(a, b); }                                 \
    Target static void bor(reg& r, const reg& a, const reg& b) { r = Or(a, b); }                                   \
    Target static void store(std::uint64_t* p, const reg& a) { Store(reinterpret_cast<reg*>(p), a); }

struct sse2_lanes {
    // 16 registers: 4 words x 2 plus 5 constants
    TRICKLE_LANES(, __m128i, 2, 2, _mm_set1_epi64x, _mm_add_epi64, _mm_mul_epu32, _mm_srli_epi64, _mm_slli_epi64,
                  _mm_xor_si128, _mm_and_si128, _mm_or_si128, _mm_storeu_si128)
    static void iota(reg& r) { r = _mm_set_epi64x(1, 0); }
};

struct avx2_lanes {
    TRICKLE_LANES(__attribute__((target("avx2"))), __m256i, 4, 2, _mm256_set1_epi64x, _mm256_add_epi64,
                  _mm256_mul_epu32, _mm256_srli_epi64, _mm256_slli_epi64, _mm256_xor_si256, _mm256_and_si256,
                  _mm256_or_si256, _mm256_storeu_si256)
    __attribute__((target("avx2"))) static void iota(reg& r) { r = _mm256_set_epi64x(3, 2, 1, 0); }
};

struct avx512_lanes {
    // 32 registers
    TRICKLE_LANES(__attribute__((target("avx512f"))), __m512i, 8, 4, _mm512_set1_epi64, _mm512_add_epi64,
                  _mm512_mul_epu32, _mm512_srli_epi64, _mm512_slli_epi64, _mm512_xor_si512, _mm512_and_si512,
                  _mm512_or_si512, _mm512_storeu_si512)
    __attribute__((target("avx512f"))) static void iota(reg& r) { r = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0); }
};

#undef TRICKLE_LANES

// out[j] = random_u64(seed, stream, k0 + j) for j < V::width * U: U registers side by side,
// so the multiplies of independent registers overlap in the pipeline.
template <class V, int U>
inline void random_u64_lanes(std::uint64_t seed, std::uint64_t stream, std::uint64_t k0, std::uint64_t* out) {
    using reg = typename V::reg;
    reg lo, m0, m1, iota, k0v, k1v, t, p0, p1;
    V::splat(lo, 0xffffffffull);
    V::splat(m0, philox4x32_10::m0);
    V::splat(m1, philox4x32_10::m1);
    V::iota(iota);
    reg c0[U], c1[U], c2[U], c3[U];
    for (int u = 0; u < U; ++u) {
        V::splat(t, k0 + static_cast<std::uint64_t>(u * V::width));
        V::add(t, t, iota); // the 64-bit counters k0 + u * width + lane
        V::band(c0[u], t, lo);
        V::shr32(c1[u], t);
        V::splat(c2[u], static_cast<std::uint32_t>(stream));
        V::splat(c3[u], stream >> 32);
    }
    std::uint32_t key0 = static_cast<std::uint32_t>(seed);
    std::uint32_t key1 = static_cast<std::uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            key0 += philox4x32_10::w0;
            key1 += philox4x32_10::w1;
        }
        V::splat(k0v, key0);
        V::splat(k1v, key1);
        for (int u = 0; u < U; ++u) {
            // The high halves of c1 and c3 may hold garbage from the products: mul_epu32
            // ignores them, and the final mask removes them.
            V::mul(p0, c0[u], m0);
            V::mul(p1, c2[u], m1);
            V::shr32(t, p1);
            V::bxor(t, t, c1[u]);
            V::bxor(c0[u], t, k0v);
            c1[u] = p1;
            V::shr32(t, p0);
            V::bxor(t, t, c3[u]);
            V::bxor(c2[u], t, k1v);
            c3[u] = p0;
        }
    }
    for (int u = 0; u < U; ++u) {
        V::shl32(t, c1[u]);
        V::band(p0, c0[u], lo);
        V::bor(t, t, p0);
        V::store(out + u * V::width, t);
    }
}

// Whole registers' worth of values: out[j] for j < steps * V::width * V::unroll. flatten
// inlines the generic rounds and the lane operations into one function compiled for the
// instruction set, which is what makes the target attributes above legal to call.
template <class V>
inline void random_u64_steps(std::uint64_t seed, std::uint64_t stream, std::uint64_t k0, std::size_t steps,
                             std::uint64_t* out) {
    constexpr std::size_t step = static_cast<std::size_t>(V::width) * V::unroll;
    for (std::size_t v = 0; v < steps; ++v) random_u64_lanes<V, V::unroll>(seed, stream, k0 + v * step, out + v * step);
}

__attribute__((target("avx2"), flatten)) inline void random_u64_avx2(std::uint64_t seed, std::uint64_t stream,
                                                                     std::uint64_t k0, std::size_t steps,
                                                                     std::uint64_t* out) {
    random_u64_steps<avx2_lanes>(seed, stream, k0, steps, out);
}

__attribute__((target("avx512f"), flatten)) inline void random_u64_avx512(std::uint64_t seed, std::uint64_t stream,
                                                                          std::uint64_t k0, std::size_t steps,
                                                                          std::uint64_t* out) {
    random_u64_steps<avx512_lanes>(seed, stream, k0, steps, out);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The widest lanes this CPU runs: 2 for AVX-512F, 1 for AVX2, 0 for SSE2.
inline int philox_simd_level() {
#if defined(__AVX512F__)
    return 2;
#else
    static const int level = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
    }();
    return level;
#endif
}

inline const char* philox_simd_name() {
    const int level = philox_simd_level();
    return level == 2 ? "avx512f" : level == 1 ? "avx2" : "sse2";
}

#endif // TRICKLE_PHILOX_SIMD

// out[j] = random_u64(seed, stream, k0 + j) for j < m.
inline void random_u64_run(std::uint64_t seed, std::uint64_t stream, std::uint64_t k0, std::size_t m,
                           std::uint64_t* out) {
    std::size_t j = 0;
#if TRICKLE_PHILOX_SIMD
    switch (philox_simd_level()) {
    case 2: {
        constexpr std::size_t step = avx512_lanes::width * avx512_lanes::unroll;
        random_u64_avx512(seed, stream, k0, m / step, out);
        j = m / step * step;
        break;
    }
    case 1: {
        constexpr std::size_t step = avx2_lanes::width * avx2_lanes::unroll;
        random_u64_avx2(seed, stream, k0, m / step, out);
        j = m / step * step;
        break;
    }
    default: {
        constexpr std::size_t step = sse2_lanes::width * sse2_lanes::unroll;
        random_u64_steps<sse2_lanes>(seed, stream, k0, m / step, out);
        j = m / step * step;
        break;
    }
    }
#endif
    for (std::size_t t = j; t < m; ++t) out[t] = random_u64(seed, stream, k0 + t);
}

} // namespace detail

TRICKLE_NAMESPACE_END
