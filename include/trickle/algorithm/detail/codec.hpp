// trickle/algorithm/detail/codec.hpp: how an algorithm takes its codec policy.
//
// An algorithm's exchange travels as fp32 sums through its topology (the codec fp32, the
// default: today's wire, bit for bit) or, with any other codec, through
// codec::encoded_all_reduce (host parameters) or codec::encoded_all_reduce_blocks (device
// parameters, the same bits) with the all_reduce topology, and through a
// codec::encoded_link in the rounds of any other built-in topology. These helpers decide
// which, and check at construction, on
// every worker (the config record), what the encoded path needs.
#pragma once

#include <trickle/codec/element.hpp>
#include <trickle/codec/link.hpp>
#include <trickle/codec/reduce.hpp>
#include <trickle/codec/sparsifier.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/topology/topology.hpp>
#include <trickle/topology/link.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/host.hpp>

#include <type_traits>
#include <variant>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

// The codec object an algorithm keeps: the policy itself, or for codec::native the codec
// of the parameters' type (W, default-constructed).
template <class W, class Codec>
W wire_codec_of(const Codec& c) {
    if constexpr (std::is_same_v<Codec, codec::native>)
        return W{};
    else
        return c;
}

// Whether the codec moves plain fp32 values (then the exchange is today's, through the
// topology, with no encoding at all).
template <class W>
bool plain_codec(const W& c) {
    if constexpr (codec::sparsifier_policy<W>)
        return false; // a sparsifier drops values whatever its value codec
    else if constexpr (std::is_same_v<W, codec::fp32>)
        return true;
    else if constexpr (requires { c.held; }) // a type-erased codec (codec::any): the one it holds
        return std::visit([](const auto& h) { return plain_codec(h); }, c.held);
    else
        return false;
}

// The name of codec or topology p, or of the one a type-erased p holds.
template <class P>
const char* held_name_of(const P& p) {
    if constexpr (requires { p.held_name(); })
        return p.held_name();
    else
        return P::name;
}

// Adds the codec's fields to an algorithm's record, and an error when the encoded path
// cannot run with this communicator, memory space or topology.
template <class Comm, class Space, class W, class Top>
void describe_codec(const W& c, const Top& top, config_record& rec, const char* kind, bool stochastic) {
    c.describe(rec);
    rec.add("stochastic_rounding", stochastic);
    if (stochastic) {
        bool can = false;
        if constexpr (!codec::sparsifier_policy<W>) can = !plain_codec(c) && codec::rounds_stochastically(c);
        if (!can)
            rec.set_error(concat(kind, ": stochastic_rounding needs a codec that rounds stochastically (int8_block, "
                                       "int4_block or sign2_block)"));
    }
    if (plain_codec(c)) return;
    const char* name = held_name_of(c);
    if constexpr (std::is_same_v<Space, cuda_space> && codec::sparsifier_policy<W>)
        rec.set_error(concat(kind, ": the ", name,
                             " sparsifier runs on host parameters in this version (device parameters take value "
                             "codecs: bf16, fp16, fp8, fp8_block, int8, int4, sign2)"));
    if (is_all_reduce(top)) {
        if constexpr (!byte_communicator<Comm>)
            rec.set_error(concat(kind, ": the ", name,
                                 " codec sums through the all_reduce topology with all_gather and all_to_all, which "
                                 "this communicator lacks (trickle::byte_communicator)"));
        return;
    }
    if constexpr (codec::sparsifier_policy<W>) {
        rec.set_error(concat(kind, ": the ", name, " sparsifier sums through the all_reduce topology, not ",
                             held_name_of(top)));
    } else {
        using exec_type = std::conditional_t<std::is_same_v<Space, cuda_space>, exec::cuda, exec::host>;
        if constexpr (!reduce_takes_link<Top, exec_type, Comm, Space, codec::encoded_link<W, Space>>)
            rec.set_error(concat(kind, ": the ", Top::name,
                                 " topology's reduce() takes no link (topology/link.hpp), so it cannot carry the ",
                                 name, " codec's bytes"));
    }
}

// The link an algorithm's topology rounds carry its codec through (plain for sparsifiers,
// which sum through the all_reduce topology only).
template <class W, class Space, bool = codec::sparsifier_policy<W>>
struct codec_link {
    using type = codec::encoded_link<W, Space>;
};
template <class W, class Space>
struct codec_link<W, Space, true> {
    using type = plain_link;
};
template <class W, class Space>
using codec_link_t = typename codec_link<W, Space>::type;

} // namespace detail

TRICKLE_NAMESPACE_END
