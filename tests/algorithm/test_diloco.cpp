// DiLoCo and SPARTA + DiLoCo over in-process workers: outer steps against hand-computed
// references, weighting, dropped contributions, pruning, byte counts, checkpoints, bad input.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <vector>

using namespace trickle;

namespace {

// Worker r's "inner training": parameter i moves by drift(r, i, t) at inner step t.
float drift(int r, std::size_t i, int t) {
    return 0.01f * static_cast<float>(std::sin(0.1 * static_cast<double>(i) * (r + 1) + 0.3 * t));
}

template <class T>
struct replica {
    std::vector<T> a, b;
    param_group<T> group;
    replica(std::size_t na, std::size_t nb, int r) : a(na), b(nb) {
        for (std::size_t i = 0; i < na; ++i) a[i] = from_float<T>(0.5f + 0.001f * static_cast<float>(i) + (r ? 0.25f : 0.0f));
        for (std::size_t i = 0; i < nb; ++i) b[i] = from_float<T>(-0.25f + 0.002f * static_cast<float>(i));
        group.add("a", a.data(), na).add("b", b.data(), nb);
    }
    float get(std::size_t i) const { return to_float(i < a.size() ? a[i] : b[i - a.size()]); }
    void set(std::size_t i, float v) { (i < a.size() ? a[i] : b[i - a.size()]) = from_float<T>(v); }
    std::size_t size() const { return a.size() + b.size(); }
    void train(int r, int t) {
        for (std::size_t i = 0; i < size(); ++i) set(i, get(i) + drift(r, i, t));
    }
};

// Steps [from, to) of every worker's diloco<Opt> over replicas m, on m.size() threads:
// loads (*load)[r] first when given (a resumed run, so no initial broadcast), and saves
// each worker's checkpoint into (*save)[r] at the end when given.
template <class Opt>
void run_diloco(std::vector<replica<float>>& m, const diloco_options& options, const Opt& opt, int from, int to,
                std::vector<std::string>* save, const std::vector<std::string>* load) {
    comm::run_local(static_cast<int>(m.size()), [&](comm::local& c) {
        const int r = c.rank();
        diloco_options o = options;
        o.broadcast_initial = load == nullptr;
        diloco<Opt> d(m[r].group, c, o, opt);
        if (load) {
            std::istringstream is((*load)[r]);
            d.load(is);
        }
        for (int t = from; t < to; ++t) {
            m[r].train(r, t);
            d.step(exec::host{});
        }
        if (save) {
            std::ostringstream os;
            d.save(os);
            (*save)[r] = os.str();
        }
    });
}

} // namespace

TEST_CASE("diloco average: one worker leaves its model unchanged") {
    replica<float> m(100, 33, 0);
    comm::run_local(1, [&](comm::local& c) {
        diloco<outer::average> d(m.group, c, {.interval = 5});
        for (int t = 0; t < 10; ++t) {
            const std::vector<float> before(m.a);
            m.train(0, t);
            const std::vector<float> trained(m.a);
            d.step(exec::host{});
            if (m.a != trained) throw std::logic_error("average changed a lone worker's model");
        }
        if (d.stats().exchanges != 2) throw std::logic_error("outer steps");
    });
    CHECK(true);
}

TEST_CASE_TEMPLATE("diloco sgd(lr = 1): the outer step is exact parameter averaging", T, float, half, bfloat16) {
    const int N = 4, H = 3;
    std::vector<replica<T>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(50, 20, r);
    std::vector<std::vector<float>> expected(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        diloco<outer::sgd> d(m[r].group, c, {.interval = H}, outer::sgd{.lr = 1.0});
        for (int t = 0; t < H; ++t) {
            m[r].train(r, t);
            if (t == H - 1) {
                c.barrier();
                if (r == 0)
                    for (int q = 0; q < N; ++q) {
                        expected[q].resize(m[q].size());
                        for (std::size_t i = 0; i < m[q].size(); ++i) {
                            double mean = 0;
                            for (int k = 0; k < N; ++k) mean += m[k].get(i);
                            expected[q][i] = static_cast<float>(mean / N);
                        }
                    }
                c.barrier();
            }
            d.step(exec::host{});
        }
    });
    const double tol = std::is_same_v<T, float> ? 1e-6 : (std::is_same_v<T, half> ? 1e-3 : 8e-3);
    for (int r = 0; r < N; ++r)
        for (std::size_t i = 0; i < m[r].size(); ++i) {
            REQUIRE(m[r].get(i) == doctest::Approx(expected[0][i]).epsilon(tol).scale(1.0));
            REQUIRE(m[r].get(i) == m[0].get(i)); // identical replicas after the outer step
        }
}

