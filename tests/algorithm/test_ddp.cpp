// trickle::ddp, the dense all-reduce baseline, over in-process workers: replicas identical
// after every average, each element the fp32 mean computed outside trickle, bytes equal to
// the cost model (reduction() 1 at interval 1), the bits of SPARTA at fraction 1, bad
// options refused on every worker, checkpoints with agreement.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

using namespace trickle;
using trickle_test::bitwise_equal;

namespace {

// Worker r's initial value at flat index i.
float initial(int r, std::size_t i) { return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + r * 1.9) * (r + 1)); }

// A two-tensor model per worker, stored as T.
template <class T>
struct model {
    std::vector<T> a, b;
    param_group<T> group;
    explicit model(int r, std::size_t na = 300, std::size_t nb = 77) : a(na), b(nb) {
        for (std::size_t i = 0; i < na; ++i) a[i] = from_float<T>(initial(r, i));
        for (std::size_t i = 0; i < nb; ++i) b[i] = from_float<T>(initial(r, na + i));
        group.add("a", a.data(), a.size()).add("b", b.data(), b.size());
    }
    std::size_t size() const { return a.size() + b.size(); }
    T& at(std::size_t i) { return i < a.size() ? a[i] : b[i - a.size()]; }
    std::vector<float> values() const {
        std::vector<float> v;
        for (const T& x : a) v.push_back(to_float(x));
        for (const T& x : b) v.push_back(to_float(x));
        return v;
    }
    // A stand-in for worker r's optimizer step t: every worker moves its own way.
    void train(int r, int t) {
        for (std::size_t i = 0; i < size(); ++i)
            at(i) = from_float<T>(to_float(at(i)) +
                                  0.01f * static_cast<float>(static_cast<int>((i * 13 + static_cast<std::size_t>(r) * 7 +
                                                                               static_cast<std::size_t>(t) * 3) % 9) - 4));
    }
};

// The fp32 images of worker r's parameters after `train`, simulated outside trickle.
template <class T>
std::vector<float> trained(std::vector<float> v, int r, int t) {
    for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = to_float(from_float<T>(
            v[i] + 0.01f * static_cast<float>(static_cast<int>((i * 13 + static_cast<std::size_t>(r) * 7 +
                                                                static_cast<std::size_t>(t) * 3) % 9) - 4)));
    return v;
}

// Every worker's error message ("" when it returned) for make(model, comm).
template <class Make>
std::vector<std::string> errors_of(int N, Make make) {
    std::vector<model<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r);
    return trickle_test::run_collect_errors(N, [&](comm::local& c) { make(m[static_cast<std::size_t>(c.rank())], c); });
}

void check_all(const std::vector<std::string>& errors, const std::string& what) {
    for (const auto& e : errors) CHECK_MESSAGE(e.find(what) != std::string::npos, e);
    for (const auto& e : errors) CHECK(e == errors[0]);
}

std::string save_of(const detail::erased_handle& a) {
    std::ostringstream os;
    a.save(os);
    return os.str();
}

} // namespace

TEST_CASE_TEMPLATE("ddp: after every step the replicas are identical and hold the fp32 mean", T, float, bfloat16) {
    constexpr int N = 3, steps = 5;
    std::vector<model<T>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r);
    // What every average must give, computed outside trickle: rank 0's parameters after the
    // broadcast, then each step every worker's trained values summed in rank order (the
    // order comm::local adds them) and scaled by 1/N, rounded to T.
    std::vector<std::vector<float>> expect(steps);
    std::vector<float> p = m[0].values();
    for (int t = 0; t < steps; ++t) {
        std::vector<float> sum = trained<T>(p, 0, t);
        for (int r = 1; r < N; ++r) {
            const std::vector<float> q = trained<T>(p, r, t);
            for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += q[i];
        }
        for (std::size_t i = 0; i < sum.size(); ++i) p[i] = to_float(from_float<T>(sum[i] * (1.0f / N)));
        expect[static_cast<std::size_t>(t)] = p;
    }
    std::vector<std::vector<std::vector<float>>> got(N, std::vector<std::vector<float>>(steps));
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        model<T>& mine = m[static_cast<std::size_t>(r)];
        ddp d(mine.group, c);
        for (int t = 0; t < steps; ++t) {
            mine.train(r, t);
            d.step(exec::host{});
            got[static_cast<std::size_t>(r)][static_cast<std::size_t>(t)] = mine.values();
        }
        CHECK(d.stats().exchanges == steps);
    });
    for (int t = 0; t < steps; ++t) {
        CAPTURE(t);
        for (int r = 0; r < N; ++r) CHECK(bitwise_equal(got[r][t], expect[t]));
    }
    // ... which is the mean of the workers' values, to within T's rounding.
    std::vector<float> start = model<T>(0).values(), mean(start.size(), 0.0f);
    for (int r = 0; r < N; ++r) {
        const std::vector<float> q = trained<T>(start, r, 0);
        for (std::size_t i = 0; i < q.size(); ++i) mean[i] += q[i] / N;
    }
    const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-2;
    for (std::size_t i = 0; i < mean.size(); ++i) REQUIRE(expect[0][i] == doctest::Approx(mean[i]).epsilon(tol).scale(1.0));
}

