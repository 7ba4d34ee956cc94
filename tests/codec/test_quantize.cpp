// Block-scaled quantization (int8, int4, sign2; symmetric and min-max): error bounds, exact
// round trips on the grid, zeros, partial blocks, NaN / Inf / subnormal inputs, the wire
// layout, and stochastic rounding (unbiased in expectation, deterministic per word).
#include "codec_patterns.hpp"

#include <trickle/codec/block.hpp>
#include <trickle/codec/quantize.hpp>
#include <trickle/core/config_record.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace codec = trickle::codec;
using codec_test::bits;
using codec_test::from_bits;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
const float qnan = std::numeric_limits<float>::quiet_NaN();

template <class Format>
std::vector<float> roundtrip_block(const std::vector<float>& x, std::vector<std::byte>* wire = nullptr) {
    std::vector<std::byte> w(Format::record_bytes(x.size()), std::byte{0xAB});
    CHECK(codec::encode_block<Format>(x.data(), x.size(), w.data()) == w.size());
    std::vector<float> y(x.size());
    CHECK(codec::decode_block<Format>(w.data(), x.size(), y.data()) == w.size());
    if (wire) *wire = w;
    return y;
}

// The block's scale as the wire carries it.
float wire_scale(const std::vector<std::byte>& w) {
    float s;
    std::memcpy(&s, w.data(), 4);
    return s;
}

// |x - decode| <= s/2, up to the fp32 rounding of x / s and of the decode (a few ulp of the
// block's largest magnitude) and, for subnormal scales, one smallest subnormal.
template <class Format>
void check_bound(const std::vector<float>& x, const char* what) {
    std::vector<std::byte> w;
    const std::vector<float> y = roundtrip_block<Format>(x, &w);
    const double s = wire_scale(w);
    double big = 0;
    for (float v : x)
        if (std::isfinite(v)) big = std::max(big, std::fabs(static_cast<double>(v)));
    const double tol = 0.5 * s + 1e-6 * big + 1.5e-45;
    for (std::size_t i = 0; i < x.size(); ++i) {
        if (!std::isfinite(x[i])) continue;
        const double err = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
        if (err > tol)
            FAIL_CHECK(what << " bits " << Format::bits << " kind " << int(Format::kind) << ": value " << i << " = " << x[i]
                            << " decodes to " << y[i] << ", error " << err << " > s/2 = " << 0.5 * s);
    }
}

template <class Format>
void check_bound_suite() {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (std::size_t m : {1, 2, 3, 7, 31, 32, 33, 64, 100, 256}) {
        for (int scale_exp : {-140, -130, -100, -20, 0, 20, 100, 120}) {
            std::vector<float> a(m), b(m), c(m), d(m);
            for (std::size_t i = 0; i < m; ++i) {
                a[i] = std::ldexp(normal(rng), scale_exp);                 // centred
                b[i] = std::ldexp(std::fabs(normal(rng)) + 3.0f, scale_exp); // all positive, off zero
                c[i] = std::ldexp(-std::fabs(uniform(rng)) - 0.5f, scale_exp); // all negative
                d[i] = std::ldexp(uniform(rng), scale_exp + static_cast<int>(i % 9) - 4); // mixed magnitudes
            }
            check_bound<Format>(a, "normal");
            check_bound<Format>(b, "positive");
            check_bound<Format>(c, "negative");
            check_bound<Format>(d, "mixed");
        }
    }
    // Subnormal inputs: a block of them, and subnormals next to normal values.
    std::vector<float> sub, mix;
    for (int k = 1; k <= 300; k += 7) sub.push_back(static_cast<float>(k) * std::numeric_limits<float>::denorm_min());
    sub.push_back(-sub.back());
    check_bound<Format>(sub, "subnormal");
    for (int k = 0; k < 40; ++k) mix.push_back(k % 2 ? std::numeric_limits<float>::denorm_min() * static_cast<float>(k) : 1e-37f * static_cast<float>(k));
    check_bound<Format>(mix, "subnormal+normal");
    check_bound<Format>({std::numeric_limits<float>::denorm_min()}, "one denorm_min");
    // Extremes of the fp32 range (min-max's hi - lo overflows).
    check_bound<Format>({3.4e38f, -3.4e38f, 1.0f, -2.5e38f}, "huge");
    check_bound<Format>({3.4e38f, 3.3e38f, 3.1e38f}, "huge positive");
    // The ends of the fp32 range: every decoded value stays finite.
    constexpr float fmax = std::numeric_limits<float>::max();
    for (const std::vector<float>& x : {std::vector<float>{fmax, 1.0f}, {fmax, -fmax}, {-fmax, 3.0e38f, -1.0f}, {fmax},
                                        {-fmax}, {fmax, -1e37f}, {1.7e38f, -fmax, 0.0f}, {9e37f, -8e37f}}) {
        check_bound<Format>(x, "fp32 max");
        for (float y : roundtrip_block<Format>(x)) REQUIRE(std::isfinite(y));
    }
}

} // namespace

