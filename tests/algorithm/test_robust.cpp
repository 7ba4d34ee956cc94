// Robust aggregation, non-finite exclusion and adaptive deadlines (docs/robustness.md):
// each rule's body against written-out values, DiLoCo's outer step under each rule against
// a reference written out here, bit for bit; the mean unchanged by a worker's exclusion but
// for that worker's absence; the adaptive deadline against a recorded trace; bad options
// refused on every worker.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

using namespace trickle;

namespace {

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan_d = std::numeric_limits<double>::quiet_NaN();

// The engine itself (the handles hide snapshot() and the outer-step counters).
template <class Outer = outer::nesterov>
using engine = diloco_engine<Outer, topology::all_reduce, float, host_space, comm::local>;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The reference of each rule for rows d (one per participant) with weights w, written out
// from docs/robustness.md's definitions.
std::vector<float> reference(const aggregate::rule& rule, const std::vector<std::vector<float>>& d,
                             const std::vector<float>& w, std::vector<float>& center) {
    const std::size_t m = d.size(), n = d[0].size();
    std::vector<float> out(n);
    if (rule.kind == aggregate::kind::clip) {
        std::vector<double> s(m);
        for (std::size_t r = 0; r < m; ++r) {
            double q = 0;
            for (std::size_t k = 0; k < n; ++k) q += (double(d[r][k]) - center[k]) * (double(d[r][k]) - center[k]);
            const double dist = std::sqrt(q);
            s[r] = dist <= rule.tau ? 1.0f : float(rule.tau / dist);
        }
        double ws = 0;
        for (float x : w) ws += x;
        for (std::size_t k = 0; k < n; ++k) {
            double acc = 0;
            for (std::size_t r = 0; r < m; ++r) acc += double(w[r]) * s[r] * (double(d[r][k]) - center[k]);
            out[k] = float(center[k] + acc / ws);
        }
        center = out;
        return out;
    }
    for (std::size_t k = 0; k < n; ++k) {
        std::vector<std::pair<float, std::size_t>> v;
        for (std::size_t r = 0; r < m; ++r) v.emplace_back(d[r][k], r);
        std::sort(v.begin(), v.end()); // by value, ties by row
        if (rule.kind == aggregate::kind::median) {
            out[k] = m % 2 ? v[m / 2].first : float(0.5 * (double(v[m / 2 - 1].first) + double(v[m / 2].first)));
        } else {
            const std::size_t K = std::min<std::size_t>(rule.trim, (m - 1) / 2);
            double s = 0, ws = 0;
            for (std::size_t j = K; j < m - K; ++j) {
                s += double(w[v[j].second]) * v[j].first;
                ws += w[v[j].second];
            }
            out[k] = float(s / ws);
        }
    }
    return out;
}

// Worker r's outer gradient in round `round`: a spread of honest values, and worker 3 far
// off (the outlier every robust rule must resist).
float delta_of(int r, std::size_t k, int round) {
    if (r == 3) return 40.0f + float(k);
    return 0.01f * float(std::sin(0.7 * double(k) + 1.3 * r + 0.4 * round)) + 0.001f * float(r);
}

} // namespace

