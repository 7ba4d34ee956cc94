// trickle/codec/quantize.hpp: block-scaled integer quantization (int8, int4, 2-bit) of fp32 values.
//
// A block of at most B values is coded as one record: a header holding its scale (fp32)
// and, for min-max, its zero point (int32), then the values' codes packed low bits first
// (int8: one a byte; int4: two a byte, low nibble first; 2-bit: four a byte, lowest pair
// first), zero bits up to a multiple of 4 bytes (so every header is 4-byte aligned when
// the buffer is). An array of n values is its blocks back to back, the last one partial:
//
//   record_bytes(m)       = round_up(header + ceil(m * bits / 8), 4)      header: 4 or 8
//   encoded_bytes(n, B)   = (n / B) * record_bytes(B) + (n % B ? record_bytes(n % B) : 0)
//
// Schemes (code q, scale s; every decode is one exact subtraction and one IEEE multiply):
//
// | scheme    | codes q                       | value of q      | scale s                                  |
// |-----------|-------------------------------|-----------------|------------------------------------------|
// | symmetric | -qmax..qmax, two's complement | q * s           | max|x| / qmax (qmax = 127, 7)             |
// | minmax    | 0..L (L = 255, 15), unsigned  | (q - z) * s     | the smallest s for which an integer z in [0, L] puts [lo, hi] on the grid |
// | midrise   | 0..3, unsigned (sign2)        | (q - 1.5) * s   | max|x| / 1.5                             |
//
// min-max takes lo = min(x, 0) and hi = max(x, 0) over the block, so its grid is the
// integer multiples of s and holds 0 exactly (PyTorch's and ONNX's affine quantization
// with an integer zero point z). z is the integer below or above z* = L * -lo / (hi - lo)
// whose covering step max(-lo / z, hi / (L - z)) is smaller: at most L / (L - 1) times
// (hi - lo) / L (0.4% more for int8, 7% for int4, in the worst case), and [lo, hi] is covered,
// so no value is clamped and stochastic rounding stays unbiased (a block whose range
// reaches 2^126 takes the grid centred on 0, z = floor(L / 2), instead). The midrise grid
// {-1.5, -0.5, 0.5, 1.5} * s is sign2's: both bits carry information (no code is spent on
// zero), every value is within s / 2 = max|x| / 3 of its code, and stochastic rounding is
// unbiased. A normal scale is rounded up to 16 significant bits, so code * s is exact for
// every code: symmetric and midrise blocks (with a normal scale) re-encode their decoded
// values to the same bytes.
//
// Rounding: to nearest, ties to the even code, on x / s computed as x * (1 / s) (one IEEE
// multiply; a division when s is subnormal, where 1 / s would overflow). Then
// |x - decode(q)| <= s / 2, up to the fp32 rounding of x / s and of the decode (a few ulp
// of max|x|). Stochastic rounding (optional) takes a uniform 32-bit word w per value:
// q = floor(t) + (u < t - floor(t)) with u = (w >> 8) * 2^-24 (trickle::uniform01) and t
// the position of x in code space, so E[decode(q)] = x to within 2^-24 * s; the caller
// supplies the words (trickle's shared Philox stream: codec::philox_words).
//
// Special values: NaN encodes as the code of 0 (sign2, which has no 0: +0.5 s to nearest,
// +-0.5 s stochastically) and the block's scale comes from its finite values only; +-Inf
// saturate to the block's extreme codes (decoding to about +-max|x| of the finite values,
// or to lo / hi for min-max); a block with no nonzero finite value has s = 0 and decodes to
// +0s (zeros of either sign included). Subnormal inputs are quantized like any other value
// (IEEE arithmetic: trickle is built without fast-math and nvcc defaults to -ftz=false;
// under flush-to-zero, blocks whose scale is subnormal, max|x| below about 1e-36, decode as
// 0). When max|x| > 0 but max|x| / qmax underflows to 0, s is the smallest subnormal 2^-149.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/philox.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

// How a block's codes map to values (see the table above).
enum class scheme : std::uint8_t { symmetric, minmax, midrise };

// One block-quantized format: Bits bits a code under scheme S.
template <unsigned Bits, scheme S>
struct block_format {
    static_assert(Bits == 2 || Bits == 4 || Bits == 8, "block formats have 2, 4 or 8 bits a code");
    static_assert(S != scheme::midrise || Bits == 2, "the midrise grid is sign2's (2 bits)");

    static constexpr unsigned bits = Bits;
    static constexpr scheme kind = S;
    static constexpr std::uint32_t code_mask = (1u << Bits) - 1u;
    // Largest code magnitude in the units of the scale: 127 / 7 (symmetric), L = 255 / 15
    // (min-max), 1.5 (midrise).
    static constexpr float qmax = S == scheme::symmetric ? static_cast<float>((1u << (Bits - 1)) - 1u)
                                  : S == scheme::minmax  ? static_cast<float>(code_mask)
                                                         : 1.5f;
    static constexpr std::size_t header_bytes = S == scheme::minmax ? 8 : 4;
    static constexpr std::size_t values_per_byte = 8 / Bits;

