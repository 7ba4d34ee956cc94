// tests/sim/test_byzantine.cpp: --aggregate and --byzantine: the corruptions, the command line, and short runs under each rule.
#include "app.hpp"
#include "byzantine.hpp"
#include "corpus.hpp"
#include "options.hpp"
#include "sim_test_support.hpp"
#include "trainer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle_sim;

namespace {

std::string error_of(std::initializer_list<std::string> args) {
    try {
        parse_cli(std::vector<std::string>(args));
    } catch (const usage_error& e) {
        return e.what();
    }
    return "";
}

byzantine_spec spec_of(const std::string& kind, int worker = 0) {
    byzantine_spec s;
    s.worker = worker;
    REQUIRE(parse_byzantine_kind(kind, s).empty());
    return s;
}

// DiLoCo with rounds of 10 steps on a tiny model.
sim_config tiny(int workers, int steps) {
    sim_config c = sim_test::tiny_config(workers, steps);
    c.outer_interval = 10;
    c.strategies = {strategy_kind::diloco};
    return c;
}

run_result run(const sim_config& c) { return run_strategy(c, prepare_data(c), c.strategies.front()); }

} // namespace

TEST_CASE("byzantine: the kinds parse, print back, and bad ones say why") {
    CHECK(spec_of("scale:-4").kind == byzantine_kind::scale);
    CHECK(spec_of("scale:-4").factor == -4.0);
    CHECK(spec_of("sign").kind == byzantine_kind::sign);
    CHECK(spec_of("noise:0.5").factor == 0.5);
    CHECK(spec_of("stale:3").lag == 3);
    CHECK(spec_of("nan").kind == byzantine_kind::nan);
    for (const char* k : {"scale:-4", "scale:10", "sign", "noise:0.5", "stale:3", "nan"})
        CHECK(byzantine_kind_name(spec_of(k)) == k);
    struct bad {
        const char* kind;
        const char* why;
    };
    for (const bad b : {bad{"flip", "unknown kind"}, bad{"scale", "scale needs a finite factor"},
                        bad{"scale:x", "scale needs a finite factor"}, bad{"scale:inf", "scale needs a finite factor"},
                        bad{"noise:0", "noise needs a standard deviation S > 0"},
                        bad{"noise:-1", "noise needs a standard deviation S > 0"}, bad{"stale:0", "stale needs"},
                        bad{"stale:1.5", "stale needs"}, bad{"sign:2", "sign takes no value"},
                        bad{"nan:1", "nan takes no value"}, bad{"", "unknown kind"}}) {
        CAPTURE(b.kind);
        byzantine_spec s;
        CHECK(parse_byzantine_kind(b.kind, s).find(b.why) != std::string::npos);
    }
}

TEST_CASE("byzantine: corrupt_delta and rms against written-out values") {
    const std::vector<float> d{1.0f, -2.0f, 0.5f, 0.0f};
    std::vector<float> out(4);
    rng g(1);
    corrupt_delta(spec_of("scale:-4"), d, out, g);
    CHECK(out == std::vector<float>{-4.0f, 8.0f, -2.0f, 0.0f});
    corrupt_delta(spec_of("sign"), d, out, g);
    CHECK(out == std::vector<float>{-1.0f, 2.0f, -0.5f, -0.0f});
    corrupt_delta(spec_of("nan"), d, out, g);
    for (float x : out) CHECK(std::isnan(x));
    CHECK(rms(d) == doctest::Approx(std::sqrt((1.0 + 4.0 + 0.25) / 4.0)));
    CHECK(rms({}) == 0.0);

    // noise:S adds S x rms(d) standard normal noise: on a long constant d the sample mean
    // and deviation of d' - d are 0 and S x rms(d); the same stream gives the same draws.
    const std::vector<float> ones(20000, 0.5f);
    std::vector<float> a(ones.size()), b(ones.size());
    rng g1 = byzantine_noise_stream(42, 1, 3), g2 = byzantine_noise_stream(42, 1, 3);
    corrupt_delta(spec_of("noise:2"), ones, a, g1);
    corrupt_delta(spec_of("noise:2"), ones, b, g2);
    CHECK(a == b);
    double mean = 0, var = 0;
    for (float x : a) mean += x - 0.5;
    mean /= static_cast<double>(a.size());
    for (float x : a) var += (x - 0.5 - mean) * (x - 0.5 - mean);
    const double sd = std::sqrt(var / static_cast<double>(a.size()));
    CHECK(std::fabs(mean) < 0.03);
    CHECK(sd == doctest::Approx(2.0 * 0.5).epsilon(0.03));
    // Other workers and rounds draw other numbers.
    rng g3 = byzantine_noise_stream(42, 2, 3), g4 = byzantine_noise_stream(42, 1, 4);
    corrupt_delta(spec_of("noise:2"), ones, b, g3);
    CHECK(a != b);
    corrupt_delta(spec_of("noise:2"), ones, b, g4);
    CHECK(a != b);
}

