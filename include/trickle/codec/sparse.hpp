// trickle/codec/sparse.hpp: sparsifiers for DiLoCo's outer gradient (chunk top-k, random-k) and
// their sum over workers, with error feedback.
//
// A sparsifier keeps a few of n fp32 values and says which; a codec (codec.hpp) then codes
// the kept values. Two policies:
//
//   chunk_topk<Values>{.chunk = C, .k = k, .values = ...}   (SparseLoCo / Covenant-72B)
//     Per chunk of C consecutive values (the last chunk may be partial, m < C values: it
//     keeps min(k, m)), the k values of largest magnitude. Order: |x| descending, ties by
//     the lower index; a NaN ranks above every number, +-Inf included (a sparsifier never
//     hides a NaN: the value codec then does what it documents: fp32 carries it, the block
//     codecs send 0), NaNs among themselves by index; -0 and +0 tie. The payload is
//       [indices][values]
//     indices: the in-chunk index of every kept value, chunks in order and ascending within a
//       chunk, ceil(log2 C) bits each (0 bits for C = 1), one little-endian bit stream
//       (value j at stream bits [j b, (j + 1) b), stream bit s is bit s % 8 of byte s / 8),
//       zero bits up to a multiple of 4 bytes;
//     values: chunk by chunk, each chunk's kept values (in index order) encoded by the value
//       codec as one array of min(k, m) values: Values::wire_bytes(k) bytes a whole chunk.
//       A block codec therefore never lets a block span two chunks: with block_size >= k
//       (sign2_block's default 64 with k <= 64, say) each chunk has exactly one scale.
//     payload_bytes(n) = round_up(ceil(kept(n) b / 8), 4) + (n / C) wire_bytes(k)
//                        + (n % C ? wire_bytes(min(k, n % C)) : 0)
//     kept(n) = (n / C) k + min(k, n % C). The size depends on n and the parameters only, so
//     every worker's payload has the same size.
//
//   random_k<Values>{.fraction = p, .values = ...}
//     round(p n) positions (at least 1), the same on every worker: the first images of a
//     Feistel permutation of [0, n) keyed by mix64(seed ^ stream_id(random_k_stream_tag,
//     round)) (sampler::uniform's construction on its own stream), so no index is sent and
//     every round draws new positions. The payload is the kept values, in permutation
//     order, through the value codec: payload_bytes(n) = Values::wire_bytes(round(p n)).
//     No rescaling by 1 / p: with error feedback the unsent part is carried over instead.
//
// sparse_all_reduce(sparsifier, comm, buf, n, scratch, residual, beta, seed, round): in place,
// buf[0, n) = the sum over workers of every worker's sparsified buf, identical bits on every
// worker:
//   chunk_topk: every worker selects and encodes its payload, all_gathers the N payloads
//     (equal sizes), decodes all N and adds them in rank order in fp32 into a zeroed buf
//     (payload 0 is assigned, the others added, like comm::local's sums: with k = C and
//     fp32 values the result has comm::local all_reduce_sum's bits). Each worker sends
//     (N - 1) payload_bytes(n).
//   random_k: the kept values packed into round(p n) floats are summed by the dense
//     machinery (fp32: comm.all_reduce_sum, so its byte count; another value codec:
//     codec::encoded_all_reduce, 2 (N - 1) slots), then scattered into a zeroed buf.
// Error feedback (optional, residual != nullptr): the values sparsified are
// e = x + beta r (x: buf on entry) and afterwards r = e - what this worker sent, decoded:
// the unsent values are carried over whole, the kept ones by their coding error.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/codec/element.hpp>
#include <trickle/codec/reduce.hpp>
#include <trickle/codec/sparsifier.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/feistel.hpp>
#include <trickle/core/fraction.hpp>
#include <trickle/core/philox.hpp>
#include <trickle/core/stream.hpp>
#include <trickle/error.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

// The Philox / Feistel stream purpose of random_k's positions.
inline constexpr trickle::detail::stream_tag random_k_stream_tag = trickle::detail::stream_tag::random_k;

