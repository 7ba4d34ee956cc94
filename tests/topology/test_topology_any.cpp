// topology::any (and schedule::any) chosen at run time: holding a topology, any reduces
// with the same bits, group sizes and traffic as the topology called directly, over many
// exchanges; describes itself with the held topology's record; reserves the scratch every
// alternative needs; and SPARTA and DiLoCo built on any give the parameters, statistics
// and checkpoints of the same run built on the held policies directly, even when some
// workers use any and the others do not.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

using namespace trickle;

namespace {

using host_ws = workspace<float, host_space, 4>;

// What one worker saw over a sequence of exchanges.
struct trace {
    std::vector<std::vector<float>> bufs;   // its buffer after each exchange
    std::vector<int> groups;                // what reduce() returned
    std::vector<traffic_counters> traffic;  // the bytes and calls of each exchange
};

std::uint64_t exchange_index(int k) { return 5 * static_cast<std::uint64_t>(k) + 2; }

// Runs `exchanges` exchanges of `top` (indices 2, 7, 12, ...) one after another on N
// workers, each worker reusing one workspace reserved for Top, each with m fresh values.
template <class Top>
std::vector<trace> run_exchanges(const Top& top, int N, std::uint64_t seed, int exchanges, std::size_t m) {
    std::vector<trace> out(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        host_ws ws;
        detail::reserve_topology_scratch<Top>(ws, m);
        trace& tr = out[static_cast<std::size_t>(r)];
        for (int k = 0; k < exchanges; ++k) {
            std::vector<float> buf(m);
            for (std::size_t i = 0; i < m; ++i) buf[i] = trickle_test::mixed(r + 11 * k, i);
            const traffic_counters before = c.traffic();
            const int g = detail::topology_reduce(top, exec::host{}, c, buf.data(), m, ws,
                                                  reduce_context{seed, exchange_index(k)});
            tr.traffic.push_back(c.traffic() - before);
            tr.groups.push_back(g);
            tr.bufs.push_back(std::move(buf));
        }
    });
    return out;
}

std::string record_of(const auto& top, int workers) {
    config_record rec("sparta");
    rec.add("workers", workers);
    detail::describe_topology(top, rec, workers);
    return rec.serialize();
}

std::string record_of(const auto& top) {
    config_record rec("sparta");
    top.describe(rec);
    return rec.serialize();
}

// any{top} reduces exactly as top does on N workers, and describes itself as top does.
template <class Top>
void check_same(const Top& top, int N) {
    const topology::any a = top;
    CAPTURE(Top::name);
    CAPTURE(N);
    CHECK(std::string(a.held_name()) == Top::name);
    CHECK(std::holds_alternative<Top>(a.held()));
    const int exchanges = 6;
    const std::size_t m = 53;
    const auto direct = run_exchanges(top, N, 21, exchanges, m);
    const auto via = run_exchanges(a, N, 21, exchanges, m);
    int grouped = 0;
    for (int r = 0; r < N; ++r) {
        const trace& d = direct[static_cast<std::size_t>(r)];
        const trace& v = via[static_cast<std::size_t>(r)];
        for (int k = 0; k < exchanges; ++k) {
            CAPTURE(r);
            CAPTURE(k);
            const auto K = static_cast<std::size_t>(k);
            CHECK(trickle_test::bitwise_equal(v.bufs[K], d.bufs[K]));
            CHECK(v.groups[K] == d.groups[K]);
            CHECK(v.traffic[K].bytes_sent == d.traffic[K].bytes_sent);
            CHECK(v.traffic[K].bytes_received == d.traffic[K].bytes_received);
            CHECK(v.traffic[K].calls == d.traffic[K].calls);
            grouped += d.groups[K] > 1;
        }
    }
    // Something was averaged (except by islands of 1 and a lone worker).
    bool moves = N > 1;
    if constexpr (std::is_same_v<Top, topology::islands>) moves = moves && top.size > 1;
    if (moves) CHECK(grouped > 0);
    CHECK(record_of(a) == record_of(top));
    for (int workers : {1, 2, 3, 4, 8}) CHECK(record_of(a, workers) == record_of(top, workers));
}

// Worker r's initial parameters and its "training" between steps.
float initial(int r, std::size_t i) { return static_cast<float>(std::cos(0.29 * static_cast<double>(i) + r * 2.3) * (r + 1)); }