TEST_CASE("byzantine: a worker sets params = round_start - d' from its own round start") {
    // scale:3 from the initial parameters, then from the parameters the outer step gave.
    byzantine_worker w(spec_of("scale:3"), 1, std::vector<float>{1.0f, 2.0f, 3.0f});
    std::vector<float> p{0.5f, 2.5f, 3.0f}; // d = (0.5, -0.5, 0)
    w.before_outer(p);
    CHECK(p == std::vector<float>{-0.5f, 3.5f, 3.0f});
    w.after_outer(std::vector<float>{1.0f, 1.0f, 1.0f});
    p = {1.25f, 0.75f, 1.0f}; // d = (-0.25, 0.25, 0)
    w.before_outer(p);
    CHECK(p == std::vector<float>{1.75f, 0.25f, 1.0f});
    CHECK(w.rounds() == 2);

    // stale:2: zeros for two rounds (params back at the round start), then the honest
    // delta of two rounds earlier.
    byzantine_worker s(spec_of("stale:2"), 1, std::vector<float>{0.0f, 0.0f});
    const std::vector<std::vector<float>> honest{{1.0f, 0.0f}, {0.0f, 2.0f}, {4.0f, 4.0f}, {8.0f, 0.0f}};
    const std::vector<std::vector<float>> sent{{0.0f, 0.0f}, {0.0f, 0.0f}, {1.0f, 0.0f}, {0.0f, 2.0f}};
    for (std::size_t k = 0; k < honest.size(); ++k) {
        CAPTURE(k);
        std::vector<float> q{-honest[k][0], -honest[k][1]}; // round_start 0: d = -params
        s.before_outer(q);
        CHECK(q == std::vector<float>{-sent[k][0], -sent[k][1]});
        s.after_outer(std::vector<float>{0.0f, 0.0f});
    }
}

TEST_CASE("byzantine cli: --aggregate and --byzantine parse") {
    const std::vector<std::string> args{"--strategy", "diloco,sparta-diloco", "--workers", "5", "--aggregate",
                                        "trimmed:2", "--byzantine", "1:scale:-4,3:nan,0:stale:2,4:noise:0.5,2:sign"};
    const sim_config c = parse_cli(args);
    CHECK(c.aggregate == trickle::aggregate::trimmed(2));
    REQUIRE(c.byzantine.size() == 5);
    CHECK(c.byzantine[0] == byzantine_spec{1, byzantine_kind::scale, -4.0, 0});
    CHECK(c.byzantine[1].kind == byzantine_kind::nan);
    CHECK(c.byzantine[2] == byzantine_spec{0, byzantine_kind::stale, 0.0, 2});
    CHECK(c.byzantine[3] == byzantine_spec{4, byzantine_kind::noise, 0.5, 0});
    CHECK(c.byzantine[4].worker == 2);
    CHECK(parse_cli(std::vector<std::string>{"--strategy", "diloco"}).aggregate == trickle::aggregate::mean());
    for (const char* rule : {"mean", "median", "clip:0.5", "trimmed:1"})
        CHECK(parse_cli(std::vector<std::string>{"--strategy", "diloco", "--aggregate", rule}).aggregate.name() == rule);
    // With --speeds the corruption runs in the round trainer.
    CHECK(parse_cli(std::vector<std::string>{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--steps",
                                             "100", "--byzantine", "0:sign"})
              .byzantine.size() == 1);
}

