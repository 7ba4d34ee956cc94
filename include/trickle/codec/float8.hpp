// trickle/codec/float8.hpp: fp32 <-> fp8 (OCP E4M3FN and E5M2), round to nearest even, saturating.
//
// The two 8-bit floating-point formats of the OCP 8-bit floating point specification
// (OFP8, 2023), as CUDA (cuda_fp8.h), PyTorch (float8_e4m3fn, float8_e5m2) and the H100 /
// H200 tensor cores define them:
//
// | format | layout      | bias | largest finite | smallest subnormal | infinities | NaN               |
// |--------|-------------|------|----------------|--------------------|------------|-------------------|
// | E4M3   | S.EEEE.MMM  | 7    | 448 (0x7E)     | 2^-9  (0x01)       | none       | S.1111.111 (0x7F) |
// | E5M2   | S.EEEEE.MM  | 15   | 57344 (0x7B)   | 2^-16 (0x01)       | S.11111.00 | S.11111.{01,10,11} |
//
// fp32 -> fp8 rounds to nearest even and saturates: every finite value whose rounded
// magnitude exceeds the largest finite one, and every infinity, becomes the largest finite
// value of its sign; a NaN becomes 0x7F (the canonical NaN, sign dropped). This is
// `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3 / __NV_E5M2)` bit for bit (host code
// and `cvt.rn.satfinite.{e4m3,e5m2}x2.f32` on sm_89 and later), which the tests check
// against cuda_fp8.h on every fp32 pattern class (tests/codec). Zero and values that round
// to zero keep their sign.
//
// fp8 -> fp32 is exact for every non-NaN code; every NaN code decodes to 0x7FFFFFFF, the
// canonical NaN CUDA's conversions give (`float(__nv_fp8_e4m3)`: fp8 -> fp16 0x7FFF ->
// fp32 0x7FFFFFFF on host and device), so a decoded NaN has the same bits on every machine.
//
// Both directions are integer bit manipulation only, the same on host and device,
// independent of the FPU's rounding mode and of flush-to-zero, and written with selects
// of constant shifts instead of branches and variable shifts, so loops of them vectorize
// (SSE2 has no per-lane variable shift).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>

#include <cstdint>
#include <utility>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

namespace detail {

// sig >> S rounded to nearest even (S >= 1).
template <std::uint32_t S>
TRICKLE_HOST_DEVICE std::uint32_t shift_round_even(std::uint32_t sig) {
    return (sig + (1u << (S - 1u)) - 1u + ((sig >> S) & 1u)) >> S;
}

// fp32 -> an fp8 format with E exponent bits and M mantissa bits whose largest finite
// magnitude has code MaxCode, round to nearest even, saturating, NaN -> 0x7F.
template <int E, int M, std::uint32_t MaxCode>
TRICKLE_HOST_DEVICE std::uint8_t float_to_fp8(float f) {
    constexpr std::uint32_t bias = (1u << (E - 1)) - 1u;
    constexpr std::uint32_t shift = 23u - M;                  // fp32 mantissa bits dropped
    constexpr std::uint32_t min_normal = (128u - bias) << 23; // fp32 bits of 2^(1 - bias)
    const std::uint32_t u = trickle::detail::float_bits(f);
    const std::uint32_t sign = (u >> 24) & 0x80u;
    const std::uint32_t a = u & 0x7fffffffu;

    // Normal range: rebias the exponent in place, then round the mantissa to M bits (a
    // carry out of the mantissa bumps the exponent, which is what rounding wants).
    const std::uint32_t normal = shift_round_even<shift>(a - ((127u - bias) << 23)); // wraps below min_normal: not selected

    // Subnormal range: the value in units of the smallest subnormal 2^(1 - bias - M) is the
    // 24-bit significand shifted right by s = (151 - bias - M) - exponent, rounded to nearest
    // even. Below min_normal, s >= 24 - M; from s = 25 on nothing is left (fp32 zeros and
    // subnormals too). So s takes M + 1 useful values: one constant shift each and a select,
    // which vectorizes where a variable shift would not (SSE2 has none).
    const std::uint32_t s = (151u - bias - M) - (a >> 23);
    const std::uint32_t sig = (a & 0x7fffffu) | 0x800000u;
    std::uint32_t sub = 0;
    [&]<std::uint32_t... K>(std::integer_sequence<std::uint32_t, K...>) {
        // An and-mask per candidate rather than a select: compilers turn a chain of selects
        // on s back into branches, which do not vectorize.
        ((sub |= shift_round_even<24u - M + K>(sig) & (0u - static_cast<std::uint32_t>(s == 24u - M + K))), ...);
    }(std::make_integer_sequence<std::uint32_t, M + 1>{});

    std::uint32_t code = a >= min_normal ? normal : sub;
    code = code < MaxCode ? code : MaxCode; // saturate (infinities included)
    return static_cast<std::uint8_t>(a > 0x7f800000u ? 0x7fu : (code | sign));
}

inline constexpr std::uint32_t fp8_nan_float_bits = 0x7fffffffu; // CUDA's canonical fp32 NaN

} // namespace detail