    // Bytes of the packed codes of m values.
    TRICKLE_HOST_DEVICE static constexpr std::size_t code_bytes(std::size_t m) {
        return (m + values_per_byte - 1) / values_per_byte;
    }
    // Bytes of the record of a block of m values (m >= 1); 0 for m = 0.
    TRICKLE_HOST_DEVICE static constexpr std::size_t record_bytes(std::size_t m) {
        return m == 0 ? 0 : (header_bytes + code_bytes(m) + 3) / 4 * 4;
    }
    // Bytes of n values in blocks of B (B >= 1; 0 when B is 0).
    TRICKLE_HOST_DEVICE static constexpr std::size_t encoded_bytes(std::size_t n, std::size_t B) {
        return B == 0 ? 0 : (n / B) * record_bytes(B) + record_bytes(n % B);
    }
    // encoded_bytes(n, B) split into codes, the headers (scales and zero points) and padding.
    static wire_parts parts(std::size_t n, std::size_t B) {
        if (B == 0) return {};
        const auto record = [](std::size_t m) {
            if (m == 0) return wire_parts{};
            return wire_parts{.codes = code_bytes(m), .scales = header_bytes,
                              .padding = record_bytes(m) - header_bytes - code_bytes(m)};
        };
        wire_parts p = record(B) * (n / B);
        p += record(n % B);
        return p;
    }
};

using int8_symmetric = block_format<8, scheme::symmetric>;
using int8_minmax = block_format<8, scheme::minmax>;
using int4_symmetric = block_format<4, scheme::symmetric>;
using int4_minmax = block_format<4, scheme::minmax>;
using sign2_midrise = block_format<2, scheme::midrise>;

// What the encoder of one block derives from its values; `scale` and `zero` are what the
// header carries (zero: the position of the value 0 in code space: z for min-max, 1.5 for
// midrise, 0 for symmetric).
struct block_params {
    float scale = 0;    // s
    float zero = 0;     // the code of 0 (an integer for min-max)
    float inv = 0;      // 1 / s (0 when s is 0 or when `divide`)
    bool divide = false; // s is subnormal: x / s by division
    float t_lo = 0;      // x / s is clamped into [t_lo, t_hi] = [-zero, L - zero] (+-Inf saturate),
    float t_hi = 0;      // as the order keys key_lo, key_hi (detail::order_key)
    std::int32_t key_lo = 0;
    std::int32_t key_hi = 0;
};

namespace detail {

// The bits of |x| for finite x (ordered like |x|), 0 for NaN and +-Inf.
TRICKLE_HOST_DEVICE std::int32_t finite_abs_bits(float x) {
    const std::uint32_t a = trickle::detail::float_bits(x) & 0x7fffffffu;
    return static_cast<std::int32_t>(a < 0x7f800000u ? a : 0u);
}

// A signed integer that orders like the float x (-0 just below +0); from_order_key inverts it.
TRICKLE_HOST_DEVICE std::int32_t order_key(float x) {
    const std::int32_t u = static_cast<std::int32_t>(trickle::detail::float_bits(x));
    return u ^ ((u >> 31) & 0x7fffffff);
}
TRICKLE_HOST_DEVICE float from_order_key(std::int32_t k) {
    return trickle::detail::bits_float(static_cast<std::uint32_t>(k ^ ((k >> 31) & 0x7fffffff)));
}

inline constexpr float min_subnormal = 1.40129846e-45f; // 2^-149
inline constexpr float min_normal = 1.17549435e-38f;    // 2^-126

// The next float up from a non-negative finite s.
TRICKLE_HOST_DEVICE float next_up(float s) {
    return trickle::detail::bits_float(trickle::detail::float_bits(s) + 1u);
}

inline constexpr float big_range = 8.50705917e37f; // 2^126: wider min-max blocks use a grid centred on 0
inline constexpr float max_float = 3.40282347e38f;

// Sets the scale and how to divide by it; `top`: the largest code magnitude in units of the
// scale (qmax, or L for min-max). A normal scale is rounded up to 16 significant bits, so
// that code * scale is exact for every code (8 bits at most): decoded values then lie
// exactly on the grid, and encoding them again gives the same bytes (symmetric and
// midrise) — unless that would push top * scale past FLT_MAX (blocks within 2^-16 of the
// end of the fp32 range), which then keep the largest scale with top * scale finite. A
// subnormal scale (a block of values below ~1e-36) is used by division, since 1 / s would
// overflow.
TRICKLE_HOST_DEVICE void set_scale(block_params& p, float scale, float top) {
    if (scale >= min_normal) {
        const float rounded = trickle::detail::bits_float((trickle::detail::float_bits(scale) + 0x7fu) & ~0x7fu);
        if (mul_rn(rounded, top) <= max_float) {
            scale = rounded;
        } else {
            while (mul_rn(scale, top) > max_float) // at most a step or two
                scale = trickle::detail::bits_float(trickle::detail::float_bits(scale) - 1u);
        }
    }
    p.scale = scale;
    p.divide = scale > 0.0f && scale < min_normal;
    p.inv = scale > 0.0f && !p.divide ? div_rn(1.0f, scale) : 0.0f;
}

// The step of the min-max grid with zero point z: the smallest s with z * s >= -lo and
// (L - z) * s >= hi. The callers keep z >= 1 when lo < 0 and z <= L - 1 when hi > 0, so the
// max(., 1) only turns 0 / 0 into 0 / 1.
TRICKLE_HOST_DEVICE float minmax_step(float lo, float hi, float z, float levels) {
    const float below = div_rn(-lo, z > 1.0f ? z : 1.0f);
    const float above = div_rn(hi, levels - z > 1.0f ? levels - z : 1.0f);
    float s = below > above ? below : above;
    // A subnormal quotient may round down by up to half of itself: one step up covers.
    if (s < min_normal && (mul_rn(s, z) < -lo || mul_rn(s, levels - z) < hi)) s = next_up(s);
    return s;
}

} // namespace detail

