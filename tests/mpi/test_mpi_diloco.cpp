// DiLoCo and SPARTA + DiLoCo over comm::mpi give comm::local's result to fp32 rounding, with the same byte counts;
// streaming DiLoCo too, and over comm::async exactly the blocking MPI run's bits.
#include <trickle/comm/async.hpp>
#include <trickle/trickle.hpp>

#include "mpi_test_support.hpp"

#include <doctest/doctest.h>

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace trickle;

namespace {

constexpr std::size_t n = 517;

float start(int r, std::size_t i) { return static_cast<float>(std::cos(0.21 * static_cast<double>(i) + r)); }
float drift(int r, std::size_t i, int t) {
    return 0.01f * static_cast<float>(std::sin(0.1 * static_cast<double>(i) * (r + 1) + 0.3 * t));
}

struct outcome {
    std::vector<float> params;
    std::uint64_t bytes_sent = 0, exchanges = 0;
};

// Four rounds of H = 3 with Nesterov, weights by rank and dropped contributions; or the
// same with a SPARTA exchange inside the rounds.
template <class Comm>
outcome run(Comm& c, bool with_sparta) {
    const int r = c.rank();
    std::vector<float> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = start(r, i);
    param_group<float> g{{"w", w.data(), n}};
    const diloco_options dop{.interval = 3, .seed = 11, .weight = 1.0f + static_cast<float>(r), .drop_probability = 0.25};
    outcome out;
    auto train = [&](auto& algo) {
        for (int t = 0; t < 12; ++t) {
            for (std::size_t i = 0; i < n; ++i) w[i] += drift(r, i, t);
            algo.step(exec::host{});
        }
        out.bytes_sent = algo.stats().total.bytes_sent;
        out.exchanges = algo.stats().exchanges;
    };
    if (with_sparta) {
        sparta_diloco<sampler::permutation> sd(g, c, {.fraction = 0.1, .seed = 11}, dop);
        train(sd);
    } else {
        diloco<outer::nesterov> d(g, c, dop);
        train(d);
    }
    out.params = w;
    return out;
}

void check(bool with_sparta) {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    const outcome mine = run(c, with_sparta);
    std::vector<outcome> ref(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& lc) { ref[lc.rank()] = run(lc, with_sparta); });
    INFO("rank ", r);
    CHECK(mine.bytes_sent == ref[r].bytes_sent);
    CHECK(mine.exchanges == ref[r].exchanges);
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(static_cast<double>(mine.params[i]) - ref[r].params[i]));
    CHECK(worst < 1e-5);
    // After the last outer step every rank holds the same parameters.
    const auto all = trickle_mpi_test::gather_all(mine.params);
    bool same = true;
    for (int q = 1; q < N; ++q)
        for (std::size_t i = 0; i < n; ++i) same = same && all[q * n + i] == all[i];
    CHECK(same);
}

} // namespace

TEST_CASE("mpi diloco (nesterov, weighted, dropped contributions) equals comm::local") { check(false); }

TEST_CASE("mpi sparta_diloco equals comm::local") { check(true); }

namespace {

// Streaming DiLoCo (3 fragments over three tensors, tau = 2, alpha = 0.25) for 14 steps.
template <class Comm>
std::vector<float> run_streaming(Comm& c, int r) {
    std::vector<float> w(n);
    for (std::size_t i = 0; i < n; ++i) w[i] = start(r, i);
    param_group<float> g{{"a", w.data(), 200}, {"b", w.data() + 200, 117}, {"c", w.data() + 317, n - 317}};
    diloco_options o{.interval = 4, .seed = 3, .weight = 1.0f + static_cast<float>(r)};
    o.fragments = 3;
    o.overlap_steps = 2;
    o.mix = 0.25;
    diloco<outer::nesterov> d(g, c, o);
    for (int t = 0; t < 14; ++t) {
        for (std::size_t i = 0; i < n; ++i) w[i] += drift(r, i, t);
        d.step(exec::host{});
    }
    return w;
}

} // namespace

TEST_CASE("mpi streaming DiLoCo equals comm::local to fp32 rounding, and over comm::async the blocking MPI run bit for bit") {
    comm::mpi c;
    const int N = c.size(), r = c.rank();
    const std::vector<float> blocking = run_streaming(c, r);
    std::vector<std::vector<float>> ref(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& lc) { ref[static_cast<std::size_t>(lc.rank())] = run_streaming(lc, lc.rank()); });
    INFO("rank ", r);
    // MPI's own reduction order: comm::local's result to fp32 rounding, as for plain DiLoCo above.
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(blocking[i]) - ref[static_cast<std::size_t>(r)][i]));
    CHECK(worst < 1e-5);
    if (c.thread_level_ok()) {
        std::vector<float> overlapped;
        {
            comm::async<comm::mpi> ac(c);
            overlapped = run_streaming(ac, r);
        }
        CHECK(std::memcmp(blocking.data(), overlapped.data(), n * sizeof(float)) == 0);
    } else {
        MESSAGE("comm::async part skipped: MPI was initialized below MPI_THREAD_SERIALIZED");
    }
}
