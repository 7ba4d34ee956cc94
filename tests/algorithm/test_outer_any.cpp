// outer::any, the outer optimizer chosen at run time (trickle/outer/any.hpp): for every
// registered optimizer, with and without an lr schedule, diloco<outer::any> holding it is
// the optimizer itself: the same parameters bit for bit, the same byte counts and the
// same checkpoint bytes, over every way the route runs the outer step (fused into a
// codec's passes, plain with pruning, a robust rule, streaming fragments in flight); its
// checkpoints load into the concrete optimizer's engine and back; bad names, fields and
// schedules are refused as the concrete optimizers refuse them.
#include <trickle/trickle.hpp>

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle;

namespace {

// Worker r's "inner training": parameter i moves by drift(r, i, t) at inner step t.
float drift(int r, std::size_t i, int t) {
    return 0.01f * static_cast<float>(std::sin(0.13 * static_cast<double>(i) * (r + 1) + 0.29 * t));
}

struct replica {
    std::vector<float> a, b;
    param_group<float> group;
    explicit replica(int r) : a(83), b(29) {
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.5f + 0.001f * static_cast<float>(i) + 0.05f * r;
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = -0.25f + 0.002f * static_cast<float>(i);
        group.add("a", a.data(), a.size()).add("b", b.data(), b.size());
    }
    void train(int r, int t) {
        for (std::size_t i = 0; i < a.size(); ++i) a[i] += drift(r, i, t);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] += drift(r, i + a.size(), t);
    }
};

struct outcome {
    std::vector<replica> m;
    std::vector<std::string> checkpoints;
    std::vector<exchange_stats> stats;
};

constexpr int workers = 3;

// `steps` inner steps of diloco<Opt, topology::all_reduce, Codec> on every worker, from
// fresh replicas or from `load` (a resumed run); each worker's checkpoint at the end.
template <class Opt, class Codec = codec::fp32>
outcome run(const Opt& opt, const diloco_options& options, int steps, const std::vector<std::string>* load = nullptr,
            int from = 0, Codec codec = {}) {
    outcome out;
    for (int r = 0; r < workers; ++r) out.m.emplace_back(r);
    out.checkpoints.resize(workers);
    out.stats.resize(workers);
    if (load) // the trainer restores its parameters: the first `from` steps again
        (void)run(opt, options, from, nullptr, 0, codec).m.swap(out.m);
    comm::run_local(workers, [&](comm::local& c) {
        const int r = c.rank();
        diloco_options o = options;
        o.broadcast_initial = load == nullptr;
        diloco<Opt, topology::all_reduce, Codec> d(out.m[r].group, c, o, opt, topology::all_reduce{}, codec);
        if (load) {
            std::istringstream is((*load)[r]);
            d.load(is);
        }
        for (int t = from; t < from + steps; ++t) {
            out.m[r].train(r, t);
            d.step(exec::host{});
        }
        std::ostringstream os;
        d.save(os);
        out.checkpoints[r] = os.str();
        out.stats[r] = d.stats();
    });
    return out;
}

void check_same_params(const outcome& x, const outcome& y) {
    for (int r = 0; r < workers; ++r) {
        CAPTURE(r);
        CHECK(trickle_test::bitwise_equal(x.m[r].a, y.m[r].a));
        CHECK(trickle_test::bitwise_equal(x.m[r].b, y.m[r].b));
    }
}

void check_same(const outcome& x, const outcome& y) {
    check_same_params(x, y);
    for (int r = 0; r < workers; ++r) {
        CAPTURE(r);
        CHECK(x.checkpoints[r] == y.checkpoints[r]);
        CHECK(x.stats[r].exchanges == y.stats[r].exchanges);
        CHECK(x.stats[r].values == y.stats[r].values);
        CHECK(x.stats[r].total.bytes_sent == y.stats[r].total.bytes_sent);
        CHECK(x.stats[r].total.bytes_received == y.stats[r].total.bytes_received);
        CHECK(x.stats[r].sent.codes == y.stats[r].sent.codes);
        CHECK(x.stats[r].sent.scales == y.stats[r].sent.scales);
    }
}

