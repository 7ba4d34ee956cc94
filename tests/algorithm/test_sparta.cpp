// SPARTA end to end over in-process workers: exact means where chosen, untouched bits elsewhere,
// intervals, topologies, byte counts, agreement checks and checkpoints.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <sstream>
#include <vector>

using namespace trickle;

namespace {

constexpr int workers = 4;

// Worker r's initial value at flat index i: distinct per worker and position.
float initial(int r, std::size_t i) { return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + r * 1.9) * (r + 1)); }

// A two-tensor model per worker, stored as T.
template <class T>
struct model {
    std::vector<T> a, b;
    param_group<T> group;
    explicit model(int r, std::size_t na = 700, std::size_t nb = 301) : a(na), b(nb) {
        for (std::size_t i = 0; i < na; ++i) a[i] = from_float<T>(initial(r, i));
        for (std::size_t i = 0; i < nb; ++i) b[i] = from_float<T>(initial(r, na + i));
        group.add("a", a.data(), a.size()).add("b", b.data(), b.size());
    }
    float at(std::size_t i) const { return to_float(i < a.size() ? a[i] : b[i - a.size()]); }
    std::size_t size() const { return a.size() + b.size(); }
};

// The positions a sampler picks at step t (exchange index e), recomputed outside trickle.
template <class Sampler>
std::set<std::size_t> chosen(Sampler s, std::uint64_t seed, std::uint64_t t, std::uint64_t e, double p,
                             const std::vector<std::size_t>& sizes) {
    std::vector<std::size_t> off{0};
    for (auto z : sizes) off.push_back(off.back() + z);
    const layout_view lay{off.data(), static_cast<std::uint32_t>(sizes.size()), off.back()};
    const auto sel = s.select(sampler_context{seed, t, e, p, lay, lay});
    std::set<std::size_t> out;
    for (std::size_t k = 0; k < sel.count(); ++k)
        if (sel(k) < off.back()) out.insert(sel(k));
    return out;
}

template <class T>
double tolerance() {
    if constexpr (std::is_same_v<T, float>) return 1e-6;
    else if constexpr (std::is_same_v<T, half>) return 2e-3;
    else return 1.6e-2;
}

} // namespace

TEST_CASE_TEMPLATE("sparta: chosen positions hold the mean, all other bits are unchanged", T, float, half, bfloat16) {
    std::vector<model<T>> before, after;
    for (int r = 0; r < workers; ++r) before.emplace_back(r);
    for (int r = 0; r < workers; ++r) after.emplace_back(r);
    const sparta_options opts{.fraction = 0.05, .interval = 1, .seed = 1234, .broadcast_initial = false};
    comm::run_local(workers, [&](comm::local& c) {
        sparta<sampler::uniform> s(after[c.rank()].group, c, opts);
        s.step(exec::host{});
    });
    const auto picked = chosen(sampler::uniform{}, 1234, 0, 0, 0.05, {700, 301});
    CHECK(picked.size() == detail::fraction_count(0.05, 1001)); // distinct positions: none drawn twice
    for (std::size_t i = 0; i < before[0].size(); ++i) {
        if (picked.count(i)) {
            float mean = 0;
            for (int r = 0; r < workers; ++r) mean += before[r].at(i);
            mean /= workers;
            for (int r = 0; r < workers; ++r) {
                REQUIRE(after[r].at(i) == doctest::Approx(mean).epsilon(tolerance<T>()).scale(1.0));
                REQUIRE(after[r].at(i) == after[0].at(i)); // identical on every worker
            }
        } else {
            for (int r = 0; r < workers; ++r) {
                const T x = i < 700 ? after[r].a[i] : after[r].b[i - 700];
                const T y = i < 700 ? before[r].a[i] : before[r].b[i - 700];
                REQUIRE(std::memcmp(&x, &y, sizeof(T)) == 0);
            }
        }
    }
}

