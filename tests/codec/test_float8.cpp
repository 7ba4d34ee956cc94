// fp8 E4M3 / E5M2: every code decodes exactly and re-encodes to itself; fp32 -> fp8 agrees
// with a reference written from the format's definition on every rounding and saturation
// boundary and 1.5 million other patterns. (test_codec_cuda_ref compares with CUDA's own.)
#include "codec_patterns.hpp"

#include <trickle/codec/float8.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <ios>
#include <limits>

using codec_test::bits;
using codec_test::from_bits;
namespace codec = trickle::codec;

namespace {

template <class Encode, class Decode>
void check_codes(const codec_test::fp8_reference& ref, Encode encode, Decode decode) {
    for (int c = 0; c < 256; ++c) {
        const auto code = static_cast<std::uint8_t>(c);
        const float x = decode(code);
        const double want = ref.value(code);
        INFO("code 0x" << std::hex << c);
        if (std::isnan(want)) {
            CHECK(bits(x) == 0x7fffffffu); // CUDA's canonical NaN, whatever the code's sign
            CHECK(encode(x) == 0x7f);
            continue;
        }
        CHECK(static_cast<double>(x) == want);
        CHECK(std::signbit(x) == ((c & 0x80) != 0)); // -0 included
        if (std::isinf(want))
            CHECK(encode(x) == ((c & 0x80) | ref.max_code)); // saturating: inf -> +-max
        else
            CHECK(encode(x) == code);
    }
}

template <class Encode>
void check_against_reference(const codec_test::fp8_reference& ref, Encode encode) {
    const auto patterns = codec_test::element_patterns({codec_test::fp8_values(codec_test::e4m3_ref),
                                                         codec_test::fp8_values(codec_test::e5m2_ref)});
    std::size_t bad = 0;
    for (std::uint32_t u : patterns) {
        const float x = from_bits(u);
        const std::uint8_t got = encode(x), want = ref.encode(x);
        if (got != want && bad++ < 10) FAIL_CHECK("fp32 0x" << std::hex << u << ": got 0x" << int(got) << ", want 0x" << int(want));
    }
    CHECK(bad == 0);
    MESSAGE(patterns.size() << " fp32 patterns checked");
}

} // namespace

TEST_CASE("fp8 E4M3: every code decodes exactly and re-encodes to itself") {
    check_codes(codec_test::e4m3_ref, codec::encode_e4m3, codec::decode_e4m3);
}

TEST_CASE("fp8 E5M2: every code decodes exactly and re-encodes to itself (infinities to the largest finite value)") {
    check_codes(codec_test::e5m2_ref, codec::encode_e5m2, codec::decode_e5m2);
}

TEST_CASE("fp8 E4M3: fp32 -> fp8 matches the reference on every boundary and 1.5M patterns") {
    check_against_reference(codec_test::e4m3_ref, codec::encode_e4m3);
}

TEST_CASE("fp8 E5M2: fp32 -> fp8 matches the reference on every boundary and 1.5M patterns") {
    check_against_reference(codec_test::e5m2_ref, codec::encode_e5m2);
}

TEST_CASE("fp8: documented rounding, saturation and special values") {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // E4M3: max 448 = 0x7E; 464 is the tie between 448 and (the NaN slot) 480: even -> 448.
    CHECK(codec::encode_e4m3(448.0f) == 0x7e);
    CHECK(codec::encode_e4m3(464.0f) == 0x7e);
    CHECK(codec::encode_e4m3(std::nextafter(464.0f, inf)) == 0x7e); // saturates
    CHECK(codec::encode_e4m3(1e30f) == 0x7e);
    CHECK(codec::encode_e4m3(inf) == 0x7e);
    CHECK(codec::encode_e4m3(-inf) == 0xfe);
    CHECK(codec::encode_e4m3(nan) == 0x7f);
    CHECK(codec::encode_e4m3(-nan) == 0x7f);
    CHECK(codec::encode_e4m3(from_bits(0x7f800001u)) == 0x7f); // signalling NaN too
    CHECK(codec::encode_e4m3(0.0f) == 0x00);
    CHECK(codec::encode_e4m3(-0.0f) == 0x80);
    CHECK(codec::encode_e4m3(0x1p-9f) == 0x01);                           // smallest subnormal
    CHECK(codec::encode_e4m3(0x1p-10f) == 0x00);                          // tie with 0: even
    CHECK(codec::encode_e4m3(-0x1p-10f) == 0x80);                         // ... keeping the sign
    CHECK(codec::encode_e4m3(std::nextafter(0x1p-10f, 1.0f)) == 0x01);
    CHECK(codec::encode_e4m3(3 * 0x1p-10f) == 0x02);                      // 1.5 units: even -> 2
    CHECK(codec::encode_e4m3(std::numeric_limits<float>::denorm_min()) == 0x00);
    CHECK(codec::encode_e4m3(0x1p-6f) == 0x08);                           // smallest normal
    CHECK(codec::encode_e4m3(15 * 0x1p-10f) == 0x08);                     // 7.5 units: rounds up into the normals
    CHECK(codec::decode_e4m3(0x7e) == 448.0f);
    CHECK(codec::decode_e4m3(0x01) == 0x1p-9f);
    CHECK(codec::decode_e4m3(0x07) == 7 * 0x1p-9f);
    // E5M2: max 57344 = 0x7B; from 61440 (the tie with 65536) on everything saturates.
    CHECK(codec::encode_e5m2(57344.0f) == 0x7b);
    CHECK(codec::encode_e5m2(std::nextafter(61440.0f, 0.0f)) == 0x7b);
    CHECK(codec::encode_e5m2(61440.0f) == 0x7b);
    CHECK(codec::encode_e5m2(3.0e38f) == 0x7b);
    CHECK(codec::encode_e5m2(inf) == 0x7b);
    CHECK(codec::encode_e5m2(-inf) == 0xfb);
    CHECK(codec::encode_e5m2(nan) == 0x7f);
    CHECK(codec::encode_e5m2(0x1p-16f) == 0x01);
    CHECK(codec::encode_e5m2(0x1p-17f) == 0x00);
    CHECK(codec::encode_e5m2(-0x1p-14f) == 0x84);
    CHECK(codec::decode_e5m2(0x7c) == inf);
    CHECK(codec::decode_e5m2(0xfc) == -inf);
    CHECK(bits(codec::decode_e5m2(0x7d)) == 0x7fffffffu);
    CHECK(bits(codec::decode_e5m2(0xff)) == 0x7fffffffu);
    CHECK(codec::decode_e5m2(0x7b) == 57344.0f);
    CHECK(codec::decode_e5m2(0x03) == 3 * 0x1p-16f);
}

TEST_CASE("fp8: encoding is monotonic in the value") {
    // Over increasing positive fp32 values the code never decreases (and mirrors for negatives).
    std::uint8_t prev4 = 0, prev5 = 0;
    for (std::uint32_t u = 0; u < 0x7f800000u; u += 0x1001u) {
        const float x = from_bits(u);
        const std::uint8_t c4 = codec::encode_e4m3(x), c5 = codec::encode_e5m2(x);
        REQUIRE(c4 >= prev4);
        REQUIRE(c5 >= prev5);
        REQUIRE(codec::encode_e4m3(-x) == (c4 | 0x80));
        REQUIRE(codec::encode_e5m2(-x) == (c5 | 0x80));
        prev4 = c4;
        prev5 = c5;
    }
}