// fp32 -> E4M3 (OCP E4M3FN): round to nearest even, saturate to +-448, NaN -> 0x7F.
TRICKLE_HOST_DEVICE std::uint8_t encode_e4m3(float f) {
    return detail::float_to_fp8<4, 3, 0x7eu>(f);
}

// fp32 -> E5M2: round to nearest even, saturate to +-57344 (infinities too), NaN -> 0x7F.
TRICKLE_HOST_DEVICE std::uint8_t encode_e5m2(float f) {
    return detail::float_to_fp8<5, 2, 0x7bu>(f);
}

namespace detail {

// fp8 (E exponent bits, M mantissa bits) -> fp32 bits, exact, for every code but the
// infinities and NaNs (the callers select those). Integer work only: a subnormal code m
// (exponent field 0) is m * 2^(1 - bias - M), whose leading bit K becomes the fp32 exponent.
template <int E, int M>
TRICKLE_HOST_DEVICE std::uint32_t fp8_finite_bits(std::uint32_t c) {
    constexpr std::uint32_t bias = (1u << (E - 1)) - 1u;
    const std::uint32_t sign = (c & 0x80u) << 24;
    const std::uint32_t mag = c & 0x7fu;
    const std::uint32_t normal = (mag << (23 - M)) + ((127u - bias) << 23);
    const std::uint32_t m = mag & ((1u << M) - 1u);
    std::uint32_t sub = 0; // m = 0: zero
    [&]<std::uint32_t... K>(std::integer_sequence<std::uint32_t, K...>) {
        ((sub = m >= (1u << K) ? (((128u - bias - M + K) << 23) | ((m << (23u - K)) & 0x7fffffu)) : sub), ...);
    }(std::make_integer_sequence<std::uint32_t, M>{});
    return (mag < (1u << M) ? sub : normal) | sign;
}

} // namespace detail

// E4M3 -> fp32, exact; NaN codes (0x7F, 0xFF) -> 0x7FFFFFFF.
TRICKLE_HOST_DEVICE float decode_e4m3(std::uint8_t c) {
    const std::uint32_t bits = detail::fp8_finite_bits<4, 3>(c);
    return trickle::detail::bits_float((c & 0x7fu) == 0x7fu ? detail::fp8_nan_float_bits : bits);
}

// E5M2 -> fp32, exact (infinities included); NaN codes -> 0x7FFFFFFF.
TRICKLE_HOST_DEVICE float decode_e5m2(std::uint8_t c) {
    const std::uint32_t mag = c & 0x7fu;
    std::uint32_t bits = detail::fp8_finite_bits<5, 2>(c);
    bits = mag == 0x7cu ? ((c & 0x80u) << 24) | 0x7f800000u : bits;
    return trickle::detail::bits_float(mag > 0x7cu ? detail::fp8_nan_float_bits : bits);
}

// Largest finite magnitudes.
inline constexpr float e4m3_max = 448.0f;
inline constexpr float e5m2_max = 57344.0f;

} // namespace codec

TRICKLE_NAMESPACE_END