namespace detail {

// ceil(log2 c): the bits of an index below c (0 for c <= 1).
constexpr unsigned index_bits(std::size_t c) {
    return c <= 1 ? 0u : static_cast<unsigned>(std::bit_width(static_cast<std::uint64_t>(c - 1)));
}

// Bytes of `count` fields of `bits` bits, packed.
constexpr std::size_t packed_bytes(std::size_t count, unsigned bits) { return (count * bits + 7) / 8; }

constexpr std::size_t round_up4(std::size_t b) { return (b + 3) / 4 * 4; }

// out[0, packed_bytes(count, bits)) = v[0, count) as one little-endian bit stream: field j
// at stream bits [j bits, (j + 1) bits), stream bit s is bit s % 8 of byte s / 8; the high
// bits of the last byte are zero. bits <= 32, every v[j] < 2^bits.
inline void pack_bits(const std::uint32_t* v, std::size_t count, unsigned bits, std::byte* out) {
    if (bits == 0) return;
    std::uint64_t acc = 0;
    unsigned have = 0;
    std::size_t o = 0;
    for (std::size_t j = 0; j < count; ++j) {
        acc |= static_cast<std::uint64_t>(v[j]) << have; // have < 8: at most 40 bits
        have += bits;
        while (have >= 8) {
            out[o++] = static_cast<std::byte>(acc & 0xffu);
            acc >>= 8;
            have -= 8;
        }
    }
    if (have > 0) out[o] = static_cast<std::byte>(acc & 0xffu);
}

// v[0, count) from such a stream (reads packed_bytes(count, bits) bytes, never more).
inline void unpack_bits(const std::byte* in, std::size_t count, unsigned bits, std::uint32_t* v) {
    if (bits == 0) {
        std::fill(v, v + count, 0u);
        return;
    }
    const std::uint64_t mask = (std::uint64_t{1} << bits) - 1u;
    std::uint64_t acc = 0;
    unsigned have = 0;
    std::size_t i = 0;
    for (std::size_t j = 0; j < count; ++j) {
        while (have < bits) {
            acc |= static_cast<std::uint64_t>(std::to_integer<unsigned>(in[i++])) << have;
            have += 8;
        }
        v[j] = static_cast<std::uint32_t>(acc & mask);
        acc >>= bits;
        have -= bits;
    }
}

// The selection order of chunk top-k as one unsigned key per value (larger: kept first):
// the magnitude's bits (|x| orders as its bit pattern), every NaN above +-Inf, and among
// equal magnitudes the lower in-chunk index i (< 2^32) first.
inline std::uint64_t topk_key(float x, std::uint32_t i) {
    std::uint32_t mag = trickle::detail::float_bits(x) & 0x7fffffffu;
    if (mag > 0x7f800000u) mag = 0x7f800001u; // any NaN, payload and sign aside
    return (static_cast<std::uint64_t>(mag) << 32) | static_cast<std::uint64_t>(0xffffffffu - i);
}

// Prefixes a value codec's fields (and error) for a sparsifier's record.
template <class Values>
void describe_values(const Values& v, config_record& rec, const char* who) {
    config_record inner;
    v.describe(inner);
    rec.add_fields("sparse_values_", inner);
    if (!inner.error().empty()) rec.set_error(trickle::detail::concat("codec::", who, ": value codec: ", inner.error()));
}

// The parameter check of a sparsifier that keeps k of every chunk (chunk_topk,
// chunk_randk): "" when 1 <= k <= chunk <= 2^32 and the value codec is valid.
template <class Values>
std::string chunk_k_error(const char* who, std::size_t chunk, std::size_t k, const Values& values) {
    if (chunk == 0) return trickle::detail::concat("codec::", who, ": chunk must be >= 1, got 0");
    if (chunk > (std::size_t{1} << 32))
        return trickle::detail::concat("codec::", who, ": chunk must be <= 2^32, got ", chunk);
    if (k == 0) return trickle::detail::concat("codec::", who, ": k must be >= 1, got 0");
    if (k > chunk)
        return trickle::detail::concat("codec::", who, ": k must be <= chunk, got k = ", k, " > chunk = ", chunk);
    config_record inner;
    values.describe(inner);
    if (!inner.error().empty()) return trickle::detail::concat("codec::", who, ": value codec: ", inner.error());
    return {};
}

// Values kept of n by k of every chunk (the last chunk partial): (n / C) k + min(k, n % C).
constexpr std::size_t chunk_kept(std::size_t n, std::size_t chunk, std::size_t k) {
    return n / chunk * k + std::min(k, n % chunk);
}

// Whether a value codec moves plain fp32 values.
template <class Values>
constexpr bool fp32_values = std::is_same_v<Values, fp32>;

} // namespace detail

