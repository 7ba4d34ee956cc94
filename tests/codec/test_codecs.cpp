// The codec functors: the concept, sizes, whole arrays against per-value conversions, the
// element codecs against trickle's parameter types, describe().
#include "codec_patterns.hpp"

#include <trickle/codec/codecs.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/core/dtype.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace codec = trickle::codec;
using codec_test::bits;
using codec_test::from_bits;

static_assert(trickle::codec_policy<codec::fp32>);
static_assert(trickle::codec_policy<codec::bf16>);
static_assert(trickle::codec_policy<codec::fp16>);
static_assert(trickle::codec_policy<codec::fp8_e4m3>);
static_assert(trickle::codec_policy<codec::fp8_e5m2>);
static_assert(trickle::codec_policy<codec::int8_block>);
static_assert(trickle::codec_policy<codec::int4_block>);
static_assert(trickle::codec_policy<codec::sign2_block>);
static_assert(std::is_trivially_copyable_v<codec::int8_block> && std::is_trivially_copyable_v<codec::fp8_e4m3>);

namespace {

std::vector<float> pattern_floats() {
    std::vector<float> x;
    for (std::uint32_t u : codec_test::element_patterns({}, 1 << 16)) x.push_back(from_bits(u));
    return x;
}

// Encodes the array (at an odd offset, so stores are unaligned), checks it wrote exactly
// wire_bytes(n), and compares each value's code and decode with the per-value functions.
template <class C>
void check_element_codec(const std::vector<float>& x) {
    const C c{};
    using code = typename C::code_type;
    const std::size_t n = x.size();
    REQUIRE(c.wire_bytes(n) == n * sizeof(code));
    std::vector<std::byte> w(c.wire_bytes(n) + 2, std::byte{0x5A});
    c.encode(x.data(), n, w.data() + 1);
    CHECK(w.front() == std::byte{0x5A});
    CHECK(w.back() == std::byte{0x5A});
    std::vector<float> y(n);
    c.decode(w.data() + 1, n, y.data());
    for (std::size_t i = 0; i < n; ++i) {
        code k;
        std::memcpy(&k, w.data() + 1 + i * sizeof(code), sizeof(code));
        REQUIRE(k == C::encode_value(x[i]));
        REQUIRE(bits(y[i]) == bits(C::decode_value(k)));
    }
}

} // namespace

TEST_CASE("element codecs: arrays code every value as the per-value functions do") {
    const auto x = pattern_floats();
    check_element_codec<codec::fp32>(x);
    check_element_codec<codec::bf16>(x);
    check_element_codec<codec::fp16>(x);
    check_element_codec<codec::fp8_e4m3>(x);
    check_element_codec<codec::fp8_e5m2>(x);
}

TEST_CASE("element codecs: fp32 is the identity, bf16 and fp16 are trickle's parameter conversions") {
    for (float v : pattern_floats()) {
        REQUIRE(bits(codec::fp32::decode_value(codec::fp32::encode_value(v))) == bits(v)); // NaN payloads too
        REQUIRE(codec::bf16::encode_value(v) == trickle::bfloat16(v).bits);
        REQUIRE(codec::fp16::encode_value(v) == trickle::half(v).bits);
        const auto b = codec::bf16::encode_value(v);
        const auto h = codec::fp16::encode_value(v);
        REQUIRE(bits(codec::bf16::decode_value(b)) == bits(static_cast<float>(trickle::bfloat16::from_bits(b))));
        REQUIRE(bits(codec::fp16::decode_value(h)) == bits(static_cast<float>(trickle::half::from_bits(h))));
    }
    // every 16-bit code decodes and re-encodes to itself (NaNs stay NaN, quieted)
    for (std::uint32_t c = 0; c < 0x10000u; ++c) {
        const auto k = static_cast<std::uint16_t>(c);
        const float b = codec::bf16::decode_value(k), h = codec::fp16::decode_value(k);
        if (std::isnan(b))
            REQUIRE(std::isnan(codec::bf16::decode_value(codec::bf16::encode_value(b))));
        else
            REQUIRE(codec::bf16::encode_value(b) == k);
        if (std::isnan(h))
            REQUIRE(std::isnan(codec::fp16::decode_value(codec::fp16::encode_value(h))));
        else
            REQUIRE(codec::fp16::encode_value(h) == k);
    }
}

