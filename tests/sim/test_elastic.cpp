// tests/sim/test_elastic.cpp: trickle-sim's elastic runs (--fail, --join, --min-workers) and workers at different speeds (--speeds, --round-policy).
#include "app.hpp"
#include "corpus.hpp"
#include "options.hpp"
#include "plan.hpp"
#include "sim_test_support.hpp"
#include "trainer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle_sim;

namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::string error_of(std::initializer_list<std::string> args) {
    try {
        parse_cli(std::vector<std::string>(args));
    } catch (const usage_error& e) {
        return e.what();
    }
    return "";
}

// A tiny DiLoCo (rounds of 10 steps) or SPARTA configuration.
sim_config tiny(int workers, int steps) {
    sim_config c = sim_test::tiny_config(workers, steps);
    c.outer_interval = 10;
    c.fraction = 0.05;
    return c;
}

run_result run(const sim_config& c, strategy_kind k) { return run_strategy(c, prepare_data(c), k); }

} // namespace

TEST_CASE("elastic cli: the options parse, with their defaults") {
    const std::vector<std::string> args{"--strategy", "diloco,sparta", "--workers", "4", "--steps", "300",
                                        "--fail", "1@10,2@20", "--join", "1@130,4@40", "--min-workers", "2",
                                        "--timeout-ms", "500"};
    const sim_config c = parse_cli(args);
    CHECK(c.fails == std::vector<membership_event>{{1, 10}, {2, 20}});
    CHECK(c.joins == std::vector<membership_event>{{1, 130}, {4, 40}});
    CHECK(c.min_workers == 2);
    CHECK(c.timeout_ms == 500);
    CHECK(elastic_run(c));
    CHECK_FALSE(timed_run(c));
    CHECK(world_capacity(c) == 5);
    const sim_config d = parse_cli(std::vector<std::string>{"--strategy", "diloco", "--workers", "3", "--speeds",
                                                            "1,0.5,0.25"});
    CHECK(d.speeds == std::vector<double>{1.0, 0.5, 0.25});
    CHECK(d.round_policy == round_policy_kind::deadline);
    CHECK(timed_run(d));
    CHECK_FALSE(elastic_run(d));
    const sim_config e = parse_cli(std::vector<std::string>{"--strategy", "diloco", "--workers", "2", "--speeds",
                                                            "1,1", "--round-policy", "wait", "--steps", "150"});
    CHECK(e.round_policy == round_policy_kind::wait);
    const sim_config plain = parse_cli(std::vector<std::string>{});
    CHECK_FALSE(round_trained(plain));
    CHECK(plain.timeout_ms == 2000);
    CHECK(plain.min_workers == 1);
}