TEST_CASE_TEMPLATE("sparta: every sampler selects identical positions on every worker", S, sampler::uniform,
                   sampler::permutation, sampler::block, sampler::layerwise) {
    std::vector<model<float>> m;
    for (int r = 0; r < workers; ++r) m.emplace_back(r);
    // Tag each position with its index on every worker but spread the worker's values so
    // the mean differs from every worker's value: a position changed on one worker and
    // not another would show.
    comm::run_local(workers, [&](comm::local& c) {
        sparta<S> s(m[c.rank()].group, c, {.fraction = 0.1, .interval = 1, .seed = 77});
        for (int t = 0; t < 5; ++t) s.step(exec::host{});
    });
    std::size_t equal = 0;
    for (std::size_t i = 0; i < m[0].size(); ++i) {
        bool all = true;
        for (int r = 1; r < workers; ++r) all = all && m[r].at(i) == m[0].at(i);
        equal += all;
    }
    // Positions averaged at least once agree everywhere; with p = 0.1 over 5 steps that is
    // 1 - 0.9^5 ≈ 41% for random samplers, 50% for permutation and rotating windows.
    CHECK(equal > m[0].size() / 4);
    for (std::size_t i = 0; i < m[0].size(); ++i) {
        bool all = true;
        for (int r = 1; r < workers; ++r) all = all && m[r].at(i) == m[0].at(i);
        if (!all) // never averaged: each worker still holds its own initial value
            for (int r = 0; r < workers; ++r) REQUIRE(m[r].at(i) == initial(r, i));
    }
}

TEST_CASE("sparta: interval H exchanges at exactly steps H-1, 2H-1, ...") {
    std::vector<model<float>> m;
    for (int r = 0; r < 2; ++r) m.emplace_back(r);
    comm::run_local(2, [&](comm::local& c) {
        sparta<> s(m[c.rank()].group, c, {.fraction = 0.01, .interval = 5, .seed = 3});
        for (int t = 0; t < 23; ++t) {
            const auto before = s.stats().exchanges;
            s.step(exec::host{});
            const bool exchanged = s.stats().exchanges != before;
            if (exchanged != ((t + 1) % 5 == 0)) throw std::logic_error("exchanged at the wrong step");
        }
        if (s.stats().steps != 23 || s.stats().exchanges != 4) throw std::logic_error("counts");
    });
    CHECK(true);
}

TEST_CASE("sparta: bytes counted equal the communicator's and the topology's formula") {
    const std::size_t n = 1001;
    for (int N : {2, 3, 4}) {
        std::vector<model<float>> m;
        for (int r = 0; r < N; ++r) m.emplace_back(r);
        std::vector<exchange_stats> st(N);
        std::vector<traffic_counters> comm_traffic(N);
        comm::run_local(N, [&](comm::local& c) {
            sparta<> s(m[c.rank()].group, c, {.fraction = 0.02, .interval = 1, .seed = 5});
            const auto at_start = c.traffic(); // the construction-time agreement is not exchange traffic
            for (int t = 0; t < 10; ++t) s.step(exec::host{});
            st[c.rank()] = s.stats();
            comm_traffic[c.rank()] = c.traffic() - at_start;
        });
        const std::size_t count = detail::fraction_count(0.02, n);
        for (int r = 0; r < N; ++r) {
            CHECK(st[r].total == comm_traffic[r]);
            CHECK(st[r].values == 10 * count);
            CHECK(st[r].total.bytes_sent == 10 * detail::all_reduce_bytes(count, 4, N, r));
            CHECK(st[r].dense_bytes == 10 * detail::all_reduce_bytes(n, 4, N, r));
            CHECK(st[r].reduction() == static_cast<double>(detail::all_reduce_bytes(n, 4, N, r)) /
                                           static_cast<double>(detail::all_reduce_bytes(count, 4, N, r)));
            // About 1/p; uneven chunks move the exact value by a few percent at this size.
            CHECK(st[r].reduction() == doctest::Approx(static_cast<double>(n) / count).epsilon(0.05));
        }
    }
    // Ring: each worker sends its buffer to two neighbours (one when N = 2).
    for (int N : {2, 5}) {
        std::vector<model<float>> m;
        for (int r = 0; r < N; ++r) m.emplace_back(r);
        std::vector<exchange_stats> st(N);
        comm::run_local(N, [&](comm::local& c) {
            sparta<sampler::uniform, schedule::constant, topology::ring> s(m[c.rank()].group, c,
                                                                            {.fraction = 0.02, .seed = 5});
            for (int t = 0; t < 4; ++t) s.step(exec::host{});
            st[c.rank()] = s.stats();
        });
        const std::uint64_t per = detail::fraction_count(0.02, n) * 4 * (N == 2 ? 1 : 2);
        for (int r = 0; r < N; ++r) {
            CHECK(st[r].total.bytes_sent == 4 * per);
            CHECK(st[r].total.bytes_received == 4 * per);
        }
    }
}

