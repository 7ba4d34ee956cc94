// The even split of n items over chunks (core/split.hpp): its invariants, and its 32-bit
// arithmetic (used whenever n < 2^32) against the 64-bit form, at the boundary too.
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

TEST_CASE("the split's 32-bit arithmetic equals the 64-bit form, up to and across n = 2^32") {
    const std::size_t edge = std::size_t{0xffffffffu};
    for (std::size_t n : {edge - 7, edge - 1, edge, edge + 1, edge + 12345, std::size_t{1} << 36,
                          (std::size_t{1} << 31) + 3, std::size_t{3'000'000'007}})
        for (int parts : {1, 2, 3, 5, 8, 17, 256}) {
            check_split(n, parts);
            const auto N = static_cast<std::size_t>(parts);
            for (int r = 0; r < parts; ++r) {
                const auto R = static_cast<std::size_t>(r);
                CHECK(chunk_begin(n, parts, r) == split_begin<std::size_t>(n, N, R));
                CHECK(chunk_size(n, parts, r) == split_size<std::size_t>(n, N, R));
            }
            for (std::size_t i : {std::size_t{0}, n / 3, n / 2 + 1, n - 2, n - 1})
                CHECK(chunk_owner(n, parts, i) == static_cast<int>(split_owner<std::size_t>(n, N, i)));
        }
}