TEST_CASE("diloco nesterov: two outer steps match the torch SGD(nesterov=True) formula") {
    const int N = 3, H = 4;
    const double lr = 0.7, mu = 0.9;
    std::vector<replica<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(40, 9, r);
    const std::size_t n = m[0].size();
    // The reference, in double: rank 0's parameters are everyone's start (broadcast_initial).
    std::vector<double> snap(n), buf(n, 0.0), ref(n);
    for (std::size_t i = 0; i < n; ++i) snap[i] = m[0].get(i);
    for (int round = 0; round < 2; ++round) {
        for (std::size_t i = 0; i < n; ++i) {
            double g = 0;
            for (int r = 0; r < N; ++r) {
                double p = static_cast<float>(snap[i]);
                for (int t = 0; t < H; ++t) p += drift(r, i, round * H + t);
                g += (snap[i] - p) / N;
            }
            buf[i] = round == 0 ? g : mu * buf[i] + g;
            snap[i] -= lr * (g + mu * buf[i]);
        }
    }
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        diloco<outer::nesterov> d(m[r].group, c, {.interval = H}, outer::nesterov{.lr = lr, .momentum = mu});
        for (int t = 0; t < 2 * H; ++t) {
            m[r].train(r, t);
            d.step(exec::host{});
        }
    });
    for (std::size_t i = 0; i < n; ++i) REQUIRE(m[1].get(i) == doctest::Approx(snap[i]).epsilon(1e-4).scale(1e-3));
}

TEST_CASE("diloco: weighted averaging with unequal weights") {
    const int N = 3;
    const float weights[N] = {1.0f, 3.0f, 0.0f};
    std::vector<replica<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(30, 5, r);
    const std::size_t n = m[0].size();
    std::vector<float> start(n);
    for (std::size_t i = 0; i < n; ++i) start[i] = m[0].get(i);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        diloco<outer::sgd> d(m[r].group, c, {.interval = 1, .weight = weights[r]}, outer::sgd{.lr = 1.0});
        m[r].train(r, 0);
        d.step(exec::host{});
    });
    for (std::size_t i = 0; i < n; ++i) {
        double num = 0, den = 0;
        for (int r = 0; r < N; ++r) {
            num += weights[r] * (start[i] - (start[i] + drift(r, i, 0)));
            den += weights[r];
        }
        REQUIRE(m[2].get(i) == doctest::Approx(start[i] - num / den).epsilon(1e-5));
    }
}