TEST_CASE("sparta ring: the mean over workers is preserved and replicas reach consensus") {
    const int N = 5;
    std::vector<model<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r, 200, 56);
    std::vector<double> mean_before(m[0].size(), 0.0);
    for (std::size_t i = 0; i < m[0].size(); ++i)
        for (int r = 0; r < N; ++r) mean_before[i] += m[r].at(i) / N;
    comm::run_local(N, [&](comm::local& c) {
        sparta<sampler::uniform, schedule::constant, topology::ring> s(m[c.rank()].group, c, {.fraction = 1.0, .seed = 8, .broadcast_initial = false});
        for (int t = 0; t < 60; ++t) s.step(exec::host{});
    });
    double spread = 0;
    for (std::size_t i = 0; i < m[0].size(); ++i) {
        double mean = 0;
        for (int r = 0; r < N; ++r) mean += m[r].at(i) / N;
        CHECK(mean == doctest::Approx(mean_before[i]).epsilon(1e-4).scale(1.0));
        for (int r = 0; r < N; ++r) spread = std::max(spread, std::fabs(m[r].at(i) - mean));
    }
    CHECK(spread < 1e-3);
}

TEST_CASE("sparta: replica correlation rises under repeated exchanges while replicas keep diverging") {
    const int N = 4;
    const std::size_t n = 4000;
    auto correlation = [](const std::vector<std::vector<float>>& w) {
        double total = 0;
        int pairs = 0;
        for (std::size_t a = 0; a < w.size(); ++a)
            for (std::size_t b = a + 1; b < w.size(); ++b) {
                const double ma = std::accumulate(w[a].begin(), w[a].end(), 0.0) / w[a].size();
                const double mb = std::accumulate(w[b].begin(), w[b].end(), 0.0) / w[b].size();
                double sab = 0, saa = 0, sbb = 0;
                for (std::size_t i = 0; i < w[a].size(); ++i) {
                    sab += (w[a][i] - ma) * (w[b][i] - mb);
                    saa += (w[a][i] - ma) * (w[a][i] - ma);
                    sbb += (w[b][i] - mb) * (w[b][i] - mb);
                }
                total += sab / std::sqrt(saa * sbb);
                ++pairs;
            }
        return total / pairs;
    };
    std::vector<std::vector<float>> w(N, std::vector<float>(n));
    for (int r = 0; r < N; ++r)
        for (std::size_t i = 0; i < n; ++i) w[r][i] = static_cast<float>(random_u64(r + 1, 0, i) % 1000) / 1000.0f;
    const double start = correlation(w);
    comm::run_local(N, [&](comm::local& c) {
        param_group<float> g{{"w", w[c.rank()].data(), n}};
        sparta<sampler::permutation> s(g, c, {.fraction = 0.02, .seed = 9});
        for (std::uint64_t t = 0; t < 150; ++t) {
            // Local "training": small independent noise on every replica.
            for (std::size_t i = 0; i < n; ++i)
                w[c.rank()][i] += (static_cast<float>(random_u64(100 + c.rank(), t, i) % 1000) / 1000.0f - 0.5f) * 0.002f;
            s.step(exec::host{});
        }
    });
    const double end = correlation(w);
    CHECK(start < 0.1);
    CHECK(end > 0.9);
}