TEST_CASE("elastic cli: bad input is an error that names the option") {
    struct bad {
        std::initializer_list<std::string> args;
        const char* must_contain;
    };
    const bad cases[] = {
        // Malformed values.
        {{"--strategy", "diloco", "--fail", "3"}, "--fail: expected W@STEP (a worker id and an inner step), got '3'"},
        {{"--strategy", "diloco", "--fail", "a@3"}, "--fail (worker): expected an integer, got 'a'"},
        {{"--strategy", "diloco", "--fail", "1@"}, "--fail (step): expected an integer"},
        {{"--strategy", "diloco", "--fail", "1@5,"}, "--fail: expected W@STEP"},
        {{"--strategy", "diloco", "--join", "-1@5"}, "--join (worker): must be in [0, 255], got '-1'"},
        {{"--strategy", "diloco", "--join", "300@5"}, "--join (worker): must be in [0, 255], got '300'"},
        {{"--strategy", "diloco", "--fail", "1@-5"}, "--fail (step): must be in [0, "},
        // W out of range, steps outside [0, steps).
        {{"--strategy", "diloco", "--fail", "4@10"}, "--fail 4@10: worker 4 is not in this run (--workers 4, and no --join brings it in)"},
        {{"--strategy", "diloco", "--fail", "1@2000"}, "--fail 1@2000: the step must be one of the run's inner steps, [0, 2000)"},
        {{"--strategy", "diloco", "--steps", "50", "--join", "4@50"}, "--join 4@50: the step must be one of the run's inner steps, [0, 50)"},
        {{"--strategy", "diloco", "--join", "5@10"}, "--join: a new worker takes the next free id after --workers 4 (4, 5, ...), so 4 must join before 5 can"},
        // A worker failing twice without a join in between; a join of a live worker.
        {{"--strategy", "diloco", "--fail", "1@10,1@20"}, "--fail 1@20: worker 1 is not alive at step 20 (it failed at step 10 and has not rejoined since)"},
        {{"--strategy", "diloco", "--fail", "1@10,1@10"}, "--fail 1@10: worker 1 is not alive at step 10"},
        {{"--strategy", "diloco", "--join", "2@10"}, "--join 2@10: worker 2 is alive at step 10; only a failed worker, or a new id, can join"},
        {{"--strategy", "diloco", "--fail", "2@50", "--join", "2@10"}, "--join 2@10: worker 2 is alive at step 10"},
        {{"--strategy", "diloco", "--fail", "2@5", "--join", "2@100,2@120"}, "--join 2@120: worker 2 is alive at step 120 (it rejoins at step 100)"},
        {{"--strategy", "diloco", "--fail", "2@5", "--join", "2@10"}, "--join 2@10: worker 2 fails at step 5 and leaves the view only at the round boundary at step 100; it can rejoin from step 100 on"},
        {{"--strategy", "sparta", "--fail", "2@5", "--join", "2@5"}, "--join 2@5: worker 2 fails at step 5 and leaves the view only at the round boundary at step 6; it can rejoin from step 6 on"},
        {{"--strategy", "diloco", "--join", "4@10", "--fail", "4@5"}, "--fail 4@5: worker 4 is not alive at step 5 (it has not joined yet)"},
        {{"--strategy", "diloco", "--fail", "2@5", "--join", "2@10", "--fail", "2@50"}, "--fail: given more than once"},
        {{"--strategy", "diloco", "--fail", "2@5,2@150", "--join", "2@100"}, "--fail 2@150: worker 2 joins at step 100 and is admitted only at the round boundary at step 200; it can fail from step 200 on"},
        {{"--strategy", "diloco", "--steps", "250", "--fail", "2@5", "--join", "2@210"}, "--join 2@210: it would be admitted at the first round boundary after step 210, step 300, which is past the end of training (--steps 250"},
        // Someone stays alive; a joiner has someone to take the state from.
        {{"--strategy", "diloco", "--workers", "1", "--fail", "0@10"}, "--fail 0@10: no worker is alive after it"},
        {{"--strategy", "diloco", "--workers", "2", "--fail", "0@10,1@20", "--join", "0@100"}, "--fail 1@20: no worker is alive after it"},
        {{"--strategy", "diloco", "--workers", "2", "--fail", "0@10,1@150", "--join", "0@120"}, "--fail 1@150: no worker is alive after it"},
        {{"--strategy", "diloco", "--workers", "1", "--fail", "0@99", "--join", "1@50"}, "--join 1@50: no member is alive at the round boundary at step 100 to hand it the state"},
        // Strategies, topologies, streaming and overlap.
        {{"--fail", "1@10"}, "--fail: applies to --strategy diloco, sparta and sparta-diloco (the elastic rounds of trickle's algorithms; ddp, none, demo and demo-shared have none, and streaming-diloco is refused over an elastic world), but --strategy is ddp,none,sparta,diloco,sparta-diloco"},
        {{"--strategy", "ddp", "--min-workers", "2"}, "--min-workers: applies to --strategy diloco, sparta and sparta-diloco"},
        {{"--strategy", "diloco,none", "--join", "4@10"}, "--join: applies to --strategy diloco, sparta and sparta-diloco"},
        {{"--strategy", "streaming-diloco", "--fail", "1@10"}, "but --strategy is streaming-diloco"},
        {{"--strategy", "sparta-diloco", "--overlap", "--fail", "1@10"}, "--fail: does not combine with --overlap"},
        {{"--strategy", "sparta-diloco", "--steps", "100", "--interval", "30", "--outer-interval", "70", "--fail", "1@10", "--join", "1@95"}, "--join 1@95: it would be admitted at the first round boundary after step 95, step 120, which is past the end of training (--steps 100; rounds every 30 and 70 steps)"},
        {{"--strategy", "diloco", "--topology", "ring", "--fail", "1@10"}, "--fail: needs --topology all-reduce (the other topologies fix their groups to the world's size), not ring"},
        {{"--strategy", "sparta", "--topology", "gossip", "--min-workers", "2"}, "--min-workers: needs --topology all-reduce"},
        {{"--strategy", "sparta", "--overlap", "--fail", "1@10"}, "--fail: does not combine with --overlap"},
        {{"--strategy", "diloco", "--fail", "1@10", "--network", "internet"}, "--network: with --speeds, --fail, --join or --min-workers it needs --step-time"},
        // --min-workers and --timeout-ms.
        {{"--strategy", "diloco", "--min-workers", "0"}, "--min-workers: must be in [1, 256], got '0'"},
        {{"--strategy", "diloco", "--min-workers", "5"}, "--min-workers: 5 is larger than the world (--workers 4)"},
        {{"--strategy", "diloco", "--fail", "1@10", "--timeout-ms", "0"}, "--timeout-ms: must be >= 1 (a dead peer must never hang the survivors), got '0'"},
        {{"--strategy", "diloco", "--fail", "1@10", "--timeout-ms", "-3"}, "--timeout-ms: must be in [1, "},
        {{"--strategy", "diloco", "--timeout-ms", "100"}, "--timeout-ms: applies to elastic runs (--fail, --join, --min-workers)"},
        // --speeds and --round-policy.
        {{"--strategy", "diloco", "--speeds", "1,0.5"}, "--speeds: gives 2 speed(s) for --workers 4 (one per worker)"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0"}, "--speeds: each speed must be in (0, 1] (1 = the fastest), got '0'"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,1.5"}, "--speeds: each speed must be in (0, 1] (1 = the fastest), got '1.5'"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,-0.5"}, "--speeds: each speed must be in (0, 1]"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,x"}, "--speeds: expected a finite number, got 'x'"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,"}, "--speeds: expected a finite number, got ''"},
        {{"--strategy", "sparta", "--workers", "2", "--speeds", "1,0.5"}, "--speeds: applies to --strategy diloco only (rounds at a deadline use DiLoCo's manual outer steps; every other strategy meets in lock step), but --strategy is sparta"},
        {{"--workers", "2", "--speeds", "1,0.5"}, "--speeds: applies to --strategy diloco only"},
        {{"--strategy", "diloco", "--round-policy", "wait"}, "--round-policy: applies with --speeds only"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,1", "--round-policy", "late"}, "--round-policy: expected one of deadline|wait|adaptive, got 'late'"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--steps", "150"}, "--round-policy deadline: --steps (150) must be a multiple of --outer-interval (100)"},
        // --speeds with --join: one speed per id, the new ones included.
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--join", "2@10"}, "--speeds: gives 2 speed(s) for 3 worker ids (--workers 2 and the 1 new id(s) --join brings in; one per id, in id order)"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5,0.5", "--fail", "1@10"}, "--speeds: gives 3 speed(s) for --workers 2 (one per worker)"},
        // --speeds and the elastic options with --network: --step-time.
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--network", "internet"}, "--network: with --speeds, --fail, --join or --min-workers it needs --step-time (a round's modelled time adds its communication to its compute, which must not depend on the measured compute)"},
        // Per-worker links.
        {{"--strategy", "diloco", "--network", "internet;2"}, "--network: expected a worker's own link as W=SPEC (e.g. 2=100Mbps,80ms or 2=internet), got '2'"},
        {{"--strategy", "diloco", "--network", "internet;x=datacenter"}, "--network (worker): expected an integer, got 'x'"},
        {{"--strategy", "diloco", "--network", "internet;300=datacenter"}, "--network (worker): must be in [0, 255], got '300'"},
        {{"--strategy", "diloco", "--network", "internet;1=fast"}, "--network: expected a preset (datacenter|cross-region|internet) or BANDWIDTH,LATENCY such as 1Gbps,50ms, got 'fast'"},
        {{"--strategy", "diloco", "--network", "internet;1=1Gbps,5"}, "--network: unknown unit '' of the latency (expected us|ms|s), got '1Gbps,5'"},
        {{"--strategy", "diloco", "--network", "internet;1=internet;1=datacenter"}, "--network: gives worker 1 a link twice, got 'internet;1=internet;1=datacenter'"},
        {{"--strategy", "diloco", "--network", "internet;"}, "--network: expected a worker's own link as W=SPEC"},
        {{"--strategy", "diloco", "--network", "internet;4=datacenter"}, "--network: internet;4=datacenter gives worker 4 a link, but it is not in this run (--workers 4)"},
        {{"--strategy", "diloco", "--workers", "2", "--join", "2@10", "--step-time", "1", "--network", "internet;3=datacenter"}, "gives worker 3 a link, but it is not in this run (--workers 2 and the new ids --join brings in: 3 ids in all)"},
        // --round-policy adaptive and --deadline.
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--steps", "150"}, "--round-policy adaptive: --steps (150) must be a multiple of --outer-interval (100)"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--deadline", "0.5,0,100,400"}, "--deadline: applies to --round-policy adaptive only (with --speeds)"},
        {{"--strategy", "diloco", "--deadline", "0.5,0,100,400"}, "--deadline: applies to --round-policy adaptive only"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--deadline", "0.5,0,300,200"}, "--deadline: CAP must be at least FLOOR, got '0.5,0,300,200'"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--deadline", "0,0,100,200"}, "--deadline: the quantile Q must be in (0, 1], got '0,0,100,200'"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--deadline", "1.5,0,100,200"}, "--deadline: the quantile Q must be in (0, 1]"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--deadline", "0.5,-1,100,200"}, "--deadline: GRACE must be >= 0"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--deadline", "0.5,0,-1,200"}, "--deadline: FLOOR must be >= 0"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--deadline", "0.5,0,0,0"}, "--deadline: CAP must be > 0"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--deadline", "0.5,0,100"}, "--deadline: expected Q,GRACE,FLOOR,CAP (four numbers), got '0.5,0,100'"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--deadline", "0.5,0,100,200,4"}, "--deadline: expected Q,GRACE,FLOOR,CAP (four numbers)"},
        {{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5", "--round-policy", "adaptive", "--deadline", "0.5,0,x,200"}, "--deadline: expected a finite number, got 'x'"},
        // The existing checks still hold.
        {{"--strategy", "sparta", "--topology", "gossip", "--workers", "1"}, "--topology gossip: needs at least 2 workers"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.must_contain);
        const std::string msg = error_of(c.args);
        CHECK_MESSAGE(msg.find(c.must_contain) != std::string::npos, "got: ", msg);
    }
    // Through run_cli: exit 2, one line on stderr, nothing trained.
    const std::vector<std::string> args{"--strategy", "diloco", "--fail", "1@10,1@20"};
    std::ostringstream out, err;
    CHECK(run_cli(args, out, err) == 2);
    CHECK(out.str().empty());
    CHECK(err.str() == "trickle-sim: --fail 1@20: worker 1 is not alive at step 20 (it failed at step 10 and has not "
                       "rejoined since)\n");
    // Echoed text keeps control bytes escaped.
    CHECK(error_of({"--strategy", "diloco", "--fail", "1\n@2"}).find("'1\\n'") != std::string::npos);
}

