// trickle/kernels/codec_pass.hpp: the kernel bodies of the encoded all-reduce, one codec block per index.
//
// codec::encoded_all_reduce (codec/reduce.hpp) sums n fp32 values over N workers as a
// reduce-scatter and an all-gather of encoded chunks. On the host it runs tile by tile,
// fused with the caller's passes; any other backend (the CUDA one, and the host in tests)
// runs it as three launches of these bodies, with the byte collectives in between:
//
//   encode_slots_body   index b: block b of the values (error feedback applied) encoded into
//                       the slot of the chunk that holds it, and this worker's residual
//   -- all_to_all of the slots --
//   sum_slots_body      index j: block j of my chunk, decoded from every worker's slot and
//                       added in rank order in fp32, then encoded into my outgoing slot
//   -- all_gather of the summed slots --
//   decode_slots_body   index b: block b decoded from its owner's slot into the values
//
// and zero_slot_tails_body clears the bytes of each slot past its chunk's encoding (sent,
// never decoded), so the wire carries no uninitialized memory.
//
// The bodies compute exactly what the host's tiled loop computes, value for value: the
// same blocks, the same rounding words (value i of the array takes word i of the caller's
// stream; the sum of my chunk takes words of the chunk's global indices), the same fp32
// operations in the same order (feedback_value, the rank-ordered sum). Both backends'
// results are therefore the same bits, tested on the host (tests/codec) and on a GPU
// (tests/cuda).
//
// The codec C is any type with the codec concept's block members callable on the device
// (every built-in codec except codec::any, which the caller resolves on the host). Words is
// nearest_words (round to nearest) or a source of uniform words with operator()(i) for
// stochastic rounding (codec::philox_words).
//
// Two forms run each pass. The *_slots_body types give one index a whole block (B values,
// typically 32 to 256): the form for element codecs (a block is one value, so adjacent
// threads touch adjacent values) and the reference of the other. The *_slots_lanes types
// give a block to a group of lanes (kernels/lane_group.hpp): the form for block-scaled
// codecs, whose lane coder (codec::lane_coder, a type with the members Lanes below names)
// splits a block into quads of 4 values, so neighbouring lanes read neighbouring values and
// write neighbouring code bytes, and the scale comes from a reduction over the group. The
// two forms write the same bytes and values (tests/codec/test_lanes.cpp, on the host through
// the lane emulation).
//
// The encode pass takes its values from a source and the decode pass hands the sums to a
// sink (value_source, value_sink below): an fp32 array for the all-reduce of an array, or
// a caller's functors that compute the values and consume the sums, which fuses the
// caller's own passes into these (DiLoCo's outer gradient and update on the device).
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/split.hpp>
#include <trickle/kernels/lane_group.hpp>
#include <trickle/kernels/outer_rule.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

// The value a worker sends with error feedback: its own value x plus beta times the
// residual r of its previous exchange. One home for the host's tiled path and these bodies.
TRICKLE_HOST_DEVICE float feedback_value(float x, float beta, float r) { return add_rn(x, mul_rn(beta, r)); }

// Round-to-nearest encoding: no words.
struct nearest_words {};

// Values of a quad: what a lane of the lane forms below codes at a time.
inline constexpr std::size_t lane_quad = 4;

// Where the encode pass takes its values and the decode pass leaves them. The encoded
// all-reduce of an array reads and writes fp32 values in memory (array_source,
// array_sink); a fused caller passes functors instead, which compute the values from its
// own state and apply the sums to it, so that no fp32 array is stored (DiLoCo's outer
// step: the outer gradient produced from the parameters, the update consuming the sums):
//   source(i, count, out)   writes values [i, i + count) into out[0, count)
//   sink(i, count, in)      takes the sums of values [i, i + count) from in[0, count)
// with count <= lane_quad (a lane's quad; 1 for an element codec's value). Both are called on
// the pass's execution space and must be trivially copyable. A source must give the same
// values each time it is asked (the lane form reads a quad twice: for the block's scale,
// then to encode it).
template <class S>
concept value_source = std::is_trivially_copyable_v<S> && requires(const S& s, std::size_t i, float* out) {
    s(i, i, out);
};
template <class S>
concept value_sink = std::is_trivially_copyable_v<S> && requires(const S& s, std::size_t i, const float* in) {
    s(i, i, in);
};

