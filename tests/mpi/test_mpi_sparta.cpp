// SPARTA over comm::mpi: the same parameters and byte counts as over comm::local, and the same positions on every rank.
#include <trickle/trickle.hpp>

#include "mpi_test_support.hpp"

#include <doctest/doctest.h>

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace trickle;
using trickle_mpi_test::gather_all;

namespace {

constexpr std::size_t na = 700, nb = 301;
constexpr int steps = 5;

// Worker r's initial value at flat index i: distinct per worker and position.
float initial(int r, std::size_t i) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + r * 1.9) * (r + 1));
}

// What one worker ends with.
struct result {
    std::vector<float> params;          // both tensors, flattened, after all steps
    std::vector<std::uint8_t> changed;  // 1 where the first step changed the value
    std::uint64_t stats[5] = {};        // exchanges, values, bytes sent, bytes received, dense bytes
};

template <class Sampler, class Topology, class Comm>
result run_sparta(Comm& c) {
    const int r = c.rank();
    std::vector<float> a(na), b(nb);
    for (std::size_t i = 0; i < na; ++i) a[i] = initial(r, i);
    for (std::size_t i = 0; i < nb; ++i) b[i] = initial(r, na + i);
    param_group<float> group;
    group.add("a", a.data(), a.size()).add("b", b.data(), b.size());
    sparta<Sampler, schedule::constant, Topology> s(group, c, {.fraction = 0.05, .interval = 1, .seed = 2024, .broadcast_initial = false});

    result out;
    const auto flat = [&] {
        std::vector<float> v(a);
        v.insert(v.end(), b.begin(), b.end());
        return v;
    };
    const std::vector<float> before = flat();
    s.step(exec::host{});
    const std::vector<float> first = flat();
    out.changed.resize(first.size());
    for (std::size_t i = 0; i < first.size(); ++i)
        out.changed[i] = std::memcmp(&first[i], &before[i], sizeof(float)) != 0;
    for (int t = 1; t < steps; ++t) s.step(exec::host{});
    out.params = flat();
    const exchange_stats& st = s.stats();
    out.stats[0] = st.exchanges;
    out.stats[1] = st.values;
    out.stats[2] = st.total.bytes_sent;
    out.stats[3] = st.total.bytes_received;
    out.stats[4] = st.dense_bytes;
    return out;
}

// Runs the same SPARTA over comm::mpi and, on rank 0, over comm::local with as many
// threads as there are ranks; checks this rank's result against the local one.
// `exact`: whether the results must match bit for bit (no sum whose order MPI picks).
// `every_rank_moves`: whether every rank's first step changes the chosen positions (not
// so for a worker that an island topology leaves alone).
template <class Sampler, class Topology>
void check_against_local(bool exact, bool every_rank_moves = true) {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    INFO("rank ", r);
    const result mine = run_sparta<Sampler, Topology>(c);

    std::vector<float> ref_params;
    std::vector<std::uint8_t> ref_changed;
    std::vector<std::uint64_t> ref_stats;
    if (r == 0) {
        std::vector<result> local(static_cast<std::size_t>(N));
        comm::run_local(N, [&](comm::local& l) { local[static_cast<std::size_t>(l.rank())] = run_sparta<Sampler, Topology>(l); });
        for (const auto& o : local) {
            ref_params.insert(ref_params.end(), o.params.begin(), o.params.end());
            ref_changed.insert(ref_changed.end(), o.changed.begin(), o.changed.end());
            ref_stats.insert(ref_stats.end(), std::begin(o.stats), std::end(o.stats));
        }
    }
    trickle_mpi_test::broadcast_from_0(ref_params);
    trickle_mpi_test::broadcast_from_0(ref_changed);
    trickle_mpi_test::broadcast_from_0(ref_stats);

    const std::size_t n = na + nb;
    const auto R = static_cast<std::size_t>(r);
    REQUIRE(ref_params.size() == n * static_cast<std::size_t>(N));

    // Every rank averaged the same positions, and the same ones as comm::local's workers.
    std::size_t picked = 0;
    for (auto x : mine.changed) picked += x;
    if (every_rank_moves) CHECK(picked > n / 40);
    const auto all_changed = gather_all(mine.changed);
    CHECK(std::memcmp(all_changed.data(), ref_changed.data(), all_changed.size()) == 0);
    if (every_rank_moves)
        for (int q = 0; q < N; ++q)
            CHECK(std::memcmp(all_changed.data() + static_cast<std::size_t>(q) * n, mine.changed.data(), n) == 0);

    // The same parameters as over comm::local, to fp32 rounding of the sums' order.
    std::size_t far = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const float x = mine.params[i], y = ref_params[R * n + i];
        if (exact ? std::memcmp(&x, &y, sizeof x) != 0 : std::fabs(x - y) > 1e-6f * (std::fabs(y) + 1.0f)) ++far;
    }
    CHECK(far == 0);
    for (std::size_t k = 0; k < 5; ++k) CHECK(mine.stats[k] == ref_stats[R * 5 + k]);
    CHECK(mine.stats[0] == steps);
}

} // namespace

TEST_CASE("mpi sparta: uniform sampler, all-reduce: as over comm::local, same positions on every rank") {
    check_against_local<sampler::uniform, topology::all_reduce>(false);
}

TEST_CASE("mpi sparta: permutation sampler, all-reduce: as over comm::local, same positions on every rank") {
    check_against_local<sampler::permutation, topology::all_reduce>(false);
}

TEST_CASE("mpi sparta: block sampler, ring topology: bit for bit as over comm::local") {
    // The ring only copies neighbours' values and adds them locally, so nothing depends
    // on MPI's order of addition.
    check_against_local<sampler::block, topology::ring>(true);
}

namespace {
// Islands of 3 over 4 ranks: one chain of three and one worker alone per exchange.
struct islands3 : topology::islands {
    islands3() { size = 3; }
};
} // namespace

TEST_CASE("mpi sparta: per-exchange topologies (gossip, exponential, islands of 3): bit for bit as over comm::local") {
    // Pairs add two buffers (a + b = b + a) and islands add along one chain, so every
    // sum has one order whatever the communicator.
    check_against_local<sampler::uniform, topology::gossip>(true);
    check_against_local<sampler::block, topology::exponential>(true);
    check_against_local<sampler::uniform, islands3>(true, false);
}

TEST_CASE("mpi sparta: workers that disagree on the seed all throw") {
    comm::mpi c;
    const int r = c.rank();
    std::vector<float> a(10, 1.0f);
    param_group<float> group;
    group.add("a", a.data(), a.size());
    std::string what = "(no exception)";
    try {
        sparta<> s(group, c, {.fraction = 0.5, .interval = 1, .seed = r == 1 ? 8u : 7u});
    } catch (const mismatch_error& e) {
        what = e.what();
    }
    CHECK(what.find("seed: rank 0 has 7, rank 1 has 8") != std::string::npos);
}