void train(std::vector<float>& w, int r, int t) {
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] += 0.01f * std::sin(0.2f * static_cast<float>(i) * static_cast<float>(r + 1) + static_cast<float>(t));
}

struct model {
    std::vector<float> w;
    param_group<float> group;
    model(int r, std::size_t n) : w(n) {
        for (std::size_t i = 0; i < n; ++i) w[i] = initial(r, i);
        group.add("w", w.data(), n);
    }
};

std::vector<model> models(int N, std::size_t n) {
    std::vector<model> m;
    m.reserve(static_cast<std::size_t>(N));
    for (int r = 0; r < N; ++r) m.emplace_back(r, n);
    return m;
}

// Each worker's parameters, statistics and checkpoint after a run.
struct run_result {
    std::vector<std::vector<float>> w;
    std::vector<exchange_stats> stats;
    std::vector<std::string> checkpoint;
};

// Runs `steps` steps of an algorithm on N workers; make(model&, comm) builds worker r's
// algorithm (any object with step(), stats() and save()).
template <class Make>
run_result run_algorithm(int N, int steps, std::size_t n, Make&& make) {
    auto m = models(N, n);
    run_result res;
    res.stats.resize(static_cast<std::size_t>(N));
    res.checkpoint.resize(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        model& mine = m[static_cast<std::size_t>(r)];
        auto alg = make(mine, c);
        for (int t = 0; t < steps; ++t) {
            train(mine.w, r, t);
            alg.step(exec::host{});
        }
        res.stats[static_cast<std::size_t>(r)] = alg.stats();
        std::ostringstream os;
        alg.save(os);
        res.checkpoint[static_cast<std::size_t>(r)] = os.str();
    });
    for (const model& x : m) res.w.push_back(x.w);
    return res;
}

void check_same_stats(const exchange_stats& a, const exchange_stats& b) {
    CHECK(a.steps == b.steps);
    CHECK(a.exchanges == b.exchanges);
    CHECK(a.values == b.values);
    CHECK(a.total == b.total);
    CHECK(a.last == b.last);
    CHECK(a.last_values == b.last_values);
    CHECK(a.dense_bytes == b.dense_bytes);
    // And every other counter (the struct is all 64-bit counters: no padding).
    static_assert(std::has_unique_object_representations_v<exchange_stats>);
    CHECK(std::memcmp(&a, &b, sizeof a) == 0);
}

// Bit-identical parameters, identical statistics and checkpoints (which carry the hash of
// the agreed configuration), and the run did move bytes and change the parameters.
void check_same_run(const run_result& a, const run_result& b) {
    REQUIRE(a.w.size() == b.w.size());
    for (std::size_t r = 0; r < a.w.size(); ++r) {
        CAPTURE(r);
        CHECK(trickle_test::bitwise_equal(a.w[r], b.w[r]));
        check_same_stats(a.stats[r], b.stats[r]);
        CHECK(a.checkpoint[r] == b.checkpoint[r]);
        CHECK(a.stats[r].exchanges > 0);
    }
    CHECK(a.stats[0].total.bytes_sent + a.stats[1].total.bytes_sent > 0);
}

template <class Schedule, class Topology>
using host_sparta = sparta<sampler::uniform, Schedule, Topology>;

// SPARTA with (schedule, topology) used directly, with both inside any, and with even
// ranks using any and odd ranks the policies directly: the same run three times.
template <class Schedule, class Topology>
void check_sparta(const Schedule& sched, const Topology& top, sparta_options o, int N = 4, int steps = 12) {
    CAPTURE(Schedule::name);
    CAPTURE(Topology::name);
    const std::size_t n = 300;
    const run_result direct = run_algorithm(N, steps, n, [&](model& m, comm::local& c) {
        return host_sparta<Schedule, Topology>(m.group, c, o, {}, sched, top);
    });
    const run_result via = run_algorithm(N, steps, n, [&](model& m, comm::local& c) {
        return host_sparta<schedule::any, topology::any>(m.group, c, o, {}, sched, top);
    });
    check_same_run(via, direct);
    auto mixed = models(N, n);
    std::vector<exchange_stats> st(static_cast<std::size_t>(N));
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        model& mine = mixed[static_cast<std::size_t>(r)];
        auto drive = [&](auto&& alg) {
            for (int t = 0; t < steps; ++t) {
                train(mine.w, r, t);
                alg.step(exec::host{});
            }
            st[static_cast<std::size_t>(r)] = alg.stats();
        };
        if (r % 2 == 0)
            drive(host_sparta<schedule::any, topology::any>(mine.group, c, o, {}, schedule::any{sched}, topology::any{top}));
        else
            drive(host_sparta<Schedule, Topology>(mine.group, c, o, {}, sched, top));
    });
    for (int r = 0; r < N; ++r) {
        CAPTURE(r);
        CHECK(trickle_test::bitwise_equal(mixed[static_cast<std::size_t>(r)].w, direct.w[static_cast<std::size_t>(r)]));
        check_same_stats(st[static_cast<std::size_t>(r)], direct.stats[static_cast<std::size_t>(r)]);
    }
}