TEST_CASE("ddp: bytes are the cost model's; reduction() is 1 at interval 1 and the interval otherwise") {
    constexpr int N = 4, steps = 6;
    std::vector<model<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r);
    const std::size_t n = m[0].size();
    for (std::uint64_t interval : {1u, 3u}) {
        CAPTURE(interval);
        std::vector<exchange_stats> st(N);
        std::vector<std::vector<float>> before_last(N), after(N);
        comm::run_local(N, [&](comm::local& c) {
            const int r = c.rank();
            model<float>& mine = m[static_cast<std::size_t>(r)];
            ddp d(mine.group, c, {.interval = interval});
            for (int t = 0; t < steps; ++t) {
                mine.train(r, t);
                d.step(exec::host{});
                // Between averages the replicas drift apart; at one they meet.
                if (t == 0 && interval == 3) before_last[static_cast<std::size_t>(r)] = mine.values();
            }
            st[static_cast<std::size_t>(r)] = d.stats();
            after[static_cast<std::size_t>(r)] = mine.values();
        });
        for (int r = 0; r < N; ++r) {
            CAPTURE(r);
            const exchange_stats& s = st[static_cast<std::size_t>(r)];
            const std::uint64_t per = detail::all_reduce_bytes(n, sizeof(float), N, r);
            const std::uint64_t exchanges = steps / interval;
            CHECK(s.steps == steps);
            CHECK(s.exchanges == exchanges);
            CHECK(s.values == exchanges * n);
            CHECK(s.last_values == n);
            CHECK(s.total.bytes_sent == exchanges * per);
            CHECK(s.total.bytes_received == exchanges * per);
            CHECK(s.total.calls == exchanges);
            CHECK(s.last == traffic_counters{per, per, 1});
            CHECK(s.dense_bytes == steps * per);
            CHECK(s.sent.codes == s.total.bytes_sent);
            CHECK(s.sent.scales + s.sent.indices + s.sent.padding == 0);
            CHECK(s.reduction() == doctest::Approx(static_cast<double>(interval)));
            // The initial broadcast: rank 0 sends n floats to each other worker.
            if (r == 0)
                CHECK(s.initial == traffic_counters{static_cast<std::uint64_t>(N - 1) * n * 4, 0, 1});
            else
                CHECK(s.initial == traffic_counters{0, n * 4, 1});
            CHECK(bitwise_equal(after[static_cast<std::size_t>(r)], after[0]));
        }
        if (interval == 3) CHECK(!bitwise_equal(before_last[1], before_last[0]));
    }
}

TEST_CASE("ddp: the bits and bytes of SPARTA at fraction 1, on exec::host and exec::openmp") {
    constexpr int N = 3, steps = 6;
    for (std::uint64_t interval : {1u, 2u}) {
        CAPTURE(interval);
        std::vector<model<float>> a, b, c3;
        for (int r = 0; r < N; ++r) {
            a.emplace_back(r);
            b.emplace_back(r);
            c3.emplace_back(r);
        }
        std::vector<exchange_stats> sa(N), sb(N);
        comm::run_local(N, [&](comm::local& c) {
            const int r = c.rank();
            ddp d(a[static_cast<std::size_t>(r)].group, c, {.interval = interval});
            sparta<sampler::uniform> s(b[static_cast<std::size_t>(r)].group, c, {.fraction = 1.0, .interval = interval, .seed = 3});
            ddp o(c3[static_cast<std::size_t>(r)].group, c, {.interval = interval});
            for (int t = 0; t < steps; ++t) {
                a[static_cast<std::size_t>(r)].train(r, t);
                b[static_cast<std::size_t>(r)].train(r, t);
                c3[static_cast<std::size_t>(r)].train(r, t);
                d.step(exec::host{});
                s.step(exec::host{});
                o.step(exec::openmp{.num_threads = 2});
            }
            sa[static_cast<std::size_t>(r)] = d.stats();
            sb[static_cast<std::size_t>(r)] = s.stats();
        });
        for (int r = 0; r < N; ++r) {
            CHECK(bitwise_equal(a[r].a, b[r].a));
            CHECK(bitwise_equal(a[r].b, b[r].b));
            CHECK(bitwise_equal(a[r].a, c3[r].a));
            CHECK(bitwise_equal(a[r].b, c3[r].b));
            CHECK(sa[r].total == sb[r].total);
            CHECK(sa[r].dense_bytes == sb[r].dense_bytes);
            CHECK(sa[r].initial == sb[r].initial);
        }
    }
}