TEST_CASE("block formats: record and array sizes") {
    // header + packed codes, padded to 4 bytes
    CHECK(codec::int8_symmetric::record_bytes(64) == 68);
    CHECK(codec::int8_minmax::record_bytes(64) == 72);
    CHECK(codec::int4_symmetric::record_bytes(64) == 36);
    CHECK(codec::int4_minmax::record_bytes(64) == 40);
    CHECK(codec::sign2_midrise::record_bytes(64) == 20);
    CHECK(codec::int8_symmetric::record_bytes(1) == 8);
    CHECK(codec::int4_symmetric::record_bytes(3) == 8);
    CHECK(codec::sign2_midrise::record_bytes(17) == 12);
    CHECK(codec::int8_symmetric::record_bytes(0) == 0);
    CHECK(codec::int8_symmetric::encoded_bytes(0, 64) == 0);
    CHECK(codec::int8_symmetric::encoded_bytes(64, 64) == 68);
    CHECK(codec::int8_symmetric::encoded_bytes(65, 64) == 76);
    CHECK(codec::int4_symmetric::encoded_bytes(1000, 64) == 15 * 36 + 4 + 20);
    CHECK(codec::sign2_midrise::encoded_bytes(1000, 64) == 15 * 20 + 4 + 12);
    CHECK(codec::int8_minmax::encoded_bytes(10, 0) == 0);
}

TEST_CASE("block quantization: |x - decode(encode(x))| <= scale / 2") {
    check_bound_suite<codec::int8_symmetric>();
    check_bound_suite<codec::int8_minmax>();
    check_bound_suite<codec::int4_symmetric>();
    check_bound_suite<codec::int4_minmax>();
    check_bound_suite<codec::sign2_midrise>();
}

TEST_CASE("block quantization: values on the grid round-trip exactly") {
    std::mt19937 rng(11);
    for (int e : {-130, -60, -3, 0, 5, 90}) {
        const float s = std::ldexp(1.0f, e);
        // symmetric: q * s, with +-qmax present so the scale comes out as s
        for (int qmax : {127, 7}) {
            std::vector<float> x{static_cast<float>(qmax) * s, -static_cast<float>(qmax) * s, 0.0f};
            for (int i = 0; i < 61; ++i) x.push_back(static_cast<float>(static_cast<int>(rng() % (2 * qmax + 1)) - qmax) * s);
            const auto y = qmax == 127 ? roundtrip_block<codec::int8_symmetric>(x) : roundtrip_block<codec::int4_symmetric>(x);
            for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == x[i]);
        }
        // min-max: (q - z) * s with q = 0 and q = L present
        for (int L : {255, 15}) {
            const int z = static_cast<int>(rng() % static_cast<unsigned>(L + 1));
            std::vector<float> x{static_cast<float>(0 - z) * s, static_cast<float>(L - z) * s};
            for (int i = 0; i < 62; ++i) x.push_back(static_cast<float>(static_cast<int>(rng() % static_cast<unsigned>(L + 1)) - z) * s);
            const auto y = L == 255 ? roundtrip_block<codec::int8_minmax>(x) : roundtrip_block<codec::int4_minmax>(x);
            for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == x[i]);
        }
        // midrise: (q - 1.5) * s with an outer level present
        std::vector<float> x{1.5f * s};
        for (int i = 0; i < 63; ++i) x.push_back((static_cast<float>(rng() % 4) - 1.5f) * s);
        const auto y = roundtrip_block<codec::sign2_midrise>(x);
        for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == x[i]);
    }
}

