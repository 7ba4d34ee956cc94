// trickle/codec/reduce.hpp: the sum of encoded values over all workers, honest about what travels.
//
// Encoded values cannot be added by an all-reduce: a sum of int8 codes with different
// scales means nothing, and a sum rounded to 8 bits at every hop of a ring would drift.
// encoded_all_reduce sums them the way the quantized collectives of INTELLECT-1 and
// SparseLoCo do, as a reduce-scatter followed by an all-gather of encoded chunks:
//   1. the n values are cut into N chunks of whole codec blocks (detail::chunk_begin over
//      the blocks); each worker encodes every chunk into a slot of E bytes (E: the largest
//      chunk's encoding) and sends chunk r's slot to worker r (all_to_all);
//   2. worker r decodes the N encodings of its chunk and adds them in rank order, in fp32;
//   3. it encodes that sum and sends it to every worker (all_gather), and every worker
//      decodes all N sums into the buffer.
// Every worker decodes the same bytes, so all end with the same bits. Each sends
// 2 (N - 1) E bytes: about 2 (N - 1)/N times the encoded size of the buffer, as the
// communicator's counters report. With the fp32 codec the result has the bits of
// comm::local's all_reduce_sum. The sum is encoded a second time in step 3, so a lossy
// codec rounds twice: once each worker's values, once their sum.
//
// Stochastic rounding (optional, codecs that offer it): see `rounding` below.
//
// Error feedback (optional): with a residual array r and a decay beta, the values sent are
// e = x + beta r (x: the buffer on entry), and afterwards r = e - decode(encode(e)), this
// worker's own compression error, which the next call sends again. The error of step 3
// is common to all workers and is not fed back.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/codec/lanes.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/stream.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/host.hpp>
#include <trickle/kernels/codec_pass.hpp>

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <variant>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

// The lane passes (kernels/codec_pass.hpp) step through a block by the quads the lane
// coders code (codec/lanes.hpp).
static_assert(lane_quad == codec::quad_values);

namespace codec {

// How an encoded all-reduce rounds: to nearest (the default), or stochastically with the
// shared Philox stream (codecs that offer it: int8_block, int4_block, sign2_block). Each
// worker rounds its own values with words of its own stream (so the workers' rounding
// errors are independent and average out), keyed by (seed, exchange, rank); the owner of a
// chunk rounds the sum with the stream of rank 0xffff.
struct rounding {
    bool stochastic = false;
    std::uint64_t seed = 0;
    std::uint64_t exchange = 0;
};

// Whether codec C can round stochastically.
template <class C>
bool rounds_stochastically(const C& c) {
    if constexpr (requires { c.supports_stochastic(); })
        return c.supports_stochastic();
    else
        return requires(const float* in, std::size_t n, std::byte* out, const philox_words& w) { c.encode(in, n, out, w); };
}

namespace detail {

// Words [first, first + n) of a stream, seen from 0.
struct offset_words {
    philox_words words;
    std::size_t first = 0;
    TRICKLE_HOST_DEVICE std::uint32_t operator()(std::size_t i) const { return words(first + i); }
};

// The words of a stochastic encoding by `rank` (0xffff: the owner of a chunk rounding its
// sum) in the exchange `how` names.
inline philox_words rounding_words(const rounding& how, int rank) {
    const std::uint64_t index = (how.exchange << 16) | (static_cast<std::uint64_t>(rank) & 0xffffu);
    return philox_words{how.seed, trickle::detail::stream_id(trickle::detail::stream_tag::codec, index)};
}

template <class C>
[[noreturn]] void no_stochastic_rounding() {
    throw invalid_argument(trickle::detail::concat("codec::", C::name, ": this codec has no stochastic rounding"));
}

template <class C>
void encode_rounded(const C& c, const float* in, std::size_t n, std::byte* out, const rounding& how, int rank,
                    std::size_t first) {
    if (!how.stochastic) {
        c.encode(in, n, out);
        return;
    }
    const offset_words w{rounding_words(how, rank), first};
    if constexpr (requires { c.encode(in, n, out, w); })
        c.encode(in, n, out, w);
    else
        no_stochastic_rounding<C>();
}

} // namespace detail

// Host memory an encoded all-reduce of up to `values` values uses, sized once (an
// algorithm reserves it at construction, so no step allocates).
struct reduce_scratch {
    std::vector<std::byte> send, recv;
    std::vector<float> sum, part;
    std::vector<float> tile, tile2; // one tile of produced (or decoded) values, and its round trip

