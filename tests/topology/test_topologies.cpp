// The per-exchange topologies (gossip, exponential, islands) over in-process workers: their
// groups partition the workers identically on every worker, sums are bit-identical within
// a group, bytes follow the documented formulas, repeated exchanges reach the preserved
// mean, SPARTA and DiLoCo run with each and pass it the exchange's context, and bad
// parameters fail on every worker.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace trickle;

namespace {

using host_ws = workspace<float, host_space, 4>;

// What one worker saw in one exchange.
struct outcome {
    std::vector<int> members;  // the ranks of its group (from summing one-hot vectors)
    int group = 0;             // what reduce() returned
    std::vector<float> sum;    // its buffer after reduce() of the random payload
    traffic_counters traffic;  // bytes of the payload's exchange
};

float payload(int r, std::size_t i, std::uint64_t t) {
    return static_cast<float>(std::sin(0.71 * static_cast<double>(i) + 1.3 * r + 0.17 * static_cast<double>(t)) *
                              (1.0 + r));
}

// Runs exchange t of `top` on N workers: first a one-hot vector (membership), then a
// random payload of m values (sums and bytes).
template <class Top>
std::vector<outcome> run_exchange(const Top& top, int N, std::uint64_t seed, std::uint64_t t, std::size_t m = 37) {
    std::vector<outcome> out(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        host_ws ws;
        detail::reserve_topology_scratch<Top>(ws, std::max<std::size_t>(m, static_cast<std::size_t>(N)));
        const reduce_context ctx{seed, t};
        std::vector<float> hot(static_cast<std::size_t>(N), 0.0f);
        hot[static_cast<std::size_t>(r)] = 1.0f;
        const int g1 = detail::topology_reduce(top, exec::host{}, c, hot.data(), hot.size(), ws, ctx);
        outcome& o = out[static_cast<std::size_t>(r)];
        for (int s = 0; s < N; ++s)
            if (hot[static_cast<std::size_t>(s)] != 0.0f) {
                if (hot[static_cast<std::size_t>(s)] != 1.0f) throw std::logic_error("a member counted twice");
                o.members.push_back(s);
            }
        o.sum.resize(m);
        for (std::size_t i = 0; i < m; ++i) o.sum[i] = payload(r, i, t);
        const traffic_counters before = c.traffic();
        o.group = detail::topology_reduce(top, exec::host{}, c, o.sum.data(), m, ws, ctx);
        o.traffic = c.traffic() - before;
        if (o.group != g1) throw std::logic_error("group size changed between two calls of one exchange");
    });
    return out;
}

// The groups are a partition of the workers, the same on every member; each member's
// sum has the same bits and is close to the exact sum. Returns the group sizes, sorted.
std::vector<int> check_partition(const std::vector<outcome>& out, std::size_t m, std::uint64_t t) {
    const int N = static_cast<int>(out.size());
    std::vector<int> seen(static_cast<std::size_t>(N), 0);
    std::vector<int> sizes;
    for (int r = 0; r < N; ++r) {
        const outcome& o = out[static_cast<std::size_t>(r)];
        REQUIRE(std::find(o.members.begin(), o.members.end(), r) != o.members.end());
        REQUIRE(static_cast<int>(o.members.size()) == o.group);
        for (int s : o.members) {
            const outcome& p = out[static_cast<std::size_t>(s)];
            REQUIRE(p.members == o.members);
            CHECK(trickle_test::bitwise_equal(p.sum, o.sum));
        }
        if (o.members.front() == r) {
            sizes.push_back(o.group);
            for (int s : o.members) ++seen[static_cast<std::size_t>(s)];
            for (std::size_t i = 0; i < m; ++i) {
                double exact = 0;
                for (int s : o.members) exact += payload(s, i, t);
                CHECK(o.sum[i] == doctest::Approx(exact).epsilon(1e-5).scale(1.0));
            }
        }
    }
    for (int c : seen) REQUIRE(c == 1);
    std::sort(sizes.begin(), sizes.end());
    return sizes;
}

// Bytes a worker sends (= receives) in one exchange of m floats, by the documented formulas.
std::uint64_t pair_bytes(int partner, std::size_t m) { return partner < 0 ? 0 : 4 * m; }