TEST_CASE("block quantization: symmetric and midrise blocks re-encode their decoded values exactly") {
    // The scale has 16 significant bits, so code * scale is exact: decoded values lie on
    // the grid of a scale that reproduces itself, and encoding them again (what a relay that
    // decodes and forwards does) gives the same bytes. (Min-max is not idempotent in
    // general: a block need not use its extreme codes, and then the re-encoded range is
    // narrower; its values still stay within the bound.)
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    std::size_t checked = 0;
    auto idempotent = [&](auto fmt) {
        using F = decltype(fmt);
        for (int trial = 0; trial < 3000; ++trial) {
            std::vector<float> x(1 + trial % 64);
            const int e = static_cast<int>(rng() % 200) - 100;
            for (auto& v : x) v = std::ldexp(normal(rng), e);
            std::vector<std::byte> w1, w2;
            const auto y = roundtrip_block<F>(x, &w1);
            const auto z = roundtrip_block<F>(y, &w2);
            REQUIRE(w1 == w2);
            for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(bits(z[i]) == bits(y[i]));
            ++checked;
        }
    };
    idempotent(codec::int8_symmetric{});
    idempotent(codec::int4_symmetric{});
    idempotent(codec::sign2_midrise{});
    CHECK(checked == 9000);
}

TEST_CASE("block quantization: all-zero blocks, NaN and Inf") {
    const std::vector<float> zeros{0.0f, -0.0f, 0.0f, 0.0f, -0.0f};
    auto all_plus_zero = [](const std::vector<float>& y) {
        for (float v : y) REQUIRE(bits(v) == 0u);
    };
    std::vector<std::byte> w;
    all_plus_zero(roundtrip_block<codec::int8_symmetric>(zeros, &w));
    CHECK(wire_scale(w) == 0.0f);
    all_plus_zero(roundtrip_block<codec::int8_minmax>(zeros));
    all_plus_zero(roundtrip_block<codec::int4_symmetric>(zeros));
    all_plus_zero(roundtrip_block<codec::int4_minmax>(zeros));
    all_plus_zero(roundtrip_block<codec::sign2_midrise>(zeros));

    // NaN encodes as the code of 0; the scale comes from the finite values; +-Inf saturate to
    // the block's extreme codes (the largest finite magnitude).
    const std::vector<float> x{1.0f, qnan, -2.0f, inf, -inf, 0.5f, -qnan};
    {
        const auto y = roundtrip_block<codec::int8_symmetric>(x, &w);
        const float s = wire_scale(w);
        CHECK(s >= 2.0f / 127.0f); // max|x| / 127, rounded up to 16 significant bits
        CHECK(s <= 2.0f / 127.0f * (1 + 0x1p-16f));
        CHECK(y[1] == 0.0f);
        CHECK(y[6] == 0.0f);
        CHECK(y[2] == -127.0f * s);
        CHECK(y[3] == 127.0f * s); // +Inf: the largest code
        CHECK(y[4] == -127.0f * s);
        CHECK(std::fabs(y[2] + 2.0f) <= 4 * 0x1p-16f);
        CHECK(std::fabs(y[0] - 1.0f) <= 1.0f / 127.0f);
    }
    {
        const auto y = roundtrip_block<codec::int8_minmax>(x, &w);
        CHECK(y[1] == 0.0f);
        CHECK(y[6] == 0.0f);
        CHECK(std::fabs(y[3] - 1.0f) <= 3.0f / 255.0f / 2 * 1.0001f); // hi = 1
        CHECK(std::fabs(y[4] + 2.0f) <= 3.0f / 255.0f / 2 * 1.0001f); // lo = -2
    }
    {
        const auto y = roundtrip_block<codec::int4_symmetric>(x, &w);
        const float s = wire_scale(w);
        CHECK(y[1] == 0.0f);
        CHECK(y[3] == 7.0f * s);
        CHECK(y[4] == -7.0f * s);
    }
    {
        // sign2 has no zero: NaN takes the code of +0, +0.5 s; Inf the outer levels +-1.5 s.
        const auto y = roundtrip_block<codec::sign2_midrise>(x, &w);
        const float s = wire_scale(w);
        CHECK(s >= 2.0f / 1.5f);
        CHECK(s <= 2.0f / 1.5f * (1 + 0x1p-16f));
        CHECK(y[1] == 0.5f * s);
        CHECK(y[3] == 1.5f * s);
        CHECK(y[4] == -1.5f * s);
    }
    // A block of nothing but non-finite values has scale 0 and decodes to zeros.
    all_plus_zero(roundtrip_block<codec::int8_symmetric>({qnan, inf, -inf}));
    all_plus_zero(roundtrip_block<codec::int4_minmax>({qnan, inf, -inf}));
    all_plus_zero(roundtrip_block<codec::sign2_midrise>({qnan, inf, -inf}));
}