    // Values of a tile: whole codec blocks, about tile_target values (a few KB, in cache).
    static constexpr std::size_t tile_target = 2048;
    template <codec_policy Codec>
    static std::size_t tile_values(const Codec& c) {
        const std::size_t B = c.block_values() == 0 ? 1 : c.block_values();
        return B >= tile_target ? B : tile_target / B * B;
    }

    template <codec_policy Codec>
    void reserve(const Codec& c, std::size_t values, int ranks) {
        const std::size_t E = slot_bytes(c, values, ranks);
        const std::size_t chunk = max_chunk_values(c, values, ranks);
        const auto N = static_cast<std::size_t>(ranks);
        send.resize(N * E);
        recv.resize(N * E);
        sum.resize(chunk);
        part.resize(chunk);
        tile.resize(tile_values(c));
        tile2.resize(tile_values(c));
    }

    // Values in rank r's chunk of n values: whole blocks, split as evenly as possible.
    template <codec_policy Codec>
    static void chunk(const Codec& c, std::size_t n, int ranks, int r, std::size_t& first, std::size_t& count) {
        const std::size_t B = c.block_values() == 0 ? 1 : c.block_values();
        const std::size_t blocks = (n + B - 1) / B;
        const std::size_t b0 = trickle::detail::chunk_begin(blocks, ranks, r);
        const std::size_t nb = trickle::detail::chunk_size(blocks, ranks, r);
        first = std::min(b0 * B, n);
        count = std::min((b0 + nb) * B, n) - first;
    }

    template <codec_policy Codec>
    static std::size_t max_chunk_values(const Codec& c, std::size_t n, int ranks) {
        std::size_t m = 0, first = 0, count = 0;
        for (int r = 0; r < ranks; ++r) {
            chunk(c, n, ranks, r, first, count);
            m = std::max(m, count);
        }
        return m;
    }