// Chunk-wise top-k (see the top of this file): k of every `chunk` values, indices packed in
// ceil(log2 chunk) bits, values through the value codec Values (fp32 by default; any
// codec_policy: bf16, fp8_e4m3, int8_block, sign2_block, codec::any, ...).
//   codec::chunk_topk<>{.chunk = 64, .k = 4}
//   codec::chunk_topk<codec::sign2_block>{.chunk = 64, .k = 2}      2-bit values, a scale a chunk
// Valid: 1 <= k <= chunk <= 2^32, and a valid value codec; describe() names what is wrong.
template <codec_policy Values = fp32>
struct chunk_topk {
    static constexpr const char* name = "chunk_topk";
    using value_codec = Values;
    template <codec_policy W>
    using with_values = chunk_topk<W>; // the same sparsifier over another value codec
    std::size_t chunk = 64;
    std::size_t k = 4;
    Values values = {};

    // "" when the parameters are valid, else what is wrong (the error describe() sets).
    std::string error() const { return detail::chunk_k_error(name, chunk, k, values); }

    void describe(config_record& rec) const {
        rec.add("sparsifier", name).add("sparse_chunk", chunk).add("sparse_k", k);
        detail::describe_values(values, rec, name);
        const std::string e = error();
        if (!e.empty()) rec.set_error(e);
    }

    unsigned index_bits() const { return detail::index_bits(chunk); }
    std::size_t chunks(std::size_t n) const { return (n + chunk - 1) / chunk; }
    // Values kept of n: (n / chunk) k + min(k, n % chunk).
    std::size_t kept(std::size_t n) const { return detail::chunk_kept(n, chunk, k); }
    std::size_t index_bytes(std::size_t n) const {
        return detail::round_up4(detail::packed_bytes(kept(n), index_bits()));
    }
    std::size_t value_bytes(std::size_t n) const {
        const std::size_t tail = n % chunk;
        return n / chunk * values.wire_bytes(k) + (tail != 0 ? values.wire_bytes(std::min(k, tail)) : 0);
    }
    // Exact bytes of the payload of n values.
    std::size_t payload_bytes(std::size_t n) const { return index_bytes(n) + value_bytes(n); }
    // The payload by part: the packed indices (their round-up to 4 bytes as padding), then
    // every chunk's values through the value codec.
    wire_parts wire_parts_of(std::size_t n) const {
        const std::size_t packed = detail::packed_bytes(kept(n), index_bits());
        wire_parts p{.indices = packed, .padding = index_bytes(n) - packed};
        p += parts_of(values, k) * (n / chunk);
        if (n % chunk != 0) p += parts_of(values, std::min(k, n % chunk));
        return p;
    }

