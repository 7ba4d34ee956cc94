// Samplers: every worker derives the same positions; coverage, alignment and spread are as documented.
#include "sampler_tests.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <sstream>
#include <type_traits>

using namespace trickle;
using trickle_test::bulk_positions;
using trickle_test::positions;
using trickle_test::test_layout;

TEST_CASE("feistel_permutation is a bijection of [0, n) for many n") {
    for (std::uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 17ull, 1000ull, 4096ull, 4097ull, 65537ull}) {
        for (std::uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
            const feistel_permutation f(n, key);
            std::vector<char> hit(n, 0);
            for (std::uint64_t i = 0; i < n; ++i) {
                const auto v = f(i);
                REQUIRE(v < n);
                REQUIRE(hit[v] == 0);
                hit[v] = 1;
            }
        }
    }
    // Different keys give different orders.
    const feistel_permutation a(1000, 1), b(1000, 2);
    int same = 0;
    for (std::uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
    CHECK(same < 20);
}

TEST_CASE("feistel32_permutation is a bijection of [0, n) for many n, and keys change it") {
    for (std::uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 17ull, 1000ull, 4096ull, 4097ull, 65537ull, 262145ull}) {
        for (std::uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
            const feistel32_permutation f(n, key);
            std::vector<char> hit(n, 0);
            for (std::uint64_t i = 0; i < n; ++i) {
                const auto v = f(i);
                REQUIRE(v < n);
                REQUIRE(hit[v] == 0);
                hit[v] = 1;
            }
        }
    }
    const feistel32_permutation a(1000, 1), b(1000, 2);
    int same = 0;
    for (std::uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
    CHECK(same < 20);
    // The largest size it takes: images stay in range.
    const feistel32_permutation big(std::uint64_t{1} << 32, 7);
    for (std::uint64_t i : {0ull, 1ull, 12345ull, (1ull << 32) - 1}) CHECK(big(i) < (1ull << 32));
}

TEST_CASE("uniform: count, range, agreement between workers, spread") {
    const test_layout lay({1000, 37, 5000, 3963});
    const std::size_t n = 10000;
    sampler::uniform w0, w1;
    const auto ctx = lay.context(42, 7, 7, 0.005);
    const auto p0 = positions(w0.select(ctx));
    const auto p1 = positions(w1.select(ctx));
    CHECK(p0.size() == 50);
    CHECK(p0 == p1); // two workers, no communication, same positions
    for (auto p : p0) CHECK(p < n);
    CHECK(positions(w0.select(lay.context(42, 8, 8, 0.005))) != p0);
    CHECK(positions(w0.select(lay.context(43, 7, 7, 0.005))) != p0);
    // At least one position even when p·n rounds to zero.
    CHECK(w0.select(lay.context(1, 0, 0, 1e-9)).count() == 1);
    CHECK(w0.select(lay.context(1, 0, 0, 1.0)).count() == n);

    // Spread: over 2000 exchanges, every tenth of the space gets ~10% (binomial bounds).
    std::vector<int> hist(10);
    for (std::uint64_t t = 0; t < 2000; ++t)
        for (auto p : positions(w0.select(lay.context(9, t, t, 0.005)))) ++hist[p / 1000];
    for (int h : hist) CHECK((h > 10000 - 450 && h < 10000 + 450)); // sd ~95: > 4.5 sd
}