std::uint64_t island_bytes(const topology::islands& top, int N, std::uint64_t seed, std::uint64_t t, int r,
                           std::size_t m) {
    if (N == 1 || top.size == 1) return 0;
    if (top.size >= N) return detail::all_reduce_bytes(m, 4, N, r);
    const detail::group_place p = top.place(r, N, seed, t);
    if (p.size == 1) return 0;
    if (top.size == 2) return 4 * m;
    return (p.index == 0 || p.index == p.size - 1 ? 1 : 2) * 4 * m;
}

// Worker r's initial value at flat index i.
float initial(int r, std::size_t i) { return static_cast<float>(std::cos(0.29 * static_cast<double>(i) + r * 2.3) * (r + 1)); }

struct model {
    std::vector<float> w;
    param_group<float> group;
    model(int r, std::size_t n) : w(n) {
        for (std::size_t i = 0; i < n; ++i) w[i] = initial(r, i);
        group.add("w", w.data(), n);
    }
};

// Repeated SPARTA exchanges at p = 1: the mean over workers is preserved, the replicas
// reach it. Returns the largest distance to the mean after `steps` steps.
template <class Top>
double sparta_spread(const Top& top, int N, int steps, std::size_t n = 128) {
    std::vector<model> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r, n);
    std::vector<double> before(n, 0.0);
    for (std::size_t i = 0; i < n; ++i)
        for (int r = 0; r < N; ++r) before[i] += m[static_cast<std::size_t>(r)].w[i] / N;
    comm::run_local(N, [&](comm::local& c) {
        sparta<sampler::uniform, schedule::constant, Top> s(m[static_cast<std::size_t>(c.rank())].group, c,
                                                            {.fraction = 1.0, .seed = 8, .broadcast_initial = false}, {}, {}, top);
        for (int t = 0; t < steps; ++t) s.step(exec::host{});
    });
    double spread = 0;
    for (std::size_t i = 0; i < n; ++i) {
        double mean = 0;
        for (int r = 0; r < N; ++r) mean += m[static_cast<std::size_t>(r)].w[i] / N;
        CHECK(mean == doctest::Approx(before[i]).epsilon(1e-5).scale(1.0));
        for (int r = 0; r < N; ++r) spread = std::max(spread, std::fabs(m[static_cast<std::size_t>(r)].w[i] - mean));
    }
    return spread;
}

} // namespace

TEST_CASE("topologies: the per-exchange ones take the context; all_reduce and ring keep their interface") {
    using C = comm::local;
    CHECK(detail::reduce_takes_context<topology::gossip, exec::host, C, host_space>);
    CHECK(detail::reduce_takes_context<topology::exponential, exec::host, C, host_space>);
    CHECK(detail::reduce_takes_context<topology::islands, exec::host, C, host_space>);
    CHECK_FALSE(detail::reduce_takes_context<topology::all_reduce, exec::host, C, host_space>);
    CHECK_FALSE(detail::reduce_takes_context<topology::ring, exec::host, C, host_space>);
    CHECK(topology_policy<topology::gossip>);
    CHECK(topology_policy<topology::exponential>);
    CHECK(topology_policy<topology::islands>);
}

TEST_CASE("gossip: a random perfect matching per exchange, identical on every worker") {
    for (int N : {1, 2, 3, 5, 8}) {
        for (std::uint64_t t = 0; t < 6; ++t) {
            CAPTURE(N);
            CAPTURE(t);
            const auto out = run_exchange(topology::gossip{}, N, 42, t);
            const auto sizes = check_partition(out, 37, t);
            // floor(N/2) pairs and, with odd N, one worker alone.
            CHECK(std::count(sizes.begin(), sizes.end(), 2) == N / 2);
            CHECK(std::count(sizes.begin(), sizes.end(), 1) == N % 2);
            for (int r = 0; r < N; ++r) {
                const outcome& o = out[static_cast<std::size_t>(r)];
                const int p = topology::gossip::partner(r, N, 42, t);
                CHECK(o.group == (p < 0 ? 1 : 2));
                if (p >= 0) CHECK(topology::gossip::partner(p, N, 42, t) == r);
                CHECK(o.traffic.bytes_sent == pair_bytes(p, 37));
                CHECK(o.traffic.bytes_received == pair_bytes(p, 37));
            }
        }
    }
}