    // One chunk of m <= chunk values: idx[0, min(k, m)) = the kept in-chunk indices,
    // ascending; keys: m entries of scratch. Returns min(k, m).
    std::size_t select_chunk(const float* x, std::size_t m, std::uint32_t* idx, std::uint64_t* keys) const {
        const std::size_t kk = std::min(k, m);
        if (kk == m) { // everything
            for (std::size_t i = 0; i < m; ++i) idx[i] = static_cast<std::uint32_t>(i);
            return m;
        }
        std::uint64_t threshold = 0; // the kk-th largest key: the kept ones are those >= it
        if (kk <= 8) {
            // A sorted (descending) list of the kk largest keys, by insertion.
            std::uint64_t top[8];
            std::size_t have = 0;
            for (std::size_t i = 0; i < m; ++i) {
                const std::uint64_t key = detail::topk_key(x[i], static_cast<std::uint32_t>(i));
                if (have == kk && key <= top[kk - 1]) continue;
                std::size_t p = have < kk ? have++ : kk - 1;
                while (p > 0 && top[p - 1] < key) {
                    top[p] = top[p - 1];
                    --p;
                }
                top[p] = key;
            }
            threshold = top[kk - 1];
        } else {
            for (std::size_t i = 0; i < m; ++i) keys[i] = detail::topk_key(x[i], static_cast<std::uint32_t>(i));
            std::nth_element(keys, keys + (kk - 1), keys + m, [](std::uint64_t a, std::uint64_t b) { return a > b; });
            threshold = keys[kk - 1];
        }
        std::size_t j = 0;
        for (std::size_t i = 0; i < m; ++i)
            if (detail::topk_key(x[i], static_cast<std::uint32_t>(i)) >= threshold) idx[j++] = static_cast<std::uint32_t>(i);
        return j; // == kk: the keys are distinct
    }

    // All chunks: idx[0, kept(n)) the kept in-chunk indices (chunk by chunk), vals the kept
    // values of x. keys: chunk entries of scratch.
    void select(const float* x, std::size_t n, std::uint32_t* idx, float* vals, std::uint64_t* keys) const {
        std::size_t j = 0;
        for (std::size_t c0 = 0; c0 < n; c0 += chunk) {
            const std::size_t m = std::min(chunk, n - c0);
            const std::size_t kk = select_chunk(x + c0, m, idx + j, keys);
            for (std::size_t t = 0; t < kk; ++t) vals[j + t] = x[c0 + idx[j + t]];
            j += kk;
        }
    }

    // The value section: kept(n) values, chunk by chunk, each chunk one array of the value
    // codec (one call for all when the chunks' arrays are whole blocks of the codec: the
    // bytes are the same).
    void encode_values(const float* vals, std::size_t n, std::byte* out) const {
        const std::size_t K = kept(n), B = values.block_values();
        if (B != 0 && k % B == 0) {
            values.encode(vals, K, out);
            return;
        }
        const std::size_t per = values.wire_bytes(k);
        for (std::size_t j = 0, c = 0; j < K; j += k, ++c) values.encode(vals + j, std::min(k, K - j), out + c * per);
    }
    void decode_values(const std::byte* in, std::size_t n, float* vals) const {
        const std::size_t K = kept(n), B = values.block_values();
        if (B != 0 && k % B == 0) {
            values.decode(in, K, vals);
            return;
        }
        const std::size_t per = values.wire_bytes(k);
        for (std::size_t j = 0, c = 0; j < K; j += k, ++c) values.decode(in + c * per, std::min(k, K - j), vals + j);
    }

    // out[0, payload_bytes(n)) = the payload of x[0, n); s.index and s.values hold the kept
    // indices and (uncoded) values afterwards.
    void encode(const float* x, std::size_t n, std::byte* out, sparse_scratch& s) const {
        check(s, n);
        select(x, n, s.index.data(), s.values.data(), s.keys.data());
        const std::size_t K = kept(n), ib = index_bytes(n);
        const std::size_t used = detail::packed_bytes(K, index_bits());
        detail::pack_bits(s.index.data(), K, index_bits(), out);
        std::fill(out + used, out + ib, std::byte{0});
        encode_values(s.values.data(), n, out + ib);
    }

    // s.index, s.values = the kept indices and decoded values of a payload of n values.
    void read(const std::byte* in, std::size_t n, sparse_scratch& s) const {
        check(s, n);
        detail::unpack_bits(in, kept(n), index_bits(), s.index.data());
        decode_values(in + index_bytes(n), n, s.values.data());
    }