template <class Topology>
void check_diloco(const Topology& top, int N = 4, int steps = 12) {
    CAPTURE(Topology::name);
    const diloco_options o{.interval = 3, .seed = 3};
    const outer::nesterov opt{.lr = 0.7, .momentum = 0.9};
    const run_result direct = run_algorithm(N, steps, 200, [&](model& m, comm::local& c) {
        return diloco<outer::nesterov, Topology>(m.group, c, o, opt, top);
    });
    const run_result via = run_algorithm(N, steps, 200, [&](model& m, comm::local& c) {
        return diloco<outer::nesterov, topology::any>(m.group, c, o, opt, top);
    });
    check_same_run(via, direct);
}

} // namespace

TEST_CASE("topology::any: a topology policy that converts implicitly from every built-in topology") {
    static_assert(topology_policy<topology::any>);
    CHECK(std::string(topology::any::name) == "any");
    static_assert(std::is_convertible_v<topology::all_reduce, topology::any>);
    static_assert(std::is_convertible_v<topology::ring, topology::any>);
    static_assert(std::is_convertible_v<topology::gossip, topology::any>);
    static_assert(std::is_convertible_v<topology::exponential, topology::any>);
    static_assert(std::is_convertible_v<topology::islands, topology::any>);
    static_assert(std::is_convertible_v<const topology::islands&, topology::any>);
    static_assert(!std::is_convertible_v<int, topology::any>);
    // It always takes the exchange's context (it may hold a per-exchange topology).
    CHECK(detail::reduce_takes_context<topology::any, exec::host, comm::local, host_space>);

    const topology::any d;
    CHECK(std::string(d.held_name()) == "all_reduce");
    topology::any t = topology::islands{.size = 3};
    CHECK(std::string(t.held_name()) == "islands");
    std::get<topology::islands>(t.held()).size = 2;
    CHECK(record_of(t, 4) == record_of(topology::islands{.size = 2}, 4));
    t = topology::ring{};
    CHECK(std::string(t.held_name()) == "ring");
}

TEST_CASE("topology::any: reserves the scratch of the most demanding alternative (ring's two slots)") {
    static_assert(topology::any::scratch_buffers == 2);
    static_assert(topology::any::scratch_buffers >= topology::ring::scratch_buffers);
    static_assert(topology::any::scratch_buffers >= topology::gossip::scratch_buffers);
    static_assert(topology::any::scratch_buffers >= topology::exponential::scratch_buffers);
    static_assert(topology::any::scratch_buffers >= topology::islands::scratch_buffers);
    static_assert(topology::any::scratch_buffers >= topology::all_reduce::scratch_buffers);
    // An alternative that does not declare its scratch counts as the three slots the
    // algorithms then reserve for it.
    struct undeclared {};
    static_assert(detail::topology_scratch_count<undeclared>() == 3);
    static_assert(detail::topology_scratch_count<topology::ring>() == 2);
    host_ws ws;
    detail::reserve_topology_scratch<topology::any>(ws, 100);
    CHECK(ws.capacity(1) == 0);
    CHECK(ws.capacity(2) >= 100);
    CHECK(ws.capacity(3) >= 100);
}

TEST_CASE("topology::any: the held topology's bits, group sizes and traffic over several exchanges") {
    for (int N : {4, 1, 2, 5}) {
        check_same(topology::all_reduce{}, N);
        check_same(topology::ring{}, N);
        check_same(topology::gossip{}, N);
        check_same(topology::exponential{}, N);
        check_same(topology::islands{.size = 1}, N);
        if (N >= 2) check_same(topology::islands{.size = 2}, N);
        if (N >= 3) check_same(topology::islands{.size = 3}, N);
        if (N >= 4) check_same(topology::islands{.size = 4}, N);
    }
}

