// Replicas of many ranks over MPI: 2 replicas of 2 shards (4 ranks). trickle runs per
// shard over the shard's cross-replica group (comm::split_replicas); SPARTA's selection
// and DiLoCo's state are keyed per shard (replica_layout::shard_seed): the replicas of a
// shard stay bit-identical after every outer step, and the two shards draw different
// selections.
#include <trickle/trickle.hpp>

#include "mpi_test_support.hpp"

#include <doctest/doctest.h>

#include <mpi.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace trickle;

namespace {

// Shard s of the model: its own size and values; replica q trains it on its own data.
std::size_t shard_size(int s) { return s == 0 ? 301 : 173; }
float init(int s, std::size_t i) { return static_cast<float>(std::cos(0.37 * static_cast<double>(i) + s)); }
float drift(int q, int s, std::size_t i, int t) {
    return 0.01f * static_cast<float>(std::sin(0.1 * static_cast<double>(i) * (q + 1) + 0.7 * s + 0.3 * t));
}

// Whether every rank of `c` holds the same bytes.
bool same_everywhere(comm::mpi& c, const std::vector<float>& v) {
    std::vector<float> all(v.size() * static_cast<std::size_t>(c.size()));
    c.all_gather_bytes(v.data(), all.data(), v.size() * sizeof(float));
    for (int r = 1; r < c.size(); ++r)
        if (std::memcmp(all.data() + r * v.size(), all.data(), v.size() * sizeof(float)) != 0) return false;
    return true;
}

} // namespace

TEST_CASE("split_replicas: the layout, and refusals on every rank") {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 4) return;
    auto rc = comm::split_replicas(MPI_COMM_WORLD, 2);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    CHECK(rc.layout.replica() == rank / 2);
    CHECK(rc.layout.shard() == rank % 2);
    CHECK(rc.within.size() == 2);
    CHECK(rc.within.rank() == rank % 2);
    CHECK(rc.across.size() == 2);
    CHECK(rc.across.rank() == rank / 2);
    CHECK(rc.layout.across_ranks() == std::vector<int>{rank % 2, 2 + rank % 2});
    CHECK(rc.layout.within_ranks() == std::vector<int>{2 * (rank / 2), 2 * (rank / 2) + 1});
    CHECK_THROWS_WITH_AS(comm::split_replicas(MPI_COMM_WORLD, 3), doctest::Contains("must be >= 1 and divide"),
                         invalid_argument);
    CHECK_THROWS_WITH_AS(comm::split_replicas(MPI_COMM_WORLD, rank == 0 ? 1 : 2),
                         doctest::Contains("different ranks_per_replica"), invalid_argument);
}

TEST_CASE("replicas of 2 shards: DiLoCo and SPARTA per shard, replicas bit-identical per shard") {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 4) return;
    auto rc = comm::split_replicas(MPI_COMM_WORLD, 2);
    const int q = rc.layout.replica(), s = rc.layout.shard();
    const std::size_t n = shard_size(s);
    std::vector<float> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = init(s, i);
    param_group<float> g{{"shard", w.data(), n}};
    const std::uint64_t seed = rc.layout.shard_seed(5);
    CHECK((s == 0 ? seed == 5 : seed != 5));
    {
        diloco<outer::nesterov> d(g, rc.across, {.interval = 4, .seed = seed});
        for (int t = 0; t < 16; ++t) {
            for (std::size_t i = 0; i < n; ++i) w[i] += drift(q, s, i, t);
            d.step(exec::host{});
            if ((t + 1) % 4 == 0) CHECK(same_everywhere(rc.across, w)); // after each outer step
        }
        CHECK(d.stats().exchanges == 4);
    }
    // SPARTA per shard: equal-sized shards here, so that the selections can be compared.
    std::vector<float> v(200);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(q * 1000 + s * 100) + static_cast<float>(i);
    param_group<float> h{{"shard", v.data(), v.size()}};
    sparta<sampler::uniform> sp(h, rc.across, {.fraction = 0.1, .seed = seed, .broadcast_initial = false});
    sp.step(exec::host{});
    // The positions this shard averaged: where both replicas now agree.
    std::vector<float> other(v.size() * 2);
    rc.across.all_gather_bytes(v.data(), other.data(), v.size() * sizeof(float));
    std::vector<int> chosen(v.size());
    int count = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        chosen[i] = other[i] == other[v.size() + i] ? 1 : 0;
        count += chosen[i];
    }
    CHECK(count > 0);
    // The other shard of this replica chose other positions.
    std::vector<int> both(v.size() * 2);
    rc.within.all_gather_bytes(chosen.data(), both.data(), v.size() * sizeof(int));
    CHECK(std::memcmp(both.data(), both.data() + v.size(), v.size() * sizeof(int)) != 0);
}