    // out[0, n) = the payload's values at their positions, +0 elsewhere.
    void decode(const std::byte* in, std::size_t n, float* out, sparse_scratch& s) const {
        std::fill(out, out + n, 0.0f);
        read(in, n, s);
        scatter<false>(n, out, s);
    }
    // out[pos] += the payload's value at pos, for each kept position.
    void decode_add(const std::byte* in, std::size_t n, float* out, sparse_scratch& s) const {
        read(in, n, s);
        scatter<true>(n, out, s);
    }

    void reserve_scratch(sparse_scratch& s, std::size_t n, int ranks) const {
        const std::size_t P = payload_bytes(n);
        s.send.resize(std::max(s.send.size(), P));
        s.recv.resize(std::max(s.recv.size(), P * static_cast<std::size_t>(ranks)));
        s.keys.resize(std::max(s.keys.size(), std::min(chunk, n)));
        s.index.resize(std::max(s.index.size(), kept(n)));
        s.values.resize(std::max(s.values.size(), kept(n)));
    }

private:
    void check(const sparse_scratch& s, std::size_t n) const {
        require(s.index.size() >= kept(n) && s.values.size() >= kept(n) && s.keys.size() >= std::min(chunk, n),
                "codec::chunk_topk: the scratch was reserved for fewer values than ", n);
    }

    template <bool Add>
    void scatter(std::size_t n, float* out, const sparse_scratch& s) const {
        const std::size_t K = kept(n);
        const std::uint32_t* idx = s.index.data();
        const float* v = s.values.data();
        for (std::size_t j = 0, base = 0; j < K; j += k, base += chunk) {
            const std::size_t kk = std::min(k, K - j);
            for (std::size_t t = 0; t < kk; ++t) {
                const std::size_t pos = base + idx[j + t];
                if (pos >= n) continue; // a corrupt payload: ignore an index past the end
                if constexpr (Add)
                    out[pos] += v[j + t];
                else
                    out[pos] = v[j + t];
            }
        }
    }
};

// The scratch shared_positions_all_reduce needs for K kept values over `ranks` ranks
// (keys: room for the positions).
template <codec_policy Values>
void reserve_shared_positions(const Values& values, sparse_scratch& s, std::size_t K, int ranks) {
    s.keys.resize(std::max(s.keys.size(), K));
    s.values.resize(std::max(s.values.size(), K));
    if constexpr (!detail::fp32_values<Values>) {
        s.packed_residual.resize(std::max(s.packed_residual.size(), K));
        s.reduce.reserve(values, K, ranks);
    }
}

// Random-k from the shared seed (see the top of this file): round(fraction n) positions, at
// least 1, the same on every worker and new every round; no index is sent.
//   codec::random_k<>{.fraction = 0.01}
//   codec::random_k<codec::int8_block>{.fraction = 0.01}
// Valid: 0 < fraction <= 1, and a valid value codec.
template <codec_policy Values = fp32>
struct random_k {
    static constexpr const char* name = "random_k";
    using value_codec = Values;
    template <codec_policy W>
    using with_values = random_k<W>; // the same sparsifier over another value codec
    double fraction = 0.01;
    Values values = {};

    std::string error() const {
        if (!(fraction > 0.0 && fraction <= 1.0))
            return trickle::detail::concat("codec::random_k: fraction must be in (0, 1], got ", fraction);
        config_record inner;
        values.describe(inner);
        if (!inner.error().empty()) return trickle::detail::concat("codec::random_k: value codec: ", inner.error());
        return {};
    }

    void describe(config_record& rec) const {
        rec.add("sparsifier", name).add("sparse_fraction", fraction);
        detail::describe_values(values, rec, name);
        const std::string e = error();
        if (!e.empty()) rec.set_error(e);
    }

    // Values kept of n: round(fraction n), at least 1 (0 for n = 0).
    std::size_t kept(std::size_t n) const { return trickle::detail::fraction_count(fraction, n); }
    std::size_t payload_bytes(std::size_t n) const { return values.wire_bytes(kept(n)); }
    wire_parts wire_parts_of(std::size_t n) const { return parts_of(values, kept(n)); }