TEST_CASE("byzantine cli: --help documents both options") {
    std::ostringstream out, err;
    REQUIRE(run_cli(std::vector<std::string>{"--help"}, out, err) == 0);
    for (const char* s : {"--aggregate RULE", "trimmed:K", "median", "clip:TAU", "--byzantine LIST", "scale:F", "sign",
                          "noise:S", "stale:K", "nan"})
        CHECK_MESSAGE(out.str().find(s) != std::string::npos, s);
}

TEST_CASE("byzantine cli: bad input is an error that names the option") {
    struct bad {
        std::initializer_list<std::string> args;
        const char* must_contain;
    };
    const bad cases[] = {
        {{"--strategy", "diloco", "--byzantine", "1:flip"}, "--byzantine: unknown kind (expected scale:F, sign, noise:S, stale:K or nan), got '1:flip'"},
        {{"--strategy", "diloco", "--byzantine", "1"}, "--byzantine: expected W:KIND"},
        {{"--strategy", "diloco", "--byzantine", "x:sign"}, "--byzantine (worker): expected an integer, got 'x'"},
        {{"--strategy", "diloco", "--byzantine", "1:scale:nan"}, "--byzantine: scale needs a finite factor"},
        {{"--strategy", "diloco", "--byzantine", "1:noise:0"}, "--byzantine: noise needs a standard deviation S > 0"},
        {{"--strategy", "diloco", "--byzantine", "1:stale:0"}, "--byzantine: stale needs a number of rounds K"},
        {{"--strategy", "diloco", "--byzantine", "4:sign"}, "--byzantine: worker 4 is not among --workers 4 (ids 0..3)"},
        {{"--strategy", "diloco", "--byzantine", "-1:sign"}, "--byzantine (worker): must be in [0, 255]"},
        {{"--strategy", "diloco", "--byzantine", "1:sign,1:nan"}, "--byzantine: lists worker 1 twice"},
        {{"--strategy", "diloco", "--byzantine", "1:sign", "--byzantine", "2:sign"}, "--byzantine: given more than once"},
        {{"--strategy", "sparta", "--byzantine", "1:sign"}, "--byzantine: applies to --strategy diloco and sparta-diloco only"},
        {{"--strategy", "diloco,ddp", "--byzantine", "1:sign"}, "--byzantine: applies to --strategy diloco and sparta-diloco only (DiLoCo's outer step), but --strategy is diloco,ddp"},
        {{"--byzantine", "1:sign"}, "--byzantine: applies to --strategy diloco and sparta-diloco only"},
        {{"--strategy", "streaming-diloco", "--byzantine", "1:sign"}, "--byzantine: applies to --strategy diloco"},
        {{"--strategy", "diloco", "--byzantine", "1:sign", "--fail", "2@50"}, "--byzantine: does not combine with --fail"},
        {{"--strategy", "diloco", "--aggregate", "average"}, "--aggregate: 'average' is not a rule (expected mean, trimmed:K, median or clip:TAU)"},
        {{"--strategy", "diloco", "--aggregate", "trimmed:x"}, "--aggregate: 'trimmed:x' needs an integer K >= 1"},
        {{"--strategy", "diloco", "--aggregate", "trimmed:0"}, "--aggregate: 'trimmed:0' needs an integer K >= 1"},
        {{"--strategy", "diloco", "--aggregate", "clip:-1"}, "--aggregate: 'clip:-1' needs a radius TAU > 0"},
        {{"--strategy", "diloco", "--aggregate", ""}, "--aggregate: '' is not a rule"},
        {{"--strategy", "diloco", "--aggregate", "trimmed:4", "--workers", "8"}, "--aggregate trimmed:4: the trim count must be below half the workers (8 workers"},
        {{"--strategy", "diloco", "--aggregate", "trimmed:2", "--workers", "4"}, "--aggregate trimmed:2: the trim count must be below half the workers"},
        {{"--strategy", "sparta", "--aggregate", "median"}, "--aggregate: applies to --strategy diloco and sparta-diloco only"},
        {{"--aggregate", "mean"}, "--aggregate: applies to --strategy diloco and sparta-diloco only (DiLoCo's outer step), but --strategy is ddp,none,sparta,diloco,sparta-diloco"},
        {{"--strategy", "diloco", "--aggregate", "median", "--outer-codec", "int8"}, "--aggregate median: needs --outer-codec fp32 (the rule compares the contributions as sent), not int8"},
        {{"--strategy", "diloco", "--aggregate", "clip:1", "--topology", "ring"}, "--aggregate clip:1: needs --topology all_reduce (every worker's contribution on every worker), not ring"},
        {{"--strategy", "diloco", "--aggregate", "median", "--outer-topk", "8:2"}, "--aggregate median: does not combine with --outer-topk"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.must_contain);
        const std::string msg = error_of(c.args);
        CHECK_MESSAGE(msg.find(c.must_contain) != std::string::npos, "got: ", msg);
    }
    // Past the parser (a configuration built in code), the library's own refusal at
    // construction is an exception out of run_strategy, not a crash.
    sim_config c = tiny(4, 10);
    c.aggregate = trickle::aggregate::trimmed(2);
    CHECK_THROWS_WITH(run_strategy(c, prepare_data(c), strategy_kind::diloco),
                      doctest::Contains("the trim count must be below half the workers"));
    // Through run_cli: exit code 2 with the message, before any training.
    std::ostringstream out, err;
    CHECK(run_cli(std::vector<std::string>{"--strategy", "diloco", "--aggregate", "trimmed:4", "--workers", "8"}, out,
                  err) == 2);
    CHECK(out.str().empty());
    CHECK(err.str().find("trickle-sim: --aggregate trimmed:4: the trim count must be below half") != std::string::npos);
}