TEST_CASE("diloco: dropped contributions are the same on every worker and the average renormalizes") {
    const int N = 4, rounds = 12;
    const double q = 0.5;
    std::vector<replica<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(20, 4, r);
    const std::size_t n = m[0].size();
    std::vector<std::vector<std::vector<char>>> seen(N, std::vector<std::vector<char>>(rounds, std::vector<char>(N)));
    std::vector<std::vector<float>> expected(rounds, std::vector<float>(n));
    std::vector<std::vector<float>> got(rounds, std::vector<float>(n));
    std::vector<std::uint64_t> skipped(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        diloco_engine<outer::sgd, topology::all_reduce, float, host_space, comm::local> d(
            m[r].group, c, {.interval = 1, .seed = 2024, .drop_probability = q}, outer::sgd{.lr = 1.0});
        for (int e = 0; e < rounds; ++e) {
            for (int k = 0; k < N; ++k) seen[r][e][k] = d.dropped(k, static_cast<std::uint64_t>(e));
            const std::vector<float> start = d.snapshot();
            m[r].train(r, e);
            c.barrier();
            if (r == 0) {
                for (std::size_t i = 0; i < n; ++i) {
                    double sum = 0;
                    int kept = 0;
                    for (int k = 0; k < N; ++k)
                        if (!d.dropped(k, static_cast<std::uint64_t>(e))) {
                            sum += m[k].get(i);
                            ++kept;
                        }
                    expected[e][i] = kept ? static_cast<float>(sum / kept) : std::nanf("");
                }
            }
            c.barrier();
            d.step(exec::host{});
            if (r == 3)
                for (std::size_t i = 0; i < n; ++i) got[e][i] = m[r].get(i);
            // Every worker restarts the next round from the shared result.
            c.barrier();
        }
        skipped[r] = d.outer_steps_skipped();
    });
    int drops = 0, skips = 0;
    for (int e = 0; e < rounds; ++e) {
        for (int r = 1; r < N; ++r) CHECK(seen[r][e] == seen[0][e]);
        int kept = 0;
        for (int k = 0; k < N; ++k) kept += !seen[0][e][k];
        drops += N - kept;
        skips += kept == 0;
        if (kept > 0)
            for (std::size_t i = 0; i < n; ++i) REQUIRE(got[e][i] == doctest::Approx(expected[e][i]).epsilon(1e-5));
    }
    CHECK(drops > 10); // about half of 48 contributions
    CHECK(drops < 38);
    CHECK(skipped[0] == static_cast<std::uint64_t>(skips));
}

TEST_CASE("diloco: pruning keeps exactly size - floor(q·size) entries per tensor") {
    replica<float> m(101, 40, 0);
    const std::size_t n = m.size();
    std::vector<float> start(n), trained(n);
    for (std::size_t i = 0; i < n; ++i) start[i] = m.get(i);
    comm::run_local(1, [&](comm::local& c) {
        diloco<outer::sgd> d(m.group, c, {.interval = 1, .prune_fraction = 0.3}, outer::sgd{.lr = 1.0});
        for (std::size_t i = 0; i < n; ++i) m.set(i, start[i] + 0.001f * static_cast<float>((i * 37) % 141 + 1));
        for (std::size_t i = 0; i < n; ++i) trained[i] = m.get(i);
        d.step(exec::host{});
    });
    // A pruned entry's delta was zeroed: that position returns to the snapshot.
    std::size_t pruned_a = 0, pruned_b = 0, largest_pruned = 0, smallest_kept = 1000;
    for (std::size_t i = 0; i < n; ++i) {
        const bool pruned = m.get(i) == start[i];
        if (!pruned) REQUIRE(m.get(i) == doctest::Approx(trained[i]).epsilon(1e-6));
        (i < 101 ? pruned_a : pruned_b) += pruned;
        const std::size_t rank = (i * 37) % 141 + 1;
        if (i < 101) {
            if (pruned) largest_pruned = std::max(largest_pruned, rank);
            else smallest_kept = std::min(smallest_kept, rank);
        }
    }
    CHECK(pruned_a == 30); // floor(0.3 · 101)
    CHECK(pruned_b == 12); // floor(0.3 · 40)
    CHECK(largest_pruned < smallest_kept); // the smallest magnitudes went first
}

TEST_CASE("diloco: bytes per outer step are one all-reduce of the deltas and the weight") {
    const int N = 3, H = 10;
    std::vector<replica<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(200, 57, r);
    const std::size_t n = m[0].size();
    std::vector<exchange_stats> st(N);
    comm::run_local(N, [&](comm::local& c) {
        diloco<> d(m[c.rank()].group, c, {.interval = H});
        for (int t = 0; t < 5 * H; ++t) d.step(exec::host{});
        st[c.rank()] = d.stats();
    });
    for (int r = 0; r < N; ++r) {
        CHECK(st[r].exchanges == 5);
        CHECK(st[r].values == 5 * (n + 1));
        // Each outer step: the all-reduce of the deltas and the weight, and the workers'
        // reports (an all-gather of 16 bytes each, stage/aggregate.hpp): the cost model's round.
        CHECK(st[r].total.bytes_sent == 5 * cost::diloco_round(n, N, r));
        CHECK(st[r].dense_bytes == 5 * H * detail::all_reduce_bytes(n, 4, N, r));
        CHECK(st[r].reduction() == doctest::Approx(H).epsilon(0.05)); // (the reports are 2.5% of this small model's bytes)
    }
}