TEST_CASE("topology::any: the held topology's record, errors included") {
    const topology::islands zero{.size = 0}, five{.size = 5};
    CHECK(record_of(topology::any{zero}, 4) == record_of(zero, 4));
    CHECK(record_of(topology::any{five}, 4) == record_of(five, 4));
    CHECK(record_of(topology::any{five}, 4).find("topology::islands: size 5 is larger than the 4 workers") !=
          std::string::npos);
    CHECK(record_of(topology::any{five}).find("!") == record_of(five).find("!"));
    CHECK(record_of(topology::any{topology::gossip{}}, 4) == record_of(topology::gossip{}, 4));
}

TEST_CASE("sparta<uniform, schedule::any, topology::any>: the run of the held policies, bit for bit") {
    SUBCASE("any{gossip} and the default schedule (constant)") {
        const run_result direct = run_algorithm(4, 12, 300, [&](model& m, comm::local& c) {
            return host_sparta<schedule::constant, topology::gossip>(m.group, c, {.fraction = 0.1, .seed = 5});
        });
        const run_result via = run_algorithm(4, 12, 300, [&](model& m, comm::local& c) {
            return host_sparta<schedule::any, topology::any>(m.group, c, {.fraction = 0.1, .seed = 5}, {}, {},
                                                             topology::gossip{});
        });
        check_same_run(via, direct);
    }
    SUBCASE("every topology with the constant schedule") {
        const sparta_options o{.fraction = 0.1, .interval = 2, .seed = 9};
        check_sparta(schedule::constant{}, topology::all_reduce{}, o);
        check_sparta(schedule::constant{}, topology::ring{}, o);
        check_sparta(schedule::constant{}, topology::gossip{}, o);
        check_sparta(schedule::constant{}, topology::exponential{}, o);
        check_sparta(schedule::constant{}, topology::islands{.size = 2}, o);
        check_sparta(schedule::constant{}, topology::islands{.size = 3}, o);
    }
    SUBCASE("decaying schedules") {
        const sparta_options o{.fraction = 0.2, .seed = 17};
        check_sparta(schedule::cosine{.end_fraction = 0.01, .steps = 10}, topology::islands{.size = 3}, o);
        check_sparta(schedule::linear{.end_fraction = 0.02, .steps = 8}, topology::ring{}, o);
        check_sparta(schedule::piecewise{.points = {{3, 0.05}, {7, 0.3}}}, topology::gossip{}, o);
        check_sparta(schedule::warmup<schedule::constant>{.steps = 4, .start_fraction = 0.5}, topology::all_reduce{}, o);
        check_sparta(schedule::warmup<schedule::linear>{.steps = 4, .start_fraction = 0.01,
                                                        .then = {.end_fraction = 0.05, .steps = 10}},
                     topology::exponential{}, o);
        check_sparta(schedule::warmup<schedule::cosine>{.steps = 5, .start_fraction = 0.4,
                                                        .then = {.end_fraction = 0.01, .steps = 12}},
                     topology::gossip{}, o, 5);
    }
}

TEST_CASE("sparta_engine with schedule::any sizes its buffers from the held schedule") {
    auto m = models(2, 1000);
    const sparta_options o{.fraction = 0.01, .seed = 1};
    const schedule::warmup<schedule::cosine> wu{.steps = 5, .start_fraction = 0.3, .then = {.end_fraction = 0.001, .steps = 50}};
    comm::run_local(2, [&](comm::local& c) {
        const param_group<float>& g = m[static_cast<std::size_t>(c.rank())].group;
        sparta_engine<sampler::uniform, std::remove_cvref_t<decltype(wu)>, topology::gossip, float, host_space, comm::local> direct(g, c, o, {}, wu);
        sparta_engine<sampler::uniform, schedule::any, topology::any, float, host_space, comm::local> via(
            g, c, o, {}, wu, topology::gossip{});
        if (via.capacity() != direct.capacity()) throw std::logic_error("capacities differ");
        for (std::uint64_t t = 0; t < 80; ++t)
            if (via.fraction_at(t) != direct.fraction_at(t)) throw std::logic_error("fractions differ");
    });
}

TEST_CASE("diloco<nesterov, topology::any>: the run of the held topology, bit for bit") {
    check_diloco(topology::ring{});
    check_diloco(topology::all_reduce{});
    check_diloco(topology::islands{.size = 3});
    check_diloco(topology::gossip{}, 5);
}