    // The permutation whose images 0 .. kept(n) - 1 are round `round`'s positions.
    feistel_permutation permutation(std::size_t n, std::uint64_t seed, std::uint64_t round) const {
        return feistel_permutation(n, mix64(seed ^ trickle::detail::stream_id(random_k_stream_tag, round)));
    }
    // pos[0, kept(n)) = round `round`'s positions (distinct, in [0, n)).
    void positions(std::size_t n, std::uint64_t seed, std::uint64_t round, std::uint64_t* pos) const {
        if (n == 0) return;
        permutation(n, seed, round).images(0, kept(n), pos);
    }

    void reserve_scratch(sparse_scratch& s, std::size_t n, int ranks) const {
        reserve_shared_positions(values, s, kept(n), ranks);
    }
};

// Random k per chunk from the shared seed: in every chunk of C consecutive values (the last
// may be partial, m < C: it keeps min(k, m)), k in-chunk positions drawn from a Feistel
// permutation of [0, C) keyed by the seed, the round and the chunk, the same on every
// worker, so no index is sent and the kept values are summed by the dense all-reduce
// (codec::shared_positions_all_reduce), O(k) per chunk received per worker instead of the
// all-gather's O(N k). DeMo's shared-index variant (algorithm/demo.hpp) chooses its DCT
// coefficients so; it is chunk_topk's shape with shared instead of own positions.
//   codec::chunk_randk<>{.chunk = 64, .k = 4}
// Valid: 1 <= k <= chunk <= 2^32, and a valid value codec.
template <codec_policy Values = fp32>
struct chunk_randk {
    static constexpr const char* name = "chunk_randk";
    using value_codec = Values;
    template <codec_policy W>
    using with_values = chunk_randk<W>; // the same sparsifier over another value codec
    std::size_t chunk = 64;
    std::size_t k = 4;
    Values values = {};

    std::string error() const { return detail::chunk_k_error(name, chunk, k, values); }
    void describe(config_record& rec) const {
        rec.add("sparsifier", name).add("sparse_chunk", chunk).add("sparse_k", k);
        detail::describe_values(values, rec, name);
        const std::string e = error();
        if (!e.empty()) rec.set_error(e);
    }
    std::size_t kept(std::size_t n) const { return detail::chunk_kept(n, chunk, k); }
    std::size_t payload_bytes(std::size_t n) const { return values.wire_bytes(kept(n)); }

    // pos[0, kept(n)) = round `round`'s positions, chunk by chunk (each chunk's ascending
    // in permutation order, not sorted).
    void positions(std::size_t n, std::uint64_t seed, std::uint64_t round, std::uint64_t* pos) const {
        const std::uint64_t base =
            mix64(seed ^ trickle::detail::stream_id(trickle::detail::stream_tag::chunk_random_k, round));
        std::size_t j = 0;
        for (std::size_t c0 = 0, c = 0; c0 < n; c0 += chunk, ++c) {
            const std::size_t m = std::min(chunk, n - c0), take = std::min(k, m);
            const feistel_permutation perm(m, mix64(base ^ mix64(static_cast<std::uint64_t>(c))));
            perm.images(0, take, pos + j);
            for (std::size_t t = 0; t < take; ++t) pos[j + t] += c0;
            j += take;
        }
    }
    void reserve_scratch(sparse_scratch& s, std::size_t n, int ranks) const {
        reserve_shared_positions(values, s, kept(n), ranks);
    }
};