TEST_CASE("diloco adam: a restored checkpoint continues bit for bit; corrupt ones change nothing") {
    const int N = 2, H = 3;
    // A resumed run keeps the parameters its trainer restored: no initial broadcast.
    auto run = [&](std::vector<replica<float>>& m, int from, int to, std::vector<std::string>* save,
                   const std::vector<std::string>* load) {
        run_diloco(m, {.interval = H, .seed = 5, .drop_probability = 0.3}, outer::adam{.lr = 0.01}, from, to, save, load);
    };
    std::vector<replica<float>> resumed, one;
    for (int r = 0; r < N; ++r) {
        resumed.emplace_back(64, 7, r);
        one.emplace_back(64, 7, r);
    }
    // The uninterrupted run: one object for 20 steps, saving its state at step 8.
    std::vector<std::string> mid(N), ck(N), unused(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        diloco<outer::adam> d(one[r].group, c, {.interval = H, .seed = 5, .drop_probability = 0.3}, outer::adam{.lr = 0.01});
        for (int t = 0; t < 20; ++t) {
            if (t == 8) {
                std::ostringstream os;
                d.save(os);
                mid[r] = os.str();
            }
            one[r].train(r, t);
            d.step(exec::host{});
        }
    });
    // A run of 8 steps by an object of its own writes the same checkpoint.
    std::vector<replica<float>> eight;
    for (int r = 0; r < N; ++r) eight.emplace_back(64, 7, r);
    run(eight, 0, 8, &ck, nullptr);
    CHECK(mid == ck);
    // Resume: the trainer restores its parameters (here: the first 8 steps again), then
    // a fresh diloco object loads the checkpoint and continues.
    run(resumed, 0, 8, &unused, nullptr);
    run(resumed, 8, 20, nullptr, &mid);
    for (int r = 0; r < N; ++r) {
        CHECK(std::memcmp(one[r].a.data(), resumed[r].a.data(), 64 * 4) == 0);
        CHECK(std::memcmp(one[r].b.data(), resumed[r].b.data(), 7 * 4) == 0);
    }

    const auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) {
        const int r = c.rank();
        diloco<outer::adam> d(resumed[r].group, c, {.interval = H, .seed = 5, .drop_probability = 0.3}, outer::adam{.lr = 0.01});
        d.step(exec::host{});
        const auto before = d.stats();
        std::string bytes = mid[r];
        if (r == 1) bytes.resize(bytes.size() - 9);
        std::istringstream is(bytes);
        try {
            d.load(is);
        } catch (...) {
            if (d.stats().steps != before.steps) throw std::logic_error("state changed");
            throw;
        }
    });
    for (const auto& e : errors) CHECK_MESSAGE(e.find("rank 1: checkpoint: truncated") != std::string::npos, e);
    const auto foreign = trickle_test::run_collect_errors(N, [&](comm::local& c) {
        diloco<outer::adam> d(resumed[c.rank()].group, c, {.interval = H + 1}, outer::adam{.lr = 0.01});
        std::istringstream is(mid[c.rank()]);
        d.load(is);
    });
    for (const auto& e : foreign) CHECK_MESSAGE(e.find("different configuration") != std::string::npos, e);
}