// What a block's scale depends on: the largest bits of the finite magnitudes of its positive
// values (pos) and of its negative ones (neg), as integers (the bits of a non-negative float
// order like the float). Symmetric and midrise blocks keep max|x| in pos and 0 in neg. An
// extent of the whole block is the combine of the extents of any split of its values, in
// any order (integer maxima): what lets a group of lanes each take part of a block and
// reduce, with the same bits as one pass over it (kernels/codec_pass.hpp).
struct block_extent {
    std::int32_t pos = 0;
    std::int32_t neg = 0;
};

TRICKLE_HOST_DEVICE block_extent combine(const block_extent& a, const block_extent& b) {
    return {a.pos > b.pos ? a.pos : b.pos, a.neg > b.neg ? a.neg : b.neg};
}

// The extent of the single value x (non-finite values have none).
template <class Format>
TRICKLE_HOST_DEVICE block_extent extent_of_value(float x) {
    if constexpr (Format::kind == scheme::minmax) {
        // The bits of the magnitude of x, as pos when x is positive, as neg when negative.
        const auto u = static_cast<std::int32_t>(trickle::detail::float_bits(x));
        const std::int32_t a = u & 0x7fffffff;
        const std::int32_t finite = a < 0x7f800000 ? a : 0; // NaN, +-Inf -> 0
        const std::int32_t negative = u >> 31;               // all ones for a negative value
        return {finite & ~negative, finite & negative};
    } else {
        return {detail::finite_abs_bits(x), 0};
    }
}

// The extent of the m values at in (non-finite values ignored): max(x, 0) and -min(x, 0)
// (min-max), max|x| (the others), as integer maxima of the bits of magnitudes (integer
// reductions vectorize; float ones need fast-math).
template <class Format>
TRICKLE_HOST_DEVICE block_extent extent_of(const float* in, std::size_t m) {
    std::int32_t pos = 0, neg = 0;
    for (std::size_t i = 0; i < m; ++i) {
        const block_extent e = extent_of_value<Format>(in[i]);
        pos = e.pos > pos ? e.pos : pos;
        if constexpr (Format::kind == scheme::minmax) neg = e.neg > neg ? e.neg : neg;
    }
    return {pos, neg};
}

// Values a lane codes at a time in a block shared by several lanes (see encode_quad below).
inline constexpr std::size_t quad_values = 4;

// The extent of in[0, count), count <= quad_values: a loop of constant trip count, so a
// register array stays in registers.
template <class Format>
TRICKLE_HOST_DEVICE block_extent extent_of_quad(const float* in, std::size_t count) {
    block_extent e{};
    TRICKLE_UNROLL
    for (std::size_t i = 0; i < quad_values; ++i)
        if (i < count) e = combine(e, extent_of_value<Format>(in[i]));
    return e;
}