// In place on host memory: buf[0, n) = the sum over workers of every worker's sparsified
// buf (see the top of this file); identical bits on every worker. Collective; needs a
// byte_communicator over host memory. scratch must have been reserved for at least n values
// and comm.size() ranks. residual (n values, or null) and beta: error feedback. seed and
// round choose random_k's positions (chunk_topk ignores them). Returns the number of
// workers summed. Bad parameters throw trickle::invalid_argument (describe()'s message).
template <codec_policy Values, byte_communicator Comm>
int sparse_all_reduce(const chunk_topk<Values>& sp, Comm& comm, float* buf, std::size_t n, sparse_scratch& s,
                      float* residual = nullptr, float beta = 0.0f, std::uint64_t seed = 0, std::uint64_t round = 0) {
    static_assert(std::is_same_v<typename Comm::memory_space, host_space>,
                  "codec::sparse_all_reduce runs on host memory (device sparsifiers are not part of this version)");
    (void)seed;
    (void)round;
    if (sp.chunk == 0 || sp.k == 0 || sp.k > sp.chunk || sp.values.block_values() == 0) require(false, sp.error());
    const int N = comm.size();
    const auto NS = static_cast<std::size_t>(N);
    const std::size_t P = sp.payload_bytes(n);
    require(s.send.size() >= P && s.recv.size() >= NS * P, "codec::sparse_all_reduce: the scratch was reserved for "
                                                           "fewer values or ranks than ",
            n, " values, ", N, " ranks");
    if (n == 0) return N;

    // e = x + beta r, its payload, and r = e - what was sent (decoded).
    if (residual != nullptr)
        for (std::size_t i = 0; i < n; ++i) buf[i] = feedback_value(buf[i], beta, residual[i]);
    sp.encode(buf, n, s.send.data(), s);
    if (residual != nullptr) {
        std::copy(buf, buf + n, residual);
        sp.decode_values(s.send.data() + sp.index_bytes(n), n, s.values.data());
        const std::size_t K = sp.kept(n);
        for (std::size_t j = 0, base = 0; j < K; j += sp.k, base += sp.chunk)
            for (std::size_t t = 0; t < std::min(sp.k, K - j); ++t) {
                const std::size_t pos = base + s.index[j + t];
                residual[pos] = buf[pos] - s.values[j + t];
            }
    }

    comm.all_gather(s.send.data(), s.recv.data(), P);
    sp.decode(s.recv.data(), n, buf, s); // payload 0 assigned, the others added in rank order
    for (std::size_t q = 1; q < NS; ++q) sp.decode_add(s.recv.data() + q * P, n, buf, s);
    return N;
}

// In place on host memory: buf[0, n) = the sum over workers of buf at K positions pos[0, K)
// (distinct, in [0, n), the same on every worker), zero elsewhere: the kept values packed
// into K floats are summed by the dense machinery (fp32 values: comm.all_reduce_sum;
// another value codec: codec::encoded_all_reduce). The whole sparse all-reduce of a
// sparsifier whose positions every worker knows without sending them (random_k; a
// sparsifier of your own: docs/extending.md), after it has written its positions. pos may
// be scratch.keys. residual (n values, or null) and beta: error feedback, as the top of
// this file says. Returns comm.size().
template <codec_policy Values, byte_communicator Comm>
int shared_positions_all_reduce(const Values& values, Comm& comm, float* buf, std::size_t n,
                                const std::uint64_t* pos, std::size_t K, sparse_scratch& s,
                                float* residual = nullptr, float beta = 0.0f) {
    static_assert(std::is_same_v<typename Comm::memory_space, host_space>,
                  "codec::sparse_all_reduce runs on host memory (device sparsifiers are not part of this version)");
    require(s.values.size() >= K, "codec::sparse_all_reduce: the scratch was reserved for fewer values than ", K,
            " kept");
    if (n == 0) return comm.size();
    if (residual != nullptr)
        for (std::size_t i = 0; i < n; ++i) buf[i] = feedback_value(buf[i], beta, residual[i]);
    float* packed = s.values.data();
    for (std::size_t j = 0; j < K; ++j) packed[j] = buf[pos[j]];
    if (residual != nullptr) std::copy(buf, buf + n, residual); // r = e; the sent positions below

    if constexpr (detail::fp32_values<Values>) {
        if (residual != nullptr)
            for (std::size_t j = 0; j < K; ++j) residual[pos[j]] = 0.0f; // sent exactly
        comm.all_reduce_sum(packed, K);
    } else {
        float* pr = nullptr;
        if (residual != nullptr) {
            require(s.packed_residual.size() >= K, "codec::sparse_all_reduce: the scratch was reserved for fewer "
                                                   "values than ",
                    K, " kept");
            pr = s.packed_residual.data();
            std::fill(pr, pr + K, -0.0f); // x + 0 * (-0) = x for every x, -0 included
        }
        encoded_all_reduce(values, comm, packed, K, s.reduce, pr, 0.0f);
        if (residual != nullptr)
            for (std::size_t j = 0; j < K; ++j) residual[pos[j]] = pr[j]; // e - decode(encode(e))
    }
    std::fill(buf, buf + n, 0.0f);
    for (std::size_t j = 0; j < K; ++j) buf[pos[j]] = packed[j];
    return comm.size();
}