TEST_CASE("diloco with an outer lr schedule: constant is the plain optimizer; a decay resumes bit for bit") {
    const int N = 3, H = 2, steps = 16;
    using cos_nesterov = outer::lr_scheduled<outer::nesterov, schedule::cosine>;
    auto run = [&](auto opt, std::vector<replica<float>>& m, int from, int to, std::vector<std::string>* save,
                   const std::vector<std::string>* load) { run_diloco(m, {.interval = H}, opt, from, to, save, load); };
    auto fresh = [&] {
        std::vector<replica<float>> m;
        for (int r = 0; r < N; ++r) m.emplace_back(40, 9, r);
        return m;
    };
    auto plain = fresh(), constant = fresh(), decayed = fresh(), resumed = fresh();
    run(outer::nesterov{.lr = 0.6}, plain, 0, steps, nullptr, nullptr);
    run(outer::lr_scheduled<outer::nesterov, schedule::constant>{.optimizer = {.lr = 0.6}}, constant, 0, steps, nullptr,
        nullptr);
    const cos_nesterov cos{.optimizer = {.lr = 0.6}, .schedule = {.end_fraction = 0.05, .steps = 6}};
    run(cos, decayed, 0, steps, nullptr, nullptr);
    int differ = 0;
    for (int r = 0; r < N; ++r) {
        CHECK(trickle_test::bitwise_equal(constant[r].a, plain[r].a));
        CHECK(trickle_test::bitwise_equal(constant[r].b, plain[r].b));
        differ += decayed[r].a != plain[r].a;
    }
    CHECK(differ == N); // the decay changed every worker's model
    // Stop after 7 steps (3 outer steps), restore into a new object, finish: same bits.
    std::vector<std::string> ck(N);
    run(cos, resumed, 0, 7, &ck, nullptr);
    run(cos, resumed, 7, steps, nullptr, &ck);
    for (int r = 0; r < N; ++r) {
        CHECK(trickle_test::bitwise_equal(resumed[r].a, decayed[r].a));
        CHECK(trickle_test::bitwise_equal(resumed[r].b, decayed[r].b));
    }
    // A checkpoint of another schedule is refused.
    auto other = fresh();
    const cos_nesterov shorter{.optimizer = {.lr = 0.6}, .schedule = {.end_fraction = 0.05, .steps = 5}};
    CHECK_THROWS_WITH_AS(run(shorter, other, 7, 8, nullptr, &ck), doctest::Contains("different configuration"),
                         trickle::error);
}

TEST_CASE("diloco: bad options and outer hyperparameters are rejected on every worker") {
    auto expect = [](auto make, const std::string& what, int N = 2) {
        std::vector<replica<float>> m;
        for (int r = 0; r < N; ++r) m.emplace_back(10, 3, r);
        const auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) { make(m[c.rank()], c); });
        for (int r = 0; r < N; ++r) {
            CHECK_MESSAGE(errors[r].find(what) != std::string::npos, errors[r]);
            replica<float> fresh(10, 3, r);
            CHECK(m[r].a == fresh.a); // untouched
        }
    };
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.interval = 0}); }, "interval (H) must be >= 1");
    expect([](replica<float>& m, comm::local& c) { diloco<outer::sgd>(m.group, c, {}, outer::sgd{.lr = 0.0}); }, "lr");
    expect([](replica<float>& m, comm::local& c) { diloco<outer::sgd>(m.group, c, {}, outer::sgd{.lr = -1.0}); }, "lr");
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {}, outer::nesterov{.lr = 0.7, .momentum = 1.0}); },
           "momentum");
    expect([](replica<float>& m, comm::local& c) { diloco<outer::momentum>(m.group, c, {}, outer::momentum{.lr = 0.7, .momentum = -0.1}); },
           "momentum");
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.weight = c.rank() == 1 ? -1.0f : 1.0f}); },
           "rank 1: diloco: weight must be finite and >= 0");
    // A float option prints as the float it is, in its shortest form (not -0.10000000149011612).
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.weight = c.rank() == 1 ? -0.1f : 1.0f}); },
           "rank 1: diloco: weight must be finite and >= 0, got -0.1");
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.drop_probability = 1.1}); },
           "drop_probability must be in [0, 1), got 1.1");
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.weight = 0.0f}); }, "weights sum to zero");
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.prune_fraction = 1.0}); }, "prune_fraction must be in [0, 1)");
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.prune_fraction = -0.5}); }, "prune_fraction");
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.drop_probability = 1.0}); }, "drop_probability");
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.state_in_pinned_host = true}); }, "cuda_space parameters only");
    expect([](replica<float>& m, comm::local& c) { diloco<>(m.group, c, {.interval = c.rank() + 1u}); }, "interval: rank 0 has 1, rank 1 has 2");
    expect([](replica<float>& m, comm::local& c) { diloco<outer::adam>(m.group, c, {}, outer::adam{.lr = 0.1, .beta1 = 1.0}); }, "beta1");
}