TEST_CASE("byzantine runs: scale:50 ruins the mean; median and trimmed:1 stay close to honest") {
    sim_config c = tiny(5, 40);
    const dataset data = prepare_data(c);
    const double honest = run_strategy(c, data, strategy_kind::diloco).rows.back().eval_loss;
    c.byzantine = {spec_of("scale:50", 1)};
    const run_result mean = run_strategy(c, data, strategy_kind::diloco);
    c.aggregate = trickle::aggregate::median();
    const run_result median = run_strategy(c, data, strategy_kind::diloco);
    c.aggregate = trickle::aggregate::trimmed(1);
    const run_result trimmed = run_strategy(c, data, strategy_kind::diloco);
    MESSAGE("honest ", honest, ", scale:50 under mean ", mean.rows.back().eval_loss, ", median ",
            median.rows.back().eval_loss, ", trimmed:1 ", trimmed.rows.back().eval_loss);
    // Loose comparisons: the attacked mean is far off (or diverged), the robust rules near honest.
    const double bad = mean.rows.back().eval_loss;
    CHECK((!std::isfinite(bad) || bad > honest + 0.5));
    CHECK(std::fabs(median.rows.back().eval_loss - honest) < 0.15);
    CHECK(std::fabs(trimmed.rows.back().eval_loss - honest) < 0.15);
    // The statistics: 4 rounds; the byzantine worker's delta is ~50 times the others'.
    for (const run_result* r : {&mean, &median, &trimmed}) {
        CHECK(r->aggregation.rounds == 4);
        REQUIRE(r->aggregation.norm.size() == 5);
    }
    CHECK(median.aggregation.rule == "median");
    CHECK(trimmed.aggregation.rule == "trimmed:1");
    const auto& n = median.aggregation.norm;
    CHECK(n[1] > 10 * n[0]);
    CHECK(trimmed.aggregation.clipped_total > 0); // worker 1 trimmed in most coordinates
}