TEST_CASE("gossip: partners change with the exchange and the seed, uniformly") {
    // Rank 0 of 4 meets each of the 3 others about equally often over many exchanges.
    std::map<int, int> count;
    for (std::uint64_t t = 0; t < 3000; ++t) ++count[topology::gossip::partner(0, 4, 7, t)];
    REQUIRE(count.size() == 3);
    for (const auto& [p, k] : count) CHECK(std::abs(k - 1000) < 120);
    // With 5 workers each sits out about a fifth of the exchanges.
    int alone = 0;
    for (std::uint64_t t = 0; t < 3000; ++t) alone += topology::gossip::partner(3, 5, 7, t) < 0;
    CHECK(std::abs(alone - 600) < 90);
    // Another seed gives another sequence.
    int differ = 0;
    for (std::uint64_t t = 0; t < 50; ++t)
        differ += topology::gossip::partner(0, 8, 7, t) != topology::gossip::partner(0, 8, 8, t);
    CHECK(differ > 20);
}

TEST_CASE("exponential: r pairs with r XOR 2^(t mod ceil(log2 N)); missing peers sit out") {
    CHECK(topology::exponential::dimensions(1) == 0);
    CHECK(topology::exponential::dimensions(2) == 1);
    CHECK(topology::exponential::dimensions(5) == 3);
    CHECK(topology::exponential::dimensions(8) == 3);
    CHECK(topology::exponential::dimensions(9) == 4);
    for (int N : {1, 2, 3, 5, 8}) {
        const int tau = topology::exponential::dimensions(N);
        for (std::uint64_t t = 0; t < 7; ++t) {
            CAPTURE(N);
            CAPTURE(t);
            const auto out = run_exchange(topology::exponential{}, N, 1, t);
            check_partition(out, 37, t);
            for (int r = 0; r < N; ++r) {
                const int want = tau == 0 ? -1 : (r ^ (1 << (t % static_cast<std::uint64_t>(tau))));
                const int p = topology::exponential::partner(r, N, t);
                CHECK(p == (want >= 0 && want < N ? want : -1));
                CHECK(out[static_cast<std::size_t>(r)].group == (p < 0 ? 1 : 2));
                CHECK(out[static_cast<std::size_t>(r)].traffic.bytes_sent == pair_bytes(p, 37));
            }
        }
    }
}

TEST_CASE("islands: random groups of g (the last smaller), identical on every worker") {
    for (int N : {1, 2, 3, 5, 8}) {
        for (int g = 1; g <= N; ++g) {
            const topology::islands top{.size = g};
            for (std::uint64_t t = 0; t < 4; ++t) {
                CAPTURE(N);
                CAPTURE(g);
                CAPTURE(t);
                const auto out = run_exchange(top, N, 99, t);
                const auto sizes = check_partition(out, 37, t);
                std::vector<int> want(static_cast<std::size_t>(N / g), g);
                if (N % g) want.push_back(N % g);
                std::sort(want.begin(), want.end());
                CHECK(sizes == want);
                for (int r = 0; r < N; ++r) {
                    const outcome& o = out[static_cast<std::size_t>(r)];
                    CHECK(o.traffic.bytes_sent == island_bytes(top, N, 99, t, r, 37));
                    CHECK(o.traffic.bytes_received == island_bytes(top, N, 99, t, r, 37));
                    if (g < N) CHECK(top.place(r, N, 99, t).size == o.group);
                }
            }
        }
    }
    // Different exchanges draw different islands.
    const topology::islands three{.size = 3};
    std::set<std::vector<int>> draws;
    for (std::uint64_t t = 0; t < 10; ++t) draws.insert(run_exchange(three, 8, 5, t)[0].members);
    CHECK(draws.size() > 3);
}

TEST_CASE("islands of 2 are gossip: the same draws give the same pairs") {
    for (int N : {2, 5, 8})
        for (std::uint64_t t = 0; t < 5; ++t) {
            const auto a = run_exchange(topology::gossip{}, N, 11, t);
            const auto b = run_exchange(topology::islands{.size = 2}, N, 11, t);
            for (int r = 0; r < N; ++r) {
                CHECK(a[static_cast<std::size_t>(r)].members == b[static_cast<std::size_t>(r)].members);
                CHECK(trickle_test::bitwise_equal(a[static_cast<std::size_t>(r)].sum, b[static_cast<std::size_t>(r)].sum));
            }
        }
}