TEST_CASE("ddp: broadcast_initial gives every worker rank 0's parameters; off, each keeps its own") {
    constexpr int N = 3;
    for (bool broadcast : {true, false}) {
        std::vector<model<float>> m;
        for (int r = 0; r < N; ++r) m.emplace_back(r);
        const std::vector<float> rank0 = m[0].values();
        std::vector<exchange_stats> st(N);
        comm::run_local(N, [&](comm::local& c) {
            ddp d(m[static_cast<std::size_t>(c.rank())].group, c, {.broadcast_initial = broadcast});
            st[static_cast<std::size_t>(c.rank())] = d.stats();
        });
        for (int r = 0; r < N; ++r) {
            CHECK(bitwise_equal(m[r].values(), broadcast ? rank0 : model<float>(r).values()));
            CHECK((st[r].initial.calls == 1) == broadcast);
            CHECK(st[r].total.calls == 0);
        }
    }
}

TEST_CASE("ddp: bad options and layouts are refused on every worker, naming the problem") {
    constexpr int N = 3;
    check_all(errors_of(N, [](model<float>& m, comm::local& c) { ddp(m.group, c, {.interval = 0}); }),
              "ddp: interval must be >= 1, got 0");
    // One worker's bad option: every worker throws, naming that rank.
    check_all(errors_of(N, [](model<float>& m, comm::local& c) { ddp(m.group, c, {.interval = c.rank() == 2 ? 0u : 1u}); }),
              "rank 2: ddp: interval must be >= 1, got 0");
    check_all(errors_of(N, [](model<float>& m, comm::local& c) { ddp(m.group, c, {.interval = c.rank() == 1 ? 2u : 1u}); }),
              "workers disagree on the ddp configuration: interval: rank 0 has 1, rank 1 has 2");
    check_all(errors_of(N,
                        [](model<float>&, comm::local& c) {
                            model<float> other(c.rank(), c.rank() == 2 ? 301 : 300);
                            ddp(other.group, c);
                        }),
              "elements: rank 0 has 377, rank 2 has 378");
    check_all(errors_of(N,
                        [](model<float>& m, comm::local& c) {
                            param_group<float> empty;
                            ddp(c.rank() == 0 ? empty : m.group, c);
                        }),
              "rank 0: the parameter group is empty");
    // The exception types: invalid_argument for a bad value, mismatch_error for disagreement.
    comm::run_local(2, [](comm::local& c) {
        model<float> m(c.rank());
        CHECK_THROWS_AS(ddp(m.group, c, {.interval = 0}), invalid_argument);
        CHECK_THROWS_AS(ddp(m.group, c, {.interval = c.rank() + 1u}), mismatch_error);
        // What applies to DiLoCo only.
        ddp d(m.group, c);
        CHECK_THROWS_WITH_AS(d.outer_step(exec::host{}), doctest::Contains("ddp: outer_step applies to DiLoCo"),
                             invalid_argument);
        CHECK_THROWS_WITH_AS(d.set_weight(2.0f), doctest::Contains("ddp: set_weight applies to DiLoCo"), invalid_argument);
        CHECK_NOTHROW(d.flush());
        CHECK(d.membership().workers == 2);
    });
    // An empty (default-constructed) object says so.
    ddp none;
    CHECK(!none);
    CHECK_THROWS_WITH_AS(none.step(exec::host{}), doctest::Contains("this algorithm object is empty"), invalid_argument);
}

namespace {

// A communicator that claims cuda_space memory and moves host memory through comm::local:
// enough for ddp's construction (configuration agreement is on host memory) to refuse it.
struct cuda_space_comm {
    using memory_space = cuda_space;
    comm::local* inner;
    int rank() const { return inner->rank(); }
    int size() const { return inner->size(); }
    void all_reduce_sum(float* data, std::size_t n) { inner->all_reduce_sum(data, n); }
    void all_gather_bytes(const void* send, void* recv, std::size_t b) { inner->all_gather_bytes(send, recv, b); }
    void send_recv(const float* send, std::size_t n, int dst, float* recv, std::size_t m, int src) {
        inner->send_recv(send, n, dst, recv, m, src);
    }
    void broadcast(float* data, std::size_t n, int root) { inner->broadcast(data, n, root); }
    void barrier() { inner->barrier(); }
    void synchronize() {}
    traffic_counters traffic() const { return inner->traffic(); }
};
static_assert(communicator<cuda_space_comm>);

} // namespace

