// trickle/codec/codec.hpp: what every codec shares: the codec concept, the random words of
// stochastic rounding, and the byte and rounding helpers of the wire formats.
//
// A codec turns n fp32 values into wire_bytes(n) bytes and back. It is the value layer of
// compression: it knows nothing of positions, workers or sums (the algorithms and
// topologies decide what is encoded, and when). A codec (concept codec_policy; the
// namespace trickle::codec holds them) is a small copyable struct with public fields and
//   static constexpr const char* name
//   std::size_t wire_bytes(std::size_t n) const                 bytes of n encoded values
//   void encode(const float* in, std::size_t n, std::byte* out) const
//   void decode(const std::byte* in, std::size_t n, float* out) const
//   std::size_t block_values() const          values per independently coded block (1 for
//                                             element codecs: every value is its own block)
//   std::size_t block_bytes(std::size_t m) const   bytes of one block of m <= block_values() values
//   std::size_t block_offset(std::size_t b) const  byte offset of block b in an array's encoding
//   void encode_block(const float* in, std::size_t m, std::byte* out) const
//   void decode_block(const std::byte* in, std::size_t m, float* out) const
//   void describe(config_record&) const       its parameters; set_error() for bad ones
// The whole-array encoding of n values is the blocks of block_values() values back to back,
// the last one partial: block b starts at byte b * block_bytes(block_values()), so any run
// of whole blocks is one contiguous byte range (a reduce-scatter can hand each worker a
// chunk of blocks). Every function that touches values is TRICKLE_HOST_DEVICE.
//
// The bytes are little-endian (every platform trickle runs on: x86-64, AArch64, CUDA
// devices). Decoding is pure integer work plus at most one IEEE multiply per value, so the
// same bytes decode to the same bits on every machine, host or device; encoding is
// deterministic too (no fused multiply-add can change it: see detail::mul_rn).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/core/random_batch.hpp>
#include <trickle/kernels/outer_rule.hpp>

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>

TRICKLE_NAMESPACE_BEGIN

static_assert(std::endian::native == std::endian::little, "trickle's wire formats are little-endian");

template <class C>
concept codec_policy = std::copy_constructible<C> &&
                       requires(const C& c, const float* in, float* out, std::byte* wire, const std::byte* cwire,
                                std::size_t n, config_record& rec) {
                           { C::name } -> std::convertible_to<const char*>;
                           { c.wire_bytes(n) } -> std::convertible_to<std::size_t>;
                           { c.block_values() } -> std::convertible_to<std::size_t>;
                           { c.block_bytes(n) } -> std::convertible_to<std::size_t>;
                           { c.block_offset(n) } -> std::convertible_to<std::size_t>;
                           c.encode(in, n, wire);
                           c.decode(cwire, n, out);
                           c.encode_block(in, n, wire);
                           c.decode_block(cwire, n, out);
                           c.describe(rec);
                       };

// A codec chosen at run time (codec::any): it holds one codec in a std::variant `held`,
// visited once per array or block. The encoded paths resolve it through this concept, so
// that they compile without the header of every codec.
template <class C>
concept type_erased_codec = requires(const C& c) { c.held; };

namespace codec {

// The uniform 32-bit words of stochastic rounding, from trickle's shared Philox4x32-10
// stream: word i is half i % 2 (low, then high) of random_u64(seed, stream, i / 2), i.e.
// lane i % 2 of random_words(seed, stream, i / 2). Every worker that knows (seed, stream)
// draws the same words, on host and device; fill() computes a run of them with the SIMD
// Philox lanes of core/random_batch.hpp on x86-64 hosts. The caller picks the stream:
// an algorithm gives each exchange its own, e.g. detail::stream_id(<its tag>, exchange),
// and i is the value's index in the array it encodes.
struct philox_words {
    std::uint64_t seed = 0;
    std::uint64_t stream = 0;

    TRICKLE_HOST_DEVICE std::uint32_t operator()(std::size_t i) const {
        return random_words(seed, stream, static_cast<std::uint64_t>(i) >> 1)[static_cast<int>(i & 1u)];
    }

