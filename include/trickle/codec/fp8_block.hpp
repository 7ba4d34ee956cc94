// trickle/codec/fp8_block.hpp: fp8 codes with an fp32 scale per block (fp8 that small values survive).
//
// Outer gradients are small: in trickle-sim most of DiLoCo's lie below E4M3's smallest
// subnormal (2^-9), so the element codec fp8_e4m3 flushes them to zero. fp8_block divides
// each block of block_size values by a scale first, so that the block's largest magnitude
// maps to the format's largest finite value (448 for E4M3, 57344 for E5M2), encodes the
// quotients with the element codec's rounding (nearest even, saturating), and multiplies
// them back on decoding. Wire: per block an fp32 scale, then one byte per value, padded
// to 4 bytes.
//   scale = max|x| over the block's finite values / fmax, rounded up to 16 significant
//           bits (codec::detail::set_scale), 0 for a block without a nonzero finite value
//   code  = encode(x * (1 / scale))      (x / scale for a subnormal scale)
//   value = decode(code) * scale
// NaN stays NaN (the element codec's NaN code); +-Inf saturate to +-fmax * scale. Every
// step is one IEEE operation (no fused multiply-add), so host and device agree bit for bit.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/codec/float8.hpp>
#include <trickle/codec/quantize.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

struct fp8_block {
    static constexpr const char* name = "fp8_block";
    std::size_t block_size = 64;
    bool e5m2 = false; // false: E4M3 (3 mantissa bits, max 448); true: E5M2 (2 bits, max 57344)

    TRICKLE_HOST_DEVICE std::size_t block_values() const { return block_size; }
    TRICKLE_HOST_DEVICE std::size_t block_bytes(std::size_t m) const { return 4 + (m + 3) / 4 * 4; }
    TRICKLE_HOST_DEVICE std::size_t block_offset(std::size_t b) const { return b * block_bytes(block_size); }
    TRICKLE_HOST_DEVICE std::size_t wire_bytes(std::size_t n) const {
        if (block_size == 0) return 0;
        const std::size_t whole = n / block_size, rest = n % block_size;
        return whole * block_bytes(block_size) + (rest ? block_bytes(rest) : 0);
    }
    wire_parts wire_parts_of(std::size_t n) const {
        if (block_size == 0) return {};
        const auto block = [&](std::size_t m) {
            if (m == 0) return wire_parts{};
            return wire_parts{.codes = m, .scales = 4, .padding = block_bytes(m) - 4 - m};
        };
        wire_parts p = block(block_size) * (n / block_size);
        p += block(n % block_size);
        return p;
    }

    TRICKLE_HOST_DEVICE float fmax() const { return e5m2 ? 57344.0f : 448.0f; }
    // The scale of a block whose largest finite magnitude has the bits amax_bits.
    TRICKLE_HOST_DEVICE block_params params_of(std::int32_t amax_bits) const {
        block_params p;
        detail::set_scale(p, detail::div_rn(trickle::detail::bits_float(static_cast<std::uint32_t>(amax_bits)), fmax()),
                          fmax());
        return p;
    }
    // The code of x in a block of parameters p, and the value a code decodes to.
    TRICKLE_HOST_DEVICE std::uint8_t code_of(const block_params& p, float x) const {
        const float t = p.scale == 0.0f ? x * 0.0f : p.divide ? detail::div_rn(x, p.scale) : detail::mul_rn(x, p.inv);
        return e5m2 ? encode_e5m2(t) : encode_e4m3(t);
    }
    TRICKLE_HOST_DEVICE float value_of(std::uint8_t code, float scale) const {
        return detail::mul_rn(e5m2 ? decode_e5m2(code) : decode_e4m3(code), scale);
    }

    TRICKLE_HOST_DEVICE void encode_block(const float* in, std::size_t m, std::byte* out) const {
        std::int32_t top = 0;
        for (std::size_t i = 0; i < m; ++i) {
            const std::int32_t a = detail::finite_abs_bits(in[i]);
            top = a > top ? a : top;
        }
        const block_params p = params_of(top);
        std::memcpy(out, &p.scale, 4);
        auto* codes = reinterpret_cast<std::uint8_t*>(out + 4);
        for (std::size_t i = 0; i < m; ++i) codes[i] = code_of(p, in[i]);
        for (std::size_t i = m; i < (m + 3) / 4 * 4; ++i) codes[i] = 0;
    }

    TRICKLE_HOST_DEVICE void decode_block(const std::byte* in, std::size_t m, float* out) const {
        float scale;
        std::memcpy(&scale, in, 4);
        const auto* codes = reinterpret_cast<const std::uint8_t*>(in + 4);
        for (std::size_t i = 0; i < m; ++i) out[i] = value_of(codes[i], scale);
    }

    TRICKLE_HOST_DEVICE void encode(const float* in, std::size_t n, std::byte* out) const {
        if (block_size == 0) return;
        for (std::size_t b = 0; b * block_size < n; ++b) {
            const std::size_t m = n - b * block_size < block_size ? n - b * block_size : block_size;
            encode_block(in + b * block_size, m, out + block_offset(b));
        }
    }
    TRICKLE_HOST_DEVICE void decode(const std::byte* in, std::size_t n, float* out) const {
        if (block_size == 0) return;
        for (std::size_t b = 0; b * block_size < n; ++b) {
            const std::size_t m = n - b * block_size < block_size ? n - b * block_size : block_size;
            decode_block(in + block_offset(b), m, out + b * block_size);
        }
    }

    void describe(config_record& rec) const {
        rec.add("codec", name).add("codec_block_size", block_size).add("codec_format", e5m2 ? "e5m2" : "e4m3");
        if (block_size == 0) rec.set_error("codec::fp8_block: block_size must be >= 1, got 0");
    }
};

} // namespace codec

static_assert(codec_policy<codec::fp8_block>);

TRICKLE_NAMESPACE_END
