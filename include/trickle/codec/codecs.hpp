// trickle/codec/codecs.hpp: every codec of the value layer (element codecs and block-scaled codecs).
//
// | codec                 | bytes per value (B = 64)    | header          |
// |-----------------------|-----------------------------|-----------------|
// | codec::fp32           | 4                           | element.hpp     |
// | codec::bf16, fp16     | 2                           | element.hpp     |
// | codec::fp8_e4m3, e5m2 | 1                           | element.hpp, float8.hpp |
// | codec::int8_block     | 1.0625 (min-max 1.125)      | block.hpp, quantize.hpp |
// | codec::int4_block     | 0.5625 (min-max 0.625)      | block.hpp, quantize.hpp |
// | codec::sign2_block    | 0.3125                      | block.hpp, quantize.hpp |
//
// docs/compression.md ("Codecs: values on the wire") describes each one.
#pragma once

#include <trickle/codec/block.hpp>
#include <trickle/codec/codec.hpp>
#include <trickle/codec/element.hpp>
#include <trickle/codec/float8.hpp>
#include <trickle/codec/fp8_block.hpp>
#include <trickle/codec/quantize.hpp>

TRICKLE_NAMESPACE_BEGIN

static_assert(codec_policy<codec::fp32> && codec_policy<codec::bf16> && codec_policy<codec::fp16> &&
              codec_policy<codec::fp8_e4m3> && codec_policy<codec::fp8_e5m2> && codec_policy<codec::int8_block> &&
              codec_policy<codec::int4_block> && codec_policy<codec::sign2_block>);

TRICKLE_NAMESPACE_END
