// comm::replica_layout: where a rank sits among replicas of many ranks, the ranks of its
// two groups, the per-shard seed, and refusals.
#include <trickle/comm/replicas.hpp>

#include <doctest/doctest.h>

#include <set>
#include <vector>

using trickle::comm::replica_layout;

TEST_CASE("replica_layout: 3 replicas of 4 ranks") {
    std::set<std::uint64_t> seeds_by_shard[4];
    for (int w = 0; w < 12; ++w) {
        const replica_layout L(w, 12, 4);
        CHECK(L.replicas() == 3);
        CHECK(L.replica() == w / 4);
        CHECK(L.shard() == w % 4);
        CHECK(L.within_color() == w / 4);
        CHECK(L.across_color() == w % 4);
        const std::vector<int> across = L.across_ranks(), within = L.within_ranks();
        CHECK(across == std::vector<int>{w % 4, 4 + w % 4, 8 + w % 4});
        CHECK(within == std::vector<int>{4 * (w / 4), 4 * (w / 4) + 1, 4 * (w / 4) + 2, 4 * (w / 4) + 3});
        CHECK(across[static_cast<std::size_t>(L.across_key())] == w); // its own place in each group
        CHECK(within[static_cast<std::size_t>(L.within_key())] == w);
        seeds_by_shard[L.shard()].insert(L.shard_seed(42));
        CHECK(L.elastic_job() == "trickle-shard" + std::to_string(w % 4));
    }
    // The replicas of a shard agree on its seed; the shards differ; shard 0 keeps the seed.
    std::set<std::uint64_t> all;
    for (const auto& s : seeds_by_shard) {
        CHECK(s.size() == 1);
        all.insert(*s.begin());
    }
    CHECK(all.size() == 4);
    CHECK(*seeds_by_shard[0].begin() == 42);
}

TEST_CASE("replica_layout: one rank per replica is the plain world") {
    const replica_layout L(5, 8, 1);
    CHECK(L.replica() == 5);
    CHECK(L.shard() == 0);
    CHECK(L.shard_seed(9) == 9);
    CHECK(L.across_ranks().size() == 8);
}

TEST_CASE("replica_layout: bad layouts are refused") {
    CHECK_THROWS_WITH_AS(replica_layout(0, 6, 4), doctest::Contains("must be >= 1 and divide the world size (6)"),
                         trickle::invalid_argument);
    CHECK_THROWS_WITH_AS(replica_layout(0, 6, 0), doctest::Contains("ranks_per_replica (0)"), trickle::invalid_argument);
    CHECK_THROWS_WITH_AS(replica_layout(6, 6, 2), doctest::Contains("rank 6 out of range [0, 6)"),
                         trickle::invalid_argument);
    CHECK_THROWS_WITH_AS(replica_layout(0, 0, 1), doctest::Contains("world size must be >= 1"), trickle::invalid_argument);
}