TEST_CASE("block quantization: wire layout (little-endian header, packed codes low bits first, zero padding)") {
    // symmetric int4: scale 1, codes 1, -1, 7, -7, 0 -> nibbles 0x1, 0xF, 0x7, 0x9, 0x0
    const std::vector<float> x{1.0f, -1.0f, 7.0f, -7.0f, 0.0f};
    std::vector<std::byte> w;
    roundtrip_block<codec::int4_symmetric>(x, &w);
    REQUIRE(w.size() == 8);
    CHECK(wire_scale(w) == 1.0f);
    CHECK(w[4] == std::byte{0xF1});
    CHECK(w[5] == std::byte{0x97});
    CHECK(w[6] == std::byte{0x00}); // last nibble's partner is zero
    CHECK(w[7] == std::byte{0x00}); // padding
    // int8 min-max: scale, zero point (int32), codes
    roundtrip_block<codec::int8_minmax>({-1.0f, 0.0f, 254.0f}, &w);
    REQUIRE(w.size() == 12);
    CHECK(wire_scale(w) == 1.0f);
    std::int32_t z;
    std::memcpy(&z, w.data() + 4, 4);
    CHECK(z == 1);
    CHECK(w[8] == std::byte{0});
    CHECK(w[9] == std::byte{1});
    CHECK(w[10] == std::byte{255});
    CHECK(w[11] == std::byte{0});
    // sign2: levels -1.5, -0.5, 0.5, 1.5 are codes 0..3, four a byte, lowest pair first
    roundtrip_block<codec::sign2_midrise>({-1.5f, -0.5f, 0.5f, 1.5f, 1.5f}, &w);
    REQUIRE(w.size() == 8);
    CHECK(wire_scale(w) == 1.0f);
    CHECK(w[4] == std::byte{0xE4}); // 3<<6 | 2<<4 | 1<<2 | 0
    CHECK(w[5] == std::byte{0x03});
    CHECK(w[6] == std::byte{0});
    CHECK(w[7] == std::byte{0});
}

