// trickle/core/crc32c.hpp: CRC-32C (Castagnoli), the checksum of checkpoints.
//
// CRC-32C detects every error burst of up to 32 bits and every odd number of flipped
// bits, which covers the damage a file picks up on disk or in a copy; it is the checksum
// of iSCSI, ext4 and SCTP, so other tools can recompute it. Reflected polynomial
// 0x82F63B78, initial value and final xor 0xFFFFFFFF: crc32c("123456789") = 0xE3069283.
// Host code: the CPU's crc32 instruction where x86-64 has SSE4.2, else slicing-by-8 (eight
// bytes per step through eight 256-entry tables built at compile time), byte order
// independent: the input is read byte by byte.
#pragma once

#include <trickle/config.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

TRICKLE_NAMESPACE_BEGIN

namespace detail {

inline constexpr std::uint32_t crc32c_polynomial = 0x82F63B78u; // 0x1EDC6F41 bit-reversed

// table[0][b]: the CRC register after shifting byte b through it. table[k][b]: the same
// byte followed by k zero bytes, so eight table reads advance the register eight bytes.
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_crc32c_tables() {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t c = b;
        for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ crc32c_polynomial : c >> 1;
        t[0][b] = c;
    }
    for (std::size_t k = 1; k < 8; ++k)
        for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
    return t;
}

inline constexpr auto crc32c_tables = make_crc32c_tables();

// The table path: the register `c` (not inverted) after `bytes` bytes at p.
inline std::uint32_t crc32c_portable(std::uint32_t c, const unsigned char* p, std::size_t bytes) {
    const auto& t = crc32c_tables;
    for (; bytes >= 8; bytes -= 8, p += 8) {
        const std::uint32_t lo = c ^ (std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
                                      std::uint32_t{p[3]} << 24);
        const std::uint32_t hi =
            std::uint32_t{p[4]} | std::uint32_t{p[5]} << 8 | std::uint32_t{p[6]} << 16 | std::uint32_t{p[7]} << 24;
        c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
            t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
    }
    for (; bytes > 0; --bytes, ++p) c = t[0][(c ^ *p) & 0xffu] ^ (c >> 8);
    return c;
}

// x86-64 with SSE4.2 (chosen at run time): the CPU's crc32 instruction computes the same
// polynomial, eight bytes per instruction, several times faster than the tables (a state
// transfer of hundreds of megabytes is checksummed twice). Eight bytes read as one
// little-endian word are the same eight bytes in order, so the results are the table
// path's, bit for bit (tests/core/test_crc32c.cpp compares them). The same in every
// translation unit's host code, nvcc's included (one definition of crc32c everywhere);
// left out of device passes, where it is never called.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDA_ARCH__)
#define TRICKLE_CRC32C_HARDWARE 1
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_sse42(std::uint32_t c, const unsigned char* p,
                                                                    std::size_t bytes) {
    std::uint64_t c64 = c;
    for (; bytes >= 8; bytes -= 8, p += 8) {
        std::uint64_t v;
        std::memcpy(&v, p, sizeof v);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    auto c32 = static_cast<std::uint32_t>(c64);
    for (; bytes > 0; --bytes, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
    return c32;
}
inline bool crc32c_hardware() {
    static const bool yes = __builtin_cpu_supports("sse4.2");
    return yes;
}
#endif

} // namespace detail

// The CRC-32C of `bytes` bytes at data, continuing from `crc`, the CRC-32C of what came
// before (0 for nothing): crc32c(b, nb, crc32c(a, na)) is the CRC-32C of a followed by b.
inline std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc = 0) {
    const auto* p = static_cast<const unsigned char*>(data);
#if defined(TRICKLE_CRC32C_HARDWARE)
    if (detail::crc32c_hardware()) return ~detail::crc32c_sse42(~crc, p, bytes);
#endif
    return ~detail::crc32c_portable(~crc, p, bytes);
}

inline std::uint32_t crc32c(std::string_view s, std::uint32_t crc = 0) { return crc32c(s.data(), s.size(), crc); }

TRICKLE_NAMESPACE_END