TEST_CASE("sparta: exec::openmp gives the same bits as exec::host") {
    std::vector<model<bfloat16>> a, b;
    for (int r = 0; r < 3; ++r) {
        a.emplace_back(r);
        b.emplace_back(r);
    }
    comm::run_local(3, [&](comm::local& c) {
        sparta<sampler::block> s(a[c.rank()].group, c, {.fraction = 0.2, .seed = 2}, sampler::block{.block_size = 32});
        for (int t = 0; t < 6; ++t) s.step(exec::host{});
    });
    comm::run_local(3, [&](comm::local& c) {
        sparta<sampler::block> s(b[c.rank()].group, c, {.fraction = 0.2, .seed = 2}, sampler::block{.block_size = 32});
        for (int t = 0; t < 6; ++t) s.step(exec::openmp{.num_threads = 2});
    });
    for (int r = 0; r < 3; ++r) {
        CHECK(std::memcmp(a[r].a.data(), b[r].a.data(), a[r].a.size() * 2) == 0);
        CHECK(std::memcmp(a[r].b.data(), b[r].b.data(), a[r].b.size() * 2) == 0);
    }
}

TEST_CASE("sparta: a fraction schedule changes the exchanged count") {
    std::vector<model<float>> m;
    for (int r = 0; r < 2; ++r) m.emplace_back(r);
    std::vector<std::uint64_t> counts;
    comm::run_local(2, [&](comm::local& c) {
        sparta<sampler::uniform, schedule::linear> s(m[c.rank()].group, c, {.fraction = 0.1, .seed = 1}, {},
                                                     schedule::linear{.end_fraction = 0.01, .steps = 10});
        for (int t = 0; t < 12; ++t) {
            s.step(exec::host{});
            if (c.rank() == 0) counts.push_back(s.stats().last_values);
        }
    });
    CHECK(counts.front() == detail::fraction_count(0.1, 1001));
    CHECK(counts[5] == detail::fraction_count(0.1 + (0.01 - 0.1) * 0.5, 1001));
    CHECK(counts.back() == detail::fraction_count(0.01, 1001));
}

TEST_CASE("sparta: bad options are rejected on every worker before anything changes") {
    auto expect_all = [](auto make, const std::string& what) {
        std::vector<model<float>> m;
        for (int r = 0; r < 3; ++r) m.emplace_back(r);
        const auto errors = trickle_test::run_collect_errors(3, [&](comm::local& c) { make(m[c.rank()], c); });
        for (int r = 0; r < 3; ++r) {
            CHECK_MESSAGE(errors[r].find(what) != std::string::npos, errors[r]);
            for (std::size_t i = 0; i < m[r].size(); ++i) REQUIRE(m[r].at(i) == initial(r, i));
        }
    };
    expect_all([](model<float>& m, comm::local& c) { sparta<>(m.group, c, {.fraction = 0.0}); }, "fraction must be in (0, 1], got 0");
    expect_all([](model<float>& m, comm::local& c) { sparta<>(m.group, c, {.fraction = 1.5}); }, "got 1.5");
    expect_all([](model<float>& m, comm::local& c) { sparta<>(m.group, c, {.fraction = NAN}); }, "fraction must be in (0, 1]");
    expect_all([](model<float>& m, comm::local& c) { sparta<>(m.group, c, {.fraction = 0.1, .interval = 0}); },
               "interval must be >= 1");
    expect_all([](model<float>&, comm::local& c) {
        param_group<float> empty;
        sparta<>(empty, c, {});
    }, "parameter group is empty");
    // One worker alone with a bad value: every worker reports it, naming the rank.
    expect_all([](model<float>& m, comm::local& c) {
        sparta<>(m.group, c, {.fraction = c.rank() == 2 ? 2.0 : 0.1});
    }, "rank 2: sparta: fraction must be in (0, 1], got 2");
    expect_all([](model<float>& m, comm::local& c) {
        sparta<sampler::block>(m.group, c, {.fraction = 0.1}, sampler::block{.block_size = 0});
    }, "block_size must be >= 1");
}