TEST_CASE("elastic cli: --help documents the new options") {
    std::ostringstream out, err;
    REQUIRE(run_cli(std::vector<std::string>{"--help"}, out, err) == 0);
    for (const char* opt : {"--fail", "--join", "--min-workers", "--timeout-ms", "--speeds", "--round-policy",
                            "deadline", "wait", "adaptive", "--deadline Q,GRACE,FLOOR,CAP", "'SPEC;W=SPEC;...'",
                            "live_workers,epoch,model_time,goodput"})
        CHECK_MESSAGE(out.str().find(opt) != std::string::npos, opt);
}

TEST_CASE("elastic plan: lives, members after each step, arrivals at each round") {
    std::string error;
    // 3 workers, rounds of 10: worker 1 dies before step 15 and rejoins at 27 (admitted at
    // 30); a new worker 3 is released at 30 (admitted at 40).
    const membership_plan p = make_membership_plan(3, 50, {10}, {{1, 15}}, {{1, 27}, {3, 30}}, error);
    REQUIRE(error.empty());
    CHECK(p.capacity == 4);
    REQUIRE(p.lives.size() == 5);
    CHECK(p.lives[1].fails);
    CHECK(p.lives[1].end == 15);
    CHECK(p.lives[3].id == 1);
    CHECK(p.lives[3].joiner);
    CHECK(p.lives[3].start == 27);
    CHECK(p.lives[3].admit == 30);
    CHECK(p.lives[4].id == 3);
    CHECK(p.lives[4].admit == 40);
    CHECK(p.alive_after(15).size() == 3);
    CHECK(p.alive_after(16).size() == 2);
    CHECK(p.alive_after(30).size() == 3);
    CHECK(p.alive_after(40).size() == 4);
    CHECK(p.round_arrivals(20) == 3); // worker 1 arrives after its failure
    CHECK(p.round_arrivals(30) == 2);
    CHECK(p.round_arrivals(40) == 3);
    CHECK(p.admitted_at(30) == std::vector<int>{3});
    CHECK(p.round_end_of(16) == 20);
    CHECK(p.round_end(20));
    CHECK_FALSE(p.round_end(25));
    // SPARTA + DiLoCo: exchanges every 4 steps, outer steps every 10; a joiner released
    // before step 9 is admitted at the round ending at tick 10.
    const membership_plan q = make_membership_plan(2, 40, {4, 10}, {{1, 2}}, {{1, 9}}, error);
    REQUIRE(error.empty());
    CHECK(q.round_end(8));
    CHECK_FALSE(q.round_end(9));
    CHECK(q.round_end(10));
    CHECK(q.round_end_of(9) == 10);
    CHECK(q.previous_round_end(10) == 8);
    CHECK(q.previous_round_end(12) == 10);
    CHECK(q.lives[2].admit == 10);
    CHECK(q.round_arrivals(4) == 2); // worker 1 dies in the first round
    CHECK(q.round_arrivals(8) == 1);
    CHECK(q.round_arrivals(12) == 2);
}