// The parameters of a block of extent e (symmetric and midrise: from max|x|; min-max: from
// min(x, 0) and max(x, 0)).
template <class Format>
TRICKLE_HOST_DEVICE block_params params_of(const block_extent& e) {
    block_params p;
    if constexpr (Format::kind == scheme::minmax) {
        const std::int32_t hi_bits = e.pos, lo_bits = e.neg;
        const float hi = trickle::detail::bits_float(static_cast<std::uint32_t>(hi_bits));
        const float lo = -trickle::detail::bits_float(static_cast<std::uint32_t>(lo_bits)); // -0 when none
        constexpr float levels = Format::qmax; // L
        float z = 0.0f, scale = 0.0f, t_hi = levels, top = levels;
        const float range = detail::sub_rn(hi, lo);
        if (!(range > 0.0f)) {
            // no nonzero finite value: scale 0, everything decodes to 0
        } else if (range <= detail::big_range) {
            // The grid (q - z) * s must hold [lo, hi] with an integer z: of the two integers
            // around z* = -lo / ((hi - lo) / L) take the one whose covering step is smaller.
            // z = 0 cannot hold a negative lo, nor z = L a positive hi.
            const float z_min = lo < 0.0f ? 1.0f : 0.0f, z_max = hi > 0.0f ? levels - 1.0f : levels;
            // z* = L * (-lo) / (hi - lo): -lo <= hi - lo, so the quotient is in [0, 1]
            const float zr = detail::clamp(detail::mul_rn(detail::div_rn(-lo, range), levels), z_min, z_max);
            std::int32_t zf = detail::round_even(zr);
            zf -= static_cast<float>(zf) > zr ? 1 : 0; // floor, >= z_min
            const float z_lo = static_cast<float>(zf);
            const float z_hi = z_lo < z_max ? z_lo + 1.0f : z_lo;
            const float s_lo = detail::minmax_step(lo, hi, z_lo, levels);
            const float s_hi = detail::minmax_step(lo, hi, z_hi, levels);
            z = s_hi <= s_lo ? z_hi : z_lo;
            scale = s_hi <= s_lo ? s_hi : s_lo;
        } else {
            // Values near the ends of the fp32 range (hi - lo may even overflow): a grid
            // centred on 0, codes 0 .. 2 * floor(L / 2), whose ends are +-max(-lo, hi), so
            // every decoded value is finite.
            constexpr float half = static_cast<float>(Format::code_mask / 2); // 127, 7
            const float amax = -lo > hi ? -lo : hi;
            z = half;
            t_hi = 2.0f * half;
            top = half;
            scale = detail::div_rn(amax, half);
        }
        detail::set_scale(p, scale, top);
        p.zero = z;
        p.t_lo = -z;
        p.t_hi = t_hi - z;
    } else {
        const float amax = trickle::detail::bits_float(static_cast<std::uint32_t>(e.pos));
        float scale = detail::div_rn(amax, Format::qmax);
        // A subnormal quotient may round down by up to half of itself (and underflow to 0
        // for the smallest blocks): one step up makes qmax * s cover max|x|.
        if (amax > 0.0f && scale < detail::min_normal && detail::mul_rn(scale, Format::qmax) < amax)
            scale = detail::next_up(scale);
        detail::set_scale(p, scale, Format::qmax);
        p.zero = Format::kind == scheme::midrise ? 1.5f : 0.0f;
        p.t_lo = -Format::qmax;
        p.t_hi = Format::qmax;
    }
    p.key_lo = detail::order_key(p.t_lo);
    p.key_hi = detail::order_key(p.t_hi);
    return p;
}

// The parameters of the block of m values at in.
template <class Format>
TRICKLE_HOST_DEVICE block_params make_block_params(const float* in, std::size_t m) {
    return params_of<Format>(extent_of<Format>(in, m));
}

namespace detail {

// x / s clamped into [t_lo, t_hi] (by the reciprocal unless Divide); NaN -> 0, +-Inf
// saturate. Needs s > 0 (a block with s = 0 codes every value as 0: see encode_block).
template <bool Divide>
TRICKLE_HOST_DEVICE float scaled(float x, const block_params& p) {
    // NaN -> 0 by an integer mask: a float select before the product lets compilers move the
    // product into branches, which then do not vectorize.
    const std::uint32_t u = trickle::detail::float_bits(x);
    const float c = trickle::detail::bits_float(u & (0u - static_cast<std::uint32_t>((u & 0x7fffffffu) <= 0x7f800000u)));
    const float t = Divide ? div_rn(c, p.scale) : mul_rn(c, p.inv);
    // The clamp, on order keys: integer min / max vectorize where float selects after a
    // product become branches, and no sum that follows can fuse with the product (an FMA
    // would round differently from an unfused host or device encoder).
    std::int32_t k = order_key(t);
    k = k < p.key_lo ? p.key_lo : k;
    k = k > p.key_hi ? p.key_hi : k;
    return from_order_key(k);
}

// The code nearest to t + zero, ties to even. For an integer zero (symmetric, min-max)
// the zero point rides in the rounding constant: one add rounds t + zero in one step.
template <scheme S>
TRICKLE_HOST_DEVICE std::int32_t round_code(float t, float zero) {
    if constexpr (S == scheme::midrise)
        return round_even(add_rn(t, zero)); // t + 1.5 is exact or rounds below the code spacing
    else
        return static_cast<std::int32_t>(trickle::detail::float_bits(add_rn(t, add_rn(zero, 12582912.0f)))) -
               0x4b400000;
}

// floor(t) + (u < t - floor(t)) with u = word * 2^-32 in [0, 1): rounds up with
// probability (t - floor(t)), to 2^-24. t is within [-128, 255].
TRICKLE_HOST_DEVICE std::int32_t round_stochastic(float t, std::uint32_t word) {
    std::int32_t k = round_even(t);
    k -= static_cast<float>(k) > t ? 1 : 0; // floor
    const float frac = sub_rn(t, static_cast<float>(k));
    return k + (uniform01(word) < frac ? 1 : 0);
}

} // namespace detail