TEST_CASE("sparta: repeated exchanges at p = 1 reach the preserved mean with every topology") {
    SUBCASE("gossip") {
        CHECK(sparta_spread(topology::gossip{}, 5, 60) < 1e-3);
        CHECK(sparta_spread(topology::gossip{}, 8, 60) < 1e-3);
    }
    SUBCASE("exponential") {
        // N a power of two: exact consensus after log2 N exchanges (up to rounding).
        CHECK(sparta_spread(topology::exponential{}, 8, 3) < 1e-5);
        CHECK(sparta_spread(topology::exponential{}, 2, 1) < 1e-6);
        CHECK(sparta_spread(topology::exponential{}, 5, 60) < 1e-3);
        CHECK(sparta_spread(topology::exponential{}, 3, 60) < 1e-3);
    }
    SUBCASE("islands") {
        CHECK(sparta_spread(topology::islands{.size = 3}, 5, 40) < 1e-3);
        CHECK(sparta_spread(topology::islands{.size = 3}, 8, 40) < 1e-3);
        CHECK(sparta_spread(topology::islands{.size = 8}, 8, 1) < 1e-5);
    }
}

TEST_CASE("sparta with each topology: bytes follow the documented formula") {
    const int N = 5;
    const std::size_t n = 600;
    const double p = 0.05;
    const std::size_t count = detail::fraction_count(p, n);
    const int steps = 6;
    auto run = [&](auto top) {
        std::vector<model> m;
        for (int r = 0; r < N; ++r) m.emplace_back(r, n);
        std::vector<exchange_stats> st(N);
        comm::run_local(N, [&](comm::local& c) {
            sparta<sampler::uniform, schedule::constant, decltype(top)> s(m[static_cast<std::size_t>(c.rank())].group, c,
                                                                          {.fraction = p, .seed = 31, .broadcast_initial = false}, {}, {}, top);
            for (int t = 0; t < steps; ++t) s.step(exec::host{});
            st[static_cast<std::size_t>(c.rank())] = s.stats();
        });
        return st;
    };
    const auto g = run(topology::gossip{});
    const auto e = run(topology::exponential{});
    const topology::islands isl{.size = 3};
    const auto i = run(isl);
    for (int r = 0; r < N; ++r) {
        std::uint64_t bg = 0, be = 0, bi = 0;
        for (std::uint64_t t = 0; t < steps; ++t) {
            bg += pair_bytes(topology::gossip::partner(r, N, 31, t), count);
            be += pair_bytes(topology::exponential::partner(r, N, t), count);
            bi += island_bytes(isl, N, 31, t, r, count);
        }
        CHECK(g[static_cast<std::size_t>(r)].total.bytes_sent == bg);
        CHECK(g[static_cast<std::size_t>(r)].total.bytes_received == bg);
        CHECK(e[static_cast<std::size_t>(r)].total.bytes_sent == be);
        CHECK(i[static_cast<std::size_t>(r)].total.bytes_sent == bi);
        CHECK(i[static_cast<std::size_t>(r)].total.bytes_received == bi);
        CHECK(g[static_cast<std::size_t>(r)].exchanges == steps);
    }
}