TEST_CASE("elastic runs: no events over comm::elastic_local, and --round-policy wait, give the lock-step numbers bit for bit") {
    for (auto kind : {strategy_kind::diloco, strategy_kind::sparta, strategy_kind::sparta_diloco}) {
        CAPTURE(name_of(kind));
        const sim_config plain = tiny(3, 30);
        sim_config el = plain;
        el.min_workers_given = true; // an elastic run without events
        const dataset data = prepare_data(plain);
        const run_result a = run_strategy(plain, data, kind);
        const run_result b = run_strategy(el, data, kind);
        REQUIRE(a.rows.size() == b.rows.size());
        for (std::size_t i = 0; i < a.rows.size(); ++i) {
            CHECK(same_bits(a.rows[i].eval_loss, b.rows[i].eval_loss));
            CHECK(same_bits(a.rows[i].train_loss, b.rows[i].train_loss));
            CHECK(same_bits(a.rows[i].correlation, b.rows[i].correlation));
            CHECK(b.rows[i].live_workers == 3);
            CHECK(b.rows[i].epoch == 0);
            CHECK(b.rows[i].goodput == 1.0);
        }
        for (std::size_t w = 0; w < 3; ++w) CHECK(bitwise_equal(a.replicas[w], b.replicas[w]));
        CHECK(b.final_ids == std::vector<int>{0, 1, 2});
        CHECK(b.membership.present);
        CHECK(b.membership.changes == 0);
        CHECK(b.membership.goodput == 1.0);
    }
    // --speeds with wait: every worker does every step, so the numbers are DiLoCo's; only
    // the modelled time stretches (the slowest worker sets every round's length).
    const sim_config plain = tiny(3, 30);
    sim_config wait = plain;
    wait.speeds = {1.0, 0.5, 0.25};
    wait.round_policy = round_policy_kind::wait;
    const dataset data = prepare_data(plain);
    const run_result a = run_strategy(plain, data, strategy_kind::diloco);
    const run_result b = run_strategy(wait, data, strategy_kind::diloco);
    REQUIRE(a.rows.size() == b.rows.size());
    for (std::size_t i = 0; i < a.rows.size(); ++i) {
        CHECK(same_bits(a.rows[i].eval_loss, b.rows[i].eval_loss));
        CHECK(b.rows[i].model_time == doctest::Approx(4.0 * a.rows[i].step));
    }
    CHECK(b.membership.goodput == doctest::Approx(0.25));
    CHECK(b.membership.rounds == "wait");
}

TEST_CASE("elastic runs: a run with --fail is reproducible bit for bit") {
    for (auto kind : {strategy_kind::diloco, strategy_kind::sparta, strategy_kind::sparta_diloco}) {
        CAPTURE(name_of(kind));
        sim_config c = tiny(4, 40);
        c.fails = {{2, 13}, {0, 25}};
        const dataset data = prepare_data(c);
        const run_result a = run_strategy(c, data, kind);
        const run_result b = run_strategy(c, data, kind);
        REQUIRE(!a.rows.empty());
        CHECK(same_bits(a.rows.back().eval_loss, b.rows.back().eval_loss));
        CHECK(a.final_ids == std::vector<int>{1, 3});
        REQUIRE(a.replicas.size() == b.replicas.size());
        for (std::size_t w = 0; w < a.replicas.size(); ++w) CHECK(bitwise_equal(a.replicas[w], b.replicas[w]));
        CHECK(a.rows.back().live_workers == 2);
        CHECK(a.membership.left == 2);
        CHECK(a.membership.epoch == 2);
    }
}

TEST_CASE("elastic runs: --fail W@0 gives the fixed world of the survivors on the same shards, bit for bit") {
    // The text is dealt into one shard per worker id, so a 3-worker run has other shards
    // than the survivors of a 4-worker run; the comparison is with the lock-step trainer
    // over 3 workers given shards 0..2 of the 4-way split (what the survivors train on).
    for (auto kind : {strategy_kind::diloco, strategy_kind::sparta, strategy_kind::sparta_diloco}) {
        CAPTURE(name_of(kind));
        sim_config four = tiny(4, 30);
        four.fails = {{3, 0}};
        const dataset data4 = prepare_data(four);
        const run_result e = run_strategy(four, data4, kind);
        sim_config three = tiny(3, 30);
        dataset data3 = data4;
        data3.shards.pop_back();
        const run_result f = run_strategy(three, data3, kind);
        REQUIRE(e.rows.size() == f.rows.size());
        for (std::size_t i = 0; i < e.rows.size(); ++i) {
            CHECK(same_bits(e.rows[i].eval_loss, f.rows[i].eval_loss));
            CHECK(same_bits(e.rows[i].correlation, f.rows[i].correlation));
        }
        REQUIRE(e.final_ids == std::vector<int>{0, 1, 2});
        for (std::size_t w = 0; w < 3; ++w) CHECK(bitwise_equal(e.replicas[w], f.replicas[w]));
        // It never did a step: nothing lost, and its time is zero.
        CHECK(e.membership.lost_steps == 0);
        CHECK(e.membership.goodput == 1.0);
    }
    // DiLoCo: any failure before the first outer step is the same (the survivors never saw
    // the failed worker's work).
    sim_config c = tiny(4, 30);
    c.fails = {{3, 7}};
    sim_config z = c;
    z.fails = {{3, 0}};
    const dataset data = prepare_data(c);
    const run_result a = run_strategy(c, data, strategy_kind::diloco);
    const run_result b = run_strategy(z, data, strategy_kind::diloco);
    CHECK(same_bits(a.rows.back().eval_loss, b.rows.back().eval_loss));
    CHECK(a.membership.lost_steps == 7);
}