// The code of x under p (signed for symmetric, [0, L] otherwise), rounded to nearest even.
template <class Format>
TRICKLE_HOST_DEVICE std::int32_t quantize_nearest(float x, const block_params& p) {
    if (p.scale == 0.0f) return detail::round_code<Format::kind>(0.0f, p.zero);
    const float t = p.divide ? detail::scaled<true>(x, p) : detail::scaled<false>(x, p);
    return detail::round_code<Format::kind>(t, p.zero);
}

// The code of x under p, rounded stochastically with the uniform word w.
template <class Format>
TRICKLE_HOST_DEVICE std::int32_t quantize_stochastic(float x, std::uint32_t w, const block_params& p) {
    if (p.scale == 0.0f) return detail::round_code<Format::kind>(0.0f, p.zero);
    const float t = p.divide ? detail::scaled<true>(x, p) : detail::scaled<false>(x, p);
    return detail::round_stochastic(detail::add_rn(t, p.zero), w);
}

// The value of code q (as quantize_* returns it) under a block's scale and zero.
TRICKLE_HOST_DEVICE float dequantize(std::int32_t q, float scale, float zero) {
    return detail::mul_rn(detail::sub_rn(static_cast<float>(q), zero), scale);
}

namespace detail {

inline constexpr std::size_t chunk = 32; // values coded per inner loop (a whole number of bytes for every format)

// Sign-extends the low Bits bits of a code (symmetric formats).
template <unsigned Bits>
TRICKLE_HOST_DEVICE std::int32_t sign_extend(std::uint32_t c) {
    return static_cast<std::int32_t>(c << (32 - Bits)) >> (32 - Bits);
}

// Packs count codes (count <= chunk; codes[count..] are zero up to a whole byte) into
// code_bytes(count) bytes.
template <class Format>
TRICKLE_HOST_DEVICE void pack(const std::uint8_t* codes, std::size_t count, std::byte* out) {
    const std::size_t bytes = Format::code_bytes(count);
    for (std::size_t j = 0; j < bytes; ++j) {
        std::uint32_t b = 0;
        for (std::size_t l = 0; l < Format::values_per_byte; ++l)
            b |= static_cast<std::uint32_t>(codes[j * Format::values_per_byte + l]) << (l * Format::bits);
        out[j] = static_cast<std::byte>(b);
    }
}

// The code of x under p (a block with a nonzero scale), w its word when stochastic.
template <class Format, bool Divide, bool Stochastic>
TRICKLE_HOST_DEVICE std::int32_t round_value(float x, const block_params& p, std::uint32_t w) {
    const float t = scaled<Divide>(x, p);
    if constexpr (Stochastic)
        return round_stochastic(add_rn(t, p.zero), w);
    else
        return (void)w, round_code<Format::kind>(t, p.zero);
}

template <class Format, bool Divide, bool Stochastic>
TRICKLE_HOST_DEVICE void quantize_chunk(const float* in, std::size_t count, const block_params& p,
                                        const std::uint32_t* words, std::uint8_t* codes) {
    for (std::size_t i = 0; i < count; ++i) {
        const std::int32_t q = round_value<Format, Divide, Stochastic>(in[i], p, Stochastic ? words[i] : 0u);
        codes[i] = static_cast<std::uint8_t>(static_cast<std::uint32_t>(q) & Format::code_mask);
    }
}

// Encodes one block; words is null for round-to-nearest, else a source of the block's
// words with the block's first value at index `first`.
template <class Format, bool Stochastic, class Words>
TRICKLE_HOST_DEVICE std::size_t encode_block_impl(const float* in, std::size_t m, std::byte* out, const Words* words,
                                                  std::size_t first) {
    if (m == 0) return 0;
    const block_params p = make_block_params<Format>(in, m);
    store_f32(out, p.scale);
    if constexpr (Format::kind == scheme::minmax) store_i32(out + 4, static_cast<std::int32_t>(p.zero));
    std::byte* codes_out = out + Format::header_bytes;
    std::uint8_t codes[chunk];
    std::uint32_t w[Stochastic ? chunk : 1] = {};
    for (std::size_t c0 = 0; c0 < m; c0 += chunk) {
        const std::size_t count = m - c0 < chunk ? m - c0 : chunk;
        if constexpr (Stochastic) fill_words(*words, first + c0, count, w);
        if (p.scale == 0.0f) { // no nonzero finite value: every code is the code of 0
            const auto zero_code = static_cast<std::uint8_t>(static_cast<std::uint32_t>(
                                       round_code<Format::kind>(0.0f, p.zero)) & Format::code_mask);
            for (std::size_t i = 0; i < count; ++i) codes[i] = zero_code;
        } else if (p.divide) {
            quantize_chunk<Format, true, Stochastic>(in + c0, count, p, w, codes);
        } else {
            quantize_chunk<Format, false, Stochastic>(in + c0, count, p, w, codes);
        }
        for (std::size_t i = count; i < chunk; ++i) codes[i] = 0;
        pack<Format>(codes, count, codes_out + c0 / Format::values_per_byte);
    }
    // Zero padding up to the record's end.
    const std::size_t used = Format::header_bytes + Format::code_bytes(m);
    for (std::size_t j = used; j < Format::record_bytes(m); ++j) out[j] = std::byte{0};
    return Format::record_bytes(m);
}

struct no_words {
    TRICKLE_HOST_DEVICE std::uint32_t operator()(std::size_t) const { return 0; }
};

} // namespace detail