TEST_CASE("diloco: broadcast_initial gives every worker rank 0's parameters") {
    const int N = 3;
    std::vector<replica<bfloat16>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(25, 5, r);
    const auto rank0 = m[0].a;
    comm::run_local(N, [&](comm::local& c) { diloco<> d(m[c.rank()].group, c, {.interval = 10}); });
    for (int r = 0; r < N; ++r) CHECK(std::memcmp(m[r].a.data(), rank0.data(), rank0.size() * 2) == 0);
}

TEST_CASE_TEMPLATE("initial broadcast: every algorithm starts replicas from rank 0, counted as stats().initial", T, float,
                   half, bfloat16) {
    const int N = 3;
    auto check = [&](auto make, bool broadcast, bool combined) {
        std::vector<replica<T>> m;
        for (int r = 0; r < N; ++r) m.emplace_back(25, 6, r);
        const auto rank0 = m[0].a;
        const auto own1 = m[1].a;
        const std::size_t n = m[0].size();
        std::vector<exchange_stats> st(N), outer_part(N);
        comm::run_local(N, [&](comm::local& c) {
            auto algo = make(m[c.rank()].group, c);
            st[c.rank()] = algo.stats();
            if constexpr (requires { algo.outer_stats(); }) {
                outer_part[c.rank()] = algo.outer_stats();
                if (algo.sparse_stats().initial.calls != 0) throw std::logic_error("the SPARTA part broadcast too");
            }
        });
        for (int r = 0; r < N; ++r) {
            INFO("rank ", r, ", broadcast ", broadcast);
            const auto& s = st[r];
            if (broadcast) {
                CHECK(std::memcmp(m[r].a.data(), rank0.data(), rank0.size() * sizeof(T)) == 0);
                CHECK(s.initial.calls == 1);
                CHECK(s.initial.bytes_sent == (r == 0 ? (N - 1) * n * 4 : 0u));
                CHECK(s.initial.bytes_received == (r == 0 ? 0u : n * 4));
                if (combined) CHECK(outer_part[r].initial == s.initial);
            } else {
                CHECK(s.initial == traffic_counters{});
            }
            CHECK(s.total == traffic_counters{}); // not part of the training traffic
            CHECK(s.reduction() == 0.0);
        }
        if (!broadcast) CHECK(std::memcmp(m[1].a.data(), own1.data(), own1.size() * sizeof(T)) == 0);
    };
    for (bool b : {true, false}) {
        check([&](param_group<T>& g, comm::local& c) { return sparta<>(g, c, {.fraction = 0.1, .broadcast_initial = b}); }, b,
              false);
        check([&](param_group<T>& g, comm::local& c) { return diloco<>(g, c, {.interval = 4, .broadcast_initial = b}); }, b,
              false);
        // SPARTA + DiLoCo: one broadcast, the DiLoCo part's, whatever the SPARTA part asks.
        check([&](param_group<T>& g, comm::local& c) {
            return sparta_diloco<>(g, c, {.fraction = 0.1, .broadcast_initial = true}, {.interval = 4, .broadcast_initial = b});
        },
              b, true);
    }
}

TEST_CASE("algorithm objects: default-constructed, assigned later; an empty one refuses to step") {
    sparta<> s;
    diloco<> d;
    sparta_diloco<> sd;
    CHECK_FALSE(static_cast<bool>(s));
    CHECK_THROWS_WITH_AS(s.step(exec::host{}), doctest::Contains("step: this algorithm object is empty"), invalid_argument);
    CHECK_THROWS_WITH_AS(d.stats(), doctest::Contains("stats: this algorithm object is empty"), invalid_argument);
    std::ostringstream os;
    CHECK_THROWS_AS(sd.save(os), invalid_argument);
    CHECK_THROWS_AS(sd.sparse_stats(), invalid_argument);
    comm::local_world world(1);
    auto c = world.rank(0);
    replica<float> m(10, 4, 0);
    s = sparta<>(m.group, c, {.fraction = 0.5});
    CHECK(static_cast<bool>(s));
    s.step(exec::host{});
    CHECK(s.stats().steps == 1);
    sparta<> moved = std::move(s);
    CHECK(moved.stats().steps == 1);
    CHECK_THROWS_AS(s.step(exec::host{}), invalid_argument); // NOLINT(bugprone-use-after-move): tested on purpose
}