TEST_CASE("robust bodies: trimmed mean, median and clipped mean against written-out values") {
    // 5 rows, 2 coordinates; weights 1, 2, 1, 1, 1.
    const std::vector<float> r0{1.0f, 0.0f}, r1{2.0f, 4.0f}, r2{3.0f, 4.0f}, r3{100.0f, -8.0f}, r4{-50.0f, 2.0f};
    const float* rows[] = {r0.data(), r1.data(), r2.data(), r3.data(), r4.data()};
    const float w[] = {1.0f, 2.0f, 1.0f, 1.0f, 1.0f};
    const robust_rows in{rows, w, 5};
    float out[2];
    std::uint64_t counts[5] = {};
    trimmed_mean_body{in, 1, out, counts}.run(0, 2);
    // Coordinate 0: -50 and 100 dropped; (1 + 2*2 + 3) / 4 = 2. Coordinate 1: sorted -8, 0,
    // 2, 4 (row 1), 4 (row 2): -8 and row 2's 4 dropped; (0 + 2 + 2*4) / 4 = 2.5.
    CHECK(out[0] == 2.0f);
    CHECK(out[1] == 2.5f);
    CHECK(counts[0] == 0);
    CHECK(counts[1] == 0);
    CHECK(counts[2] == 1);
    CHECK(counts[3] == 2);
    CHECK(counts[4] == 1);
    median_body{in, out}.run(0, 2);
    CHECK(out[0] == 2.0f); // -50 1 2 3 100
    CHECK(out[1] == 2.0f); // -8 0 2 4 4
    // Even count: the mean of the middle two.
    median_body{robust_rows{rows, w, 4}, out}.run(0, 2);
    CHECK(out[0] == 2.5f);  // 1 2 3 100
    CHECK(out[1] == 2.0f);  // -8 0 4 4
    // Centered clipping around c = (0, 0) with tau = 5: row 3 (norm ~100.3) and row 4 (~50.04)
    // scaled to norm 5; the others (norms 1, ~4.47, 5) untouched.
    const float c[2] = {0.0f, 0.0f};
    float f[5];
    const float* const crow[] = {r0.data(), r1.data(), r2.data(), r3.data(), r4.data()};
    for (int r = 0; r < 5; ++r) f[r] = clip_factor(distance(crow[r], c, 2), 5.0);
    CHECK(f[0] == 1.0f);
    CHECK(f[1] == 1.0f);
    CHECK(f[2] == 1.0f);
    CHECK(f[3] == float(5.0 / std::sqrt(100.0 * 100.0 + 64.0)));
    CHECK(f[4] == float(5.0 / std::sqrt(2504.0)));
    clipped_mean_body{in, c, f, out}.run(0, 2);
    const double f3 = f[3], f4 = f[4];
    CHECK(out[0] == float((1.0 + 2 * 2.0 + 3.0 + f3 * 100.0 + f4 * -50.0) / 6.0));
    CHECK(out[1] == float((0.0 + 2 * 4.0 + 4.0 + f3 * -8.0 + f4 * 2.0) / 6.0));
}

TEST_CASE("aggregate::parse and name: the four rules, and bad text refused with the accepted forms") {
    CHECK(aggregate::parse("mean") == aggregate::mean());
    CHECK(aggregate::parse("median") == aggregate::median());
    CHECK(aggregate::parse("trimmed:2") == aggregate::trimmed(2));
    CHECK(aggregate::parse("clip:0.5") == aggregate::clip(0.5));
    for (const char* s : {"mean", "median", "trimmed:3", "clip:0.25"}) CHECK(aggregate::parse(s).name() == s);
    for (const char* bad : {"", "avg", "trimmed", "trimmed:0", "trimmed:-1", "trimmed:1.5", "clip:0", "clip:-2", "clip:x",
                            "clip:inf", "median:1"})
        CHECK_THROWS_WITH_AS(aggregate::parse(bad), doctest::Contains("expected mean, trimmed:K, median or clip:TAU"),
                             invalid_argument);
}