    // dst[j] = (*this)(first + j) for j < count.
    TRICKLE_HOST_DEVICE void fill(std::size_t first, std::size_t count, std::uint32_t* dst) const {
#if TRICKLE_ON_DEVICE
        for (std::size_t j = 0; j < count; ++j) dst[j] = (*this)(first + j);
#else
        std::size_t j = 0;
        if (count > 0 && (first & 1u)) { // an odd start: the high half of its pair
            dst[0] = (*this)(first);
            j = 1;
        }
        std::uint64_t pairs[32];
        while (count - j >= 2) {
            const std::size_t m = (count - j) / 2 < 32 ? (count - j) / 2 : 32;
            trickle::detail::random_u64_run(seed, stream, static_cast<std::uint64_t>(first + j) >> 1, m, pairs);
            for (std::size_t k = 0; k < m; ++k) {
                dst[j + 2 * k] = static_cast<std::uint32_t>(pairs[k]);
                dst[j + 2 * k + 1] = static_cast<std::uint32_t>(pairs[k] >> 32);
            }
            j += 2 * m;
        }
        if (j < count) dst[j] = (*this)(first + j);
#endif
    }
};

// What a codec's bytes are made of: the codes of the values, the per-block scales (and
// zero points), the indices of a sparsifier's kept values, and padding (record and word
// alignment). A codec may say how its encoding of n values splits with
//   wire_parts wire_parts_of(std::size_t n) const
// (parts_of below; without it every byte is a code). The parts always sum to wire_bytes(n).
struct wire_parts {
    std::uint64_t codes = 0;
    std::uint64_t scales = 0;
    std::uint64_t indices = 0;
    std::uint64_t padding = 0;

    std::uint64_t total() const { return codes + scales + indices + padding; }
    wire_parts& operator+=(const wire_parts& o) {
        codes += o.codes;
        scales += o.scales;
        indices += o.indices;
        padding += o.padding;
        return *this;
    }
    friend wire_parts operator*(wire_parts a, std::uint64_t k) {
        a.codes *= k;
        a.scales *= k;
        a.indices *= k;
        a.padding *= k;
        return a;
    }
    friend bool operator==(const wire_parts&, const wire_parts&) = default;
};

template <class C>
wire_parts parts_of(const C& c, std::size_t n) {
    if constexpr (requires { { c.wire_parts_of(n) } -> std::convertible_to<wire_parts>; })
        return c.wire_parts_of(n);
    else
        return wire_parts{.codes = c.wire_bytes(n)};
}

// A source of random words: words(i) is the uniform 32-bit word of value i.
template <class W>
concept word_source = requires(const W& w, std::size_t i) {
    { w(i) } -> std::convertible_to<std::uint32_t>;
};

namespace detail {

// dst[j] = words(first + j), in bulk when the source can.
template <word_source Words>
TRICKLE_HOST_DEVICE void fill_words(const Words& words, std::size_t first, std::size_t count, std::uint32_t* dst) {
    if constexpr (requires { words.fill(first, count, dst); }) {
        words.fill(first, count, dst);
    } else {
        for (std::size_t j = 0; j < count; ++j) dst[j] = static_cast<std::uint32_t>(words(first + j));
    }
}

// IEEE operations that the compiler may not fuse with a neighbour: nvcc contracts a * b + c
// into an FMA by default, and g++ does where the target has FMA (-march=native), which
// would change the rounding between a host and a device encoder. Device code uses the _rn
// intrinsics, which are never contracted; host code needs nothing more because every sum
// in the codecs takes an operand that did not come from a product (a clamp or a
// conversion stands between them). The product, sum and difference are the outer rules' (kernels/outer_rule.hpp).
using trickle::add_rn;
using trickle::mul_rn;
using trickle::sub_rn;

TRICKLE_HOST_DEVICE float div_rn(float a, float b) {
#if TRICKLE_ON_DEVICE
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

// v clamped to [lo, hi]; NaN stays NaN.
TRICKLE_HOST_DEVICE float clamp(float v, float lo, float hi) {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

// The integer nearest to v, ties to even, for |v| <= 2^22: adding 1.5 * 2^23 leaves the
// rounded value in the low mantissa bits (the FPU rounds to nearest even), read back as an
// integer. Independent of the rounding functions of <cmath>, which are library calls
// without SSE4.1, and vectorizes.
TRICKLE_HOST_DEVICE std::int32_t round_even(float v) {
    constexpr float magic = 12582912.0f; // 1.5 * 2^23, fp32 bits 0x4B400000
    return static_cast<std::int32_t>(trickle::detail::float_bits(add_rn(v, magic))) - 0x4b400000;
}

// Little-endian fp32 and int32 fields at any alignment.
TRICKLE_HOST_DEVICE void store_f32(std::byte* p, float v) { std::memcpy(p, &v, sizeof v); }
TRICKLE_HOST_DEVICE float load_f32(const std::byte* p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
TRICKLE_HOST_DEVICE void store_i32(std::byte* p, std::int32_t v) { std::memcpy(p, &v, sizeof v); }
TRICKLE_HOST_DEVICE std::int32_t load_i32(const std::byte* p) {
    std::int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

} // namespace detail

} // namespace codec

TRICKLE_NAMESPACE_END