// Encodes the block of m values at in (1 <= m; m is the block size B, or less for the
// last block) into record_bytes(m) bytes at out, rounding to nearest even. Returns the
// bytes written.
template <class Format>
TRICKLE_HOST_DEVICE std::size_t encode_block(const float* in, std::size_t m, std::byte* out) {
    return detail::encode_block_impl<Format, false, detail::no_words>(in, m, out, nullptr, 0);
}

// The same with stochastic rounding: value i of the block takes words(first + i).
template <class Format, word_source Words>
TRICKLE_HOST_DEVICE std::size_t encode_block(const float* in, std::size_t m, std::byte* out, const Words& words,
                                             std::size_t first) {
    return detail::encode_block_impl<Format, true, Words>(in, m, out, &words, first);
}

// Decodes the record of a block of m values at in into out[0..m). Returns the bytes read.
template <class Format>
TRICKLE_HOST_DEVICE std::size_t decode_block(const std::byte* in, std::size_t m, float* out) {
    if (m == 0) return 0;
    const float scale = detail::load_f32(in);
    const float zero = Format::kind == scheme::minmax    ? static_cast<float>(detail::load_i32(in + 4))
                       : Format::kind == scheme::midrise ? 1.5f
                                                         : 0.0f;
    const std::byte* codes = in + Format::header_bytes;
    constexpr std::size_t per_byte = Format::values_per_byte;
    std::int32_t q[detail::chunk];
    for (std::size_t c0 = 0; c0 < m; c0 += detail::chunk) {
        const std::size_t count = m - c0 < detail::chunk ? m - c0 : detail::chunk;
        const std::byte* bytes = codes + c0 / per_byte;
        // Unpack whole bytes (a constant shift per position in the byte), then scale.
        for (std::size_t j = 0; j < Format::code_bytes(count); ++j) {
            const std::uint32_t b = static_cast<std::uint32_t>(bytes[j]);
            for (std::size_t l = 0; l < per_byte; ++l) {
                const std::uint32_t c = (b >> (l * Format::bits)) & Format::code_mask;
                q[j * per_byte + l] = Format::kind == scheme::symmetric ? detail::sign_extend<Format::bits>(c)
                                                                        : static_cast<std::int32_t>(c);
            }
        }
        for (std::size_t i = 0; i < count; ++i) out[c0 + i] = dequantize(q[i], scale, zero);
    }
    return Format::record_bytes(m);
}

// n values in blocks of B (B >= 1), back to back; the last block holds n % B values when
// that is not 0. Writes Format::encoded_bytes(n, B) bytes.
template <class Format>
TRICKLE_HOST_DEVICE void encode_blocks(const float* in, std::size_t n, std::size_t B, std::byte* out) {
    if (B == 0) return;
    for (std::size_t i = 0; i < n; i += B) out += encode_block<Format>(in + i, n - i < B ? n - i : B, out);
}

// The same with stochastic rounding: value i takes words(i).
template <class Format, word_source Words>
TRICKLE_HOST_DEVICE void encode_blocks(const float* in, std::size_t n, std::size_t B, std::byte* out,
                                       const Words& words) {
    if (B == 0) return;
    for (std::size_t i = 0; i < n; i += B) out += encode_block<Format>(in + i, n - i < B ? n - i : B, out, words, i);
}

template <class Format>
TRICKLE_HOST_DEVICE void decode_blocks(const std::byte* in, std::size_t n, std::size_t B, float* out) {
    if (B == 0) return;
    for (std::size_t i = 0; i < n; i += B) in += decode_block<Format>(in, n - i < B ? n - i : B, out + i);
}