TEST_CASE("elastic runs: failed workers rejoin and a new one joins; everyone is alive at the end and agrees") {
    sim_config c = tiny(4, 60);
    c.fails = {{1, 12}, {3, 18}};
    c.joins = {{1, 25}, {3, 31}, {4, 33}};
    c.timeout_ms = 30'000; // no round may wait for it: the run below takes far less
    const dataset data = prepare_data(c);
    CHECK(data.shards.size() == 5);
    const run_result r = run_strategy(c, data, strategy_kind::diloco);
    CHECK(r.final_ids == std::vector<int>{0, 1, 2, 3, 4});
    REQUIRE(r.replicas.size() == 5);
    for (const auto& rep : r.replicas) CHECK(bitwise_equal(rep, r.replicas[0])); // the last step ends a round
    CHECK(r.rows.back().live_workers == 5);
    CHECK(r.rows.back().correlation == 1.0);
    CHECK(std::isfinite(r.rows.back().eval_loss));
    CHECK(r.rows.back().eval_loss < r.rows.front().eval_loss);
    CHECK(r.wall_s < 20.0);
    const membership_summary& m = r.membership;
    CHECK(m.joined == 3);
    CHECK(m.left == 2);
    CHECK(m.changes == 3); // drops at 20 (1 and 3 together), admissions at 30 (1) and 40 (3 and 4)
    CHECK(m.epoch == 3);
    CHECK(m.state_bytes > 3 * r.parameters * sizeof(float));
    CHECK(m.rounds_retried == 0);
    CHECK(m.rounds_below_quorum == 0);
    // Goodput by hand (rounds of 10): worker 1 loses steps 10-11, worker 3 steps 10-17.
    // Time: 0, 2: 60 each; 1: 12 + (60 - 25); 3: 18 + (60 - 31); 4: 60 - 33.
    // Useful: 0, 2: 60 each; 1: 10 + 30 (from 30); 3: 10 + 20 (from 40); 4: 20 (from 40).
    CHECK(m.lost_steps == 2 + 8);
    CHECK(m.worker_time == 120 + 47 + 47 + 27);
    CHECK(m.useful_steps == 120 + 40 + 30 + 20);
    CHECK(m.goodput == doctest::Approx(210.0 / 241.0));
    CHECK(m.model_time == 60);
    // The joined workers took part from their admission: epochs in the rows.
    for (const auto& row : r.rows) {
        CAPTURE(row.step);
        CHECK(row.live_workers == (row.step < 20 ? 4 : row.step < 30 ? 2 : row.step < 40 ? 3 : 5));
    }
    // Reproducible.
    const run_result again = run_strategy(c, data, strategy_kind::diloco);
    CHECK(same_bits(again.rows.back().eval_loss, r.rows.back().eval_loss));

    // SPARTA: a worker fails and rejoins; all alive at the end, reproducible.
    sim_config s = tiny(3, 30);
    s.fails = {{0, 5}};
    s.joins = {{0, 11}};
    const run_result sp = run(s, strategy_kind::sparta);
    CHECK(sp.final_ids == std::vector<int>{0, 1, 2});
    CHECK(sp.membership.joined == 1);
    const run_result sp2 = run(s, strategy_kind::sparta);
    CHECK(same_bits(sp.rows.back().eval_loss, sp2.rows.back().eval_loss));

    // SPARTA + DiLoCo: the same events as DiLoCo above; after the last outer step everyone
    // agrees. Its joiners are admitted at the next step (a SPARTA exchange: at 26, 32 and
    // 34), so they do 34, 28 and 26 steps; its steps count at outer steps.
    const run_result sd = run_strategy(c, data, strategy_kind::sparta_diloco);
    CHECK(sd.final_ids == std::vector<int>{0, 1, 2, 3, 4});
    REQUIRE(sd.replicas.size() == 5);
    for (const auto& rep : sd.replicas) CHECK(bitwise_equal(rep, sd.replicas[0]));
    CHECK(sd.membership.joined == 3);
    CHECK(sd.membership.left == 2);
    CHECK(sd.membership.lost_steps == 10);
    CHECK(sd.membership.useful_steps == 120 + (10 + 34) + (10 + 28) + 26);
    CHECK(sd.membership.goodput == doctest::Approx(228.0 / 241.0));
    const run_result sd2 = run_strategy(c, data, strategy_kind::sparta_diloco);
    CHECK(same_bits(sd.rows.back().eval_loss, sd2.rows.back().eval_loss));
}

TEST_CASE("elastic runs: below --min-workers the rounds are skipped and their steps wait for the next round") {
    sim_config c = tiny(3, 50);
    c.min_workers = 3;
    c.min_workers_given = true;
    c.fails = {{2, 12}};
    c.joins = {{2, 21}};
    const run_result r = run(c, strategy_kind::diloco);
    CHECK(r.membership.rounds_below_quorum == 1); // the round at 20; 2 is back at 30
    CHECK(r.final_ids == std::vector<int>{0, 1, 2});
    // The survivors' steps of rounds 10-19 and 20-29 reach the model at 30: nothing lost
    // but worker 2's steps 10-11.
    CHECK(r.membership.lost_steps == 2);
    CHECK(r.membership.useful_steps == 100 + 10 + 20);
}