TEST_CASE("ddp: cuda_space parameters are refused at construction, on every worker, saying so") {
    // (An empty group: a host build cannot hold CUDA memory; the refusal comes first.)
    const auto errors = trickle_test::run_collect_errors(2, [&](comm::local& c) {
        cuda_space_comm dc{&c};
        const param_group<float, cuda_space> g;
        ddp d(g, dc);
    });
    check_all(errors, "rank 0: ddp: cuda_space parameters are not supported in this version");
}

TEST_CASE("ddp: a membership that changes is refused on every worker") {
    using namespace std::chrono_literals;
    comm::elastic_local_world world(2, 2000ms);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int id = 0; id < 2; ++id)
        threads.emplace_back([&, id] {
            comm::elastic_local c = world.worker(id);
            model<float> m(id);
            try {
                ddp d(m.group, c);
            } catch (const invalid_argument& e) {
                errors[static_cast<std::size_t>(id)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    check_all(errors, "ddp: a communicator whose membership changes (comm::elastic_local) is not supported");
}

TEST_CASE("ddp: a checkpoint restores the counters; a foreign, damaged or out-of-step one is refused on every worker") {
    constexpr int N = 2;
    std::vector<model<float>> m;
    for (int r = 0; r < N; ++r) m.emplace_back(r);
    std::vector<std::string> at3(N), at5(N), sp(N);
    std::vector<exchange_stats> st5(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        // Without the initial broadcast, whose bytes (exchange_stats::initial) a loading
        // object keeps as its own construction's: the whole saved state then round-trips.
        ddp d(m[static_cast<std::size_t>(r)].group, c, {.interval = 2, .broadcast_initial = false});
        for (int t = 0; t < 5; ++t) {
            m[static_cast<std::size_t>(r)].train(r, t);
            d.step(exec::host{});
            if (t == 2) at3[static_cast<std::size_t>(r)] = save_of(d);
        }
        at5[static_cast<std::size_t>(r)] = save_of(d);
        st5[static_cast<std::size_t>(r)] = d.stats();
        sparta<> s(m[static_cast<std::size_t>(r)].group, c, {.fraction = 0.1, .broadcast_initial = false});
        sp[static_cast<std::size_t>(r)] = save_of(s);
    });
    auto attempt = [&](const std::function<std::string(int)>& bytes, ddp_options o = {.interval = 2}) {
        std::vector<std::string> saved(N);
        auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) {
            const int r = c.rank();
            model<float> mine(r);
            ddp d(mine.group, c, {.interval = o.interval, .broadcast_initial = false});
            std::istringstream is(at3[static_cast<std::size_t>(r)]);
            d.load(is);
            const std::string before = save_of(d);
            std::istringstream in(bytes(r));
            try {
                d.load(in, "test");
            } catch (...) {
                saved[static_cast<std::size_t>(r)] = save_of(d) == before ? "unchanged" : "changed";
                throw;
            }
            saved[static_cast<std::size_t>(r)] = save_of(d);
        });
        return std::pair{errors, saved};
    };
    // A good one: the counters (steps, exchanges, bytes) come back as they were at step 5
    // (its save() writes the same bytes again).
    {
        auto [errors, saved] = attempt([&](int r) { return at5[static_cast<std::size_t>(r)]; });
        for (int r = 0; r < N; ++r) {
            CHECK(errors[static_cast<std::size_t>(r)].empty());
            CHECK(saved[static_cast<std::size_t>(r)] == at5[static_cast<std::size_t>(r)]);
        }
        CHECK(st5[0].steps == 5);
        CHECK(st5[0].exchanges == 2);
    }
    // One worker at another step: both throw, both unchanged.
    {
        auto [errors, saved] =
            attempt([&](int r) { return r == 1 ? at3[static_cast<std::size_t>(r)] : at5[static_cast<std::size_t>(r)]; });
        check_all(errors, "step: rank 0 has 5, rank 1 has 3");
        for (const auto& s : saved) CHECK(s == "unchanged");
    }
    // SPARTA's checkpoint, a damaged byte, and another interval's.
    check_all(attempt([&](int r) { return sp[static_cast<std::size_t>(r)]; }).first,
              "checkpoint: written by 'sparta', expected 'ddp'");
    {
        auto [errors, saved] = attempt([&](int r) {
            std::string s = at5[static_cast<std::size_t>(r)];
            if (r == 0) s[s.size() / 2] ^= 0x20;
            return s;
        });
        check_all(errors, "rank 0: checkpoint: checksum mismatch in section 'stats'");
        for (const auto& s : saved) CHECK(s == "unchanged");
    }
    check_all(attempt([&](int r) { return at5[static_cast<std::size_t>(r)]; }, {.interval = 3}).first,
              "checkpoint: written under a different configuration or parameter layout");
}
