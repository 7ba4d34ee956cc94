// trickle/codec/block.hpp: the block-scaled codecs int8_block, int4_block and sign2_block.
//
// Each codes blocks of `block_size` values (B, default 64) as quantize.hpp describes: one
// record per block, a 4-byte fp32 scale (8 bytes with a min-max zero point) and the
// packed codes, padded to a multiple of 4 bytes; the last block of an array may be partial.
//
// | codec                               | codes          | bytes for B = 64          | bytes/value at B = 64 |
// |-------------------------------------|----------------|---------------------------|-----------------------|
// | `int8_block{B}` (symmetric)         | -127..127      | 4 + 64 = 68               | 1.0625 |
// | `int8_block{B, false}` (min-max)    | 0..255, zero point | 8 + 64 = 72           | 1.125  |
// | `int4_block{B}` (symmetric)         | -7..7          | 4 + 32 = 36               | 0.5625 |
// | `int4_block{B, false}` (min-max)    | 0..15, zero point  | 8 + 32 = 40           | 0.625  |
// | `sign2_block{B}`                    | {-1.5, -0.5, 0.5, 1.5} x s | 4 + 16 = 20   | 0.3125 |
//
// encode(in, n, out) rounds to nearest even; encode(in, n, out, words) rounds
// stochastically with words(i) for value i (codec::philox_words: trickle's shared Philox
// stream). Decoding does not depend on the rounding. A block_size of 0 is invalid:
// describe() reports it, and the array functions then do nothing.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/codec/quantize.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/error.hpp>

#include <cstddef>
#include <cstdint>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

namespace detail {

inline void describe_block(config_record& rec, const char* name, std::size_t block_size, const char* scheme_name) {
    rec.add("codec", name).add("codec_block_size", block_size).add("codec_scheme", scheme_name);
    if (block_size == 0)
        rec.set_error(trickle::detail::concat("codec::", name, ": block_size must be >= 1, got 0"));
}

// int8_block and int4_block: Bits-bit codes with an fp32 scale per block of block_size
// values; symmetric (codes -qmax..qmax, scale max|x| / qmax, qmax = 2^(Bits-1) - 1) or
// min-max (codes 0..2^Bits - 1, scale (max - min) / (2^Bits - 1), an integer zero point).
template <unsigned Bits>
struct int_block {
    static constexpr const char* name = Bits == 8 ? "int8" : "int4";
    std::size_t block_size = 64;
    bool symmetric = true;

    // Calls fn(Format{}) with the block_format the fields choose.
    template <class Fn>
    TRICKLE_HOST_DEVICE decltype(auto) visit(Fn&& fn) const {
        return symmetric ? fn(block_format<Bits, scheme::symmetric>{}) : fn(block_format<Bits, scheme::minmax>{});
    }

    TRICKLE_HOST_DEVICE std::size_t block_values() const { return block_size; }
    // Bytes of one block of m <= block_size values.
    TRICKLE_HOST_DEVICE std::size_t block_bytes(std::size_t m) const {
        return visit([&](auto f) { return decltype(f)::record_bytes(m); });
    }
    TRICKLE_HOST_DEVICE std::size_t wire_bytes(std::size_t n) const {
        return visit([&](auto f) { return decltype(f)::encoded_bytes(n, block_size); });
    }
    wire_parts wire_parts_of(std::size_t n) const {
        return symmetric ? block_format<Bits, scheme::symmetric>::parts(n, block_size)
                         : block_format<Bits, scheme::minmax>::parts(n, block_size);
    }
    // Byte offset of block b (every block before it is whole).
    TRICKLE_HOST_DEVICE std::size_t block_offset(std::size_t b) const { return b * block_bytes(block_size); }