TEST_CASE("diloco robust rules: two outer steps match the written-out reference bit for bit on every worker") {
    const int N = 5;
    const std::size_t n = 37;
    for (const aggregate::rule rule : {aggregate::trimmed(1), aggregate::trimmed(2), aggregate::median(), aggregate::clip(0.05)}) {
        CAPTURE(rule.name());
        std::vector<std::vector<float>> params(N, std::vector<float>(n, 0.0f));
        std::vector<float> weights{1.0f, 2.0f, 1.0f, 3.0f, 1.0f};
        std::vector<aggregation_stats> st(N);
        std::vector<std::vector<float>> snap(N);
        comm::run_local(N, [&](comm::local& c) {
            const int r = c.rank();
            param_group<float> g;
            g.add("p", params[r].data(), n);
            engine<outer::sgd> d(g, c, {.interval = 2, .weight = weights[r], .aggregate = rule}, outer::sgd{.lr = 1.0});
            for (int round = 0; round < 2; ++round) {
                for (int t = 0; t < 2; ++t) {
                    if (t == 1) // the round's delta: snapshot - params = delta_of exactly (first round) or in float
                        for (std::size_t k = 0; k < n; ++k) params[r][k] = d.snapshot()[k] - delta_of(r, k, round);
                    d.step(exec::host{});
                }
            }
            st[r] = d.aggregation();
            snap[r] = d.snapshot();
        });
        // The reference: deltas as the worker computes them, the rule, then sgd(lr = 1).
        std::vector<float> s(n, 0.0f), center(n, 0.0f);
        for (int round = 0; round < 2; ++round) {
            std::vector<std::vector<float>> d(N, std::vector<float>(n));
            for (int r = 0; r < N; ++r)
                for (std::size_t k = 0; k < n; ++k) d[r][k] = s[k] - (s[k] - delta_of(r, k, round));
            const std::vector<float> agg = reference(rule, d, weights, center);
            for (std::size_t k = 0; k < n; ++k) s[k] = s[k] - agg[k];
        }
        for (int r = 0; r < N; ++r) {
            CHECK(same_bits(snap[r], s));
            CHECK(same_bits(params[r], s));
            CHECK(st[r].rule == rule.name());
            CHECK(st[r].rounds == 2);
            CHECK(st[r].excluded.empty());
            CHECK(st[r].distance.size() == N);
            // The outlier is the farthest from the aggregate, and named where the rule names.
            for (int q = 0; q < N; ++q)
                if (q != 3) CHECK(st[r].distance[3] > st[r].distance[q]);
            if (rule.kind == aggregate::kind::clip || rule.kind == aggregate::kind::trimmed)
                CHECK(std::find(st[r].clipped.begin(), st[r].clipped.end(), 3) != st[r].clipped.end());
            if (rule.kind == aggregate::kind::trimmed) CHECK(st[r].trimmed_fraction[3] == 1.0);
        }
        // Every worker saw the same statistics.
        for (int r = 1; r < N; ++r) {
            CHECK(st[r].norm == st[0].norm);
            CHECK(st[r].clipped == st[0].clipped);
        }
        // The robust rules keep the outlier's 40-sized delta out; the mean would not.
        for (std::size_t k = 0; k < n; ++k) CHECK(std::fabs(s[k]) < 1.0f);
    }
}

TEST_CASE("diloco: a worker with a non-finite outer gradient is excluded on every worker, named and counted") {
    const int N = 4;
    const std::size_t n = 23;
    for (const aggregate::rule rule : {aggregate::mean(), aggregate::median(), aggregate::trimmed(1)}) {
        CAPTURE(rule.name());
        // Run A: worker 2's parameters turn NaN; run B: worker 2 has weight 0 and finite ones.
        std::vector<float> snap_a, snap_b;
        std::vector<aggregation_stats> st(N);
        std::vector<std::vector<float>> after(N);
        for (int run = 0; run < 2; ++run) {
            std::vector<std::vector<float>> params(N, std::vector<float>(n, 0.25f));
            comm::run_local(N, [&](comm::local& c) {
                const int r = c.rank();
                param_group<float> g;
                g.add("p", params[r].data(), n);
                engine<> d(g, c, {.interval = 3, .aggregate = rule});
                for (int t = 0; t < 6; ++t) {
                    for (std::size_t k = 0; k < n; ++k) params[r][k] -= 0.01f * float(std::cos(double(k * (r + 1) + t)));
                    if (r == 2 && t == 5) {
                        if (run == 0)
                            params[r][7] = nan_f;
                        else
                            d.set_weight(0.0f);
                    }
                    d.step(exec::host{});
                }
                if (run == 0) {
                    st[r] = d.aggregation();
                    after[r] = params[r];
                }
                if (r == 0) (run == 0 ? snap_a : snap_b) = d.snapshot();
            });
        }
        CHECK(same_bits(snap_a, snap_b)); // the NaN worker counts as absent, nothing more
        for (int r = 0; r < N; ++r) {
            CHECK(st[r].excluded == std::vector<int>{2});
            CHECK(st[r].excluded_total == 1);
            CHECK(st[r].weights[2] == 0.0f);
            CHECK(std::isnan(st[r].norm[2]));
            CHECK(same_bits(after[r], snap_a)); // the NaN replica took the global model too
        }
    }
}

