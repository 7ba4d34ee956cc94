// trickle/core/crc32c.hpp: CRC-32C (Castagnoli), the checksum of checkpoints.
//
// CRC-32C detects every error burst of up to 32 bits and every odd number of flipped
// bits, which covers the damage a file picks up on disk or in a copy; it is the checksum
// of iSCSI, ext4 and SCTP, so other tools can recompute it. Reflected polynomial
// 0x82F63B78, initial value and final xor 0xFFFFFFFF: crc32c("123456789") = 0xE3069283.
// Host code, slicing-by-8 (eight bytes per step through eight 256-entry tables built at
// compile time), byte order independent: the input is read byte by byte.
#pragma once

#include <trickle/config.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
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

} // namespace detail

// The CRC-32C of `bytes` bytes at data, continuing from `crc`, the CRC-32C of what came
// before (0 for nothing): crc32c(b, nb, crc32c(a, na)) is the CRC-32C of a followed by b.
inline std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc = 0) {
    const auto& t = detail::crc32c_tables;
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint32_t c = ~crc;
    for (; bytes >= 8; bytes -= 8, p += 8) {
        const std::uint32_t lo = c ^ (std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
                                      std::uint32_t{p[3]} << 24);
        const std::uint32_t hi =
            std::uint32_t{p[4]} | std::uint32_t{p[5]} << 8 | std::uint32_t{p[6]} << 16 | std::uint32_t{p[7]} << 24;
        c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
            t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
    }
    for (; bytes > 0; --bytes, ++p) c = t[0][(c ^ *p) & 0xffu] ^ (c >> 8);
    return ~c;
}

inline std::uint32_t crc32c(std::string_view s, std::uint32_t crc = 0) { return crc32c(s.data(), s.size(), crc); }

TRICKLE_NAMESPACE_END