TEST_CASE("any: invalid parameters and disagreements fail on every worker with the direct policy's message") {
    // Each rank's message, or "" when it succeeded.
    auto errors_of = [](int N, auto make) {
        auto m = models(N, 50);
        return trickle_test::run_collect_errors(N, [&](comm::local& c) { make(m[static_cast<std::size_t>(c.rank())], c); });
    };
    auto same_errors = [&](int N, auto direct, auto via, const std::string& what) {
        const auto d = errors_of(N, direct);
        const auto v = errors_of(N, via);
        for (int r = 0; r < N; ++r) {
            CAPTURE(r);
            CHECK_MESSAGE(d[static_cast<std::size_t>(r)].find(what) != std::string::npos, d[static_cast<std::size_t>(r)]);
            CHECK(v[static_cast<std::size_t>(r)] == d[static_cast<std::size_t>(r)]);
        }
    };
    using isl = topology::islands;
    same_errors(
        4,
        [](model& m, comm::local& c) { host_sparta<schedule::constant, isl>(m.group, c, {.fraction = 0.1}, {}, {}, isl{.size = 5}); },
        [](model& m, comm::local& c) {
            host_sparta<schedule::any, topology::any>(m.group, c, {.fraction = 0.1}, {}, {}, isl{.size = 5});
        },
        "topology::islands: size 5 is larger than the 4 workers");
    same_errors(
        3,
        [](model& m, comm::local& c) {
            host_sparta<schedule::cosine, topology::all_reduce>(m.group, c, {.fraction = 0.1}, {},
                                                                 schedule::cosine{.end_fraction = 1.5, .steps = 100});
        },
        [](model& m, comm::local& c) {
            host_sparta<schedule::any, topology::any>(m.group, c, {.fraction = 0.1}, {},
                                                      schedule::cosine{.end_fraction = 1.5, .steps = 100});
        },
        "schedule::cosine: end_fraction must be in (0, 1], got 1.5");
    same_errors(
        4,
        [](model& m, comm::local& c) { diloco<outer::nesterov, isl>(m.group, c, {.interval = 2}, {}, isl{.size = 0}); },
        [](model& m, comm::local& c) { diloco<outer::nesterov, topology::any>(m.group, c, {.interval = 2}, {}, isl{.size = 0}); },
        "topology::islands: size must be >= 1, got 0");
    // Workers whose any holds different topologies, or different schedules, disagree.
    same_errors(
        2,
        [](model& m, comm::local& c) {
            if (c.rank() == 0)
                host_sparta<schedule::constant, topology::gossip>(m.group, c, {.fraction = 0.1});
            else
                host_sparta<schedule::constant, topology::exponential>(m.group, c, {.fraction = 0.1});
        },
        [](model& m, comm::local& c) {
            host_sparta<schedule::any, topology::any>(
                m.group, c, {.fraction = 0.1}, {}, {},
                c.rank() == 0 ? topology::any{topology::gossip{}} : topology::any{topology::exponential{}});
        },
        "topology: rank 0 has gossip, rank 1 has exponential");
    same_errors(
        2,
        [](model& m, comm::local& c) {
            if (c.rank() == 0)
                host_sparta<schedule::linear, topology::all_reduce>(m.group, c, {.fraction = 0.1});
            else
                host_sparta<schedule::cosine, topology::all_reduce>(m.group, c, {.fraction = 0.1});
        },
        [](model& m, comm::local& c) {
            host_sparta<schedule::any, topology::any>(
                m.group, c, {.fraction = 0.1}, {},
                c.rank() == 0 ? schedule::any{schedule::linear{}} : schedule::any{schedule::cosine{}});
        },
        "schedule: rank 0 has linear, rank 1 has cosine");
    // A worker using any agrees with one using the held policies directly.
    const auto mixed = errors_of(2, [](model& m, comm::local& c) {
        if (c.rank() == 0)
            host_sparta<schedule::any, topology::any>(m.group, c, {.fraction = 0.1}, {},
                                                      schedule::cosine{.end_fraction = 0.01, .steps = 9}, isl{.size = 2});
        else
            host_sparta<schedule::cosine, isl>(m.group, c, {.fraction = 0.1}, {}, {.end_fraction = 0.01, .steps = 9},
                                               isl{.size = 2});
    });
    CHECK(mixed[0].empty());
    CHECK(mixed[1].empty());
}