// (Writable: the thread-per-block form applies error feedback in place.)
struct array_source {
    float* values = nullptr;
    TRICKLE_HOST_DEVICE void operator()(std::size_t i, std::size_t count, float* out) const {
        TRICKLE_UNROLL
        for (std::size_t t = 0; t < lane_quad; ++t)
            if (t < count) out[t] = values[i + t];
    }
};

struct array_sink {
    float* values = nullptr;
    TRICKLE_HOST_DEVICE void operator()(std::size_t i, std::size_t count, const float* in) const {
        TRICKLE_UNROLL
        for (std::size_t t = 0; t < lane_quad; ++t)
            if (t < count) values[i + t] = in[t];
    }
};

// Encodes one block of m values, to nearest or with value j taking words(first + j).
template <class C, class Words>
TRICKLE_HOST_DEVICE void encode_block_with(const C& c, const float* in, std::size_t m, std::byte* out,
                                           const Words& words, std::size_t first) {
    if constexpr (std::is_same_v<Words, nearest_words>) {
        (void)words, (void)first;
        c.encode_block(in, m, out);
    } else {
        c.encode_block(in, m, out, words, first);
    }
}

// Where the values' codec blocks travel: n values in blocks of B, the blocks split evenly
// over `ranks` chunks (detail::chunk_begin), chunk r encoded into slot r of E bytes.
struct slot_layout {
    std::size_t n = 0;
    std::size_t B = 1;      // values per codec block
    std::size_t blocks = 0; // ceil(n / B)
    std::size_t E = 0;      // bytes of every slot
    int ranks = 1;

    TRICKLE_HOST_DEVICE std::size_t block_size(std::size_t b) const {
        const std::size_t i0 = b * B;
        return n - i0 < B ? n - i0 : B;
    }
    TRICKLE_HOST_DEVICE int owner(std::size_t b) const { return detail::chunk_owner(blocks, ranks, b); }
    TRICKLE_HOST_DEVICE std::size_t first_block(int r) const { return detail::chunk_begin(blocks, ranks, r); }
    TRICKLE_HOST_DEVICE std::size_t chunk_blocks(int r) const { return detail::chunk_size(blocks, ranks, r); }
    // Values in chunk r.
    TRICKLE_HOST_DEVICE std::size_t chunk_values(int r) const {
        const std::size_t nb = chunk_blocks(r);
        if (nb == 0) return 0;
        const std::size_t last = first_block(r) + nb - 1;
        return (nb - 1) * B + block_size(last);
    }
};

// A codec that codes each value on its own (codec/element.hpp: fp32, bf16, fp16, fp8): a
// code_type and static encode_value / decode_value. The bodies below give such a codec's
// value its own short path: one value per index with the block size fixed at one at
// compile time, and the code stored and loaded as one typed access where its address is
// aligned for it (memcpy byte by byte otherwise: codes lie at any alignment on the wire).
// The same bits as the general path, which the first H200 profile found spending ~160
// instructions a value on the general path's runtime-sized loops and byte-wise copies
// (bf16 encode at 27% of B_copy with 63% of issue slots busy).
template <class C>
concept per_value_codec = requires(float x, typename C::code_type c) {
    { C::encode_value(x) } -> std::same_as<typename C::code_type>;
    { C::decode_value(c) } -> std::same_as<float>;
};

template <class Code>
TRICKLE_HOST_DEVICE void store_code(std::byte* p, Code c) {
#if TRICKLE_ON_DEVICE
    if (reinterpret_cast<std::uintptr_t>(p) % sizeof(Code) == 0) {
        *reinterpret_cast<Code*>(p) = c;
        return;
    }
#endif
    std::memcpy(p, &c, sizeof(Code));
}

template <class Code>
TRICKLE_HOST_DEVICE Code load_code(const std::byte* p) {
#if TRICKLE_ON_DEVICE
    if (reinterpret_cast<std::uintptr_t>(p) % sizeof(Code) == 0) return *reinterpret_cast<const Code*>(p);
#endif
    Code c;
    std::memcpy(&c, p, sizeof(Code));
    return c;
}

// Index b < L.blocks: with a residual, values[i] = feedback_value(values[i], beta,
// residual[i]) for the block's values; the block encoded into its owner's slot of `slots`
// (N slots of E bytes); then residual[i] = values[i] - decode(code)[i]. With a source
// other than an array, blocks are single values (element codecs; the caller checks B = 1).
template <class C, class Words = nearest_words, value_source Source = array_source>
struct encode_slots_body {
    C codec{};
    slot_layout at{};
    Source source{};
    float* residual = nullptr; // null: no error feedback
    float beta = 0.0f;
    std::byte* slots = nullptr;
    Words words{};