// Each registered optimizer with fields away from its defaults, as `visit(f)` hands them.
template <class F>
void for_each_optimizer(F&& f) {
    f(outer::sgd{.lr = 0.8});
    f(outer::momentum{.lr = 0.6, .momentum = 0.8});
    f(outer::nesterov{.lr = 0.7, .momentum = 0.85});
    f(outer::adam{.lr = 0.02, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6});
    f(outer::average{});
}

config_record record_of(const auto& p) {
    config_record rec("outer");
    p.describe(rec);
    return rec;
}

} // namespace

TEST_CASE("outer::any: holds each registered optimizer, with its name, state slots and configuration fields") {
    for_each_optimizer([](auto o) {
        using O = decltype(o);
        CAPTURE(std::string(O::name));
        const outer::any a = o;
        CHECK(std::string(a.held_name()) == O::name);
        CHECK(a.state_slot_count() == O::state_slots);
        CHECK(outer_state_floats(a, 1000) == outer_state_floats<O>(1000));
        CHECK(record_of(a).serialize() == record_of(o).serialize());
        // Its rule is the optimizer's own, for the same step: the same update of a
        // parameter and its state.
        const auto rule = a.prepare(3);
        bool same = false;
        rule.visit([&]<class R>(const R& r) {
            if constexpr (std::is_same_v<R, outer_rule_t<O>>) {
                const R want = o.prepare(3);
                float p[2] = {0.75f, 0.75f}, s[2][2] = {{0.5f, 0.25f}, {0.5f, 0.25f}};
                r.apply(p[0], 0.125f, s[0]);
                want.apply(p[1], 0.125f, s[1]);
                same = std::memcmp(&p[0], &p[1], sizeof(float)) == 0 && std::memcmp(s[0], s[1], sizeof s[0]) == 0;
            }
        });
        CHECK(same);
    });
    CHECK(std::string(outer::any{}.held_name()) == "nesterov"); // DiLoCo's default
    CHECK(record_of(outer::any{}).serialize() == record_of(outer::nesterov{}).serialize());
}

TEST_CASE("outer::any::named: every registered name with its fields; unknown names and bad schedules refused") {
    for (const std::string_view n : names_of<outer::registry>()) {
        CAPTURE(n);
        CHECK(std::string(outer::any::named(n, {}, std::nullopt).held_name()) == n);
    }
    const outer::any adam = outer::any::named("adam", {.lr = 0.3, .beta2 = 0.9}, std::nullopt);
    CHECK(record_of(adam).serialize() == record_of(outer::adam{.lr = 0.3, .beta2 = 0.9}).serialize());
    CHECK_THROWS_WITH_AS(outer::any::named("lion", {}, std::nullopt), doctest::Contains("nesterov"), invalid_argument);
    CHECK_THROWS_WITH_AS(outer::any::named("average", {}, schedule::any(schedule::cosine{.steps = 10})),
                         doctest::Contains("no learning rate"), invalid_argument);
    // A scheduled optimizer describes itself as lr_scheduled does.
    const outer::any cos = outer::any::named("nesterov", {.lr = 0.6}, schedule::any(schedule::cosine{.steps = 10}));
    const outer::lr_scheduled<outer::nesterov, schedule::cosine> direct{.optimizer = {.lr = 0.6}, .schedule = {.steps = 10}};
    CHECK(record_of(cos).serialize() == record_of(direct).serialize());
    // Bad fields are reported by describe() (collectively, at construction) and thrown by prepare().
    const outer::any bad = outer::any::named("sgd", {.lr = -1.0}, std::nullopt);
    CHECK(record_of(bad).error().find("lr must be finite and > 0") != std::string::npos);
    CHECK_THROWS_AS(bad.prepare(1), invalid_argument);
    CHECK_THROWS_AS(adam.prepare(0), invalid_argument);
}