TEST_CASE("sparta: mismatched configurations between workers throw on every worker, naming the field") {
    auto mismatch = [](auto make, const std::string& what) {
        std::vector<model<float>> m;
        for (int r = 0; r < 3; ++r) m.emplace_back(r, 700, r == 1 ? 302 : 301);
        const auto errors = trickle_test::run_collect_errors(3, [&](comm::local& c) { make(m[c.rank()], c); });
        for (int r = 0; r < 3; ++r) {
            CHECK_MESSAGE(errors[r].find("workers disagree on the sparta configuration") != std::string::npos, errors[r]);
            CHECK_MESSAGE(errors[r].find(what) != std::string::npos, errors[r]);
        }
    };
    // Different layouts (worker 1's second tensor is one element longer).
    mismatch([](model<float>& m, comm::local& c) { sparta<>(m.group, c, {.fraction = 0.1}); }, "elements: rank 0 has 1001, rank 1 has 1002");
    std::vector<model<float>> m;
    for (int r = 0; r < 3; ++r) m.emplace_back(r);
    const auto errors = trickle_test::run_collect_errors(3, [&](comm::local& c) {
        sparta<>(m[c.rank()].group, c, {.fraction = 0.1, .seed = c.rank() == 2 ? 8u : 7u});
    });
    for (const auto& e : errors) CHECK(e.find("seed: rank 0 has 7, rank 2 has 8") != std::string::npos);
    const auto sched = trickle_test::run_collect_errors(2, [&](comm::local& c) {
        sparta<sampler::uniform, schedule::linear>(m[c.rank()].group, c, {.fraction = 0.1}, {},
                                                   schedule::linear{.end_fraction = c.rank() ? 0.02 : 0.01, .steps = 9});
    });
    for (const auto& e : sched) CHECK(e.find("end_fraction: rank 0 has 0.01") != std::string::npos);
}

TEST_CASE("sparta: stepping host parameters with exec::cuda is a clear runtime error") {
    std::vector<model<float>> m;
    m.emplace_back(0);
    comm::run_local(1, [&](comm::local& c) {
        sparta<> s(m[0].group, c, {.fraction = 0.5});
        bool threw = false;
        try {
            s.step(exec::cuda{});
        } catch (const invalid_argument& e) {
            threw = std::string(e.what()).find("host memory, which exec::cuda cannot reach") != std::string::npos;
        }
        if (!threw || s.stats().steps != 0) throw std::logic_error("expected a space error");
    });
    // Parameters declared as CUDA memory are rejected where no CUDA runtime can check them.
#if !TRICKLE_HAS_CUDA
    param_group<float, cuda_space> g;
    std::vector<float> v(4);
    CHECK_THROWS_WITH_AS(g.add("w", v.data(), 4), doctest::Contains("CUDA memory"), invalid_argument);
#endif
    param_group<float> g2;
    CHECK_THROWS_AS(g2.add("w", nullptr, 4), invalid_argument);
}