TEST_CASE("diloco: when every contribution is non-finite the round is skipped on every worker") {
    std::vector<std::vector<float>> params(2, std::vector<float>(9, 1.0f));
    comm::run_local(2, [&](comm::local& c) {
        const int r = c.rank();
        param_group<float> g;
        g.add("p", params[r].data(), 9);
        engine<> d(g, c, {.interval = 2});
        const std::vector<float> before = d.snapshot();
        d.step(exec::host{});
        params[r][r] = r == 0 ? nan_f : std::numeric_limits<float>::infinity();
        d.step(exec::host{});
        if (!same_bits(d.snapshot(), before)) throw std::logic_error("the snapshot moved");
        if (d.outer_steps_skipped() != 1 || d.outer_steps_applied() != 0) throw std::logic_error("skip count");
        if (d.aggregation().skipped != 1 || d.aggregation().excluded != std::vector<int>{0, 1})
            throw std::logic_error("exclusions");
    });
}

TEST_CASE("adaptive deadline: a recorded arrival trace gives the written-out sequence") {
    adaptive_deadline dl({.quantile = 0.5, .grace = 1.0, .floor = 10.0, .cap = 100.0, .initial = 50.0, .window = 2});
    CHECK(dl.current() == 50.0);
    // Nearest rank ceil(q M) over the last two rounds' arrivals (NaN left out, +inf kept).
    CHECK(dl.record({20, 30, 40, inf}) == 31.0);         // {20 30 40 inf}: 30, + 1
    CHECK(dl.record({25, 35, nan_d, 60}) == 36.0);       // {20 25 30 35 40 60 inf}: 35, + 1
    CHECK(dl.record({5, 5, 5, 5}) == 10.0);              // {5 5 5 5 25 35 60}: 5 + 1, raised to the floor
    CHECK(dl.record({inf, inf, inf, inf}) == 10.0);      // {5 5 5 5 inf inf inf inf}: 5 + 1 -> floor
    CHECK(dl.record({inf, inf, inf, inf}) == 100.0);     // all inf: the cap
    const deadline_stats& s = dl.stats();
    CHECK(s.history == std::vector<double>{50, 31, 36, 10, 10});
    CHECK(s.rounds == 5);
    CHECK(s.late == 1 + 2 + 0 + 4 + 4);
    CHECK(s.current == 100.0);
    // The state round-trips.
    adaptive_deadline copy({.quantile = 0.5, .grace = 1.0, .floor = 10.0, .cap = 100.0, .initial = 50.0, .window = 2});
    copy.set_state(dl.state());
    CHECK(copy.current() == 100.0);
    CHECK(copy.record({12, 13, 14, 15}) == dl.record({12, 13, 14, 15}));
    CHECK_THROWS_AS(copy.set_state({1.0, 2.0}), invalid_argument);
    // Bad options.
    CHECK_THROWS_WITH(adaptive_deadline({.floor = 5, .cap = 2}), doctest::Contains("cap (2) is below the floor (5)"));
    CHECK_THROWS_WITH(adaptive_deadline({.quantile = 0, .cap = 2}), doctest::Contains("quantile must be in (0, 1]"));
    CHECK_THROWS_WITH(adaptive_deadline({.quantile = 1.5, .cap = 2}), doctest::Contains("quantile must be in (0, 1]"));
    CHECK_THROWS_WITH(adaptive_deadline({.grace = -1, .cap = 2}), doctest::Contains("grace"));
    CHECK_THROWS_WITH(adaptive_deadline({.cap = 2, .window = 0}), doctest::Contains("window"));
    CHECK_THROWS_WITH(adaptive_deadline({.floor = 1, .cap = 2, .initial = 3}), doctest::Contains("initial (3)"));
}