// A block coded by several lanes at once (kernels/codec_pass.hpp): the block's extent is
// reduced over the lanes, every lane derives the same block_params from it (params_of),
// one lane writes the header (store_header) and each codes its own quads, runs of
// quad_values values starting at a multiple of quad_values in the block, whose codes are
// whole bytes of the record (encode_quad, decode_quad). The bytes are encode_block's.
//
// A quad lives in registers: its loops run quad_values times with the values past
// `count` (the block's end) masked, so nvcc indexes its arrays with constants and keeps
// them out of local memory (scripts/check_sass.py checks the lane kernels for that).

template <class Format>
TRICKLE_HOST_DEVICE void store_header(const block_params& p, std::byte* record) {
    detail::store_f32(record, p.scale);
    if constexpr (Format::kind == scheme::minmax) detail::store_i32(record + 4, static_cast<std::int32_t>(p.zero));
}

namespace detail {

// x[0, count) into registers, zeros after (count <= quad_values).
TRICKLE_HOST_DEVICE void load_quad(const float* x, std::size_t count, float (&v)[quad_values]) {
    TRICKLE_UNROLL
    for (std::size_t i = 0; i < quad_values; ++i) v[i] = i < count ? x[i] : 0.0f;
}

// v[0, count) into x.
TRICKLE_HOST_DEVICE void store_quad(const float (&v)[quad_values], std::size_t count, float* x) {
    TRICKLE_UNROLL
    for (std::size_t i = 0; i < quad_values; ++i)
        if (i < count) x[i] = v[i];
}

// The codes of a quad (quantize_chunk's, unrolled).
template <class Format, bool Divide, bool Stochastic>
TRICKLE_HOST_DEVICE void quad_round(const float (&v)[quad_values], const block_params& p,
                                    const std::uint32_t (&w)[quad_values], std::int32_t (&q)[quad_values]) {
    TRICKLE_UNROLL
    for (std::size_t i = 0; i < quad_values; ++i) q[i] = round_value<Format, Divide, Stochastic>(v[i], p, w[i]);
}

// The codes of v[0, count) under p, as encode_block_impl computes them; zero after count.
template <class Format, bool Stochastic, class Words>
TRICKLE_HOST_DEVICE void quad_codes(const float (&v)[quad_values], std::size_t count, const block_params& p,
                                    const Words* words, std::size_t first, std::uint8_t (&codes)[quad_values]) {
    std::uint32_t w[quad_values] = {};
    if constexpr (Stochastic) {
#if TRICKLE_ON_DEVICE
        TRICKLE_UNROLL
        for (std::size_t i = 0; i < quad_values; ++i)
            if (i < count) w[i] = static_cast<std::uint32_t>((*words)(first + i));
#else
        fill_words(*words, first, count, w);
#endif
    }
    // One branch a quad (not a value): the division's slow path stays out of the common one.
    std::int32_t q[quad_values];
    if (p.scale == 0.0f) {
        const std::int32_t zero_code = round_code<Format::kind>(0.0f, p.zero);
        TRICKLE_UNROLL
        for (std::size_t i = 0; i < quad_values; ++i) q[i] = zero_code;
    } else if (p.divide) {
        quad_round<Format, true, Stochastic>(v, p, w, q);
    } else {
        quad_round<Format, false, Stochastic>(v, p, w, q);
    }
    TRICKLE_UNROLL
    for (std::size_t i = 0; i < quad_values; ++i)
        codes[i] = i < count ? static_cast<std::uint8_t>(static_cast<std::uint32_t>(q[i]) & Format::code_mask)
                             : std::uint8_t{0};
}

// The value of a masked code (sign-extended for symmetric formats).
template <class Format>
TRICKLE_HOST_DEVICE std::int32_t code_value(std::uint32_t c) {
    return Format::kind == scheme::symmetric ? sign_extend<Format::bits>(c) : static_cast<std::int32_t>(c);
}

// Bytes of a quad's codes: 4 (int8), 2 (int4), 1 (2-bit).
template <class Format>
inline constexpr std::size_t quad_code_bytes = quad_values * Format::bits / 8;

// A quad's codes packed low bits first: code i at bit i * bits.
template <class Format>
TRICKLE_HOST_DEVICE std::uint32_t quad_word(const std::uint8_t (&codes)[quad_values]) {
    std::uint32_t word = 0;
    TRICKLE_UNROLL
    for (std::size_t i = 0; i < quad_values; ++i) word |= static_cast<std::uint32_t>(codes[i]) << (i * Format::bits);
    return word;
}

// The low N bytes of a quad's code word at `at` (N = quad_code_bytes: a multiple of N
// past a 4-byte aligned record header, so aligned to N): one store on the device.
template <std::size_t N>
TRICKLE_HOST_DEVICE void store_quad_word(std::uint32_t word, std::byte* at) {
    constexpr std::size_t n = N;
#if TRICKLE_ON_DEVICE
    if constexpr (n == 4) *reinterpret_cast<std::uint32_t*>(at) = word;
    else if constexpr (n == 2) *reinterpret_cast<std::uint16_t*>(at) = static_cast<std::uint16_t>(word);
    else *reinterpret_cast<std::uint8_t*>(at) = static_cast<std::uint8_t>(word);
#else
    for (std::size_t k = 0; k < n; ++k) at[k] = static_cast<std::byte>((word >> (8 * k)) & 0xffu);
#endif
}

template <std::size_t N>
TRICKLE_HOST_DEVICE std::uint32_t load_quad_word(const std::byte* at) {
    constexpr std::size_t n = N;
#if TRICKLE_ON_DEVICE
    if constexpr (n == 4) return *reinterpret_cast<const std::uint32_t*>(at);
    else if constexpr (n == 2) return *reinterpret_cast<const std::uint16_t*>(at);
    else return *reinterpret_cast<const std::uint8_t*>(at);
#else
    std::uint32_t word = 0;
    for (std::size_t k = 0; k < n; ++k) word |= static_cast<std::uint32_t>(at[k]) << (8 * k);
    return word;
#endif
}

template <class Format, bool Stochastic, class Words>
TRICKLE_HOST_DEVICE void encode_quad_impl(const float* x, std::size_t count, const block_params& p, std::byte* record,
                                          std::size_t j, std::size_t m, const Words* words, std::size_t first,
                                          float* decoded) {
    float v[quad_values];
    load_quad(x, count, v);
    std::uint8_t codes[quad_values];
    quad_codes<Format, Stochastic>(v, count, p, words, first, codes);
    // Past the block's end the codes are 0, the record's padding: the quad's bytes stay
    // inside the record, whose code bytes are padded to a multiple of 4.
    store_quad_word<quad_code_bytes<Format>>(quad_word<Format>(codes), record + Format::header_bytes + j / Format::values_per_byte);
    if (j + count == m) // the block's last quad: the rest of the padding up to the record's end
        for (std::size_t k = Format::header_bytes + (j + quad_values) / Format::values_per_byte;
             k < Format::record_bytes(m); ++k)
            record[k] = std::byte{0};
    if (decoded != nullptr) {
        float d[quad_values];
        TRICKLE_UNROLL
        for (std::size_t i = 0; i < quad_values; ++i) d[i] = dequantize(code_value<Format>(codes[i]), p.scale, p.zero);
        store_quad(d, count, decoded);
    }
}

} // namespace detail

