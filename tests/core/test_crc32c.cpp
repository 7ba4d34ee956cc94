// CRC-32C: the standard check value, the RFC 3720 (iSCSI) vectors, and the slicing-by-8
// code against a bit-at-a-time reference over every length and split, and a chunked
// computation against the whole.
#include <trickle/core/crc32c.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace trickle;

namespace {

// The definition, one bit at a time: no tables shared with the code under test.
std::uint32_t crc32c_bitwise(const unsigned char* p, std::size_t n) {
    std::uint32_t c = 0xFFFFFFFFu;
    for (std::size_t i = 0; i < n; ++i) {
        c ^= p[i];
        for (int b = 0; b < 8; ++b) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

// n bytes from a linear congruential stream seeded with `seed`.
std::vector<unsigned char> lcg_bytes(std::size_t n, std::uint32_t seed) {
    std::vector<unsigned char> data(n);
    std::uint32_t x = seed;
    for (auto& v : data) {
        x = x * 1664525u + 1013904223u;
        v = static_cast<unsigned char>(x >> 24);
    }
    return data;
}

} // namespace

TEST_CASE("crc32c: known answers") {
    CHECK(crc32c("123456789") == 0xE3069283u); // the catalogue's check value
    CHECK(crc32c("") == 0u);
    CHECK(crc32c("a") == 0xC1D04330u);
    // RFC 3720, appendix B.4.
    std::vector<unsigned char> b(32, 0x00);
    CHECK(crc32c(b.data(), b.size()) == 0x8A9136AAu);
    b.assign(32, 0xFF);
    CHECK(crc32c(b.data(), b.size()) == 0x62A8AB43u);
    for (int i = 0; i < 32; ++i) b[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i);
    CHECK(crc32c(b.data(), b.size()) == 0x46DD794Eu);
    for (int i = 0; i < 32; ++i) b[static_cast<std::size_t>(i)] = static_cast<unsigned char>(31 - i);
    CHECK(crc32c(b.data(), b.size()) == 0x113FDB5Cu);
}

TEST_CASE("crc32c: slicing-by-8 equals the bitwise definition; chunks continue the whole") {
    std::vector<unsigned char> data = lcg_bytes(300, 12345);
    for (std::size_t n = 0; n <= data.size(); ++n) {
        const std::uint32_t whole = crc32c(data.data(), n);
        REQUIRE(whole == crc32c_bitwise(data.data(), n));
        // Every split point of a prefix, so both the 8-byte loop and the byte tail meet
        // every alignment and every starting register.
        if (n % 37 == 0)
            for (std::size_t k = 0; k <= n; ++k)
                REQUIRE(crc32c(data.data() + k, n - k, crc32c(data.data(), k)) == whole);
    }
    // A single flipped bit anywhere changes the checksum.
    const std::uint32_t base = crc32c(data.data(), data.size());
    for (std::size_t bit = 0; bit < data.size() * 8; ++bit) {
        data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
        REQUIRE(crc32c(data.data(), data.size()) != base);
        data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
}

TEST_CASE("crc32c: the table path equals the bitwise definition, and the hardware path the table path") {
    const std::vector<unsigned char> data = lcg_bytes(1031, 777);
    for (std::size_t start = 0; start < 9; ++start) // every alignment of the 8-byte loop
        for (std::size_t n = 0; start + n <= data.size(); n += 1 + n / 3) {
            const unsigned char* p = data.data() + start;
            const std::uint32_t table = ~trickle::detail::crc32c_portable(~0u, p, n);
            REQUIRE(table == crc32c_bitwise(p, n));
#if defined(TRICKLE_CRC32C_HARDWARE)
            if (trickle::detail::crc32c_hardware())
                REQUIRE(~trickle::detail::crc32c_sse42(~0u, p, n) == table);
#endif
        }
#if defined(TRICKLE_CRC32C_HARDWARE)
    if (!trickle::detail::crc32c_hardware()) MESSAGE("this CPU has no SSE4.2: the hardware path is not compared");
#else
    MESSAGE("not x86-64 with GCC or Clang: only the table path exists here");
#endif
}