TEST_CASE("diloco deadline: every worker computes the same deadlines from the reported arrivals; a checkpoint keeps them") {
    const int N = 3;
    const deadline_options o{.quantile = 0.5, .grace = 0.5, .floor = 1.0, .cap = 20.0, .window = 1};
    std::vector<std::vector<double>> seen(N);
    std::vector<std::string> saved(N);
    std::vector<std::vector<float>> params(N, std::vector<float>(5, 0.0f));
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        param_group<float> g;
        g.add("p", params[r].data(), 5);
        diloco<> d(g, c, {.manual_outer = true, .deadline = o});
        seen[r].push_back(d.deadline());
        for (int round = 0; round < 3; ++round) {
            params[r][0] += 0.1f;
            d.step(exec::host{});
            if (r != 1 || round != 1) d.report_arrival(2.0 + r + 3.0 * round); // worker 1 says nothing in round 1
            d.outer_step(exec::host{});
            seen[r].push_back(d.deadline());
        }
        if (d.deadlines().history != std::vector<double>(seen[r].begin(), seen[r].end() - 1))
            throw std::logic_error("history");
        std::ostringstream os;
        d.save(os);
        saved[r] = os.str();
    });
    // The reference: round k's arrivals {2 + 3k, 3 + 3k, 4 + 3k} (round 1 without worker 1),
    // median by nearest rank, + 0.5.
    adaptive_deadline ref(o);
    std::vector<double> want{ref.current()};
    want.push_back(ref.record({2, 3, 4}));
    want.push_back(ref.record({5, nan_d, 7}));
    want.push_back(ref.record({8, 9, 10}));
    CHECK(want == std::vector<double>{20, 3.5, 5.5, 9.5});
    for (int r = 0; r < N; ++r) CHECK(seen[r] == want);
    // A restored object continues with the saved deadline.
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        param_group<float> g;
        g.add("p", params[r].data(), 5);
        diloco<> d(g, c, {.broadcast_initial = false, .manual_outer = true, .deadline = o});
        std::istringstream is(saved[r]);
        d.load(is);
        if (d.deadline() != 9.5) throw std::logic_error("the deadline was not restored");
    });
}

TEST_CASE("diloco clip: the center is part of the checkpoint; a restored run continues bit for bit") {
    const int N = 3;
    const std::size_t n = 11;
    const auto train = [](std::vector<float>& p, int r, int t) {
        for (std::size_t k = 0; k < p.size(); ++k) p[k] -= 0.02f * float(std::sin(double(k + 3 * r + t)));
    };
    const diloco_options o{.interval = 2, .aggregate = aggregate::clip(0.01)};
    std::vector<std::vector<float>> full(N, std::vector<float>(n, 0.5f)), part(N, std::vector<float>(n, 0.5f));
    std::vector<std::string> saved(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        param_group<float> g;
        g.add("p", full[r].data(), n);
        diloco<> d(g, c, o);
        for (int t = 0; t < 8; ++t) {
            train(full[r], r, t);
            d.step(exec::host{});
        }
    });
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        param_group<float> g;
        g.add("p", part[r].data(), n);
        diloco<> d(g, c, o);
        for (int t = 0; t < 4; ++t) {
            train(part[r], r, t);
            d.step(exec::host{});
        }
        std::ostringstream os;
        d.save(os);
        saved[r] = os.str();
    });
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        param_group<float> g;
        g.add("p", part[r].data(), n);
        diloco_options o2 = o;
        o2.broadcast_initial = false;
        diloco<> d(g, c, o2);
        std::istringstream is(saved[r]);
        d.load(is);
        for (int t = 4; t < 8; ++t) {
            train(part[r], r, t);
            d.step(exec::host{});
        }
    });
    for (int r = 0; r < N; ++r) CHECK(same_bits(full[r], part[r]));
}