TEST_CASE("diloco with each topology: a group applies one averaged outer gradient; bytes by formula") {
    const int N = 5, H = 3;
    const std::size_t n = 90;
    // rounds outer rounds; returns each worker's parameters and the change of its snapshot
    // in the last outer step.
    auto run = [&](auto top, int rounds, auto&& expected_bytes) {
        std::vector<model> m;
        for (int r = 0; r < N; ++r) m.emplace_back(r, n);
        std::vector<std::vector<float>> after(N), moved(N);
        std::vector<exchange_stats> st(N);
        comm::run_local(N, [&](comm::local& c) {
            const int r = c.rank();
            auto& w = m[static_cast<std::size_t>(r)].w;
            diloco_engine<outer::sgd, decltype(top), float, host_space, comm::local> d(
                m[static_cast<std::size_t>(r)].group, c, {.interval = H, .seed = 3}, outer::sgd{.lr = 1.0}, top);
            std::vector<float> before;
            for (int t = 0; t < H * rounds; ++t) {
                for (std::size_t i = 0; i < n; ++i) w[i] += 0.01f * std::sin(0.2f * static_cast<float>(i) * (r + 1) + t);
                if (t == H * rounds - 1) before = d.snapshot();
                d.step(exec::host{});
            }
            const std::vector<float> snap = d.snapshot();
            for (std::size_t i = 0; i < n; ++i) moved[static_cast<std::size_t>(r)].push_back(before[i] - snap[i]);
            after[static_cast<std::size_t>(r)] = w;
            st[static_cast<std::size_t>(r)] = d.stats();
        });
        const auto last = run_exchange(top, N, 3, static_cast<std::uint64_t>(rounds - 1), 1);
        for (int r = 0; r < N; ++r) {
            for (int s : last[static_cast<std::size_t>(r)].members)
                for (std::size_t i = 0; i < n; ++i)
                    CHECK(moved[static_cast<std::size_t>(r)][i] ==
                          doctest::Approx(moved[static_cast<std::size_t>(s)][i]).epsilon(1e-6).scale(1.0));
            std::uint64_t want = 0;
            // Each outer round begins with the reports' all-gather over the world (16 bytes a worker).
            for (std::uint64_t t = 0; t < static_cast<std::uint64_t>(rounds); ++t)
                want += expected_bytes(r, t) + cost::outer_reports(N);
            CHECK(st[static_cast<std::size_t>(r)].total.bytes_sent == want);
            CHECK(st[static_cast<std::size_t>(r)].total.bytes_received == want);
            CHECK(st[static_cast<std::size_t>(r)].exchanges == static_cast<std::uint64_t>(rounds));
        }
        return std::make_pair(after, last);
    };
    auto both = [&](auto top, auto&& expected_bytes) {
        // One round from a common snapshot (the initial broadcast): sgd(lr = 1) makes every
        // member of a group hold its group's mean, the same bits on each.
        const auto [one, groups] = run(top, 1, expected_bytes);
        for (int r = 0; r < N; ++r)
            for (int s : groups[static_cast<std::size_t>(r)].members)
                CHECK(trickle_test::bitwise_equal(one[static_cast<std::size_t>(r)], one[static_cast<std::size_t>(s)]));
        run(top, 4, expected_bytes);
    };
    both(topology::gossip{}, [&](int r, std::uint64_t t) { return pair_bytes(topology::gossip::partner(r, N, 3, t), n + 1); });
    both(topology::exponential{},
         [&](int r, std::uint64_t t) { return pair_bytes(topology::exponential::partner(r, N, t), n + 1); });
    const topology::islands isl{.size = 3};
    both(isl, [&](int r, std::uint64_t t) { return island_bytes(isl, N, 3, t, r, n + 1); });
    // SPARTA + DiLoCo runs with a per-exchange topology too.
    std::vector<model> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r, n);
    comm::run_local(N, [&](comm::local& c) {
        sparta_diloco<sampler::uniform, schedule::constant, topology::gossip> sd(
            m[static_cast<std::size_t>(c.rank())].group, c, {.fraction = 0.1, .seed = 4}, {.interval = 4, .seed = 4});
        for (int t = 0; t < 12; ++t) sd.step(exec::host{});
        if (sd.stats().exchanges == 0) throw std::logic_error("nothing exchanged");
    });
}

namespace {

// A user topology that records the contexts it is given (and otherwise all-reduces).
struct recording_topology {
    static constexpr const char* name = "recording";
    static constexpr int scratch_buffers = 0;
    std::vector<reduce_context>* seen = nullptr;

    template <class Exec, class Comm, class Space>
    int reduce(const Exec&, Comm& comm, float* buf, std::size_t n, workspace<float, Space, 4>&,
               const reduce_context& ctx) const {
        if (comm.rank() == 0) seen->push_back(ctx);
        comm.all_reduce_sum(buf, n);
        return comm.size();
    }
    void describe(config_record& rec) const { rec.add("topology", name); }
};

} // namespace

