// Element types: fp16 and bf16 conversions are exact, round to nearest even, and keep
// specials; checked exhaustively against independent references.
#include <trickle/core/dtype.hpp>
#include <trickle/kernels/sparse_exchange.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using trickle::bfloat16;
using trickle::half;

namespace {

std::uint32_t bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float from_bits(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Reference float -> bf16: pick the nearer of the two truncation neighbours in double,
// ties to the even one.
std::uint16_t ref_bf16(float f) {
    if (std::isnan(f)) return 0x7fc0;
    const std::uint32_t u = bits(f);
    const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);
    if ((u & 0xffffu) == 0) return lo;
    const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);
    const double dlo = std::fabs(static_cast<double>(f) - from_bits(static_cast<std::uint32_t>(lo) << 16));
    // The neighbour past the largest finite bf16 is infinity; as a rounding target it
    // sits at 2^128.
    const double vhi = (hi & 0x7fffu) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), static_cast<double>(f))
                                                 : static_cast<double>(from_bits(static_cast<std::uint32_t>(hi) << 16));
    const double dhi = std::fabs(static_cast<double>(f) - vhi);
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1u) ? hi : lo;
}

} // namespace

TEST_CASE("fp16: every binary16 value survives half -> float -> half") {
    for (std::uint32_t b = 0; b < 0x10000u; ++b) {
        const half h = half::from_bits(static_cast<std::uint16_t>(b));
        const float f = static_cast<float>(h);
        const half back(f);
        if (std::isnan(f)) {
            CHECK(((back.bits & 0x7c00u) == 0x7c00u && (back.bits & 0x3ffu) != 0));
        } else {
            REQUIRE(back.bits == b);
        }
    }
}

#if defined(__FLT16_MAX__)
TEST_CASE("fp16: float -> half matches the compiler's _Float16 rounding") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::uint32_t> any;
    auto check = [](float f) {
        const _Float16 ref = static_cast<_Float16>(f);
        std::uint16_t rb;
        std::memcpy(&rb, &ref, 2);
        const half h(f);
        if (std::isnan(f))
            CHECK((h.bits & 0x7fffu) > 0x7c00u);
        else
            REQUIRE_MESSAGE(h.bits == rb, "float bits ", bits(f));
    };
    for (int i = 0; i < 2000000; ++i) check(from_bits(any(rng)));
    // Every float whose exponent lands in or near binary16's range, on a dense grid.
    for (std::uint32_t u = 0x33000000u; u < 0x47800000u; u += 0x1ff) {
        check(from_bits(u));
        check(from_bits(u | 0x80000000u));
    }
    // Halfway cases around the largest finite value and the subnormals.
    for (float f : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f,
                    8.940697e-8f, 6.1035156e-5f, 6.1035152e-5f, 0.0f, -0.0f})
        check(f);
}
#endif

TEST_CASE("fp16: specials") {
    CHECK(half(std::numeric_limits<float>::infinity()).bits == 0x7c00u);
    CHECK(half(-std::numeric_limits<float>::infinity()).bits == 0xfc00u);
    CHECK(half(1e10f).bits == 0x7c00u);
    CHECK(half(-0.0f).bits == 0x8000u);
    CHECK(half(1.0f).bits == 0x3c00u);
    CHECK(static_cast<float>(half::from_bits(0x0001u)) == std::ldexp(1.0f, -24));
}

TEST_CASE("bf16: float -> bf16 matches the reference rounding") {
    std::mt19937 rng(11);
    std::uniform_int_distribution<std::uint32_t> any;
    for (int i = 0; i < 2000000; ++i) {
        const float f = from_bits(any(rng));
        const bfloat16 b(f);
        if (std::isnan(f))
            CHECK(std::isnan(static_cast<float>(b)));
        else
            REQUIRE_MESSAGE(b.bits == ref_bf16(f), "float bits ", bits(f));
    }
    // Exact ties: round to even.
    CHECK(bfloat16(from_bits(0x3f808000u)).bits == 0x3f80u);
    CHECK(bfloat16(from_bits(0x3f818000u)).bits == 0x3f82u);
    CHECK(bfloat16(from_bits(0x7f7fffffu)).bits == 0x7f80u); // rounds up to infinity
}

// The scatter's bf16 store and, on x86-64 with GCC, each of its per-ISA versions that this
// CPU can run, give the bits of bfloat16(x * scale).
TEST_CASE("bf16: the scatter's store runs round exactly as bfloat16") {
    namespace d = trickle::detail;
    using store = void (*)(bfloat16*, const float*, float, std::size_t);
    std::vector<std::pair<const char*, store>> versions{
        {"store_run", [](bfloat16* o, const float* i, float s, std::size_t m) { d::store_run(o, i, s, m); }}};
#if TRICKLE_BF16_CLONES
    versions.emplace_back("dispatched", &d::bf16_store_run);
    versions.emplace_back("baseline", &d::bf16_store_run_base);
    if (__builtin_cpu_supports("x86-64-v3")) versions.emplace_back("x86-64-v3", &d::bf16_store_run_v3);
    else MESSAGE("this CPU lacks x86-64-v3: that version is not run");
    if (__builtin_cpu_supports("x86-64-v4")) versions.emplace_back("x86-64-v4", &d::bf16_store_run_v4);
    else MESSAGE("this CPU lacks x86-64-v4: that version is not run");
#endif
    std::mt19937 rng(5);
    std::uniform_int_distribution<std::uint32_t> any;
    std::vector<float> in(100003);
    for (auto& f : in) f = from_bits(any(rng));
    in[0] = from_bits(0x3f808000u); // tie, rounds to even
    in[1] = from_bits(0x7f7fffffu); // rounds to infinity
    in[2] = std::numeric_limits<float>::quiet_NaN();
    in[3] = -std::numeric_limits<float>::infinity();
    for (const float scale : {1.0f, 0.25f, 3.0f}) {
        for (const auto& version : versions) {
            const auto& name = version.first; // (not a structured binding: CAPTURE's lambda takes it, which clang 14 refuses)
            const auto& fn = version.second;
            CAPTURE(name);
            CAPTURE(scale);
            std::vector<bfloat16> out(in.size());
            fn(out.data(), in.data(), scale, in.size());
            for (std::size_t j = 0; j < in.size(); ++j) {
                const bfloat16 want(in[j] * scale);
                if (std::isnan(static_cast<float>(want)))
                    REQUIRE(std::isnan(static_cast<float>(out[j])));
                else
                    REQUIRE_MESSAGE(out[j].bits == want.bits, "input bits ", bits(in[j]));
            }
        }
    }
}

TEST_CASE("bf16: every bf16 value survives bf16 -> float -> bf16") {
    for (std::uint32_t b = 0; b < 0x10000u; ++b) {
        const bfloat16 v = bfloat16::from_bits(static_cast<std::uint16_t>(b));
        const float f = static_cast<float>(v);
        if (std::isnan(f)) continue;
        REQUIRE(bfloat16(f).bits == b);
    }
}

TEST_CASE("dtype traits") {
    CHECK(trickle::dtype_traits<float>::id == trickle::dtype::f32);
    CHECK(std::string(trickle::dtype_traits<half>::name) == "fp16");
    CHECK(std::string(trickle::dtype_name(trickle::dtype::bf16)) == "bf16");
    static_assert(trickle::element_type<float> && trickle::element_type<half> && trickle::element_type<bfloat16>);
    static_assert(!trickle::element_type<double> && !trickle::element_type<int>);
    CHECK(trickle::to_float(bfloat16(2.5f)) == 2.5f);
    CHECK(trickle::from_float<half>(0.5f).bits == 0x3800u);
}
