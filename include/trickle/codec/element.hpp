// trickle/codec/element.hpp: codecs that code every value on its own: fp32, bf16, fp16, fp8 E4M3 and E5M2.
//
// | codec      | bytes/value | fp32 -> code                                              | code -> fp32 |
// |------------|-------------|-----------------------------------------------------------|--------------|
// | `fp32`     | 4           | the value's bits (identity, NaN payloads included)         | identity |
// | `bf16`     | 2           | round to nearest even; overflow -> inf; NaN -> quiet NaN, sign and payload kept | exact |
// | `fp16`     | 2           | round to nearest even; >= 65520 -> inf; NaN -> quiet NaN, sign and payload kept | exact |
// | `fp8_e4m3` | 1           | round to nearest even, saturating to +-448 (Inf too); NaN -> 0x7F | exact; NaN -> 0x7FFFFFFF |
// | `fp8_e5m2` | 1           | round to nearest even, saturating to +-57344 (Inf too); NaN -> 0x7F | exact; NaN -> 0x7FFFFFFF |
//
// bf16 and fp16 are the conversions of trickle's parameter types (core/dtype.hpp), so the
// `bf16` codec sends exactly what a bf16 parameter stores; they agree bit for bit with
// CUDA's __float2bfloat16_rn / __float2half_rn for every non-NaN input (CUDA returns the
// canonical NaN 0x7FFF instead of the quieted input NaN). Like those, they are not
// saturating: a finite value beyond the format's range becomes an infinity. fp8 is
// codec/float8.hpp (bit-exact with __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)).
//
// Codes are stored little-endian at any alignment, value i at byte i * bytes/value.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/codec/float8.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

namespace detail {

// The array and block members of a codec whose Derived provides code_type and the static
// per-value functions encode_value(float) -> code_type and decode_value(code_type) -> float.
template <class Derived>
struct element_codec {
    TRICKLE_HOST_DEVICE static constexpr std::size_t bytes_per_value() { return sizeof(typename Derived::code_type); }
    TRICKLE_HOST_DEVICE std::size_t wire_bytes(std::size_t n) const { return n * bytes_per_value(); }
    // Every value is its own block: any run of values is a whole number of blocks.
    TRICKLE_HOST_DEVICE std::size_t block_values() const { return 1; }
    TRICKLE_HOST_DEVICE std::size_t block_bytes(std::size_t m) const { return m * bytes_per_value(); }
    TRICKLE_HOST_DEVICE std::size_t block_offset(std::size_t b) const { return b * bytes_per_value(); }

    TRICKLE_HOST_DEVICE void encode(const float* in, std::size_t n, std::byte* out) const {
        using code = typename Derived::code_type;
        for (std::size_t i = 0; i < n; ++i) {
            const code c = Derived::encode_value(in[i]);
            std::memcpy(out + i * sizeof(code), &c, sizeof(code));
        }
    }
    TRICKLE_HOST_DEVICE void decode(const std::byte* in, std::size_t n, float* out) const {
        using code = typename Derived::code_type;
        for (std::size_t i = 0; i < n; ++i) {
            code c;
            std::memcpy(&c, in + i * sizeof(code), sizeof(code));
            out[i] = Derived::decode_value(c);
        }
    }
    TRICKLE_HOST_DEVICE void encode_block(const float* in, std::size_t m, std::byte* out) const { encode(in, m, out); }
    TRICKLE_HOST_DEVICE void decode_block(const std::byte* in, std::size_t m, float* out) const { decode(in, m, out); }

    void describe(config_record& rec) const { rec.add("codec", Derived::name); }
};

} // namespace detail

// fp32: today's wire, the values' own bits.
struct fp32 : detail::element_codec<fp32> {
    static constexpr const char* name = "fp32";
    using code_type = std::uint32_t;
    TRICKLE_HOST_DEVICE static code_type encode_value(float x) { return trickle::detail::float_bits(x); }
    TRICKLE_HOST_DEVICE static float decode_value(code_type c) { return trickle::detail::bits_float(c); }

    TRICKLE_HOST_DEVICE void encode(const float* in, std::size_t n, std::byte* out) const {
        if (n) std::memcpy(out, in, n * sizeof(float));
    }
    TRICKLE_HOST_DEVICE void decode(const std::byte* in, std::size_t n, float* out) const {
        if (n) std::memcpy(out, in, n * sizeof(float));
    }
    TRICKLE_HOST_DEVICE void encode_block(const float* in, std::size_t m, std::byte* out) const { encode(in, m, out); }
    TRICKLE_HOST_DEVICE void decode_block(const std::byte* in, std::size_t m, float* out) const { decode(in, m, out); }
};

// bfloat16: the upper half of an fp32, rounded to nearest even (trickle::bfloat16's conversion).
struct bf16 : detail::element_codec<bf16> {
    static constexpr const char* name = "bf16";
    using code_type = std::uint16_t;
    TRICKLE_HOST_DEVICE static code_type encode_value(float x) { return trickle::detail::float_to_bf16_bits(x); }
    TRICKLE_HOST_DEVICE static float decode_value(code_type c) { return trickle::detail::bf16_bits_to_float(c); }
};

// IEEE binary16, rounded to nearest even (trickle::half's conversion).
struct fp16 : detail::element_codec<fp16> {
    static constexpr const char* name = "fp16";
    using code_type = std::uint16_t;
    TRICKLE_HOST_DEVICE static code_type encode_value(float x) { return trickle::detail::float_to_half_bits(x); }
    TRICKLE_HOST_DEVICE static float decode_value(code_type c) { return trickle::detail::half_bits_to_float(c); }
};

// OCP E4M3FN: 1 byte, largest finite 448, no infinities.
struct fp8_e4m3 : detail::element_codec<fp8_e4m3> {
    static constexpr const char* name = "fp8_e4m3";
    using code_type = std::uint8_t;
    TRICKLE_HOST_DEVICE static code_type encode_value(float x) { return encode_e4m3(x); }
    TRICKLE_HOST_DEVICE static float decode_value(code_type c) { return decode_e4m3(c); }
};

// OCP E5M2: 1 byte, largest finite 57344, infinities decode (but are never produced).
struct fp8_e5m2 : detail::element_codec<fp8_e5m2> {
    static constexpr const char* name = "fp8_e5m2";
    using code_type = std::uint8_t;
    TRICKLE_HOST_DEVICE static code_type encode_value(float x) { return encode_e5m2(x); }
    TRICKLE_HOST_DEVICE static float decode_value(code_type c) { return decode_e5m2(c); }
};

// The parameters' own precision on the wire: fp32 for float parameters, fp16 for
// trickle::half, bf16 for trickle::bfloat16. A bf16 or fp16 model's values then travel at
// 2 bytes, losslessly on the way out (the gathered values are exact images of the
// parameters). An algorithm resolves it with resolve_t<native, T>.
struct native {
    static constexpr const char* name = "native";
};

// The codec an algorithm over parameters of type T uses for policy C.
template <class C, class T>
struct resolve {
    using type = C;
};
template <class T>
struct resolve<native, T> {
    using type = std::conditional_t<std::is_same_v<T, half>, fp16, std::conditional_t<std::is_same_v<T, bfloat16>, bf16, fp32>>;
};
template <class C, class T>
using resolve_t = typename resolve<C, T>::type;

} // namespace codec

TRICKLE_NAMESPACE_END
