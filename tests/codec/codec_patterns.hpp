// Shared by the codec tests: fp32 bit patterns that exercise every rounding and saturation
// rule of the element codecs, and an fp8 reference written from the format's definition
// (a table of all values and a nearest search in double), independent of codec/float8.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace codec_test {

inline std::uint32_t bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float from_bits(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// An fp8 format from its definition: E exponent bits, M mantissa bits, largest finite code.
struct fp8_reference {
    int E, M;
    int max_code; // 0x7E (E4M3), 0x7B (E5M2)
    bool has_inf; // E5M2: 0x7C is infinity, 0x7D..0x7F NaN; E4M3: only 0x7F is NaN
    std::vector<double> table; // magnitude(c) for c = 0 .. max_code, increasing

    fp8_reference(int e, int m, int max, bool inf) : E(e), M(m), max_code(max), has_inf(inf) {
        for (int c = 0; c <= max_code; ++c) table.push_back(magnitude(c));
    }

    int bias() const { return (1 << (E - 1)) - 1; }

    // The value of a non-negative code (0 .. 0x7F), in double; NaN for NaN codes.
    double magnitude(int c) const {
        const int e = c >> M, m = c & ((1 << M) - 1);
        if (has_inf && e == (1 << E) - 1) return m == 0 ? INFINITY : NAN;
        if (!has_inf && c == 0x7f) return NAN;
        if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias() - M);
        return std::ldexp(1.0 + static_cast<double>(m) / (1 << M), e - bias());
    }
    double value(std::uint8_t c) const { return (c & 0x80) ? -magnitude(c & 0x7f) : magnitude(c & 0x7f); }

    // Round to nearest, ties to the even code, saturate to max_code (infinities too),
    // NaN -> 0x7F; zero keeps its sign.
    std::uint8_t encode(float x) const {
        if (std::isnan(x)) return 0x7f;
        const int sign = std::signbit(x) ? 0x80 : 0x00;
        const double a = std::fabs(static_cast<double>(x));
        if (a >= table.back()) return static_cast<std::uint8_t>(sign | max_code);
        // lo: the largest code whose magnitude is <= a
        const int lo = static_cast<int>(std::upper_bound(table.begin(), table.end(), a) - table.begin()) - 1;
        const double dlo = a - table[static_cast<std::size_t>(lo)], dhi = table[static_cast<std::size_t>(lo) + 1] - a;
        const int c = dlo < dhi ? lo : dhi < dlo ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
        return static_cast<std::uint8_t>(sign | c);
    }
};

inline const fp8_reference e4m3_ref{4, 3, 0x7e, false};
inline const fp8_reference e5m2_ref{5, 2, 0x7b, true};

// fp32 patterns for the element codecs:
// - all 2^16 high halves, each with low halves 0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001,
//   0xFFFF and two random ones (every exponent, sign, NaN class; bf16 ties and near-ties);
// - for each format given as (decoded value list), every midpoint between neighbours and
//   the fp32 values 1, 2 and 3 ulps either side of it, and the same around each value and
//   the saturation threshold (the midpoint above the largest finite value);
// - +-0, the fp32 subnormal range's ends, +-Inf, NaNs with several payloads and signs;
// - `randoms` uniformly random bit patterns.
inline std::vector<std::uint32_t> element_patterns(const std::vector<std::vector<double>>& formats,
                                                   std::size_t randoms = std::size_t{1} << 20) {
    std::vector<std::uint32_t> out;
    std::mt19937 rng(20240611u);
    for (std::uint32_t hi = 0; hi < 0x10000u; ++hi)
        for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, static_cast<std::uint32_t>(rng() & 0xffffu),
                                 static_cast<std::uint32_t>(rng() & 0xffffu)})
            out.push_back(hi << 16 | lo);
    auto around = [&](double v) {
        if (!std::isfinite(v) || std::fabs(v) > 3.4e38) return;
        const float f = static_cast<float>(v);
        if (static_cast<double>(f) != v) { // not an fp32 value: its two fp32 neighbours
            out.push_back(bits(std::nextafter(f, 0.0f)));
        }
        const std::uint32_t u = bits(f);
        for (std::uint32_t d = 0; d <= 3; ++d)
            for (std::uint32_t s : {0u, 0x80000000u}) {
                out.push_back(((u + d) & 0x7fffffffu) | s);
                if ((u & 0x7fffffffu) >= d) out.push_back(((u - d) & 0x7fffffffu) | s);
            }
    };
    for (const auto& values : formats) {
        std::vector<double> v = values;
        std::sort(v.begin(), v.end());
        for (std::size_t i = 0; i < v.size(); ++i) {
            around(v[i]);
            if (i + 1 < v.size()) around((v[i] + v[i + 1]) / 2);
        }
        if (v.size() >= 2) { // the saturation threshold: max + half an ulp of the top binade
            const double top = v.back(), below = v[v.size() - 2];
            around(top + (top - below) / 2);
            around(top + (top - below));
            around(top * 2);
        }
    }
    for (std::uint32_t u : {0x00000000u, 0x00000001u, 0x00000002u, 0x003fffffu, 0x00400000u, 0x007ffffeu, 0x007fffffu,
                            0x00800000u, 0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fbfffffu, 0x7fc00000u, 0x7fc00001u,
                            0x7fe00000u, 0x7fffe000u, 0x7fffffffu})
        for (std::uint32_t s : {0u, 0x80000000u}) out.push_back(u | s);
    for (std::size_t i = 0; i < randoms; ++i) out.push_back(static_cast<std::uint32_t>(rng()));
    return out;
}

// The finite non-negative values of an fp8 format, in double.
inline std::vector<double> fp8_values(const fp8_reference& f) { return f.table; }

// The finite non-negative values of fp16 (as half bit patterns decoded by the definition).
inline std::vector<double> fp16_values() {
    std::vector<double> v;
    for (int c = 0; c < 0x7c00; ++c) {
        const int e = c >> 10, m = c & 0x3ff;
        v.push_back(e == 0 ? std::ldexp(m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15));
    }
    return v;
}

} // namespace codec_test