TEST_CASE("sparta_diloco: sparse exchanges inside rounds, the outer step at their end") {
    const int N = 4, H = 5;
    std::vector<replica<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(300, 100, r);
    const std::size_t n = m[0].size();
    std::vector<exchange_stats> st(N);
    std::vector<std::string> ck(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        sparta_diloco_engine<sampler::uniform, schedule::constant, topology::all_reduce, outer::nesterov, float, host_space,
                             comm::local>
            sd(m[r].group, c, {.fraction = 0.05, .seed = 1}, {.interval = H, .seed = 1});
        for (int t = 0; t < 3 * H; ++t) {
            m[r].train(r, t);
            sd.step(exec::host{});
        }
        st[r] = sd.stats();
        if (sd.sparse_stats().exchanges != 3 * (H - 1)) throw std::logic_error("sparse exchanges");
        if (sd.outer_stats().exchanges != 3) throw std::logic_error("outer exchanges");
    });
    for (int r = 0; r < N; ++r) {
        CHECK(st[r].steps == 3 * H);
        CHECK(st[r].exchanges == 3 * (H - 1) + 3);
        const std::uint64_t sparse = 3 * (H - 1) * cost::sparta_exchange(0.05, n, N, r);
        const std::uint64_t outer = 3 * cost::diloco_round(n, N, r);
        CHECK(st[r].total.bytes_sent == sparse + outer);
    }
    // After an outer step every replica holds the same parameters.
    for (int r = 1; r < N; ++r) CHECK(m[r].a == m[0].a);
}

TEST_CASE("sparta_diloco: checkpoint round trip through the type-erased object") {
    const int N = 2;
    std::vector<replica<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(80, 20, r);
    std::vector<std::string> ck(N), again(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        sparta_diloco<sampler::permutation> sd(m[r].group, c, {.fraction = 0.1, .seed = 3}, {.interval = 4, .seed = 3});
        for (int t = 0; t < 6; ++t) sd.step(exec::host{});
        std::ostringstream os;
        sd.save(os);
        ck[r] = os.str();
        sparta_diloco<sampler::permutation> other(m[r].group, c, {.fraction = 0.1, .seed = 3}, {.interval = 4, .seed = 3});
        std::istringstream is(ck[r]);
        other.load(is);
        std::ostringstream os2;
        other.save(os2);
        again[r] = os2.str();
        if (other.stats().steps != 6) throw std::logic_error("steps not restored");
    });
    CHECK(ck == again);
}

TEST_CASE("pruning order: smaller magnitude first, ties by position, NaN last") {
    std::vector<float> d{0.5f, -0.5f, 0.1f, NAN, -0.1f, 0.5f, INFINITY, 0.2f};
    const std::vector<std::size_t> off{0, 8};
    const layout_view lay{off.data(), 1, 8};
    std::vector<std::uint64_t> keys;
    detail::prune_host(d.data(), lay, 0.75, keys); // floor(0.75 · 8) = 6 zeroed
    // Order: 0.1 (2), -0.1 (4), 0.2 (7), 0.5 (0), -0.5 (1), 0.5 (5) | inf (6), NaN (3)
    CHECK(d[0] == 0.0f);
    CHECK(d[1] == 0.0f);
    CHECK(d[2] == 0.0f);
    CHECK(d[4] == 0.0f);
    CHECK(d[5] == 0.0f);
    CHECK(d[7] == 0.0f);
    CHECK(std::isinf(d[6]));
    CHECK(std::isnan(d[3]));
    std::vector<float> e{0.3f, 0.3f, 0.3f, 0.3f};
    const std::vector<std::size_t> off2{0, 4};
    detail::prune_host(e.data(), layout_view{off2.data(), 1, 4}, 0.5, keys);
    CHECK(e == std::vector<float>{0.0f, 0.0f, 0.3f, 0.3f}); // equal magnitudes: the first positions go first
}