TEST_CASE("byzantine runs: a nan worker is excluded in every round; the run stays finite") {
    for (const auto rule : {trickle::aggregate::mean(), trickle::aggregate::median()}) {
        CAPTURE(rule.name());
        sim_config c = tiny(3, 30);
        c.aggregate = rule;
        c.byzantine = {spec_of("nan", 2)};
        const run_result r = run(c);
        for (const auto& row : r.rows) CHECK(std::isfinite(row.eval_loss));
        CHECK(r.rows.back().eval_loss < r.rows.front().eval_loss);
        CHECK(r.aggregation.rounds == 3);
        CHECK(r.aggregation.excluded_total == 3);
        CHECK(r.aggregation.excluded == std::vector<int>{2});
        for (const auto& rep : r.replicas)
            for (float x : rep) REQUIRE(std::isfinite(x));
    }
}

TEST_CASE("byzantine runs: the corruption applies at the outer steps of --speeds rounds and of sparta-diloco") {
    sim_config c = tiny(3, 20);
    c.speeds = {1.0, 0.5, 1.0};
    c.byzantine = {spec_of("nan", 1)};
    const run_result d = run(c);
    CHECK(d.aggregation.rounds == 2);
    CHECK(d.aggregation.excluded_total == 2);
    CHECK(std::isfinite(d.rows.back().eval_loss));
    c.round_policy = round_policy_kind::wait;
    const run_result w = run(c);
    CHECK(w.aggregation.excluded_total == 2);
    CHECK(std::isfinite(w.rows.back().eval_loss));

    sim_config s = tiny(3, 20);
    s.strategies = {strategy_kind::sparta_diloco};
    s.fraction = 0.05;
    const run_result honest = run(s);
    s.byzantine = {spec_of("sign", 0)};
    const run_result sd = run(s);
    CHECK(sd.aggregation.rounds == 2);
    REQUIRE(sd.aggregation.norm.size() == 3);
    CHECK(std::isfinite(sd.rows.back().eval_loss));
    CHECK(sd.rows.back().eval_loss != honest.rows.back().eval_loss);
}

TEST_CASE("byzantine runs: without the options the output has no aggregation section; mean is today's bits") {
    sim_config c = tiny(3, 20);
    const dataset data = prepare_data(c);
    const run_result plain = run_strategy(c, data, strategy_kind::diloco);
    c.aggregate = trickle::aggregate::parse("mean");
    const run_result mean = run_strategy(c, data, strategy_kind::diloco);
    REQUIRE(plain.replicas.size() == mean.replicas.size());
    for (std::size_t w = 0; w < plain.replicas.size(); ++w) CHECK(plain.replicas[w] == mean.replicas[w]);

    const std::vector<std::string> base{"--strategy", "diloco", "--workers", "3", "--steps", "20", "--eval-every",
                                        "10", "--batch", "8", "--context", "4", "--embed", "4", "--hidden", "16",
                                        "--layers", "1", "--corpus-chars", "20000", "--eval-size", "256",
                                        "--outer-interval", "10", "--quiet"};
    std::ostringstream out, err;
    REQUIRE(run_cli(base, out, err) == 0);
    CHECK(out.str().find("aggregat") == std::string::npos);
    CHECK(out.str().find("byzantine") == std::string::npos);

    std::vector<std::string> attacked = base;
    for (const char* a : {"--aggregate", "median", "--byzantine", "1:scale:10"}) attacked.emplace_back(a);
    std::ostringstream out2, err2;
    REQUIRE(run_cli(attacked, out2, err2) == 0);
    const std::string text = out2.str();
    CHECK(text.find("outer nesterov lr 0.7 momentum 0.9, drop probability 0, prune 0, topology all_reduce, aggregate "
                    "median\n") != std::string::npos);
    CHECK(text.find("byzantine: worker 1 scale:10\n") != std::string::npos);
    CHECK(text.find("\naggregation (DiLoCo's outer steps") != std::string::npos);
    CHECK(text.find("\ndiloco                 median       2         0") != std::string::npos);
}