TEST_CASE("uniform: without replacement: distinct, in range, from (seed, step) only, bulk path = per-k path") {
    // Sizes just above a power of four make most Feistel images walk (the slow case of the
    // bulk path's SIMD lanes); 1 and 2 are the degenerate ones.
    const std::vector<std::vector<std::size_t>> layouts = {
        {1}, {2}, {3, 1, 4, 1, 5}, {1000, 37, 5000, 3963}, {4096, 1}, {65536, 3, 1}};
    for (const auto& sizes : layouts) {
        const test_layout lay(sizes);
        const std::size_t n = lay.offsets.back();
        for (double p : {1e-9, 0.005, 0.1, 0.37, 1.0}) {
            CAPTURE(n);
            CAPTURE(p);
            for (std::uint64_t t = 0; t < 4; ++t) {
                const auto sel = sampler::uniform{}.select(lay.context(42, t, t, p));
                const auto pos = positions(sel);
                REQUIRE(pos.size() == detail::fraction_count(p, n));
                // Every position in range and none twice.
                std::vector<char> hit(n, 0);
                for (auto q : pos) {
                    REQUIRE(q < n);
                    REQUIRE(hit[q] == 0);
                    hit[q] = 1;
                }
                // Only (seed, step) decide: another sampler object, another exchange index.
                CHECK(positions(sampler::uniform{}.select(lay.context(42, t, t + 1000, p))) == pos);
                // The bulk path (SIMD Feistel lanes where the CPU has them) gives the same
                // positions, in the same order, for chunks that split the 8-lane groups.
                for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{33}, pos.size()})
                    REQUIRE(bulk_positions(sel, chunk) == pos);
            }
        }
    }
    // Different steps and seeds give different selections; at p = 1 each is all of [0, n).
    const test_layout lay({1000, 37, 5000, 3963});
    const auto a = positions(sampler::uniform{}.select(lay.context(42, 7, 7, 0.005)));
    const auto b = positions(sampler::uniform{}.select(lay.context(42, 8, 8, 0.005)));
    const auto c = positions(sampler::uniform{}.select(lay.context(43, 7, 7, 0.005)));
    CHECK(a != b);
    CHECK(a != c);
    std::set<std::size_t> sa(a.begin(), a.end()), sb(b.begin(), b.end());
    std::vector<std::size_t> common;
    std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(common));
    CHECK(common.size() < 5); // two independent 50-subsets of 10000 share 0.25 on average
    const auto all0 = positions(sampler::uniform{}.select(lay.context(42, 0, 0, 1.0)));
    const auto all1 = positions(sampler::uniform{}.select(lay.context(42, 1, 1, 1.0)));
    CHECK(all0 != all1); // a new order every step...
    CHECK(std::set<std::size_t>(all0.begin(), all0.end()).size() == 10000); // ...of every position
    // Not the permutation sampler's stream: the same seed gives another order.
    sampler::permutation perm;
    CHECK(positions(perm.select(lay.context(42, 0, 0, 1.0))) != all0);
}

TEST_CASE("permutation: every position exactly once per cycle, a new order each cycle") {
    const test_layout lay({400, 600});
    const std::size_t n = 1000;
    sampler::permutation s;
    const double p = 0.013; // 13 per exchange: 76 full exchanges and one of 12 per cycle
    std::vector<std::vector<std::size_t>> cycles(3);
    std::uint64_t exchanges = 0;
    for (int c = 0; c < 3; ++c) {
        std::vector<int> hits(n, 0);
        std::size_t seen = 0;
        int steps = 0;
        while (seen < n) {
            const auto sel = s.select(lay.context(5, exchanges, exchanges, p));
            ++exchanges;
            ++steps;
            for (auto pos : positions(sel)) {
                REQUIRE(pos < n);
                ++hits[pos];
                cycles[c].push_back(pos);
            }
            seen += sel.count();
        }
        CHECK(seen == n);
        CHECK(steps == 77);
        CHECK(steps <= static_cast<int>(std::ceil(1.0 / p)));
        CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
        CHECK(s.cursor == 0);
        CHECK(s.cycle == static_cast<std::uint64_t>(c + 1));
    }
    CHECK(cycles[0] != cycles[1]);
    // State round trip.
    sampler::permutation t;
    s.cursor = 39;
    std::stringstream ss;
    s.save(ss);
    t.load(ss);
    CHECK(t.cursor == 39);
    CHECK(t.cycle == 3);
    std::stringstream bad("xx");
    CHECK_THROWS_AS(t.load(bad), invalid_argument);
    CHECK(t.cursor == 39);
}