TEST_CASE("elastic runs: --speeds with deadline rounds has a higher goodput than waiting for the slowest") {
    sim_config c = tiny(4, 40);
    c.speeds = {1.0, 1.0, 0.5, 0.25};
    const dataset data = prepare_data(c);
    const run_result d = run_strategy(c, data, strategy_kind::diloco);
    c.round_policy = round_policy_kind::wait;
    const run_result w = run_strategy(c, data, strategy_kind::diloco);
    // Deadline: k = 10, 10, 5, 2 steps per round of 10 (floor(10 x 0.25) = 2): 27 of 40.
    CHECK(d.membership.goodput == doctest::Approx(27.0 / 40.0));
    CHECK(d.membership.model_time == 40);
    // Wait: every round waits 10 / 0.25 = 40 units for the slowest.
    CHECK(w.membership.goodput == doctest::Approx(0.25));
    CHECK(w.membership.model_time == 160);
    CHECK(d.membership.goodput > w.membership.goodput);
    CHECK(d.membership.rounds == "deadline");
    // After each deadline the replicas agree; both train.
    for (const auto& rep : d.replicas) CHECK(bitwise_equal(rep, d.replicas[0]));
    CHECK(d.rows.back().eval_loss < d.rows.front().eval_loss);
    // A speed below 1/H still does one step per round.
    sim_config slow = tiny(2, 20);
    slow.speeds = {1.0, 0.01};
    const run_result s = run(slow, strategy_kind::diloco);
    CHECK(s.membership.useful_steps == 2 * (10 + 1));
}

TEST_CASE("elastic runs: the CLI prints the membership table, and the CSV has the membership columns") {
    const sim_test::temp_file csv("elastic.csv");
    const std::vector<std::string> args{
        "--strategy", "diloco,sparta", "--workers", "3", "--steps", "30", "--eval-every", "10", "--batch", "4",
        "--context", "3", "--embed", "3", "--hidden", "8", "--layers", "1", "--corpus-chars", "20000",
        "--eval-size", "64", "--fraction", "0.05", "--outer-interval", "10", "--fail", "1@12", "--join", "1@21",
        "--quiet", "--csv", csv.path()};
    std::ostringstream out, err;
    REQUIRE(run_cli(args, out, err) == 0);
    CHECK(err.str().empty());
    CHECK(out.str().find("elastic: comm::elastic_local, 3 worker id(s), failures 1@12, joins 1@21") != std::string::npos);
    CHECK(out.str().find("membership and goodput") != std::string::npos);
    std::ifstream in(csv.path());
    std::string line;
    REQUIRE(std::getline(in, line));
    CHECK(line == std::string(csv_header) + ",live_workers,epoch,model_time,goodput");
    int rows = 0;
    while (std::getline(in, line)) {
        ++rows;
        CHECK(std::count(line.begin(), line.end(), ',') == 14);
    }
    CHECK(rows == 6);
    // A plain run keeps the old columns.
    const sim_test::temp_file plain("plain.csv");
    const std::vector<std::string> pargs{"--strategy", "diloco", "--workers", "2", "--steps", "10", "--batch", "4",
                                         "--context", "3", "--embed", "3", "--hidden", "8", "--layers", "1",
                                         "--corpus-chars", "20000", "--eval-size", "64", "--quiet", "--csv", plain.path()};
    std::ostringstream o2, e2;
    REQUIRE(run_cli(pargs, o2, e2) == 0);
    std::ifstream pin(plain.path());
    REQUIRE(std::getline(pin, line));
    CHECK(line == csv_header);
    CHECK(o2.str().find("membership and goodput") == std::string::npos);
}

TEST_CASE("elastic runs: the progress line names the members and the epoch") {
    struct recorder final : step_observer {
        std::vector<int> workers;
        std::vector<std::uint64_t> epochs;
        int steps = 0;
        void on_membership(int w, std::uint64_t e) override {
            workers.push_back(w);
            epochs.push_back(e);
        }
        void on_step(int, double) override { ++steps; }
    } rec;
    sim_config c = tiny(3, 30);
    c.fails = {{0, 12}}; // the reporter changes when worker 0 dies
    run_strategy(c, prepare_data(c), strategy_kind::diloco, &rec);
    CHECK(rec.steps == 30);
    REQUIRE(rec.workers.size() == 30);
    CHECK(rec.workers.front() == 3);
    CHECK(rec.workers.back() == 2);
    CHECK(rec.epochs.front() == 0);
    CHECK(rec.epochs.back() == 1);
}