TEST_CASE("block codecs: arrays with a partial last block equal their blocks encoded one by one") {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    auto check = [&](auto c, std::size_t n) {
        std::vector<float> x(n);
        for (auto& v : x) v = normal(rng);
        std::vector<std::byte> whole(c.wire_bytes(n) + 8, std::byte{0x5A});
        c.encode(x.data(), n, whole.data());
        for (std::size_t j = c.wire_bytes(n); j < whole.size(); ++j) REQUIRE(whole[j] == std::byte{0x5A}); // no overrun
        const std::size_t B = c.block_values();
        for (std::size_t b = 0; b * B < n; ++b) {
            const std::size_t m = std::min(B, n - b * B);
            std::vector<std::byte> one(c.block_bytes(m));
            c.encode_block(x.data() + b * B, m, one.data());
            REQUIRE(std::memcmp(one.data(), whole.data() + c.block_offset(b), one.size()) == 0);
            std::vector<float> part(m);
            c.decode_block(whole.data() + c.block_offset(b), m, part.data());
            std::vector<float> all(n);
            c.decode(whole.data(), n, all.data());
            REQUIRE(std::memcmp(part.data(), all.data() + b * B, m * 4) == 0);
        }
        CHECK(c.block_offset((n + B - 1) / B - (n % B ? 1 : 0)) + (n % B ? c.block_bytes(n % B) : 0) == c.wire_bytes(n));
    };
    for (std::size_t n : {1, 5, 63, 64, 65, 200, 1000}) {
        check(codec::int8_block{}, n);
        check(codec::int8_block{.block_size = 32, .symmetric = false}, n);
        check(codec::int4_block{.block_size = 7}, n);
        check(codec::int4_block{.block_size = 64, .symmetric = false}, n);
        check(codec::sign2_block{.block_size = 13}, n);
        check(codec::sign2_block{}, n);
    }
}

TEST_CASE("block codecs: encoding is deterministic; the wire bytes do not depend on the output's alignment") {
    std::mt19937 rng(9);
    std::normal_distribution<float> normal;
    std::vector<float> x(333);
    for (auto& v : x) v = normal(rng);
    const codec::int4_block c{.block_size = 64, .symmetric = false};
    std::vector<std::byte> a(c.wire_bytes(x.size())), b(c.wire_bytes(x.size()) + 3);
    c.encode(x.data(), x.size(), a.data());
    c.encode(x.data(), x.size(), b.data() + 3);
    CHECK(std::memcmp(a.data(), b.data() + 3, a.size()) == 0);
    std::vector<float> ya(x.size()), yb(x.size());
    c.decode(a.data(), x.size(), ya.data());
    c.decode(b.data() + 3, x.size(), yb.data());
    CHECK(std::memcmp(ya.data(), yb.data(), ya.size() * 4) == 0);
}

TEST_CASE("stochastic rounding: unbiased in expectation, deterministic for given words") {
    std::mt19937 rng(21);
    std::normal_distribution<float> normal;
    auto run = [&](auto c) {
        std::vector<float> x(64);
        for (auto& v : x) v = normal(rng);
        x[3] = 0.0f;
        const std::size_t draws = 4000;
        std::vector<double> mean(x.size(), 0.0);
        std::vector<std::byte> w(c.wire_bytes(x.size()));
        std::vector<float> y(x.size());
        float s = 0;
        for (std::size_t d = 0; d < draws; ++d) {
            c.encode(x.data(), x.size(), w.data(), codec::philox_words{.seed = 99, .stream = d});
            c.decode(w.data(), x.size(), y.data());
            std::memcpy(&s, w.data(), 4);
            for (std::size_t i = 0; i < x.size(); ++i) {
                // always one of the two grid neighbours: within one step
                REQUIRE(std::fabs(static_cast<double>(y[i]) - x[i]) <= s * (1 + 1e-6));
                mean[i] += y[i];
            }
        }
        // Each draw has variance <= s^2 / 4: the mean of 4000 is within 5 sigma = 0.04 s.
        double total_bias = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const double bias = mean[i] / draws - x[i];
            CHECK(std::fabs(bias) <= 5 * s / (2 * std::sqrt(double(draws))));
            total_bias += bias;
        }
        CHECK(std::fabs(total_bias / x.size()) <= 5 * s / (2 * std::sqrt(double(draws) * x.size())));
        // Same words, same bytes; other words, other bytes.
        std::vector<std::byte> a(w.size()), b(w.size()), other(w.size());
        c.encode(x.data(), x.size(), a.data(), codec::philox_words{.seed = 1, .stream = 2});
        c.encode(x.data(), x.size(), b.data(), codec::philox_words{.seed = 1, .stream = 2});
        c.encode(x.data(), x.size(), other.data(), codec::philox_words{.seed = 1, .stream = 3});
        CHECK(a == b);
        CHECK(a != other);
    };
    run(codec::int8_block{.block_size = 64});
    run(codec::int8_block{.block_size = 64, .symmetric = false});
    run(codec::int4_block{.block_size = 64});
    run(codec::int4_block{.block_size = 64, .symmetric = false});
    run(codec::sign2_block{.block_size = 64});
}