    TRICKLE_HOST_DEVICE void operator()(std::size_t b) const {
        const int r = at.owner(b);
        std::byte* out = slots + static_cast<std::size_t>(r) * at.E + codec.block_offset(b - at.first_block(r));
        if constexpr (per_value_codec<C> && std::is_same_v<Words, nearest_words>) {
            using code_type = typename C::code_type;
            float x;
            if constexpr (std::is_same_v<Source, array_source>)
                x = source.values[b];
            else
                source(b, 1, &x);
            if (residual != nullptr) {
                x = feedback_value(x, beta, residual[b]);
                if constexpr (std::is_same_v<Source, array_source>) source.values[b] = x; // in place, as below
            }
            const code_type code = C::encode_value(x);
            store_code(out, code);
            if (residual != nullptr) residual[b] = sub_rn(x, C::decode_value(code));
            return;
        }
        const std::size_t i0 = b * at.B, m = at.block_size(b);
        if constexpr (std::is_same_v<Source, array_source>) {
            // In place: the fed-back values stay in the array until the decode overwrites them.
            float* x = source.values + i0;
            if (residual != nullptr)
                for (std::size_t j = 0; j < m; ++j) x[j] = feedback_value(x[j], beta, residual[i0 + j]);
            encode_block_with(codec, x, m, out, words, i0);
            if (residual != nullptr) {
                float* res = residual + i0;
                codec.decode_block(out, m, res);
                for (std::size_t j = 0; j < m; ++j) res[j] = sub_rn(x[j], res[j]);
            }
        } else {
            float x;
            source(i0, 1, &x);
            if (residual != nullptr) x = feedback_value(x, beta, residual[i0]);
            encode_block_with(codec, &x, 1, out, words, i0);
            if (residual != nullptr) {
                float d;
                codec.decode_block(out, 1, &d);
                residual[i0] = sub_rn(x, d);
            }
        }
    }
};

// Index j < L.chunk_blocks(me): block j of chunk `me`, decoded from each of the N slots of
// `in` (slot q: worker q's encoding of the chunk) and added in rank order into sum
// (part: scratch of the same size), then encoded into `out` (one slot). Words take the
// chunk's global value indices.
template <class C, class Words = nearest_words>
struct sum_slots_body {
    C codec{};
    slot_layout at{};
    int me = 0;
    const std::byte* in = nullptr;
    float* sum = nullptr;
    float* part = nullptr;
    std::byte* out = nullptr;
    Words words{};

    TRICKLE_HOST_DEVICE void operator()(std::size_t j) const {
        const std::size_t offset = codec.block_offset(j);
        if constexpr (per_value_codec<C> && std::is_same_v<Words, nearest_words>) {
            using code_type = typename C::code_type;
            float s = C::decode_value(load_code<code_type>(in + offset));
            for (int q = 1; q < at.ranks; ++q)
                s = add_rn(s, C::decode_value(load_code<code_type>(in + static_cast<std::size_t>(q) * at.E + offset)));
            sum[j] = s;
            store_code(out + offset, C::encode_value(s));
            return;
        }
        const std::size_t b = at.first_block(me) + j;
        const std::size_t k0 = j * at.B, m = at.block_size(b);
        float* s = sum + k0;
        float* p = part + k0;
        codec.decode_block(in + offset, m, s);
        for (int q = 1; q < at.ranks; ++q) {
            codec.decode_block(in + static_cast<std::size_t>(q) * at.E + offset, m, p);
            for (std::size_t t = 0; t < m; ++t) s[t] = add_rn(s[t], p[t]);
        }
        encode_block_with(codec, s, m, out + offset, words, b * at.B);
    }
};

// Index b < L.blocks: block b decoded from its owner's slot of `in` into values (with a
// sink other than an array: given to the sink; single-value blocks, as for the source).
template <class C, value_sink Sink = array_sink>
struct decode_slots_body {
    C codec{};
    slot_layout at{};
    const std::byte* in = nullptr;
    Sink sink{};

    TRICKLE_HOST_DEVICE void operator()(std::size_t b) const {
        const int r = at.owner(b);
        const std::byte* code = in + static_cast<std::size_t>(r) * at.E + codec.block_offset(b - at.first_block(r));
        if constexpr (per_value_codec<C>) {
            const float v = C::decode_value(load_code<typename C::code_type>(code));
            if constexpr (std::is_same_v<Sink, array_sink>)
                sink.values[b] = v;
            else
                sink(b, 1, &v);
            return;
        }
        if constexpr (std::is_same_v<Sink, array_sink>) {
            codec.decode_block(code, at.block_size(b), sink.values + b * at.B);
        } else {
            float v;
            codec.decode_block(code, 1, &v);
            sink(b * at.B, 1, &v);
        }
    }
};

