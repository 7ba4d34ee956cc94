// trickle/codec/registry.hpp: the codecs a run-time choice can name: codec::any's alternatives, trickle-sim's --codec, Python's codec=.
//
// One list, in the order the front ends list the names. codec::any is a variant of
// exactly these, and every front end finds one by the name it declares (its `name`), so
// adding a codec is its header and one line here (docs/extending.md). The sparsifiers
// (chunk_topk, random_k) wrap a codec and are not listed; neither is native, which an
// algorithm resolves to a codec of its parameters' type at compile time.
#pragma once

#include <trickle/codec/block.hpp>
#include <trickle/codec/codec.hpp>
#include <trickle/codec/element.hpp>
#include <trickle/codec/fp8_block.hpp>
#include <trickle/config.hpp>
#include <trickle/core/type_list.hpp>

TRICKLE_NAMESPACE_BEGIN

namespace codec {

using registry = type_list<fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, fp8_block, int8_block, int4_block, sign2_block>;

static_assert(names_unique<registry>(), "codec::registry: two codecs share a name");
static_assert([]<class... C>(type_list<C...>*) { return (codec_policy<C> && ...); }(static_cast<registry*>(nullptr)),
              "codec::registry: every entry must satisfy codec_policy");

} // namespace codec

TRICKLE_NAMESPACE_END