TEST_CASE("stochastic rounding: the word decides (exact thresholds) and grid values never move") {
    using F = codec::int8_symmetric;
    const std::vector<float> x{127.0f, 0.25f, -0.25f, 3.0f};
    // u = (w >> 8) * 2^-24 rounds up when u < frac: 0.25 rounds up for u < 0.25
    auto code_of = [&](std::size_t i, std::uint32_t word) {
        std::vector<std::byte> w(F::record_bytes(x.size()));
        auto words = [word](std::size_t) { return word; };
        codec::encode_block<F>(x.data(), x.size(), w.data(), words, 0);
        return static_cast<std::int8_t>(w[4 + i]);
    };
    CHECK(code_of(1, 0x00000000u) == 1);
    CHECK(code_of(1, 0x3fffffffu) == 1);  // u just below 0.25
    CHECK(code_of(1, 0x40000000u) == 0);  // u = 0.25
    CHECK(code_of(2, 0x00000000u) == 0);  // -0.25 = -1 + 0.75: up to 0 unless u >= 0.75
    CHECK(code_of(2, 0xbfffffffu) == 0);
    CHECK(code_of(2, 0xc0000000u) == -1);
    for (std::uint32_t word : {0u, 0x7fffffffu, 0xffffffffu}) {
        CHECK(code_of(0, word) == 127);
        CHECK(code_of(3, word) == 3);
    }
}

TEST_CASE("philox_words: fill() gives operator()'s words") {
    const codec::philox_words w{.seed = 42, .stream = 7};
    for (std::size_t first : {0, 1, 2, 3, 5, 1000}) {
        std::vector<std::uint32_t> v(37);
        w.fill(first, v.size(), v.data());
        for (std::size_t j = 0; j < v.size(); ++j) REQUIRE(v[j] == w(first + j));
    }
    CHECK(w(0) != w(1));
    CHECK(w(0) != codec::philox_words{.seed = 42, .stream = 8}(0));
}

TEST_CASE("block codecs: describe() names the parameters and rejects a block size of 0") {
    trickle::config_record ok;
    codec::int4_block{.block_size = 32, .symmetric = false}.describe(ok);
    CHECK(ok.error().empty());
    REQUIRE(ok.fields().size() == 3);
    CHECK(ok.fields()[0] == std::pair<std::string, std::string>{"codec", "int4"});
    CHECK(ok.fields()[1] == std::pair<std::string, std::string>{"codec_block_size", "32"});
    CHECK(ok.fields()[2] == std::pair<std::string, std::string>{"codec_scheme", "minmax"});

    for (const auto& [rec, name] : {std::pair{trickle::config_record{}, "int8"}, std::pair{trickle::config_record{}, "int4"},
                                    std::pair{trickle::config_record{}, "sign2"}}) {
        trickle::config_record r = rec;
        if (std::string(name) == "int8") codec::int8_block{.block_size = 0}.describe(r);
        if (std::string(name) == "int4") codec::int4_block{.block_size = 0}.describe(r);
        if (std::string(name) == "sign2") codec::sign2_block{.block_size = 0}.describe(r);
        CHECK(r.error() == std::string("codec::") + name + ": block_size must be >= 1, got 0");
    }
    // With a block size of 0 the array functions write and read nothing.
    std::vector<std::byte> w(16, std::byte{7});
    std::vector<float> x(4, 1.0f), y(4, 5.0f);
    const codec::int8_block bad{.block_size = 0};
    CHECK(bad.wire_bytes(4) == 0);
    bad.encode(x.data(), 4, w.data());
    bad.decode(w.data(), 4, y.data());
    CHECK(w == std::vector<std::byte>(16, std::byte{7}));
    CHECK(y == std::vector<float>(4, 5.0f));
}
