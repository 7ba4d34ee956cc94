// trickle/codec/lanes.hpp: codec::lane_coder, a block-scaled codec's block cut into quads that several lanes code together.
//
// The device runs the encoded all-reduce's passes (kernels/codec_pass.hpp) with a group of
// lanes per codec block rather than a thread per block: lane l of a group of G takes the
// quads l, l + G, l + 2G, ... of the block (a quad: quad_values = 4 consecutive values,
// whose codes are whole bytes for every format), so neighbouring lanes read neighbouring
// values and write neighbouring code bytes. A block is then coded in three steps:
//
//   extent(x, count)         the extent of one quad (count <= quad_values), each lane
//                            combining its quads' with combine(a, b): the
//                            scale's inputs (integer maxima, so any split and any order of
//                            the reduction give the same bits)
//   params(total)            every lane, from the group's reduced extent: the same
//                            block_params everywhere, those of encode_block
//   store_header, encode_quad / decode_quad
//                            one lane writes the header, each lane codes its quads
//
// and the bytes are exactly encode_block's (tests/codec/test_lanes.cpp runs the lanes on
// the host, reduction included, against encode_block for every block codec, size and
// rounding). lane_coder<C> exists for int8_block, int4_block, sign2_block (through their
// visit(fn)) and fp8_block; element codecs (fp32, bf16, fp16, fp8_e4m3/e5m2) have one value
// a block and need none: a thread per value already reads and writes neighbouring values.
#pragma once

#include <trickle/codec/block.hpp>
#include <trickle/codec/codec.hpp>
#include <trickle/codec/element.hpp>
#include <trickle/codec/fp8_block.hpp>
#include <trickle/codec/quantize.hpp>
#include <trickle/config.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

// Undefined for codecs without a lane form (has_lane_coder<C> is false for them).
template <class C>
struct lane_coder;

namespace detail {

// What every lane coder has: the codec, its extent (block_extent: integer maxima) and the
// offset of block b's record.
template <class C>
struct lane_coder_base {
    using extent_type = block_extent;
    C codec{};

    TRICKLE_HOST_DEVICE static extent_type combine(const extent_type& a, const extent_type& b) {
        return codec::combine(a, b);
    }
    TRICKLE_HOST_DEVICE std::size_t block_offset(std::size_t b) const { return codec.block_offset(b); }
};

// The lane form of a codec with visit(fn), fn called with its block_format (int_block,
// sign2_block): quantize.hpp's extent_of, params_of, store_header, encode_quad and
// decode_quad for that format.
template <class C>
struct visited_lane_coder : lane_coder_base<C> {
    using typename lane_coder_base<C>::extent_type;
    using lane_coder_base<C>::codec;

    TRICKLE_HOST_DEVICE extent_type extent(const float* x, std::size_t count) const {
        return codec.visit([&](auto f) { return extent_of_quad<decltype(f)>(x, count); });
    }
    TRICKLE_HOST_DEVICE block_params params(const extent_type& e) const {
        return codec.visit([&](auto f) { return params_of<decltype(f)>(e); });
    }
    TRICKLE_HOST_DEVICE void store_header(const block_params& p, std::byte* record) const {
        codec.visit([&](auto f) { codec::store_header<decltype(f)>(p, record); });
    }
    // Quad [j, j + count) of a block of m values, x at value j; decoded may be null.
    TRICKLE_HOST_DEVICE void encode_quad(const block_params& p, const float* x, std::size_t count, std::size_t j,
                                         std::size_t m, std::byte* record, float* decoded) const {
        codec.visit([&](auto f) { codec::encode_quad<decltype(f)>(x, count, p, record, j, m, decoded); });
    }
    template <word_source Words>
    TRICKLE_HOST_DEVICE void encode_quad(const block_params& p, const float* x, std::size_t count, std::size_t j,
                                         std::size_t m, std::byte* record, float* decoded, const Words& words,
                                         std::size_t first) const {
        codec.visit([&](auto f) { codec::encode_quad<decltype(f)>(x, count, p, record, j, m, words, first, decoded); });
    }
    TRICKLE_HOST_DEVICE void decode_quad(const std::byte* record, std::size_t j, std::size_t count, float* out) const {
        codec.visit([&](auto f) { codec::decode_quad<decltype(f)>(record, j, count, out); });
    }
};

} // namespace detail

template <unsigned Bits>
struct lane_coder<detail::int_block<Bits>> : detail::visited_lane_coder<detail::int_block<Bits>> {};

template <>
struct lane_coder<sign2_block> : detail::visited_lane_coder<sign2_block> {};

// fp8_block: the extent is max|x| over the finite values (pos); a quad's four code bytes
// (zeros past the block's end: the record's padding) are one aligned 4-byte word.
template <>
struct lane_coder<fp8_block> : detail::lane_coder_base<fp8_block> {
    TRICKLE_HOST_DEVICE extent_type extent(const float* x, std::size_t count) const {
        std::int32_t top = 0;
        TRICKLE_UNROLL
        for (std::size_t i = 0; i < quad_values; ++i) {
            const std::int32_t a = i < count ? detail::finite_abs_bits(x[i]) : 0;
            top = a > top ? a : top;
        }
        return {top, 0};
    }
    TRICKLE_HOST_DEVICE block_params params(const extent_type& e) const { return codec.params_of(e.pos); }
    TRICKLE_HOST_DEVICE void store_header(const block_params& p, std::byte* record) const {
        std::memcpy(record, &p.scale, 4);
    }
    TRICKLE_HOST_DEVICE void encode_quad(const block_params& p, const float* x, std::size_t count, std::size_t j,
                                         std::size_t, std::byte* record, float* decoded) const {
        std::uint8_t codes[quad_values];
        std::uint32_t word = 0;
        TRICKLE_UNROLL
        for (std::size_t i = 0; i < quad_values; ++i) {
            codes[i] = i < count ? codec.code_of(p, x[i]) : std::uint8_t{0};
            word |= static_cast<std::uint32_t>(codes[i]) << (8 * i);
        }
        detail::store_quad_word<4>(word, record + 4 + j); // j + 4 <= the padded code bytes
        if (decoded != nullptr) {
            TRICKLE_UNROLL
            for (std::size_t i = 0; i < quad_values; ++i)
                if (i < count) decoded[i] = codec.value_of(codes[i], p.scale);
        }
    }
    TRICKLE_HOST_DEVICE void decode_quad(const std::byte* record, std::size_t j, std::size_t count, float* out) const {
        float scale;
        std::memcpy(&scale, record, 4);
        const std::uint32_t word = detail::load_quad_word<4>(record + 4 + j);
        TRICKLE_UNROLL
        for (std::size_t i = 0; i < quad_values; ++i)
            if (i < count) out[i] = codec.value_of(static_cast<std::uint8_t>(word >> (8 * i)), scale);
    }
};

template <class C>
concept has_lane_coder = requires { typename lane_coder<C>::extent_type; };

static_assert(has_lane_coder<int8_block> && has_lane_coder<int4_block> && has_lane_coder<sign2_block> &&
              has_lane_coder<fp8_block> && !has_lane_coder<bf16>);

} // namespace codec

TRICKLE_NAMESPACE_END