TEST_CASE("robust aggregation and deadlines: bad options are refused on every worker, changing nothing") {
    const auto expect = [](int N, auto make, const std::string& what) {
        std::vector<std::vector<float>> params(N, std::vector<float>(6, 0.5f));
        const auto errors = trickle_test::run_collect_errors(N, [&](comm::local& c) {
            param_group<float> g;
            g.add("a", params[c.rank()].data(), 3).add("b", params[c.rank()].data() + 3, 3);
            make(g, c);
        });
        for (int r = 0; r < N; ++r) {
            CHECK_MESSAGE(errors[r].find(what) != std::string::npos, errors[r]);
            CHECK(params[r] == std::vector<float>(6, 0.5f));
        }
    };
    using G = param_group<float>;
    expect(4, [](G& g, comm::local& c) { diloco<>(g, c, {.aggregate = aggregate::trimmed(2)}); },
           "the trim count must be below half the workers");
    expect(2, [](G& g, comm::local& c) { diloco<>(g, c, {.aggregate = aggregate::trimmed(1)}); },
           "the trim count must be below half the workers");
    expect(3, [](G& g, comm::local& c) { diloco<>(g, c, {.aggregate = aggregate::clip(-1.0)}); }, "radius tau");
    expect(3, [](G& g, comm::local& c) { diloco<outer::nesterov, topology::all_reduce, codec::int8_block>(g, c, {.aggregate = aggregate::median()}); },
           "cannot use an encoded all-reduce");
    expect(3, [](G& g, comm::local& c) { diloco<outer::nesterov, topology::ring>(g, c, {.aggregate = aggregate::median()}); },
           "all-reduce topology only");
    expect(3, [](G& g, comm::local& c) { diloco<>(g, c, {.fragments = 2, .aggregate = aggregate::median()}); },
           "does not combine with streaming");
    expect(3, [](G& g, comm::local& c) { diloco<>(g, c, {.aggregate = c.rank() == 2 ? aggregate::median() : aggregate::mean()}); },
           "aggregate");
    expect(2, [](G& g, comm::local& c) { diloco<>(g, c, {.deadline = {.cap = 10.0}}); }, "an adaptive deadline needs manual_outer");
    expect(2, [](G& g, comm::local& c) { diloco<>(g, c, {.manual_outer = true, .deadline = {.floor = 5.0, .cap = 2.0}}); },
           "cap (2) is below the floor (5)");
    expect(2, [](G& g, comm::local& c) {
        diloco<>(g, c, {.manual_outer = true, .deadline = {.cap = c.rank() == 0 ? 10.0 : 20.0}});
    }, "deadline_cap: rank 0 has 10, rank 1 has 20");
    // report_arrival: a local check.
    std::vector<float> p(4, 0.0f);
    comm::run_local(1, [&](comm::local& c) {
        param_group<float> g;
        g.add("p", p.data(), 4);
        diloco<> d(g, c, {.manual_outer = true, .deadline = {.cap = 5.0}});
        CHECK_THROWS_WITH(d.report_arrival(-1.0), doctest::Contains("must be >= 0"));
        CHECK_THROWS_WITH(d.report_arrival(nan_d), doctest::Contains("must be >= 0"));
        d.report_arrival(inf);
    });
}

TEST_CASE("sparta_diloco: its outer step takes the robust rule; the handle reports the aggregation") {
    const int N = 3;
    const std::size_t n = 40;
    std::vector<std::vector<float>> params(N, std::vector<float>(n, 0.0f));
    std::vector<aggregation_stats> st(N);
    comm::run_local(N, [&](comm::local& c) {
        const int r = c.rank();
        param_group<float> g;
        g.add("p", params[r].data(), n);
        any_algorithm a = sparta_diloco<>(g, c, {.fraction = 0.1}, {.interval = 4, .aggregate = aggregate::median()});
        for (int t = 0; t < 8; ++t) {
            for (std::size_t k = 0; k < n; ++k) params[r][k] += r == 1 ? 5.0f : 0.001f * float(k % 7);
            a.step(exec::host{});
        }
        st[r] = a.aggregation();
    });
    for (int r = 0; r < N; ++r) {
        CHECK(st[r].rule == "median");
        CHECK(st[r].rounds == 2);
        CHECK(st[r].norm == st[0].norm);
    }
}
