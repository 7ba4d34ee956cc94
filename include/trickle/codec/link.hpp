// trickle/codec/link.hpp: codec::encoded_link, a codec's bytes through the rounds of a topology.
//
// The topologies that average without a global all-reduce (ring, gossip, exponential,
// islands) move whole buffers with send_recv rounds through a link (topology/link.hpp).
// encoded_link sends a codec's bytes in those rounds instead of fp32 values:
//   prepare(buf, n)   encodes buf into the outgoing bytes and replaces buf by their decoding,
//                     so the sender holds exactly what its receivers will hold;
//   relay(buf, n)     sends on the bytes received last (never rounded twice);
//   exchange(...)     one send_recv of the bytes (as ceil(wire_bytes / 4) floats: every
//                     communicator can move them, and the padding is counted as sent), then
//                     the received bytes decoded into the receiver's buffer.
// So gossip pairs, exponential pairs and islands end with identical bits on every member,
// as with fp32; the ring's three-way sums are each worker's own, as with fp32.
//
// Rounding: each exchange's first prepare() (this worker's own values; in an island's chain
// its running sum) rounds stochastically when asked, with this worker's words of the
// exchange (detail::rounding_words), and takes error feedback: e = x + beta r is encoded and
// r = e - decode(code) is what the next exchange sends again. Later prepares (an island's
// total on its way back) round to nearest and feed nothing back.
//
// The passes are the bodies of kernels/codec_pass.hpp over one slot (one chunk), launched
// with for_each_index on the topology's execution space: the same code on the host and the
// device, which is why the buffers live in memory space Space.
#pragma once

#include <trickle/codec/codec.hpp>
#include <trickle/codec/reduce.hpp>
#include <trickle/config.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/buffer.hpp>
#include <trickle/kernels/codec_pass.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>
#include <variant>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

template <codec_policy Codec, class Space>
class encoded_link {
public:
    static constexpr bool lossless = false;

    encoded_link() = default;

    // Buffers for up to `capacity` values, once (Exec: exec::cuda for cuda_space).
    template <class Exec>
    void reserve(const Codec& c, std::size_t capacity, const Exec& ex) {
        codec_ = c;
        const std::size_t floats = wire_floats(capacity);
        if constexpr (std::is_same_v<Space, cuda_space>) {
            a_ = buffer<float, Space>(floats, ex);
            b_ = buffer<float, Space>(floats, ex);
        } else {
            (void)ex;
            a_ = buffer<float, Space>(floats);
            b_ = buffer<float, Space>(floats);
        }
        out_ = a_.data();
        in_ = b_.data();
        capacity_ = capacity;
    }

    // Starts an exchange: the first prepare() takes error feedback (residual: this worker's
    // values' residual, null for none) and rounds with `how` as worker `rank`.
    void begin(float* residual, float beta, const rounding& how, int rank) {
        residual_ = residual;
        beta_ = beta;
        how_ = how;
        rank_ = rank;
        first_ = true;
    }

    std::size_t wire_floats(std::size_t n) const { return (codec_.wire_bytes(n) + 3) / 4; }

    // The bytes sent since the last call, by part (they sum to the communicator's count of
    // the sends), and a fresh count.
    wire_parts take_sent() { return std::exchange(sent_, wire_parts{}); }

    template <class Exec, class Comm>
    void prepare(const Exec& ex, Comm&, float* buf, std::size_t n) {
        check(n);
        with_codec([&](const auto& c) { prepare_with(c, ex, buf, n); });
        first_ = false;
        count_ = n;
    }

    template <class Exec, class Comm>
    void relay(const Exec&, Comm&, float*, std::size_t n) {
        check(n);
        std::swap(out_, in_);
        count_ = n;
    }

    template <class Exec, class Comm>
    void exchange(const Exec& ex, Comm& comm, int dst, bool send, float* recv, std::size_t m, int src) {
        check(m);
        comm.send_recv(out_, send ? wire_floats(count_) : 0, dst, in_, m == 0 ? 0 : wire_floats(m), src);
        if (send && count_ != 0) {
            wire_parts p = parts_of(codec_, count_);
            p.padding += wire_floats(count_) * 4 - codec_.wire_bytes(count_);
            sent_ += p;
        }
        if (m == 0) return;
        with_codec([&](const auto& c) {
            using C = std::remove_cvref_t<decltype(c)>;
            for_each_index(ex, layout(c, m).blocks, decode_slots_body<C>{c, layout(c, m), bytes(in_), {recv}});
        });
    }

private:
    void check(std::size_t n) const {
        require(n <= capacity_, "codec::encoded_link: ", n, " values, but the link was reserved for ", capacity_);
    }

    template <class Fn>
    void with_codec(Fn&& fn) const {
        if constexpr (type_erased_codec<Codec>)
            std::visit(fn, codec_.held);
        else
            fn(codec_);
    }

    template <class C>
    slot_layout layout(const C& c, std::size_t n) const {
        const std::size_t B = c.block_values() == 0 ? 1 : c.block_values();
        return slot_layout{n, B, (n + B - 1) / B, wire_floats(n) * 4, 1};
    }

    static std::byte* bytes(float* p) { return reinterpret_cast<std::byte*>(p); }

    template <class C, class Exec>
    void prepare_with(const C& c, const Exec& ex, float* buf, std::size_t n) {
        const slot_layout at = layout(c, n);
        std::byte* out = bytes(out_);
        for_each_index(ex, 1, zero_slot_tails_body<C>{c, at, out, 0});
        float* residual = first_ ? residual_ : nullptr;
        constexpr bool can_round = requires(const float* in, std::byte* o, const philox_words& w) {
            c.encode_block(in, std::size_t{}, o, w, std::size_t{});
        };
        const bool stochastic = first_ && how_.stochastic;
        if constexpr (can_round) {
            if (stochastic) {
                const philox_words words = detail::rounding_words(how_, rank_);
                for_each_index(ex, at.blocks, encode_slots_body<C, philox_words>{c, at, {buf}, residual, beta_, out, words});
            } else {
                for_each_index(ex, at.blocks, encode_slots_body<C>{c, at, {buf}, residual, beta_, out, {}});
            }
        } else {
            if (stochastic) detail::no_stochastic_rounding<C>();
            for_each_index(ex, at.blocks, encode_slots_body<C>{c, at, {buf}, residual, beta_, out, {}});
        }
        for_each_index(ex, at.blocks, decode_slots_body<C>{c, at, out, {buf}});
    }

    Codec codec_{};
    buffer<float, Space> a_, b_;
    float* out_ = nullptr; // the bytes sent next
    float* in_ = nullptr;  // the bytes received last
    std::size_t capacity_ = 0;
    std::size_t count_ = 0; // values prepared in out_
    float* residual_ = nullptr;
    float beta_ = 0.0f;
    rounding how_{};
    int rank_ = 0;
    bool first_ = true;
    wire_parts sent_{};
};

} // namespace codec

TRICKLE_NAMESPACE_END