TEST_CASE("codecs: wire sizes and block geometry") {
    CHECK(codec::fp32{}.wire_bytes(1000) == 4000);
    CHECK(codec::bf16{}.wire_bytes(1000) == 2000);
    CHECK(codec::fp16{}.wire_bytes(1000) == 2000);
    CHECK(codec::fp8_e4m3{}.wire_bytes(1000) == 1000);
    CHECK(codec::fp8_e5m2{}.wire_bytes(1000) == 1000);
    CHECK(codec::fp8_e5m2{}.block_values() == 1);
    CHECK(codec::bf16{}.block_offset(10) == 20);
    CHECK(codec::int8_block{}.wire_bytes(1024) == 16 * 68);
    CHECK(codec::int8_block{.block_size = 64, .symmetric = false}.wire_bytes(1024) == 16 * 72);
    CHECK(codec::int4_block{}.wire_bytes(1024) == 16 * 36);
    CHECK(codec::int4_block{64, false}.wire_bytes(1024) == 16 * 40);
    CHECK(codec::sign2_block{}.wire_bytes(1024) == 16 * 20);
    CHECK(codec::sign2_block{.block_size = 256}.wire_bytes(1024) == 4 * 68);
    CHECK(codec::int8_block{.block_size = 100}.wire_bytes(250) == 2 * 104 + 56);
    CHECK(codec::int8_block{.block_size = 100}.block_offset(2) == 208);
    CHECK(codec::int4_block{}.block_values() == 64);
    CHECK(codec::int4_block{}.wire_bytes(0) == 0);
}

TEST_CASE("codecs: empty arrays write and read nothing") {
    std::vector<std::byte> w(8, std::byte{1});
    std::vector<float> y(2, 3.0f);
    auto none = [&](auto c) {
        c.encode(nullptr, 0, w.data());
        c.decode(w.data(), 0, y.data());
        CHECK(w == std::vector<std::byte>(8, std::byte{1}));
        CHECK(y == std::vector<float>(2, 3.0f));
    };
    none(codec::fp32{});
    none(codec::bf16{});
    none(codec::fp8_e4m3{});
    none(codec::int8_block{});
    none(codec::int4_block{});
    none(codec::sign2_block{});
}

TEST_CASE("codecs: describe() records the codec's name and parameters") {
    auto fields = [](auto c) {
        trickle::config_record rec;
        c.describe(rec);
        std::string s;
        for (const auto& [k, v] : rec.fields()) s += k + "=" + v + ";";
        CHECK(rec.error().empty());
        return s;
    };
    CHECK(fields(codec::fp32{}) == "codec=fp32;");
    CHECK(fields(codec::bf16{}) == "codec=bf16;");
    CHECK(fields(codec::fp16{}) == "codec=fp16;");
    CHECK(fields(codec::fp8_e4m3{}) == "codec=fp8_e4m3;");
    CHECK(fields(codec::fp8_e5m2{}) == "codec=fp8_e5m2;");
    CHECK(fields(codec::int8_block{}) == "codec=int8;codec_block_size=64;codec_scheme=symmetric;");
    CHECK(fields(codec::int4_block{128, false}) == "codec=int4;codec_block_size=128;codec_scheme=minmax;");
    CHECK(fields(codec::sign2_block{.block_size = 32}) == "codec=sign2;codec_block_size=32;codec_scheme=midrise;");
}

TEST_CASE("codecs: error of a normal-distributed array, for the record") {
    // Not a bound (the block tests check those): the relative RMS error each codec gives a
    // N(0, 1) array, which docs/compression.md quotes; it must stay in these ranges.
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    std::vector<float> x(1 << 16);
    for (auto& v : x) v = normal(rng);
    auto rms = [&](auto c) {
        std::vector<std::byte> w(c.wire_bytes(x.size()));
        std::vector<float> y(x.size());
        c.encode(x.data(), x.size(), w.data());
        c.decode(w.data(), x.size(), y.data());
        double e = 0, s = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
            s += double(x[i]) * x[i];
        }
        return std::sqrt(e / s);
    };
    CHECK(rms(codec::fp32{}) == 0.0);
    CHECK(rms(codec::bf16{}) < 2.5e-3);
    CHECK(rms(codec::fp16{}) < 3.5e-4);
    CHECK(rms(codec::fp8_e4m3{}) < 3.0e-2);
    CHECK(rms(codec::fp8_e5m2{}) < 6.0e-2);
    CHECK(rms(codec::int8_block{}) < 1.0e-2);
    CHECK(rms(codec::int4_block{}) < 1.6e-1);
    CHECK(rms(codec::sign2_block{}) < 6.0e-1);
    MESSAGE("relative RMS error on N(0,1): bf16 " << rms(codec::bf16{}) << ", fp16 " << rms(codec::fp16{}) << ", e4m3 "
                                                  << rms(codec::fp8_e4m3{}) << ", e5m2 " << rms(codec::fp8_e5m2{})
                                                  << ", int8 " << rms(codec::int8_block{}) << ", int8 minmax "
                                                  << rms(codec::int8_block{64, false}) << ", int4 "
                                                  << rms(codec::int4_block{}) << ", int4 minmax "
                                                  << rms(codec::int4_block{64, false}) << ", sign2 "
                                                  << rms(codec::sign2_block{}));
}