TEST_CASE("elastic cli: --speeds with joins, --deadline and per-worker --network links parse") {
    const sim_config c = parse_cli(std::vector<std::string>{
        "--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5,0.25", "--fail", "1@10", "--join", "1@100,2@100",
        "--steps", "300", "--round-policy", "adaptive", "--network", "internet;2=100Mbps,80ms;0=datacenter",
        "--step-time", "5"});
    CHECK(c.speeds == std::vector<double>{1.0, 0.5, 0.25});
    CHECK(c.round_policy == round_policy_kind::adaptive);
    // The defaults: 0.75, 0, H, 4H.
    CHECK(c.deadline_quantile == 0.75);
    CHECK(c.deadline_grace == 0);
    CHECK(c.deadline_floor == 100);
    CHECK(c.deadline_cap == 400);
    REQUIRE(c.networks.size() == 1);
    const network_config& net = c.networks[0];
    CHECK(net.label == "internet;2=100Mbps,80ms;0=datacenter");
    REQUIRE(net.links.size() == 2);
    CHECK(net.links[0].worker == 0);
    CHECK(net.links[1].worker == 2);
    CHECK(net.link_of(2).bandwidth_bytes_per_s == 100e6 / 8);
    CHECK(net.link_of(2).latency_s == doctest::Approx(0.08));
    CHECK(net.link_of(1).bandwidth_bytes_per_s == 1e9 / 8);
    CHECK(net.link_of(0).latency_s == doctest::Approx(10e-6));
    // The slowest link among workers 0..N-1: the least bandwidth, the most latency.
    CHECK(net.slowest(2).bandwidth_bytes_per_s == 1e9 / 8);
    CHECK(net.slowest(3).bandwidth_bytes_per_s == 100e6 / 8);
    CHECK(net.slowest(3).latency_s == doctest::Approx(0.08));
    const sim_config d = parse_cli(std::vector<std::string>{"--strategy", "diloco", "--workers", "2", "--speeds", "1,0.5",
                                                            "--round-policy", "adaptive", "--deadline", "0.5,2,10,30"});
    CHECK(d.deadline_quantile == 0.5);
    CHECK(d.deadline_grace == 2);
    CHECK(d.deadline_floor == 10);
    CHECK(d.deadline_cap == 30);
    // Without an override --network is what it was; its CSV column names a link's override plainly.
    const sim_config e = parse_cli(std::vector<std::string>{"--strategy", "diloco", "--network", "1Gbps,50ms+internet;1=1Mbps,1ms"});
    REQUIRE(e.networks.size() == 2);
    CHECK(e.networks[0].label == "1Gbps,50ms");
    CHECK(e.networks[0].links.empty());
    CHECK(network_column(e.networks[1]) == "sim_wall_s_internet_1_1Mbps_1ms");
}

TEST_CASE("elastic runs: --speeds with a failure and a rejoin is deterministic, and its goodput counts the lost work") {
    sim_config c = tiny(3, 40);
    c.speeds = {1.0, 0.5, 0.25};
    c.fails = {{1, 12}};
    c.joins = {{1, 21}}; // admitted at the round boundary at 30
    const dataset data = prepare_data(c);
    const run_result a = run_strategy(c, data, strategy_kind::diloco);
    const run_result b = run_strategy(c, data, strategy_kind::diloco);
    CHECK(a.final_ids == std::vector<int>{0, 1, 2});
    REQUIRE(a.replicas.size() == b.replicas.size());
    for (std::size_t w = 0; w < a.replicas.size(); ++w) CHECK(bitwise_equal(a.replicas[w], b.replicas[w]));
    REQUIRE(a.rows.size() == b.rows.size());
    for (std::size_t i = 0; i < a.rows.size(); ++i) {
        CHECK(same_bits(a.rows[i].eval_loss, b.rows[i].eval_loss));
        CHECK(same_bits(a.rows[i].goodput, b.rows[i].goodput));
    }
    // Worker 0 (speed 1): 10 steps a round; worker 2 (0.25): 2; worker 1 (0.5): 5 in the
    // first round, 1 of the second lost at its failure before tick 13, then 5 in the round
    // after its admission at 30.
    CHECK(a.membership.lost_steps == 1);
    CHECK(a.membership.useful_steps == 40 + 8 + 5 + 5);
    // Lives: 40 + 12 + 40 + the rejoined one from its release at 21.
    CHECK(a.membership.worker_time == 40 + 12 + 40 + 19);
    CHECK(a.membership.goodput == doctest::Approx(58.0 / 111.0));
    CHECK(a.membership.goodput > 0);
    CHECK(a.membership.goodput <= 1);
    CHECK(a.membership.model_time == 40);
    CHECK(a.membership.round_times == std::vector<double>{10, 10, 10, 10});
    for (const auto& rep : a.replicas) CHECK(bitwise_equal(rep, a.replicas[0]));
    // wait: every round waits for the slowest of its workers (0.25 throughout).
    c.round_policy = round_policy_kind::wait;
    const run_result w = run_strategy(c, data, strategy_kind::diloco);
    CHECK(w.membership.model_time == 160);
    CHECK(w.final_ids == std::vector<int>{0, 1, 2});
    CHECK(w.membership.goodput > 0);
    CHECK(w.membership.goodput <= 1);
    // A new id joins at its own speed; without the slowest worker the rounds are shorter.
    sim_config j = tiny(2, 40);
    j.speeds = {1.0, 0.25, 0.5};
    j.fails = {{1, 5}};
    j.joins = {{2, 5}}; // admitted at 10
    j.round_policy = round_policy_kind::wait;
    const run_result r = run(j, strategy_kind::diloco);
    CHECK(r.final_ids == std::vector<int>{0, 2});
    CHECK(r.membership.round_times == std::vector<double>{40, 20, 20, 20});
    CHECK(r.membership.model_time == 100);
}