TEST_CASE("block: aligned distinct blocks inside bounds, padding past a partial last block") {
    const test_layout lay({1000, 1000, 500}); // n = 2500: 9 full blocks of 256 and one of 196
    const std::size_t n = 2500, B = 256;
    sampler::block s{.block_size = B};
    bool saw_partial = false;
    for (std::uint64_t t = 0; t < 200; ++t) {
        const auto sel = s.select(lay.context(3, t, t, 0.2)); // round(0.2·2500/256·…) = 2 blocks
        REQUIRE(sel.count() % B == 0);
        CHECK(sel.count() == 2 * B);
        const auto pos = positions(sel);
        std::set<std::size_t> starts;
        for (std::size_t j = 0; j < pos.size() / B; ++j) {
            const std::size_t start = pos[j * B];
            REQUIRE(start % B == 0);
            starts.insert(start);
            for (std::size_t i = 0; i < B; ++i) {
                const std::size_t want = start + i;
                REQUIRE(pos[j * B + i] == (want < n ? want : n));
                saw_partial = saw_partial || want >= n;
            }
        }
        CHECK(starts.size() == pos.size() / B); // distinct blocks
    }
    CHECK(saw_partial);
    // p = 1 is every position, even with a last block less than half full (n = 2060 with
    // blocks of 256: 8 full blocks and one of 12 positions; round(2060 / 256) is 8).
    {
        const test_layout small({1000, 1060});
        const auto sel = s.select(small.context(3, 0, 0, 1.0));
        CHECK(sel.count() == 9 * B);
        CHECK(s.max_count(1.0, 2060) == 9 * B);
        std::set<std::size_t> seen;
        for (std::size_t q : positions(sel))
            if (q < 2060) seen.insert(q);
        CHECK(seen.size() == 2060);
    }
    config_record ok, bad;
    s.describe(ok);
    CHECK(ok.error().empty());
    sampler::block{.block_size = 0}.describe(bad);
    CHECK(bad.error().find("block_size") != std::string::npos);
}

TEST_CASE("layerwise per_tensor: each tensor gets its share every exchange") {
    const std::vector<std::size_t> sizes{10000, 3, 20000, 7, 5000};
    const test_layout lay(sizes);
    sampler::layerwise s;
    const double p = 0.01;
    std::vector<int> tiny_hits(2, 0);
    for (std::uint64_t t = 0; t < 3000; ++t) {
        const auto sel = s.select(lay.context(11, t, t, p));
        std::vector<std::size_t> per(sizes.size(), 0);
        for (auto pos : positions(sel)) {
            const auto i = lay.view().tensor_of(pos);
            REQUIRE(pos < lay.offsets.back());
            ++per[i];
        }
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            const double share = p * static_cast<double>(sizes[i]);
            REQUIRE(std::fabs(static_cast<double>(per[i]) - share) <= 1.0);
        }
        tiny_hits[0] += static_cast<int>(per[1]);
        tiny_hits[1] += static_cast<int>(per[3]);
    }
    // A 3-element tensor is picked with probability 0.03 per exchange: ~90 of 3000.
    CHECK((tiny_hits[0] > 50 && tiny_hits[0] < 135));
    CHECK((tiny_hits[1] > 150 && tiny_hits[1] < 270)); // 0.07 · 3000 = 210
}

TEST_CASE("layerwise rotating: contiguous windows that cover everything every ceil(1/p) exchanges") {
    const test_layout lay({300, 700});
    sampler::layerwise s{.how = sampler::layerwise::mode::rotating};
    std::vector<int> hits(1000, 0);
    for (std::uint64_t t = 0; t < 10; ++t) {
        const auto pos = positions(s.select(lay.context(1, t, t, 0.1)));
        REQUIRE(pos.size() == 100);
        for (std::size_t k = 1; k < pos.size(); ++k) REQUIRE(pos[k] == (pos[k - 1] + 1) % 1000);
        for (auto p : pos) ++hits[p];
    }
    CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    CHECK(s.cursor == 0);
    // Wrap-around when the window does not divide the space.
    const auto pos = positions(s.select(lay.context(1, 10, 10, 0.3)));
    CHECK(pos.front() == 0);
    const auto next = positions(s.select(lay.context(1, 11, 11, 0.8)));
    CHECK(next.front() == 300);
    CHECK(next.back() == 99); // 300 + 800 - 1 wrapped
}

TEST_CASE("samplers satisfy the concept") {
    static_assert(sampler_policy<sampler::uniform>);
    static_assert(sampler_policy<sampler::permutation>);
    static_assert(sampler_policy<sampler::block>);
    static_assert(sampler_policy<sampler::layerwise>);
    static_assert(selection<sampler::uniform::selection_type>);
    // One implementation of "the k-th image of a Feistel permutation" serves both.
    static_assert(std::is_same_v<sampler::uniform::selection_type, sampler::permutation::selection_type>);
    CHECK(std::string(sampler::block::name) == "block");
}