TEST_CASE_TEMPLATE("sparta: a restored checkpoint continues bit for bit", S, sampler::uniform, sampler::permutation,
                   sampler::layerwise) {
    const int N = 3;
    auto run = [&](std::vector<model<float>>& m, int first, int second, std::vector<std::string>* save_to,
                   const std::vector<std::string>* load_from, std::vector<exchange_stats>* st) {
        comm::run_local(N, [&](comm::local& c) {
            const sparta_options o{.fraction = 0.07, .interval = 2, .seed = 99};
            S samp{};
            if constexpr (std::is_same_v<S, sampler::layerwise>) samp.how = sampler::layerwise::mode::rotating;
            sparta<S> s(m[c.rank()].group, c, o, samp);
            if (load_from) {
                std::istringstream is((*load_from)[c.rank()]);
                s.load(is);
            }
            for (int t = 0; t < first; ++t) s.step(exec::host{});
            if (save_to) {
                std::ostringstream os;
                s.save(os);
                (*save_to)[c.rank()] = os.str();
            }
            for (int t = 0; t < second; ++t) s.step(exec::host{});
            if (st) (*st)[c.rank()] = s.stats();
        });
    };
    std::vector<model<float>> straight, resumed;
    for (int r = 0; r < N; ++r) {
        straight.emplace_back(r);
        resumed.emplace_back(r);
    }
    std::vector<std::string> ckpt(N);
    std::vector<exchange_stats> st_straight(N), st_resumed(N);
    run(straight, 13, 17, &ckpt, nullptr, &st_straight);
    // The resumed run: first 13 steps, a checkpoint, then a fresh object restored from it.
    std::vector<std::string> ckpt2(N);
    run(resumed, 13, 0, &ckpt2, nullptr, nullptr);
    CHECK(ckpt2 == ckpt);
    run(resumed, 0, 17, nullptr, &ckpt2, &st_resumed);
    for (int r = 0; r < N; ++r) {
        CHECK(std::memcmp(straight[r].a.data(), resumed[r].a.data(), 700 * 4) == 0);
        CHECK(std::memcmp(straight[r].b.data(), resumed[r].b.data(), 301 * 4) == 0);
        CHECK(st_resumed[r].steps == 30);
        CHECK(st_resumed[r].total == st_straight[r].total);
    }
}

TEST_CASE("sparta: corrupt, foreign or mismatched checkpoints throw on every worker and change nothing") {
    const int N = 2;
    std::vector<model<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r);
    std::vector<std::string> good(N);
    comm::run_local(N, [&](comm::local& c) {
        sparta<sampler::permutation> s(m[c.rank()].group, c, {.fraction = 0.1, .seed = 1});
        for (int t = 0; t < 3; ++t) s.step(exec::host{});
        std::ostringstream os;
        s.save(os);
        good[c.rank()] = os.str();
    });
    auto attempt = [&](auto corrupt, sparta_options o, const std::string& what) {
        const auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) {
            sparta<sampler::permutation> s(m[c.rank()].group, c, o);
            s.step(exec::host{});
            const auto before = s.stats();
            std::string bytes = good[c.rank()];
            corrupt(bytes, c.rank());
            std::istringstream is(bytes);
            try {
                s.load(is);
            } catch (...) {
                if (s.stats().steps != before.steps || s.stats().total != before.total)
                    throw std::logic_error("state changed by a failed load");
                throw;
            }
        });
        for (const auto& e : errors) CHECK_MESSAGE(e.find(what) != std::string::npos, e);
    };
    const sparta_options same{.fraction = 0.1, .seed = 1};
    attempt([](std::string& b, int r) { if (r == 1) b.resize(b.size() / 2); }, same, "rank 1: checkpoint: truncated");
    attempt([](std::string& b, int) { b[0] = 'X'; }, same, "bad magic");
    attempt([](std::string&, int) {}, sparta_options{.fraction = 0.2, .seed = 1}, "different configuration");
    attempt([](std::string& b, int r) { if (r == 0) b.clear(); }, same, "rank 0: checkpoint");
    // Workers restoring checkpoints from different steps disagree.
    std::vector<std::string> other(N);
    comm::run_local(N, [&](comm::local& c) {
        sparta<sampler::permutation> s(m[c.rank()].group, c, same);
        for (int t = 0; t < 4; ++t) s.step(exec::host{});
        std::ostringstream os;
        s.save(os);
        other[c.rank()] = os.str();
    });
    attempt([&](std::string& b, int r) { if (r == 1) b = other[1]; }, same, "step: rank 0 has 3, rank 1 has 4");
}