TEST_CASE("the algorithms pass (seed, exchange index) to a topology that takes a context") {
    std::vector<reduce_context> sp, dl;
    std::vector<model> m;
    for (int r = 0; r < 3; ++r) m.emplace_back(r, 40);
    comm::run_local(3, [&](comm::local& c) {
        sparta<sampler::uniform, schedule::constant, recording_topology> s(
            m[static_cast<std::size_t>(c.rank())].group, c, {.fraction = 0.5, .interval = 2, .seed = 77}, {}, {},
            recording_topology{&sp});
        for (int t = 0; t < 7; ++t) s.step(exec::host{});
    });
    REQUIRE(sp.size() == 3);
    for (std::size_t k = 0; k < sp.size(); ++k) {
        CHECK(sp[k].seed == 77);
        CHECK(sp[k].exchange == k); // the exchange index, not the step (steps 1, 3, 5)
    }
    // DiLoCo: the outer round's index, counting rounds skipped because every contribution
    // was dropped (those never reach the topology).
    comm::run_local(3, [&](comm::local& c) {
        diloco<outer::sgd, recording_topology> d(m[static_cast<std::size_t>(c.rank())].group, c,
                                                 {.interval = 2, .seed = 12, .drop_probability = 0.6}, {},
                                                 recording_topology{&dl});
        for (int t = 0; t < 40; ++t) d.step(exec::host{});
        if (c.rank() == 0) {
            std::vector<std::uint64_t> want;
            for (std::uint64_t k = 0; k < 20; ++k) {
                bool all = true;
                for (int r = 0; r < 3; ++r) all = all && detail::dropped_contribution(12, 0.6, k, r);
                if (!all) want.push_back(k);
            }
            REQUIRE(dl.size() == want.size());
            for (std::size_t k = 0; k < dl.size(); ++k) {
                CHECK(dl[k].seed == 12);
                CHECK(dl[k].exchange == want[k]);
            }
        }
    });
}

TEST_CASE("bad topology parameters fail on every worker, without a hang") {
    auto expect_all = [](int N, auto make, const std::string& what) {
        std::vector<model> m;
        for (int r = 0; r < N; ++r) m.emplace_back(r, 50);
        const auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) { make(m[static_cast<std::size_t>(c.rank())], c); });
        for (int r = 0; r < N; ++r) {
            CHECK_MESSAGE(errors[static_cast<std::size_t>(r)].find(what) != std::string::npos, errors[static_cast<std::size_t>(r)]);
            for (std::size_t i = 0; i < 50; ++i) REQUIRE(m[static_cast<std::size_t>(r)].w[i] == initial(r, i));
        }
    };
    using isl = topology::islands;
    expect_all(3, [](model& m, comm::local& c) {
        sparta<sampler::uniform, schedule::constant, isl>(m.group, c, {.fraction = 0.1}, {}, {}, isl{.size = 0});
    }, "topology::islands: size must be >= 1, got 0");
    expect_all(3, [](model& m, comm::local& c) {
        sparta<sampler::uniform, schedule::constant, isl>(m.group, c, {.fraction = 0.1}, {}, {}, isl{.size = -2});
    }, "size must be >= 1, got -2");
    expect_all(3, [](model& m, comm::local& c) {
        sparta<sampler::uniform, schedule::constant, isl>(m.group, c, {.fraction = 0.1}, {}, {}, isl{.size = 4});
    }, "topology::islands: size 4 is larger than the 3 workers");
    expect_all(1, [](model& m, comm::local& c) {
        diloco<outer::nesterov, isl>(m.group, c, {.interval = 2}, {}, isl{.size = 2});
    }, "size 2 is larger than the 1 worker");
    expect_all(4, [](model& m, comm::local& c) {
        diloco<outer::nesterov, isl>(m.group, c, {.interval = 2}, {}, isl{.size = 5});
    }, "size 5 is larger than the 4 workers");
    // Workers that disagree are caught by the agreement.
    expect_all(3, [](model& m, comm::local& c) {
        sparta<sampler::uniform, schedule::constant, isl>(m.group, c, {.fraction = 0.1}, {}, {},
                                                          isl{.size = c.rank() == 1 ? 3 : 2});
    }, "island_size: rank 0 has 2, rank 1 has 3");
    expect_all(2, [](model& m, comm::local& c) {
        if (c.rank() == 0)
            sparta<sampler::uniform, schedule::constant, topology::gossip>(m.group, c, {.fraction = 0.1});
        else
            sparta<sampler::uniform, schedule::constant, topology::exponential>(m.group, c, {.fraction = 0.1});
    }, "topology: rank 0 has gossip, rank 1 has exponential");
}