TEST_CASE("elastic runs: --speeds with --network adds each round's communication over the slowest link") {
    sim_config c = tiny(2, 20);
    c.speeds = {1.0, 0.5};
    c.step_time_s = 0.001;
    c.networks = {parse_cli(std::vector<std::string>{"--network", "1Mbps,0ms"}).networks[0]};
    const dataset data = prepare_data(c);
    const run_result a = run_strategy(c, data, strategy_kind::diloco);
    const run_result b = run_strategy(c, data, strategy_kind::diloco);
    // Two outer steps, each moving the same bytes: their time at 125 kB/s, in steps of 1 ms.
    const double bytes = static_cast<double>(std::max(a.bytes_sent[0], a.bytes_sent[1]));
    REQUIRE(bytes > 0);
    const double comm_steps = bytes / 125e3 / 0.001;
    CHECK(a.membership.model_time == doctest::Approx(20 + comm_steps));
    REQUIRE(a.membership.round_times.size() == 2);
    CHECK(a.membership.round_times[0] == doctest::Approx(10 + comm_steps / 2));
    CHECK(a.membership.round_times[1] == doctest::Approx(10 + comm_steps / 2));
    CHECK(same_bits(a.membership.model_time, b.membership.model_time));
    CHECK(same_bits(a.membership.goodput, b.membership.goodput));
    // Idle time while communicating: the goodput drops below the network-free run's 15/20.
    CHECK(a.membership.goodput == doctest::Approx(30.0 / (2 * (20 + comm_steps))));
    // The modelled wall time in the CSV's sim_wall_s: compute at --step-time plus the communication.
    REQUIRE(a.rows.back().sim_wall_s.size() == 1);
    CHECK(a.rows.back().sim_wall_s[0] == doctest::Approx(20 * 0.001 + bytes / 125e3));
    CHECK(a.rows.back().step_compute_s == 0.001);
    // Worker 1 on a link half as fast: every collective runs at its pace.
    sim_config slow = c;
    slow.networks = {parse_cli(std::vector<std::string>{"--network", "1Mbps,0ms;1=0.5Mbps,0ms"}).networks[0]};
    const run_result s = run_strategy(slow, data, strategy_kind::diloco);
    CHECK(s.membership.model_time == doctest::Approx(20 + 2 * comm_steps));
    // ... and a faster own link changes nothing (the other link is still the slowest).
    sim_config fast = c;
    fast.networks = {parse_cli(std::vector<std::string>{"--network", "1Mbps,0ms;1=1Gbps,0ms"}).networks[0]};
    CHECK(run_strategy(fast, data, strategy_kind::diloco).membership.model_time == doctest::Approx(20 + comm_steps));
    // Latency: per operation, per message round (2 workers: 2 rounds of the all-reduce).
    sim_config lat = c;
    lat.networks = {parse_cli(std::vector<std::string>{"--network", "1Mbps,1ms"}).networks[0]};
    const run_result l = run_strategy(lat, data, strategy_kind::diloco);
    CHECK(l.membership.model_time > a.membership.model_time + 2 * 2 * 1.0 - 1e-9);
    // An elastic run without --speeds: its rounds add their communication too.
    sim_config el = tiny(3, 30);
    el.fails = {{1, 12}};
    el.step_time_s = 0.001;
    el.networks = c.networks;
    const run_result e = run(el, strategy_kind::diloco);
    CHECK(e.membership.model_time > 30);
    CHECK(e.final_ids == std::vector<int>{0, 2});
    CHECK(e.membership.lost_steps == 2);
}

TEST_CASE("elastic runs: --round-policy adaptive closes each round at the library's deadline") {
    sim_config c = tiny(4, 40);
    c.speeds = {1.0, 1.0, 0.5, 0.25};
    c.round_policy = round_policy_kind::adaptive;
    c.deadline_quantile = 0.75;
    c.deadline_floor = 10;
    c.deadline_cap = 40;
    const dataset data = prepare_data(c);
    const run_result a = run_strategy(c, data, strategy_kind::diloco);
    // The first round waits up to the cap (40): everyone does its 10 steps. Arrivals 10, 10,
    // 20, 40: the 0.75-quantile is 20, so every later round lasts 20 and the slowest worker
    // does 5 of its 10 (late each time).
    CHECK(a.membership.adaptive);
    CHECK(a.membership.deadlines == std::vector<double>{40, 20, 20, 20});
    CHECK(a.membership.late_arrivals == 3);
    CHECK(a.membership.round_times == std::vector<double>{40, 20, 20, 20});
    CHECK(a.membership.model_time == 100);
    CHECK(a.membership.useful_steps == 40 + 3 * 35);
    CHECK(a.membership.worker_time == 400);
    CHECK(a.membership.goodput == doctest::Approx(145.0 / 400.0));
    CHECK(a.membership.rounds == "adaptive");
    for (const auto& rep : a.replicas) CHECK(bitwise_equal(rep, a.replicas[0]));
    CHECK(a.rows.back().eval_loss < a.rows.front().eval_loss);
    // The median follows the fast workers: from the second round on, the deadline policy's rounds.
    c.deadline_quantile = 0.5;
    const run_result m = run_strategy(c, data, strategy_kind::diloco);
    CHECK(m.membership.deadlines == std::vector<double>{40, 10, 10, 10});
    CHECK(m.membership.useful_steps == 40 + 3 * 27);
    // With a failure and a rejoin, the joiner takes the deadline with the state; deterministic.
    sim_config e = c;
    e.fails = {{2, 12}};
    e.joins = {{2, 21}};
    const run_result x = run_strategy(e, data, strategy_kind::diloco);
    const run_result y = run_strategy(e, data, strategy_kind::diloco);
    CHECK(x.final_ids == std::vector<int>{0, 1, 2, 3});
    CHECK(same_bits(x.membership.goodput, y.membership.goodput));
    CHECK(x.membership.goodput > 0);
    CHECK(x.membership.goodput <= 1);
    for (std::size_t w = 0; w < x.replicas.size(); ++w) CHECK(bitwise_equal(x.replicas[w], y.replicas[w]));
}

TEST_CASE("elastic runs: the CLI reports the adaptive deadlines") {
    const std::vector<std::string> args{
        "--strategy", "diloco", "--workers", "3", "--steps", "30", "--eval-every", "10", "--batch", "4",
        "--context", "3", "--embed", "3", "--hidden", "8", "--layers", "1", "--corpus-chars", "20000",
        "--eval-size", "64", "--outer-interval", "10", "--speeds", "1,1,0.5", "--round-policy", "adaptive",
        "--deadline", "0.5,0,10,20", "--quiet"};
    std::ostringstream out, err;
    REQUIRE(run_cli(args, out, err) == 0);
    CHECK(err.str().empty());
    CHECK(out.str().find("speeds: 1 1 0.5, rounds adaptive") != std::string::npos);
    // Deadlines 20 (the cap), then the median arrival, 10; the 0.5 worker is late twice.
    CHECK_MESSAGE(out.str().find("diloco: adaptive deadline over 3 rounds: mean 13.33 (min 10.00, max 20.00, last "
                                 "10.00) speed-1 steps; late arrivals 2") != std::string::npos,
                  out.str());
}