    // E: the bytes of every slot, the largest chunk's encoding.
    template <codec_policy Codec>
    static std::size_t slot_bytes(const Codec& c, std::size_t n, int ranks) {
        std::size_t e = 0, first = 0, count = 0;
        for (int r = 0; r < ranks; ++r) {
            chunk(c, n, ranks, r, first, count);
            e = std::max(e, c.wire_bytes(count));
        }
        return e;
    }
};

// What worker `me` of N sends in an encoded all-reduce of n values, by part: the slots of
// the other workers' chunks (all_to_all) and its own chunk's sum N - 1 times (all_gather),
// each slot's bytes past its chunk's encoding counted as padding. The parts sum to the
// communicator's count, 2 (N - 1) E.
template <codec_policy Codec>
wire_parts encoded_all_reduce_parts(const Codec& c, std::size_t n, int N, int me) {
    wire_parts p;
    if (N <= 1) return p;
    const std::size_t E = reduce_scratch::slot_bytes(c, n, N);
    const auto slot = [&](int r) {
        std::size_t first = 0, count = 0;
        reduce_scratch::chunk(c, n, N, r, first, count);
        wire_parts s = parts_of(c, count);
        s.padding += E - c.wire_bytes(count);
        return s;
    };
    for (int r = 0; r < N; ++r)
        if (r != me) p += slot(r);
    p += slot(me) * static_cast<std::uint64_t>(N - 1);
    return p;
}

// The same sum with the values produced and consumed tile by tile, so a caller can fuse
// its own passes with the encoding and the decoding (DiLoCo computes its outer gradient
// into a tile and encodes it, and takes each decoded tile straight into its outer update:
// the fp32 buffer of n values is never written or read).
//   produce(i0, m, float* out)        writes the m values [i0, i0 + m) to out
//   consume(i0, m, const float* in)   takes the m summed values of [i0, i0 + m)
// Tiles are whole codec blocks (about reduce_scratch::tile_target values), and every tile
// lies inside one chunk. The bytes sent, and the bits consumed, are those of
// encoded_all_reduce over a buffer holding the produced values.
template <codec_policy Codec, byte_communicator Comm, class Produce, class Consume>
int encoded_all_reduce_tiled(const Codec& c, Comm& comm, std::size_t n, reduce_scratch& s, Produce&& produce,
                             Consume&& consume, float* residual = nullptr, float beta = 0.0f, const rounding& how = {}) {
    static_assert(std::is_same_v<typename Comm::memory_space, host_space>,
                  "codec::encoded_all_reduce runs on host memory (device codecs are not part of this version)");
    const int N = comm.size(), me = comm.rank();
    const std::size_t E = reduce_scratch::slot_bytes(c, n, N);
    const auto NS = static_cast<std::size_t>(N);
    const std::size_t B = c.block_values() == 0 ? 1 : c.block_values();
    const std::size_t T = reduce_scratch::tile_values(c);
    require(s.send.size() >= NS * E && s.sum.size() >= reduce_scratch::max_chunk_values(c, n, N) &&
                s.tile.size() >= T && s.tile2.size() >= T,
            "codec::encoded_all_reduce: the scratch was reserved for fewer values than ", n);
    std::size_t first = 0, count = 0;
    // Calls fn(t0, m, bytes offset in the chunk's slot) for each tile of chunk [first, first + count).
    const auto tiles = [&](std::size_t f, std::size_t cnt, auto&& fn) {
        for (std::size_t k = 0; k < cnt; k += T) fn(f + k, cnt - k < T ? cnt - k : T, c.block_offset(k / B));
    };

    // 1. Every chunk encoded into its slot (with error feedback, e = x + beta r first).
    for (int r = 0; r < N; ++r) {
        reduce_scratch::chunk(c, n, N, r, first, count);
        std::byte* slot = s.send.data() + static_cast<std::size_t>(r) * E;
        tiles(first, count, [&](std::size_t t0, std::size_t m, std::size_t at) {
            float* e = s.tile.data();
            produce(t0, m, e);
            if (residual != nullptr)
                for (std::size_t i = 0; i < m; ++i) e[i] = feedback_value(e[i], beta, residual[t0 + i]);
            detail::encode_rounded(c, e, m, slot + at, how, me, t0);
            if (residual != nullptr) {
                c.decode(slot + at, m, s.tile2.data());
                for (std::size_t i = 0; i < m; ++i) residual[t0 + i] = sub_rn(e[i], s.tile2[i]);
            }
        });
        std::fill(slot + c.wire_bytes(count), slot + E, std::byte{0});
    }
    comm.all_to_all(s.send.data(), s.recv.data(), E);

    // 2. My chunk's sum, in rank order.
    reduce_scratch::chunk(c, n, N, me, first, count);
    for (int q = 0; q < N; ++q) {
        float* out = q == 0 ? s.sum.data() : s.part.data();
        c.decode(s.recv.data() + static_cast<std::size_t>(q) * E, count, out);
        if (q != 0)
            for (std::size_t i = 0; i < count; ++i) s.sum[i] = add_rn(s.sum[i], s.part[i]);
    }

    // 3. The encoded sums to everyone; every worker decodes the same bytes.
    std::byte* mine = s.send.data();
    detail::encode_rounded(c, s.sum.data(), count, mine, how, 0xffff, first);
    std::fill(mine + c.wire_bytes(count), mine + E, std::byte{0});
    comm.all_gather(mine, s.recv.data(), E);
    for (int q = 0; q < N; ++q) {
        reduce_scratch::chunk(c, n, N, q, first, count);
        const std::byte* slot = s.recv.data() + static_cast<std::size_t>(q) * E;
        tiles(first, count, [&](std::size_t t0, std::size_t m, std::size_t at) {
            c.decode(slot + at, m, s.tile.data());
            consume(t0, m, static_cast<const float*>(s.tile.data()));
        });
    }
    return N;
}

// In place on host memory: buf[0, n) = the sum over workers of every worker's buf,
// through the codec (see above). Collective; needs a byte_communicator over host memory.
// scratch must have been reserved for at least n values and comm.size() ranks. Returns the
// number of workers summed.
template <codec_policy Codec, byte_communicator Comm>
int encoded_all_reduce(const Codec& c, Comm& comm, float* buf, std::size_t n, reduce_scratch& s,
                       float* residual = nullptr, float beta = 0.0f, const rounding& how = {}) {
    return encoded_all_reduce_tiled(
        c, comm, n, s, [&](std::size_t i0, std::size_t m, float* out) { std::copy(buf + i0, buf + i0 + m, out); },
        [&](std::size_t i0, std::size_t m, const float* in) { std::copy(in, in + m, buf + i0); }, residual, beta, how);
}

// The memory of the block-parallel encoded all-reduce (encoded_all_reduce_blocks) in
// memory space Space, sized once for up to `values` values over `ranks` workers.
template <class Space>
struct block_reduce_scratch {
    buffer<std::byte, Space> send, recv; // N slots of E bytes
    buffer<float, Space> sum, part;      // the largest chunk's values

