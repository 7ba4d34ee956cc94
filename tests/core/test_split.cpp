// The even split of n items over chunks (core/split.hpp): its invariants, for small n item
// by item and past 2^32 items at the chunks' edges.
#include <trickle/core/split.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

using namespace trickle::detail;

namespace {

// Every invariant of one split, item by item for small n, at the chunk edges for large n.
void check_split(std::size_t n, int parts) {
    std::size_t total = 0;
    for (int r = 0; r < parts; ++r) {
        const std::size_t begin = chunk_begin(n, parts, r), size = chunk_size(n, parts, r);
        REQUIRE(begin == total);
        total += size;
        // The chunk sizes differ by at most one, larger ones first.
        CHECK((size == n / static_cast<std::size_t>(parts) || size == n / static_cast<std::size_t>(parts) + 1));
        if (size == 0) continue;
        for (std::size_t i : {begin, begin + size / 2, begin + size - 1}) CHECK(chunk_owner(n, parts, i) == r);
        if (n <= 4096)
            for (std::size_t i = begin; i < begin + size; ++i) REQUIRE(chunk_owner(n, parts, i) == r);
    }
    CHECK(total == n);
}

} // namespace

TEST_CASE("chunk_begin, chunk_size, chunk_owner: contiguous chunks in order that cover n, each item owned once") {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}, std::size_t{64},
                          std::size_t{1000}, std::size_t{4093}})
        for (int parts : {1, 2, 3, 4, 7, 8, 64})
            check_split(n, parts);
    // Fewer items than parts: item i is chunk i's only item.
    for (std::size_t i = 0; i < 3; ++i) CHECK(chunk_owner(3, 8, i) == static_cast<int>(i));
}

TEST_CASE("the split holds past 2^32 items") {
    // (A 32-bit form of this arithmetic for n < 2^32 was tried on 2026-12-04 and made the
    // device codec passes slower on an H200: nvcc's 64-bit division already takes a 32-bit
    // path when its operands fit.)
    const std::size_t edge = std::size_t{0xffffffffu};
    for (std::size_t n : {edge - 7, edge, edge + 1, edge + 12345, std::size_t{1} << 36, std::size_t{3'000'000'007}})
        for (int parts : {1, 2, 3, 5, 8, 17, 256})
            check_split(n, parts);
}
