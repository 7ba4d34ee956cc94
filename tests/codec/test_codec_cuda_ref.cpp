// The element codecs against CUDA's own host conversions (cuda_fp8.h, cuda_bf16.h,
// cuda_fp16.h, whose conversion functions g++ can call): fp32 -> fp8 agrees bit for bit
// with __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3 / __NV_E5M2), fp8 -> fp32 with
// float(__nv_fp8_e4m3 / __nv_fp8_e5m2) (NaN included), bf16 / fp16 with
// __float2bfloat16_rn / __float2half_rn for every non-NaN input. Built only where CMake
// finds the headers (tests/codec/CMakeLists.txt); a Release build without sanitizers also
// compares every one of the 2^32 fp32 patterns (TRICKLE_CODEC_EXHAUSTIVE).
#include "codec_patterns.hpp"

#include <trickle/codec/element.hpp>
#include <trickle/codec/float8.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <ios>
#include <cstring>
#include <vector>

namespace codec = trickle::codec;
using codec_test::bits;
using codec_test::from_bits;

namespace {

std::uint8_t cuda_e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
std::uint8_t cuda_e5m2(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2); }
std::uint16_t cuda_bf16(float x) {
    const __nv_bfloat16_raw r = __float2bfloat16_rn(x);
    return r.x;
}
std::uint16_t cuda_fp16(float x) {
    const __half_raw r = __float2half_rn(x);
    return r.x;
}

const std::vector<std::uint32_t>& patterns() {
    static const std::vector<std::uint32_t> p = codec_test::element_patterns(
        {codec_test::fp8_values(codec_test::e4m3_ref), codec_test::fp8_values(codec_test::e5m2_ref),
         codec_test::fp16_values()},
        std::size_t{1} << 22);
    return p;
}

} // namespace

TEST_CASE("fp8: fp32 -> E4M3 / E5M2 agrees bit for bit with __nv_cvt_float_to_fp8 (__NV_SATFINITE)") {
    std::size_t bad4 = 0, bad5 = 0;
    for (std::uint32_t u : patterns()) {
        const float x = from_bits(u);
        if (codec::encode_e4m3(x) != cuda_e4m3(x) && bad4++ < 10)
            FAIL_CHECK("E4M3 of 0x" << std::hex << u << ": 0x" << int(codec::encode_e4m3(x)) << " vs CUDA 0x" << int(cuda_e4m3(x)));
        if (codec::encode_e5m2(x) != cuda_e5m2(x) && bad5++ < 10)
            FAIL_CHECK("E5M2 of 0x" << std::hex << u << ": 0x" << int(codec::encode_e5m2(x)) << " vs CUDA 0x" << int(cuda_e5m2(x)));
    }
    CHECK(bad4 == 0);
    CHECK(bad5 == 0);
    MESSAGE(patterns().size() << " fp32 patterns compared with cuda_fp8.h");
}

TEST_CASE("fp8: every code decodes to CUDA's float, bit for bit (NaN: 0x7FFFFFFF)") {
    for (int c = 0; c < 256; ++c) {
        __nv_fp8_e4m3 a;
        a.__x = static_cast<__nv_fp8_storage_t>(c);
        __nv_fp8_e5m2 b;
        b.__x = static_cast<__nv_fp8_storage_t>(c);
        INFO("code 0x" << std::hex << c);
        CHECK(bits(codec::decode_e4m3(static_cast<std::uint8_t>(c))) == bits(static_cast<float>(a)));
        CHECK(bits(codec::decode_e5m2(static_cast<std::uint8_t>(c))) == bits(static_cast<float>(b)));
    }
}

TEST_CASE("bf16 / fp16: the codecs agree with __float2bfloat16_rn / __float2half_rn (NaN: both NaN)") {
    std::size_t bad = 0, nans = 0;
    for (std::uint32_t u : patterns()) {
        const float x = from_bits(u);
        const std::uint16_t b = codec::bf16::encode_value(x), h = codec::fp16::encode_value(x);
        if (std::isnan(x)) {
            // CUDA returns its canonical NaN (0x7FFF); trickle keeps the sign and payload, quieted.
            CHECK(std::isnan(codec::bf16::decode_value(b)));
            CHECK(std::isnan(codec::fp16::decode_value(h)));
            CHECK(std::isnan(static_cast<float>(__nv_bfloat16(__float2bfloat16_rn(x)))));
            ++nans;
            continue;
        }
        if (b != cuda_bf16(x) && bad++ < 10)
            FAIL_CHECK("bf16 of 0x" << std::hex << u << ": 0x" << b << " vs CUDA 0x" << cuda_bf16(x));
        if (h != cuda_fp16(x) && bad++ < 10)
            FAIL_CHECK("fp16 of 0x" << std::hex << u << ": 0x" << h << " vs CUDA 0x" << cuda_fp16(x));
    }
    CHECK(bad == 0);
    MESSAGE(patterns().size() << " fp32 patterns compared with cuda_bf16.h / cuda_fp16.h (" << nans << " NaNs)");
    // decode: every 16-bit code to the same float as CUDA (NaNs: both NaN)
    for (std::uint32_t c = 0; c < 0x10000u; ++c) {
        __nv_bfloat16_raw br;
        br.x = static_cast<unsigned short>(c);
        __half_raw hr;
        hr.x = static_cast<unsigned short>(c);
        const float cb = static_cast<float>(__nv_bfloat16(br)), ch = static_cast<float>(__half(hr));
        const float tb = codec::bf16::decode_value(static_cast<std::uint16_t>(c));
        const float th = codec::fp16::decode_value(static_cast<std::uint16_t>(c));
        if (std::isnan(cb))
            REQUIRE(std::isnan(tb));
        else
            REQUIRE(bits(tb) == bits(cb));
        if (std::isnan(ch))
            REQUIRE(std::isnan(th));
        else
            REQUIRE(bits(th) == bits(ch));
    }
}

#if defined(TRICKLE_CODEC_EXHAUSTIVE)
TEST_CASE("fp8 / bf16 / fp16: all 2^32 fp32 patterns agree with CUDA (Release builds)") {
    std::uint64_t bad = 0;
    for (std::uint64_t i = 0; i <= 0xffffffffull; ++i) {
        const std::uint32_t u = static_cast<std::uint32_t>(i);
        const float x = from_bits(u);
        bool ok = codec::encode_e4m3(x) == cuda_e4m3(x) && codec::encode_e5m2(x) == cuda_e5m2(x);
        if ((u & 0x7fffffffu) <= 0x7f800000u) // not NaN
            ok = ok && codec::bf16::encode_value(x) == cuda_bf16(x) && codec::fp16::encode_value(x) == cuda_fp16(x);
        if (!ok && bad++ < 10) FAIL_CHECK("fp32 0x" << std::hex << u << " differs from CUDA");
    }
    CHECK(bad == 0);
}
#endif