// Index s < slots: zeroes the bytes of slot `first_slot + s` past its chunk's encoding.
template <class C>
struct zero_slot_tails_body {
    C codec{};
    slot_layout at{};
    std::byte* slots = nullptr; // slot 0 of the launch
    int first_slot = 0;         // the chunk that slot 0 holds

    TRICKLE_HOST_DEVICE void operator()(std::size_t s) const {
        const int r = first_slot + static_cast<int>(s);
        std::byte* slot = slots + s * at.E;
        for (std::size_t k = codec.wire_bytes(at.chunk_values(r)); k < at.E; ++k) slot[k] = std::byte{0};
    }
};


// ---- The lane forms: a block to a group of G lanes, lane l taking the quads l, l + G, ...
//
// Lanes is a lane coder: extent_type, combine, block_offset, extent(x, count), params(e),
// store_header(p, record), encode_quad(p, x, count, j, m, record, decoded[, words, first]),
// decode_quad(record, j, count, out) (codec/lanes.hpp).


// Lanes a block of B values takes: enough for a quad each, a power of two, at most a warp.
TRICKLE_HOST_DEVICE unsigned lane_group_shift(std::size_t B) {
    unsigned s = 0;
    while (s < detail::max_lane_shift && (lane_quad << s) < B) ++s;
    return s;
}

template <class Lanes, class Words>
TRICKLE_HOST_DEVICE void encode_quad_with(const Lanes& lc, const auto& p, const float* x, std::size_t count,
                                          std::size_t j, std::size_t m, std::byte* record, float* decoded,
                                          const Words& words, std::size_t first) {
    if constexpr (std::is_same_v<Words, nearest_words>) {
        (void)words, (void)first;
        lc.encode_quad(p, x, count, j, m, record, decoded);
    } else {
        lc.encode_quad(p, x, count, j, m, record, decoded, words, first);
    }
}

// encode_slots_body's work on unit b = block b: the lanes apply error feedback to their
// quads and reduce the block's extent, then lane 0 writes the header and each lane encodes
// its quads and keeps their residual.
template <class Lanes, class Words = nearest_words, value_source Source = array_source>
struct encode_slots_lanes {
    using extent_type = typename Lanes::extent_type;
    Lanes lanes{};
    slot_layout at{};
    Source source{};
    float* residual = nullptr;
    float beta = 0.0f;
    std::byte* slots = nullptr;
    Words words{};

    TRICKLE_HOST_DEVICE static extent_type combine(const extent_type& a, const extent_type& b) {
        return Lanes::combine(a, b);
    }
    TRICKLE_HOST_DEVICE extent_type first(std::size_t b, unsigned lane, unsigned G) const {
        const std::size_t i0 = b * at.B, m = at.block_size(b);
        extent_type e{};
        for (std::size_t j = lane * lane_quad; j < m; j += G * lane_quad) {
            const std::size_t count = m - j < lane_quad ? m - j : lane_quad;
            float x[lane_quad]{}; // zeros past a short quad: -O3 cannot see that only count are read
            quad(i0 + j, count, x);
            e = Lanes::combine(e, lanes.extent(x, count));
        }
        return e;
    }
    // The quad's values to encode: the source's, with error feedback (the same bits in
    // both phases, so nothing is written back).
    TRICKLE_HOST_DEVICE void quad(std::size_t i, std::size_t count, float (&x)[lane_quad]) const {
        source(i, count, x);
        if (residual != nullptr) {
            TRICKLE_UNROLL
            for (std::size_t t = 0; t < lane_quad; ++t)
                if (t < count) x[t] = feedback_value(x[t], beta, residual[i + t]);
        }
    }
    TRICKLE_HOST_DEVICE void second(std::size_t b, unsigned lane, unsigned G, const extent_type& e) const {
        const std::size_t i0 = b * at.B, m = at.block_size(b);
        const int r = at.owner(b);
        std::byte* record = slots + static_cast<std::size_t>(r) * at.E + lanes.block_offset(b - at.first_block(r));
        const auto p = lanes.params(e);
        if (lane == 0) lanes.store_header(p, record);
        for (std::size_t j = lane * lane_quad; j < m; j += G * lane_quad) {
            const std::size_t count = m - j < lane_quad ? m - j : lane_quad;
            float x[lane_quad]{};
            quad(i0 + j, count, x);
            // Always decoded (four products), so the array is never behind a null-or-not
            // pointer, which would put it in local memory.
            float decoded[lane_quad]{};
            encode_quad_with(lanes, p, x, count, j, m, record, decoded, words, i0 + j);
            if (residual != nullptr) {
                TRICKLE_UNROLL
                for (std::size_t t = 0; t < lane_quad; ++t)
                    if (t < count) residual[i0 + j + t] = sub_rn(x[t], decoded[t]);
            }
        }
    }
};