    TRICKLE_HOST_DEVICE void encode(const float* in, std::size_t n, std::byte* out) const {
        visit([&](auto f) { encode_blocks<decltype(f)>(in, n, block_size, out); });
    }
    template <word_source Words>
    TRICKLE_HOST_DEVICE void encode(const float* in, std::size_t n, std::byte* out, const Words& words) const {
        visit([&](auto f) { encode_blocks<decltype(f)>(in, n, block_size, out, words); });
    }
    TRICKLE_HOST_DEVICE void decode(const std::byte* in, std::size_t n, float* out) const {
        visit([&](auto f) { decode_blocks<decltype(f)>(in, n, block_size, out); });
    }
    // One block of m <= block_size values; with words, `first` is the index of its first
    // value in the array (value i takes words(first + i)).
    TRICKLE_HOST_DEVICE void encode_block(const float* in, std::size_t m, std::byte* out) const {
        visit([&](auto f) { codec::encode_block<decltype(f)>(in, m, out); });
    }
    template <word_source Words>
    TRICKLE_HOST_DEVICE void encode_block(const float* in, std::size_t m, std::byte* out, const Words& words,
                                          std::size_t first) const {
        visit([&](auto f) { codec::encode_block<decltype(f)>(in, m, out, words, first); });
    }
    TRICKLE_HOST_DEVICE void decode_block(const std::byte* in, std::size_t m, float* out) const {
        visit([&](auto f) { codec::decode_block<decltype(f)>(in, m, out); });
    }

    void describe(config_record& rec) const {
        describe_block(rec, name, block_size, symmetric ? "symmetric" : "minmax");
    }
};

} // namespace detail

// int8 codes (one a byte) with an fp32 scale per block: int8_block{.block_size = 64,
// .symmetric = true}; symmetric: -127..127 times max|x| / 127; min-max: 0..255.
using int8_block = detail::int_block<8>;

// int4 codes (two a byte, low nibble first) with an fp32 scale per block; symmetric:
// -7..7 times max|x| / 7; min-max: 0..15.
using int4_block = detail::int_block<4>;

// 2-bit codes (four a byte, lowest pair first) on the midrise grid {-1.5, -0.5, 0.5, 1.5}
// times an fp32 scale max|x| / 1.5 per block of block_size values.
struct sign2_block {
    static constexpr const char* name = "sign2";
    using format = sign2_midrise;
    std::size_t block_size = 64;

    // Calls fn(format{}) (as int_block's visit does with the format its fields choose).
    template <class Fn>
    TRICKLE_HOST_DEVICE decltype(auto) visit(Fn&& fn) const {
        return fn(format{});
    }

    TRICKLE_HOST_DEVICE std::size_t block_values() const { return block_size; }
    TRICKLE_HOST_DEVICE std::size_t block_bytes(std::size_t m) const { return format::record_bytes(m); }
    TRICKLE_HOST_DEVICE std::size_t wire_bytes(std::size_t n) const { return format::encoded_bytes(n, block_size); }
    wire_parts wire_parts_of(std::size_t n) const { return format::parts(n, block_size); }
    TRICKLE_HOST_DEVICE std::size_t block_offset(std::size_t b) const { return b * block_bytes(block_size); }

    TRICKLE_HOST_DEVICE void encode(const float* in, std::size_t n, std::byte* out) const {
        encode_blocks<format>(in, n, block_size, out);
    }
    template <word_source Words>
    TRICKLE_HOST_DEVICE void encode(const float* in, std::size_t n, std::byte* out, const Words& words) const {
        encode_blocks<format>(in, n, block_size, out, words);
    }
    TRICKLE_HOST_DEVICE void decode(const std::byte* in, std::size_t n, float* out) const {
        decode_blocks<format>(in, n, block_size, out);
    }
    TRICKLE_HOST_DEVICE void encode_block(const float* in, std::size_t m, std::byte* out) const {
        codec::encode_block<format>(in, m, out);
    }
    template <word_source Words>
    TRICKLE_HOST_DEVICE void encode_block(const float* in, std::size_t m, std::byte* out, const Words& words,
                                          std::size_t first) const {
        codec::encode_block<format>(in, m, out, words, first);
    }
    TRICKLE_HOST_DEVICE void decode_block(const std::byte* in, std::size_t m, float* out) const {
        codec::decode_block<format>(in, m, out);
    }

    void describe(config_record& rec) const { detail::describe_block(rec, name, block_size, "midrise"); }
};

} // namespace codec

TRICKLE_NAMESPACE_END
