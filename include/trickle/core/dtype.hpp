// trickle/core/dtype.hpp: the parameter element types (fp32, fp16, bf16) and their traits.
#pragma once

#include <trickle/config.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

TRICKLE_HOST_DEVICE std::uint32_t float_bits(float f) {
#if TRICKLE_ON_DEVICE
    return __float_as_uint(f);
#else
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
#endif
}

TRICKLE_HOST_DEVICE float bits_float(std::uint32_t u) {
#if TRICKLE_ON_DEVICE
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
#endif
}

// float -> IEEE binary16, round to nearest even. Pure integer work except the subnormal
// range, so host and device give bit-identical results.
TRICKLE_HOST_DEVICE std::uint16_t float_to_half_bits(float f) {
    std::uint32_t x = float_bits(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) // inf stays inf; NaN becomes a quiet NaN
        return static_cast<std::uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x0200u : 0u));
    if (x >= 0x477ff000u) // at or above 65520 rounds to infinity
        return static_cast<std::uint16_t>(sign | 0x7c00u);
    if (x < 0x38800000u) { // below 2^-14: a binary16 subnormal or zero
        // Adding 0.5 puts the value's 2^-24 units in the low mantissa bits; the FPU
        // rounds to nearest even for us.
        const float shifted = bits_float(x) + 0.5f;
        return static_cast<std::uint16_t>(sign | (float_bits(shifted) - 0x3f000000u));
    }
    const std::uint32_t odd = (x >> 13) & 1u;
    x += 0xc8000fffu + odd; // rebias the exponent by -112 and round to nearest even
    return static_cast<std::uint16_t>(sign | (x >> 13));
}

TRICKLE_HOST_DEVICE float half_bits_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    const std::uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0u) {
        const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f; // mant * 2^-24, exact
        return sign ? -mag : mag;
    }
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> bfloat16, round to nearest even; NaN stays NaN (quieted). The NaN case is a
// select rather than an early return so that loops of conversions vectorize: the branchy
// form held bf16 scatters and DiLoCo updates to under half the copy rate.
TRICKLE_HOST_DEVICE std::uint16_t float_to_bf16_bits(float f) {
    const std::uint32_t u = float_bits(f);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const std::uint32_t quiet = (u >> 16) | 0x0040u;
    return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

TRICKLE_HOST_DEVICE float bf16_bits_to_float(std::uint16_t b) {
    return bits_float(static_cast<std::uint32_t>(b) << 16);
}

} // namespace detail

// IEEE binary16. Layout-compatible with CUDA's __half: a pointer to __half parameters may
// be reinterpret_cast to trickle::half*.
struct half {
    std::uint16_t bits;

    half() = default;
    TRICKLE_HOST_DEVICE explicit half(float f) : bits(detail::float_to_half_bits(f)) {}
    TRICKLE_HOST_DEVICE explicit operator float() const { return detail::half_bits_to_float(bits); }
    TRICKLE_HOST_DEVICE static half from_bits(std::uint16_t b) {
        half h;
        h.bits = b;
        return h;
    }
};

// bfloat16 (the upper half of an fp32). Layout-compatible with CUDA's __nv_bfloat16.
struct bfloat16 {
    std::uint16_t bits;

    bfloat16() = default;
    TRICKLE_HOST_DEVICE explicit bfloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}
    TRICKLE_HOST_DEVICE explicit operator float() const { return detail::bf16_bits_to_float(bits); }
    TRICKLE_HOST_DEVICE static bfloat16 from_bits(std::uint16_t b) {
        bfloat16 h;
        h.bits = b;
        return h;
    }
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

enum class dtype : std::uint8_t { f32 = 1, f16 = 2, bf16 = 3 };

template <class T>
struct dtype_traits; // deliberately undefined: only fp32, fp16 and bf16 are parameter types

template <>
struct dtype_traits<float> {
    static constexpr dtype id = dtype::f32;
    static constexpr const char* name = "fp32";
};
template <>
struct dtype_traits<half> {
    static constexpr dtype id = dtype::f16;
    static constexpr const char* name = "fp16";
};
template <>
struct dtype_traits<bfloat16> {
    static constexpr dtype id = dtype::bf16;
    static constexpr const char* name = "bf16";
};

// A parameter element type: one of float, trickle::half, trickle::bfloat16.
template <class T>
concept element_type = std::is_same_v<T, float> || std::is_same_v<T, half> ||
                       std::is_same_v<T, bfloat16>;

inline constexpr const char* dtype_name(dtype d) {
    switch (d) {
    case dtype::f32: return "fp32";
    case dtype::f16: return "fp16";
    case dtype::bf16: return "bf16";
    }
    return "unknown";
}

// Conversions used by kernel bodies: every element type goes through fp32.
template <class T>
TRICKLE_HOST_DEVICE float to_float(T v) {
    return static_cast<float>(v);
}

template <class T>
TRICKLE_HOST_DEVICE T from_float(float v) {
    return T(v);
}

TRICKLE_NAMESPACE_END