// Values [j, j + count) of a block of m values (j a multiple of quad_values, count <=
// quad_values, j + count <= m), x pointing at value j, coded under p into their bytes of
// the record; the quad that ends the block also writes the record's padding. decoded
// (when not null) receives the values the codes decode to (what decode_quad would read).
template <class Format>
TRICKLE_HOST_DEVICE void encode_quad(const float* x, std::size_t count, const block_params& p, std::byte* record,
                                     std::size_t j, std::size_t m, float* decoded = nullptr) {
    detail::encode_quad_impl<Format, false, detail::no_words>(x, count, p, record, j, m, nullptr, 0, decoded);
}

// The same with stochastic rounding: value i of the quad takes words(first + i).
template <class Format, word_source Words>
TRICKLE_HOST_DEVICE void encode_quad(const float* x, std::size_t count, const block_params& p, std::byte* record,
                                     std::size_t j, std::size_t m, const Words& words, std::size_t first,
                                     float* decoded = nullptr) {
    detail::encode_quad_impl<Format, true, Words>(x, count, p, record, j, m, &words, first, decoded);
}

// Values [j, j + count) of the block whose record is at `record` (j a multiple of
// quad_values, count <= quad_values), decoded into out[0, count).
template <class Format>
TRICKLE_HOST_DEVICE void decode_quad(const std::byte* record, std::size_t j, std::size_t count, float* out) {
    const float scale = detail::load_f32(record);
    const float zero = Format::kind == scheme::minmax    ? static_cast<float>(detail::load_i32(record + 4))
                       : Format::kind == scheme::midrise ? 1.5f
                                                         : 0.0f;
    const std::uint32_t word =
        detail::load_quad_word<detail::quad_code_bytes<Format>>(record + Format::header_bytes + j / Format::values_per_byte);
    TRICKLE_UNROLL
    for (std::size_t i = 0; i < quad_values; ++i) {
        const std::uint32_t c = (word >> (i * Format::bits)) & Format::code_mask;
        if (i < count) out[i] = dequantize(detail::code_value<Format>(c), scale, zero);
    }
}

} // namespace codec

TRICKLE_NAMESPACE_END