// What worker `me` of N sends in shared_positions_all_reduce of K kept values, by part.
template <codec_policy Values>
wire_parts shared_positions_parts(const Values& values, std::size_t K, int N, int me) {
    if (K == 0 || N <= 1) return {};
    if constexpr (detail::fp32_values<Values>)
        return wire_parts{.codes = trickle::detail::all_reduce_bytes(K, sizeof(float), N, me)};
    else
        return encoded_all_reduce_parts(values, K, N, me);
}

template <codec_policy Values, byte_communicator Comm>
int sparse_all_reduce(const random_k<Values>& sp, Comm& comm, float* buf, std::size_t n, sparse_scratch& s,
                      float* residual = nullptr, float beta = 0.0f, std::uint64_t seed = 0, std::uint64_t round = 0) {
    if (!(sp.fraction > 0.0 && sp.fraction <= 1.0) || sp.values.block_values() == 0) require(false, sp.error());
    const std::size_t K = sp.kept(n);
    require(s.keys.size() >= K && s.values.size() >= K,
            "codec::sparse_all_reduce: the scratch was reserved for fewer values than ", n);
    if (n == 0) return comm.size();
    sp.positions(n, seed, round, s.keys.data());
    return shared_positions_all_reduce(sp.values, comm, buf, n, s.keys.data(), K, s, residual, beta);
}

// What worker `me` of N sends in sparse_all_reduce of n values, by part (they sum to the
// communicator's count).
template <codec_policy Values>
wire_parts sparse_all_reduce_parts(const chunk_topk<Values>& sp, std::size_t n, int N, int) {
    if (n == 0 || N <= 1) return {};
    return sp.wire_parts_of(n) * static_cast<std::uint64_t>(N - 1);
}

template <codec_policy Values, byte_communicator Comm>
int sparse_all_reduce(const chunk_randk<Values>& sp, Comm& comm, float* buf, std::size_t n, sparse_scratch& s,
                      float* residual = nullptr, float beta = 0.0f, std::uint64_t seed = 0, std::uint64_t round = 0) {
    if (const std::string e = sp.error(); !e.empty()) require(false, e);
    const std::size_t K = sp.kept(n);
    require(s.keys.size() >= K && s.values.size() >= K,
            "codec::sparse_all_reduce: the scratch was reserved for fewer values than ", n);
    if (n == 0) return comm.size();
    sp.positions(n, seed, round, s.keys.data());
    return shared_positions_all_reduce(sp.values, comm, buf, n, s.keys.data(), K, s, residual, beta);
}

template <codec_policy Values>
wire_parts sparse_all_reduce_parts(const chunk_randk<Values>& sp, std::size_t n, int N, int me) {
    if (n == 0) return {};
    return shared_positions_parts(sp.values, sp.kept(n), N, me);
}

template <codec_policy Values>
wire_parts sparse_all_reduce_parts(const random_k<Values>& sp, std::size_t n, int N, int me) {
    if (n == 0) return {};
    return shared_positions_parts(sp.values, sp.kept(n), N, me);
}

} // namespace codec

static_assert(codec::sparsifier_policy<codec::chunk_topk<>> && codec::sparsifier_policy<codec::random_k<>> &&
              codec::sparsifier_policy<codec::chunk_randk<>>);

TRICKLE_NAMESPACE_END