    // Exec: exec::cuda for cuda_space (stream-ordered memory on its stream), any host
    // execution space for host_space.
    template <codec_policy Codec, class Exec>
    void reserve(const Codec& c, std::size_t values, int ranks, const Exec& ex) {
        const std::size_t slots = static_cast<std::size_t>(ranks) * reduce_scratch::slot_bytes(c, values, ranks);
        const std::size_t chunk = reduce_scratch::max_chunk_values(c, values, ranks);
        if constexpr (std::is_same_v<Space, cuda_space>) {
            send = buffer<std::byte, Space>(slots, ex);
            recv = buffer<std::byte, Space>(slots, ex);
            sum = buffer<float, Space>(chunk, ex);
            part = buffer<float, Space>(chunk, ex);
        } else {
            (void)ex;
            send = buffer<std::byte, Space>(slots);
            recv = buffer<std::byte, Space>(slots);
            sum = buffer<float, Space>(chunk);
            part = buffer<float, Space>(chunk);
        }
    }
};

namespace detail {

// The three passes of the encoded all-reduce on execution space ex (kernels/codec_pass.hpp
// has their bodies). Block-scaled codecs run each with a group of lanes per block (their
// lane coder, codec/lanes.hpp); element codecs with an index per block of one value. The
// same bytes either way. bench_cuda times the encode and decode passes through these.
template <class Codec, class Exec, class Words, value_source Source>
void encode_slots_pass(const Exec& ex, const Codec& c, const slot_layout& at, const Source& source, float* residual,
                       float beta, std::byte* slots, const Words& words) {
    if constexpr (has_lane_coder<Codec>)
        for_each_lane_group(ex, at.blocks, lane_group_shift(at.B),
                            encode_slots_lanes<lane_coder<Codec>, Words, Source>{lane_coder<Codec>{{c}}, at, source,
                                                                                 residual, beta, slots, words});
    else
        for_each_index(ex, at.blocks, encode_slots_body<Codec, Words, Source>{c, at, source, residual, beta, slots, words});
}

// part is the thread-per-block form's scratch (chunk values); the lane form needs none.
template <class Codec, class Exec, class Words>
void sum_slots_pass(const Exec& ex, const Codec& c, const slot_layout& at, int me, const std::byte* in, float* sum,
                    float* part, std::byte* out, const Words& words) {
    if constexpr (has_lane_coder<Codec>)
        for_each_lane_group(ex, at.chunk_blocks(me), lane_group_shift(at.B),
                            sum_slots_lanes<lane_coder<Codec>, Words>{lane_coder<Codec>{{c}}, at, me, in, sum, out, words});
    else
        for_each_index(ex, at.chunk_blocks(me), sum_slots_body<Codec, Words>{c, at, me, in, sum, part, out, words});
}

template <class Codec, class Exec, value_sink Sink>
void decode_slots_pass(const Exec& ex, const Codec& c, const slot_layout& at, const std::byte* in, const Sink& sink) {
    if constexpr (has_lane_coder<Codec>)
        for_each_lane_group(ex, at.blocks, lane_group_shift(at.B),
                            decode_slots_lanes<lane_coder<Codec>, Sink>{lane_coder<Codec>{{c}}, at, in, sink});
    else
        for_each_index(ex, at.blocks, decode_slots_body<Codec, Sink>{c, at, in, sink});
}

} // namespace detail

// Whether encoded_all_reduce_blocks_fused takes a source and a sink with codec c: a lane
// coder, or blocks of one value (every built-in codec; a user codec with larger blocks and
// no lane coder takes arrays only).
template <class Codec>
bool fuses_values(const Codec& c) {
    if constexpr (type_erased_codec<Codec>)
        return std::visit([](const auto& held) { return fuses_values(held); }, c.held);
    else if constexpr (has_lane_coder<Codec>)
        return true;
    else
        return c.block_values() <= 1;
}

// encoded_all_reduce with the caller's passes fused into the encoding and the decoding,
// as three passes (detail::encode_slots_pass, sum_slots_pass, decode_slots_pass) on
// execution space ex with the communicator's byte collectives between them: the encode
// pass takes the n values from source(i, count, out), the decode pass hands their sums to
// sink(i, count, in) (kernels/codec_pass.hpp: value_source, value_sink), so no fp32 array
// of the values is stored. How the CUDA backend runs it, on device memory through
// comm::nccl or comm::local_cuda, enqueued on the stream and never waiting for the
// device; DiLoCo's device outer step passes its outer gradient and its update. The bytes
// sent and the sums handed over are those of encoded_all_reduce over the values the
// source gives (tested on the host, where the same function runs with exec::host and
// comm::local). The residual and the scratch are in the communicator's memory space; the
// scratch must have been reserved for at least n values and comm.size() ranks. A
// codec::any is resolved on the host and its held codec runs. A codec without a lane
// coder must code one value a block (every element codec does). Returns the workers summed.
template <codec_policy Codec, byte_communicator Comm, class Exec, value_source Source, value_sink Sink>
int encoded_all_reduce_blocks_fused(const Codec& c, Comm& comm, const Exec& ex, std::size_t n,
                                    block_reduce_scratch<typename Comm::memory_space>& s, const Source& source,
                                    const Sink& sink, float* residual = nullptr, float beta = 0.0f,
                                    const rounding& how = {}) {
    if constexpr (type_erased_codec<Codec>) {
        return std::visit(
            [&](const auto& held) {
                return encoded_all_reduce_blocks_fused(held, comm, ex, n, s, source, sink, residual, beta, how);
            },
            c.held);
    } else {
        const int N = comm.size(), me = comm.rank();
        const std::size_t B = c.block_values() == 0 ? 1 : c.block_values();
        const slot_layout at{n, B, (n + B - 1) / B, reduce_scratch::slot_bytes(c, n, N), N};
        const auto NS = static_cast<std::size_t>(N);
        require(s.send.size() >= NS * at.E && s.recv.size() >= NS * at.E &&
                    s.sum.size() >= reduce_scratch::max_chunk_values(c, n, N) && s.part.size() >= s.sum.size(),
                "codec::encoded_all_reduce_blocks: the scratch was reserved for fewer values than ", n, " or ranks than ",
                N);
        constexpr bool arrays = std::is_same_v<Source, array_source> && std::is_same_v<Sink, array_sink>;
        if constexpr (!arrays)
            require(fuses_values(c), "codec::encoded_all_reduce_blocks_fused: codec::", Codec::name, " codes blocks of ",
                    B, " values without a lane form; a source and a sink need blocks of one value or a lane coder");
        constexpr bool can_round = requires(const float* in, std::byte* out, const philox_words& w) {
            c.encode_block(in, std::size_t{}, out, w, std::size_t{});
        };
        if constexpr (!can_round)
            if (how.stochastic) detail::no_stochastic_rounding<Codec>();
        // Runs body with the words of rank `rank` (round to nearest without them).
        const auto with_words = [&](int rank, auto&& launch) {
            if constexpr (can_round)
                if (how.stochastic) return launch(detail::rounding_words(how, rank));
            launch(nearest_words{});
        };
        std::byte* send = s.send.data();
        std::byte* recv = s.recv.data();

        // 1. Every chunk encoded into its slot (error feedback first), the tails zeroed.
        for_each_index(ex, NS, zero_slot_tails_body<Codec>{c, at, send, 0});
        with_words(me, [&](const auto& words) { detail::encode_slots_pass(ex, c, at, source, residual, beta, send, words); });
        comm.all_to_all(send, recv, at.E);

        // 2. My chunk's sum in rank order, encoded into my outgoing slot.
        with_words(0xffff, [&](const auto& words) {
            detail::sum_slots_pass(ex, c, at, me, recv, s.sum.data(), s.part.data(), send, words);
        });
        for_each_index(ex, 1, zero_slot_tails_body<Codec>{c, at, send, me});

        // 3. The encoded sums to everyone; every worker decodes the same bytes.
        comm.all_gather(send, recv, at.E);
        detail::decode_slots_pass(ex, c, at, recv, sink);
        return N;
    }
}

// The same over the array buf: its n values summed over the workers in place (buf is in
// the communicator's memory space). The form SPARTA's route and DiLoCo's unfused passes
// use.
template <codec_policy Codec, byte_communicator Comm, class Exec>
int encoded_all_reduce_blocks(const Codec& c, Comm& comm, const Exec& ex, float* buf, std::size_t n,
                              block_reduce_scratch<typename Comm::memory_space>& s, float* residual = nullptr,
                              float beta = 0.0f, const rounding& how = {}) {
    return encoded_all_reduce_blocks_fused(c, comm, ex, n, s, array_source{buf}, array_sink{buf}, residual, beta, how);
}

} // namespace codec

TRICKLE_NAMESPACE_END