// sum_slots_body's work on unit j = block j of chunk `me`: each lane decodes its quads
// from every worker's slot and adds them in rank order into sum (the chunk's scratch),
// reducing the extent of the sums; then the sums are encoded into `out`.
template <class Lanes, class Words = nearest_words>
struct sum_slots_lanes {
    using extent_type = typename Lanes::extent_type;
    Lanes lanes{};
    slot_layout at{};
    int me = 0;
    const std::byte* in = nullptr;
    float* sum = nullptr;
    std::byte* out = nullptr;
    Words words{};

    TRICKLE_HOST_DEVICE static extent_type combine(const extent_type& a, const extent_type& b) {
        return Lanes::combine(a, b);
    }
    TRICKLE_HOST_DEVICE extent_type first(std::size_t jb, unsigned lane, unsigned G) const {
        const std::size_t b = at.first_block(me) + jb;
        const std::size_t k0 = jb * at.B, m = at.block_size(b);
        const std::size_t offset = lanes.block_offset(jb);
        extent_type e{};
        for (std::size_t j = lane * lane_quad; j < m; j += G * lane_quad) {
            const std::size_t count = m - j < lane_quad ? m - j : lane_quad;
            float s[lane_quad] = {}, part[lane_quad] = {};
            lanes.decode_quad(in + offset, j, count, s);
            for (int q = 1; q < at.ranks; ++q) {
                lanes.decode_quad(in + static_cast<std::size_t>(q) * at.E + offset, j, count, part);
                TRICKLE_UNROLL
                for (std::size_t t = 0; t < lane_quad; ++t) s[t] = add_rn(s[t], part[t]);
            }
            TRICKLE_UNROLL
            for (std::size_t t = 0; t < lane_quad; ++t)
                if (t < count) sum[k0 + j + t] = s[t];
            e = Lanes::combine(e, lanes.extent(s, count));
        }
        return e;
    }
    TRICKLE_HOST_DEVICE void second(std::size_t jb, unsigned lane, unsigned G, const extent_type& e) const {
        const std::size_t b = at.first_block(me) + jb;
        const std::size_t k0 = jb * at.B, m = at.block_size(b);
        std::byte* record = out + lanes.block_offset(jb);
        const auto p = lanes.params(e);
        if (lane == 0) lanes.store_header(p, record);
        for (std::size_t j = lane * lane_quad; j < m; j += G * lane_quad) {
            const std::size_t count = m - j < lane_quad ? m - j : lane_quad;
            encode_quad_with(lanes, p, sum + k0 + j, count, j, m, record, nullptr, words, b * at.B + j);
        }
    }
};

// Nothing to reduce.
struct no_extent {};

// decode_slots_body's work on unit b = block b: each lane decodes its quads and gives
// them to the sink.
template <class Lanes, value_sink Sink = array_sink>
struct decode_slots_lanes {
    using extent_type = no_extent;
    Lanes lanes{};
    slot_layout at{};
    const std::byte* in = nullptr;
    Sink sink{};

    TRICKLE_HOST_DEVICE static no_extent combine(const no_extent&, const no_extent&) { return {}; }
    TRICKLE_HOST_DEVICE no_extent first(std::size_t b, unsigned lane, unsigned G) const {
        const int r = at.owner(b);
        const std::byte* record = in + static_cast<std::size_t>(r) * at.E + lanes.block_offset(b - at.first_block(r));
        const std::size_t m = at.block_size(b);
        for (std::size_t j = lane * lane_quad; j < m; j += G * lane_quad) {
            const std::size_t count = m - j < lane_quad ? m - j : lane_quad;
            float v[lane_quad]{};
            lanes.decode_quad(record, j, count, v);
            sink(b * at.B + j, count, v);
        }
        return {};
    }
    TRICKLE_HOST_DEVICE void second(std::size_t, unsigned, unsigned, const no_extent&) const {}
};

TRICKLE_NAMESPACE_END