TEST_CASE("diloco<outer::any>: the held optimizer's bits, bytes and checkpoints over every route") {
    const std::vector<std::pair<const char*, diloco_options>> routes = {
        {"summed, fused into the codec's passes", {.interval = 3, .seed = 11}},
        {"pruned, plain passes", {.interval = 3, .seed = 11, .prune_fraction = 0.25}},
        {"robust rule (trimmed mean)", {.interval = 3, .seed = 11, .aggregate = aggregate::trimmed(1)}},
        {"streaming fragments in flight", {.interval = 4, .seed = 11, .fragments = 2, .overlap_steps = 1}},
    };
    for (const auto& route : routes) {
        // (Named, not a structured binding: clang 14's lambdas cannot capture one.)
        const std::string what = route.first;
        const diloco_options& options = route.second;
        CAPTURE(what);
        for_each_optimizer([&](auto o) {
            CAPTURE(std::string(decltype(o)::name));
            check_same(run(o, options, 13), run(outer::any(o), options, 13));
        });
    }
    // Through a block codec (the fused host passes decode into the held rule, tile by tile).
    for_each_optimizer([&](auto o) {
        CAPTURE(std::string(decltype(o)::name));
        const diloco_options options{.interval = 2, .seed = 3};
        check_same(run(o, options, 9, nullptr, 0, codec::int8_block{}),
                   run(outer::any(o), options, 9, nullptr, 0, codec::int8_block{}));
    });
}

TEST_CASE("diloco<outer::any>: an lr schedule is lr_scheduled's, bit for bit") {
    const diloco_options options{.interval = 2, .seed = 4};
    const outer::lr_scheduled<outer::adam, schedule::cosine> direct{.optimizer = {.lr = 0.05},
                                                                    .schedule = {.end_fraction = 0.1, .steps = 5}};
    const outer::any chosen = outer::any::named("adam", {.lr = 0.05},
                                                schedule::any(schedule::cosine{.end_fraction = 0.1, .steps = 5}));
    check_same(run(direct, options, 14), run(chosen, options, 14));
}

TEST_CASE("diloco<outer::any>: checkpoints load into the concrete optimizer's engine and back; another optimizer's are refused") {
    const diloco_options options{.interval = 3, .seed = 9};
    const outer::adam adam{.lr = 0.03};
    const outcome whole = run(adam, options, 16);
    // Stop after 7 steps under one type, resume under the other: the same 16-step result.
    // (A resumed run's checkpoint differs from the whole run's only in its account: it made
    // no initial broadcast. The two resumed runs' checkpoints are the same bytes.)
    const outcome first_concrete = run(adam, options, 7);
    const outcome first_any = run(outer::any(adam), options, 7);
    CHECK(first_concrete.checkpoints == first_any.checkpoints);
    const outcome then_any = run(outer::any(adam), options, 9, &first_concrete.checkpoints, 7);
    const outcome then_concrete = run(adam, options, 9, &first_any.checkpoints, 7);
    check_same_params(whole, then_any);
    check_same(then_any, then_concrete);
    // An engine holding another optimizer refuses the checkpoint on every worker.
    CHECK_THROWS_WITH_AS(run(outer::any(outer::nesterov{}), options, 1, &first_any.checkpoints, 7),
                         doctest::Contains("different configuration"), trickle::error);
}

TEST_CASE("diloco<outer::any>: bad hyperparameters are refused on every worker, as the optimizers refuse them") {
    std::vector<replica> m;
    for (int r = 0; r < 2; ++r) m.emplace_back(r);
    const auto errors = trickle_test::run_collect_errors(2, [&](comm::local& c) {
        const double beta1 = c.rank() == 1 ? 1.0 : 0.9;
        diloco<outer::any>(m[c.rank()].group, c, {}, outer::any::named("adam", {.beta1 = beta1}, std::nullopt));
    });
    for (const auto& e : errors) CHECK_MESSAGE(e.find("rank 1: outer::adam: beta1 must be in [0, 1)") != std::string::npos, e);
    // Workers holding different optimizers disagree at construction.
    const auto mismatch = trickle_test::run_collect_errors(2, [&](comm::local& c) {
        diloco<outer::any>(m[c.rank()].group, c, {},
                           c.rank() == 0 ? outer::any(outer::nesterov{}) : outer::any(outer::momentum{}));
    });
    for (const auto& e : mismatch) CHECK_MESSAGE(e.find("outer") != std::string::npos, e);
}
