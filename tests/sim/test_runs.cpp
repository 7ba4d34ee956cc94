// tests/sim/test_runs.cpp: short simulated runs of every strategy: CSV, replica behaviour and byte counts.
#include "app.hpp"
#include "corpus.hpp"
#include "sim_test_support.hpp"
#include "trainer.hpp"

#include <doctest/doctest.h>

#include <trickle/trickle.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace trickle_sim;

namespace {

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string item;
    std::istringstream is(s);
    while (std::getline(is, item, sep)) out.push_back(item);
    if (!s.empty() && s.back() == sep) out.emplace_back();
    return out;
}

// Each worker's bytes for `exchanges` all-reduces of `count` floats.
std::uint64_t all_reduce_total(std::size_t count, int workers, int rank, std::uint64_t exchanges) {
    return exchanges * trickle::detail::all_reduce_bytes(count, sizeof(float), workers, rank);
}

// What a demo_engine over the model counts for `steps` steps under cfg, on each worker: built
// here as the library's tests build it, beside the simulator's exchanger (its bytes depend on
// the shapes and options only, so zero gradients send what training sends).
template <class Select>
std::vector<trickle::exchange_stats> demo_engine_stats(const sim_config& cfg, const dataset& data, int steps) {
    const mlp model(cfg.model, data.vocab());
    std::vector<trickle::exchange_stats> out(static_cast<std::size_t>(cfg.workers));
    trickle::comm::run_local(cfg.workers, [&](trickle::comm::local& comm) {
        std::vector<float> params(model.size()), grads(model.size(), 0.0f);
        model.init(params, cfg.seed);
        trickle::param_group<float> p, g;
        for (const auto& t : model.tensors()) {
            p.add(t.name, params.data() + t.offset, t.size());
            g.add(t.name, grads.data() + t.offset, t.size());
        }
        trickle::demo_engine<trickle::comm::local, Select, trickle::codec::any> engine(
            p, g, demo_shapes(model.tensors()), comm, make_demo_options(cfg), make_codec(cfg.demo_values, cfg.codec_block));
        for (int t = 0; t < steps; ++t) engine.step(trickle::exec::host{});
        out[static_cast<std::size_t>(comm.rank())] = engine.stats();
    });
    return out;
}

// What each worker sends for the reports a DiLoCo outer round begins with (an all-gather of
// 16 bytes per worker, whatever the topology: trickle/algorithm/stage/aggregate.hpp).
std::uint64_t reports(int workers) { return trickle::cost::outer_reports(workers); }

} // namespace

TEST_CASE("runs: each strategy completes and the CSV has exactly the documented columns") {
    const sim_test::temp_file csv("runs.csv");
    std::vector<std::string> args{"--strategy", "ddp,none,sparta,diloco,sparta-diloco", "--workers", "3", "--steps",
                                  "25", "--eval-every", "10", "--batch", "4", "--context", "3", "--embed", "3",
                                  "--hidden", "8", "--layers", "1", "--corpus-chars", "20000", "--eval-size", "64",
                                  "--fraction", "0.05", "--outer-interval", "5", "--quiet", "--csv", csv.path()};
    std::ostringstream out, err;
    REQUIRE(run_cli(args, out, err) == 0);
    CHECK(err.str().empty());
    // The comparison table names every strategy.
    for (const char* s : {"ddp", "none", "sparta", "diloco", "sparta-diloco"})
        CHECK(out.str().find(std::string("\n") + s + " ") != std::string::npos);

    std::ifstream in(csv.path());
    std::string line;
    REQUIRE(std::getline(in, line));
    CHECK(line == "strategy,step,eval_loss,eval_ppl,train_loss,correlation,bytes_sent_per_worker,reduction_vs_ddp,wall_s,"
                  "peak_bytes,sim_wall_s");
    std::vector<std::vector<std::string>> rows;
    while (std::getline(in, line)) rows.push_back(split(line, ','));
    REQUIRE(rows.size() == 15); // steps 10, 20 and 25 for each of five strategies
    const char* names[] = {"ddp", "none", "sparta", "diloco", "sparta-diloco"};
    const int steps[] = {10, 20, 25};
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        REQUIRE(r.size() == 11);
        CHECK(r[10] == "nan"); // no --network
        CHECK(r[0] == names[i / 3]);
        CHECK(std::stoi(r[1]) == steps[i % 3]);
        const double loss = std::stod(r[2]), ppl = std::stod(r[3]);
        CHECK(std::isfinite(loss));
        CHECK(ppl == doctest::Approx(std::exp(loss)).epsilon(1e-3));
        CHECK(std::isfinite(std::stod(r[4])));
        const double corr = std::stod(r[5]);
        CHECK((corr >= -1.0 && corr <= 1.0));
        if (i / 3 == 1)
            CHECK(std::stoull(r[6]) == 0);
        else
            CHECK(std::stoull(r[6]) > 0);
        CHECK(std::stod(r[8]) >= 0.0);
    }
    CHECK(rows[0][7] == "1.000");         // ddp against itself
    CHECK(rows[3][7] == "inf");           // none sends nothing
    CHECK(std::stod(rows[6][7]) > 10.0);  // sparta at 5%
    CHECK(std::stod(rows[9][7]) > 4.0);   // diloco every 5 steps
    CHECK(rows[9][5] == "1.000000");      // right after an outer step the replicas agree
}

TEST_CASE("runs: ddp keeps replicas bit-identical and counts the dense gradient all-reduce") {
    const sim_config cfg = sim_test::tiny_config(3, 30);
    const dataset data = prepare_data(cfg);
    const run_result r = run_strategy(cfg, data, strategy_kind::ddp);
    REQUIRE(r.replicas.size() == 3);
    for (const auto& rep : r.replicas) CHECK(bitwise_equal(rep, r.replicas[0]));
    for (int w = 0; w < 3; ++w)
        CHECK(r.bytes_sent[static_cast<std::size_t>(w)] == all_reduce_total(r.parameters, 3, w, 30));
    for (const auto& row : r.rows) {
        CHECK(row.correlation == 1.0);
        CHECK(row.bytes_sent_per_worker == r.ddp_bytes_per_step * static_cast<std::uint64_t>(row.step));
        CHECK(row.reduction_vs_ddp == 1.0);
    }
    // Training helped; the average of identical replicas is each of them.
    CHECK(r.rows.back().eval_loss < r.rows.front().eval_loss);
    for (double l : r.replica_eval_loss) CHECK(l == doctest::Approx(r.rows.back().eval_loss).epsilon(1e-9));
}

TEST_CASE("runs: none replicas diverge and send nothing") {
    const sim_config cfg = sim_test::tiny_config(3, 30);
    const dataset data = prepare_data(cfg);
    const run_result r = run_strategy(cfg, data, strategy_kind::none);
    CHECK_FALSE(bitwise_equal(r.replicas[0], r.replicas[1]));
    CHECK_FALSE(bitwise_equal(r.replicas[1], r.replicas[2]));
    for (auto b : r.bytes_sent) CHECK(b == 0);
    CHECK(r.rows.back().correlation < 0.95);
    CHECK(std::isinf(r.rows.back().reduction_vs_ddp));
}

TEST_CASE("runs: sparta's replica correlation rises over steps, above none's, for the bytes of round(p·n) values") {
    sim_config cfg = sim_test::tiny_config(3, 60);
    cfg.fraction = 0.1;
    const dataset data = prepare_data(cfg);
    const run_result none = run_strategy(cfg, data, strategy_kind::none);
    const run_result sp = run_strategy(cfg, data, strategy_kind::sparta);
    REQUIRE(sp.rows.size() == 6);
    CHECK(sp.rows.back().correlation > sp.rows.front().correlation + 0.05);
    for (std::size_t i = 1; i < sp.rows.size(); ++i) CHECK(sp.rows[i].correlation > none.rows[i].correlation);
    const std::size_t count = static_cast<std::size_t>(std::llround(0.1 * static_cast<double>(sp.parameters)));
    for (int w = 0; w < 3; ++w)
        CHECK(sp.bytes_sent[static_cast<std::size_t>(w)] == all_reduce_total(count, 3, w, 60));
    CHECK_FALSE(bitwise_equal(sp.replicas[0], sp.replicas[1]));
    CHECK(sp.rows.back().reduction_vs_ddp ==
          doctest::Approx(static_cast<double>(sp.ddp_bytes_per_step) * 60 / static_cast<double>(sp.rows.back().bytes_sent_per_worker)));
}

TEST_CASE("runs: sparta every H steps on a ring sends 2 neighbours' worth per exchange") {
    sim_config cfg = sim_test::tiny_config(4, 23);
    cfg.fraction = 0.02;
    cfg.interval = 5;
    cfg.topology = topology_kind::ring;
    const dataset data = prepare_data(cfg);
    const run_result r = run_strategy(cfg, data, strategy_kind::sparta);
    const std::size_t count = static_cast<std::size_t>(std::llround(0.02 * static_cast<double>(r.parameters)));
    for (auto b : r.bytes_sent) CHECK(b == 4 /* exchanges: steps 5, 10, 15, 20 */ * 2 * count * sizeof(float));
}

TEST_CASE("runs: sparta and diloco with the per-exchange topologies send what the topology says") {
    const int W = 5;
    for (auto top : {topology_kind::gossip, topology_kind::exponential, topology_kind::islands}) {
        CAPTURE(name_of(top));
        sim_config cfg = sim_test::tiny_config(W, 12);
        cfg.fraction = 0.02;
        cfg.outer_interval = 4;
        cfg.topology = top;
        cfg.island_size = 3;
        const dataset data = prepare_data(cfg);
        const run_result sp = run_strategy(cfg, data, strategy_kind::sparta);
        const run_result dl = run_strategy(cfg, data, strategy_kind::diloco);
        const std::size_t count = static_cast<std::size_t>(std::llround(0.02 * static_cast<double>(sp.parameters)));
        // Bytes one worker sends in exchange t of m floats (docs/policies.md).
        auto bytes = [&](int w, std::uint64_t seed, std::uint64_t t, std::size_t m) -> std::uint64_t {
            int peer = -1;
            if (top == topology_kind::gossip) peer = trickle::topology::gossip::partner(w, W, seed, t);
            if (top == topology_kind::exponential) peer = trickle::topology::exponential::partner(w, W, t);
            if (top != topology_kind::islands) return peer < 0 ? 0 : m * sizeof(float);
            const auto p = trickle::topology::islands{.size = 3}.place(w, W, seed, t);
            if (p.size == 1) return 0;
            return (p.index == 0 || p.index == p.size - 1 ? 1 : 2) * m * sizeof(float);
        };
        for (int w = 0; w < W; ++w) {
            std::uint64_t want_sp = 0, want_dl = 0;
            for (std::uint64_t t = 0; t < 12; ++t) want_sp += bytes(w, cfg.seed, t, count);
            for (std::uint64_t t = 0; t < 3; ++t) want_dl += bytes(w, cfg.seed, t, dl.parameters + 1) + reports(W);
            CHECK(sp.bytes_sent[static_cast<std::size_t>(w)] == want_sp);
            CHECK(dl.bytes_sent[static_cast<std::size_t>(w)] == want_dl);
        }
        CHECK(std::isfinite(sp.rows.back().eval_loss));
        CHECK(std::isfinite(dl.rows.back().eval_loss));
    }
}

TEST_CASE("runs: every sampler and fraction schedule runs through the dispatch and exchanges something") {
    for (auto sampler : {sampler_kind::uniform, sampler_kind::permutation, sampler_kind::block, sampler_kind::layerwise})
        for (auto schedule : {schedule_kind::constant, schedule_kind::linear, schedule_kind::cosine}) {
            CAPTURE(name_of(sampler));
            CAPTURE(name_of(schedule));
            sim_config cfg = sim_test::tiny_config(2, 6);
            cfg.eval_every = 6;
            cfg.fraction = 0.05;
            cfg.sampler = sampler;
            cfg.block_size = 16;
            cfg.fraction_schedule = schedule;
            cfg.fraction_end = schedule == schedule_kind::constant ? cfg.fraction : 0.01;
            const dataset data = prepare_data(cfg);
            const run_result r = run_strategy(cfg, data, strategy_kind::sparta);
            REQUIRE(r.rows.size() == 1);
            CHECK(r.rows[0].bytes_sent_per_worker > 0);
            CHECK(r.rows[0].bytes_sent_per_worker < r.ddp_bytes_per_step * 6 / 5);
        }
}

TEST_CASE("runs: one worker trains alone and reports no traffic for every strategy") {
    sim_config cfg = sim_test::tiny_config(1, 10);
    const dataset data = prepare_data(cfg);
    for (auto s : {strategy_kind::ddp, strategy_kind::none, strategy_kind::sparta, strategy_kind::demo,
                   strategy_kind::demo_shared}) {
        const run_result r = run_strategy(cfg, data, s);
        CHECK(r.rows.back().bytes_sent_per_worker == 0);
        CHECK(r.rows.back().correlation == 1.0);
    }
}

TEST_CASE("runs: identical configurations give identical results (threads do not change the numbers)") {
    const sim_config cfg = sim_test::tiny_config(3, 20);
    const dataset data = prepare_data(cfg);
    const run_result a = run_strategy(cfg, data, strategy_kind::sparta);
    const run_result b = run_strategy(cfg, data, strategy_kind::sparta);
    for (std::size_t w = 0; w < 3; ++w) CHECK(bitwise_equal(a.replicas[w], b.replicas[w]));
    CHECK(a.rows.back().eval_loss == b.rows.back().eval_loss);
    CHECK(a.rows.back().correlation == b.rows.back().correlation);
}

TEST_CASE("runs: diloco sends one all-reduce of n + 1 values per outer step and leaves replicas identical after it") {
    sim_config cfg = sim_test::tiny_config(3, 30);
    cfg.outer_interval = 10;
    const dataset data = prepare_data(cfg);
    const run_result r = run_strategy(cfg, data, strategy_kind::diloco);
    for (int w = 0; w < 3; ++w)
        CHECK(r.bytes_sent[static_cast<std::size_t>(w)] == all_reduce_total(r.parameters + 1, 3, w, 3) + 3 * reports(3));
    for (const auto& rep : r.replicas) CHECK(bitwise_equal(rep, r.replicas[0]));
    REQUIRE(r.rows.size() == 3);
    for (const auto& row : r.rows) CHECK(row.correlation == 1.0); // evaluations at 10, 20, 30 follow outer steps
    CHECK(r.rows.back().reduction_vs_ddp == doctest::Approx(10.0).epsilon(0.01));
    CHECK(r.rows.back().eval_loss < r.rows.front().eval_loss);

    // Between outer steps the replicas drift apart.
    cfg.eval_every = 5;
    const run_result mid = run_strategy(cfg, data, strategy_kind::diloco);
    CHECK(mid.rows[0].correlation < 1.0);
    CHECK(mid.rows[1].correlation == 1.0);
}

TEST_CASE("runs: diloco on a ring, with each outer optimizer, pruning and dropped contributions") {
    for (auto outer : {outer_kind::nesterov, outer_kind::sgd, outer_kind::momentum, outer_kind::adam, outer_kind::average}) {
        CAPTURE(name_of(outer));
        sim_config cfg = sim_test::tiny_config(4, 12);
        cfg.outer = outer;
        cfg.outer_lr = default_outer_lr(outer);
        cfg.outer_interval = 4;
        cfg.topology = topology_kind::ring;
        const dataset data = prepare_data(cfg);
        const run_result r = run_strategy(cfg, data, strategy_kind::diloco);
        // Ring: each worker sends its n + 1 values to both neighbours, 3 outer steps (and
        // the reports to every worker).
        for (auto b : r.bytes_sent) CHECK(b == 3 * (2 * (r.parameters + 1) * sizeof(float) + reports(4)));
        CHECK(std::isfinite(r.rows.back().eval_loss));
    }

    sim_config cfg = sim_test::tiny_config(3, 40);
    cfg.outer_interval = 2;
    cfg.drop_prob = 0.5;
    cfg.prune = 0.5;
    const dataset data = prepare_data(cfg);
    const run_result r = run_strategy(cfg, data, strategy_kind::diloco);
    // A round where every worker's contribution is dropped sends nothing; the others send
    // the whole (pruned values travel as zeros) n + 1 floats.
    std::uint64_t rounds = 0;
    for (std::uint64_t k = 0; k < 20; ++k) {
        bool any = false;
        for (int w = 0; w < 3; ++w) any = any || !trickle::detail::dropped_contribution(cfg.seed, 0.5, k, w);
        rounds += any;
    }
    CHECK(rounds < 20);
    for (int w = 0; w < 3; ++w)
        CHECK(r.bytes_sent[static_cast<std::size_t>(w)] == all_reduce_total(r.parameters + 1, 3, w, rounds) + rounds * reports(3));
    CHECK(std::isfinite(r.rows.back().eval_loss));
}

TEST_CASE("runs: an outer lr schedule changes the outer steps only as scheduled") {
    sim_config cfg = sim_test::tiny_config(3, 12);
    cfg.outer = outer_kind::sgd;
    cfg.outer_lr = 0.7;
    cfg.outer_interval = 4; // 3 outer steps, the last at the end of the run
    const dataset data = prepare_data(cfg);
    const run_result flat = run_strategy(cfg, data, strategy_kind::diloco);
    // A linear schedule to 1 x lr multiplies by exactly 1: the same bits as no schedule.
    cfg.outer_lr_schedule = schedule_kind::linear;
    cfg.outer_lr_end = 1.0;
    const run_result unit = run_strategy(cfg, data, strategy_kind::diloco);
    cfg.outer_lr_schedule = schedule_kind::cosine;
    cfg.outer_lr_end = 0.1;
    const run_result decayed = run_strategy(cfg, data, strategy_kind::diloco);
    for (std::size_t w = 0; w < 3; ++w) {
        CHECK(bitwise_equal(unit.replicas[w], flat.replicas[w]));
        CHECK_FALSE(bitwise_equal(decayed.replicas[w], flat.replicas[w]));
        CHECK(bitwise_equal(decayed.replicas[w], decayed.replicas[0])); // still one model after the outer step
        CHECK(decayed.bytes_sent[w] == flat.bytes_sent[w]);
    }
    // The combination takes the same schedule.
    const run_result both = run_strategy(cfg, data, strategy_kind::sparta_diloco);
    CHECK(std::isfinite(both.rows.back().eval_loss));
}

TEST_CASE("runs: sparta-diloco adds the sparse exchanges between outer steps to the outer steps' bytes") {
    sim_config cfg = sim_test::tiny_config(3, 30);
    cfg.fraction = 0.05;
    cfg.interval = 2;
    cfg.outer_interval = 10;
    const dataset data = prepare_data(cfg);
    const run_result r = run_strategy(cfg, data, strategy_kind::sparta_diloco);
    // Sparse exchanges after steps 2, 4, ..., 30 except those ending an outer round (10, 20, 30).
    const std::uint64_t sparse = 15 - 3;
    const std::size_t count = static_cast<std::size_t>(std::llround(0.05 * static_cast<double>(r.parameters)));
    for (int w = 0; w < 3; ++w)
        CHECK(r.bytes_sent[static_cast<std::size_t>(w)] ==
              all_reduce_total(count, 3, w, sparse) + all_reduce_total(r.parameters + 1, 3, w, 3) + 3 * reports(3));
    for (const auto& rep : r.replicas) CHECK(bitwise_equal(rep, r.replicas[0]));
}

TEST_CASE("runs: compressed exchanges keep replicas identical after outer steps and send the codec's bytes") {
    sim_config cfg = sim_test::tiny_config(3, 30);
    cfg.outer_interval = 10;
    const dataset data = prepare_data(cfg);
    const run_result plain = run_strategy(cfg, data, strategy_kind::diloco);
    cfg.outer_codec = codec_kind::int8;
    cfg.error_feedback = 1.0;
    const run_result int8 = run_strategy(cfg, data, strategy_kind::diloco);
    for (const auto& rep : int8.replicas) CHECK(bitwise_equal(rep, int8.replicas[0]));
    // Per outer step: two slots of the int8 encoding (68 bytes per 64 values) to each of the
    // 2 peers, and the weights' exact sum (a one-float all-reduce).
    for (int w = 0; w < 3; ++w) {
        const std::uint64_t slot =
            trickle::codec::reduce_scratch::slot_bytes(trickle::codec::int8_block{}, int8.parameters, 3);
        CHECK(int8.bytes_sent[static_cast<std::size_t>(w)] == 3 * (2 * 2 * slot + all_reduce_total(1, 3, w, 1) + reports(3)));
    }
    CHECK(static_cast<double>(int8.bytes_sent[0]) < 0.31 * static_cast<double>(plain.bytes_sent[0]));
    CHECK(int8.rows.back().eval_loss == doctest::Approx(plain.rows.back().eval_loss).epsilon(0.05));

    // Chunk top-k (2 of every 64, fp32 values) with feedback: identical replicas, far fewer bytes.
    cfg.outer_codec = codec_kind::fp32;
    cfg.topk_chunk = 64;
    cfg.topk_k = 2;
    const run_result topk = run_strategy(cfg, data, strategy_kind::diloco);
    for (const auto& rep : topk.replicas) CHECK(bitwise_equal(rep, topk.replicas[0]));
    CHECK(topk.bytes_sent[0] * 10 < plain.bytes_sent[0]);

    // SPARTA through bf16: half the bytes of fp32.
    sim_config s = sim_test::tiny_config(3, 20);
    const run_result sp = run_strategy(s, data, strategy_kind::sparta);
    s.codec = codec_kind::bf16;
    const run_result sb = run_strategy(s, data, strategy_kind::sparta);
    CHECK(static_cast<double>(sb.bytes_sent[0]) / static_cast<double>(sp.bytes_sent[0]) ==
          doctest::Approx(0.5).epsilon(0.02));
}

TEST_CASE("runs: --model gpt trains under sparta on 2 workers as the mlp does: loss falls, replicas stay correlated") {
    sim_config cfg = sim_test::tiny_config(2, 40);
    cfg.model = {.kind = model_kind::gpt, .context = 8, .layers = 1, .d_model = 16, .heads = 2};
    cfg.batch = 4;
    cfg.fraction = 0.1;
    cfg.clip = 1.0f;
    cfg.lr_schedule = schedule_kind::cosine;
    const dataset data = prepare_data(cfg);
    const run_result none = run_strategy(cfg, data, strategy_kind::none);
    const run_result sp = run_strategy(cfg, data, strategy_kind::sparta);
    const run_result ddp = run_strategy(cfg, data, strategy_kind::ddp);
    REQUIRE(sp.rows.size() == 4);
    CHECK(sp.parameters == gpt(cfg.model, data.vocab()).size());
    // The loss falls from near uniform (ln V) over the run.
    CHECK(sp.rows.front().eval_loss < std::log(static_cast<double>(data.vocab())));
    CHECK(sp.rows.back().eval_loss < sp.rows.front().eval_loss - 0.05);
    CHECK(sp.rows.back().train_loss < sp.rows.front().train_loss);
    // SPARTA keeps the replicas' changes more alike than independent training does, for
    // round(p·n) values per step, and the replicas are not identical.
    for (std::size_t i = 0; i < sp.rows.size(); ++i) CHECK(sp.rows[i].correlation > none.rows[i].correlation);
    const std::size_t count = static_cast<std::size_t>(std::llround(0.1 * static_cast<double>(sp.parameters)));
    for (int w = 0; w < 2; ++w)
        CHECK(sp.bytes_sent[static_cast<std::size_t>(w)] == all_reduce_total(count, 2, w, 40));
    CHECK_FALSE(bitwise_equal(sp.replicas[0], sp.replicas[1]));
    for (auto b : none.bytes_sent) CHECK(b == 0);
    // --threads 2 (an OpenMP team per worker) changes no bit of the run.
    sim_config threaded = cfg;
    threaded.threads = 2;
    const run_result sp2 = run_strategy(threaded, data, strategy_kind::sparta);
    CHECK(bitwise_equal(sp2.replicas[0], sp.replicas[0]));
    CHECK(bitwise_equal(sp2.replicas[1], sp.replicas[1]));
    // ddp: identical replicas (the clip sees the same averaged gradient on every worker).
    CHECK(bitwise_equal(ddp.replicas[0], ddp.replicas[1]));
    CHECK(ddp.bytes_sent[0] == all_reduce_total(ddp.parameters, 2, 0, 40));
}

TEST_CASE("runs: --model gpt runs diloco, sparta-diloco and the full command line") {
    sim_config cfg = sim_test::tiny_config(2, 20);
    cfg.model = {.kind = model_kind::gpt, .context = 8, .layers = 1, .d_model = 8, .heads = 2};
    cfg.batch = 2;
    cfg.outer_interval = 10;
    const dataset data = prepare_data(cfg);
    for (auto s : {strategy_kind::diloco, strategy_kind::sparta_diloco}) {
        const run_result r = run_strategy(cfg, data, s);
        // Right after an outer step (the last step is one) the replicas are identical.
        CHECK(bitwise_equal(r.replicas[0], r.replicas[1]));
        CHECK(r.rows.back().eval_loss < r.rows.front().eval_loss);
    }
    std::vector<std::string> args{"--model", "gpt", "--strategy", "ddp,sparta", "--workers", "2", "--steps", "6",
                                  "--eval-every", "3", "--context", "8", "--d-model", "8", "--heads", "2",
                                  "--layers", "1", "--corpus-chars", "20000", "--eval-size", "32", "--quiet"};
    std::ostringstream out, err;
    REQUIRE(run_cli(args, out, err) == 0);
    CHECK(err.str().empty());
    CHECK(out.str().find("model: gpt, context 8, layers 1, d_model 8, heads 2") != std::string::npos);
    CHECK(out.str().find("(cosine decay), gradient clip 1") != std::string::npos);
}

TEST_CASE("runs: streaming-diloco with one fragment and tau 0 is diloco, bit for bit") {
    sim_config cfg = sim_test::tiny_config(3, 30);
    cfg.outer_interval = 10;
    cfg.fragments = 1;
    cfg.overlap_steps = 0;
    const dataset data = prepare_data(cfg);
    const run_result plain = run_strategy(cfg, data, strategy_kind::diloco);
    const run_result stream = run_strategy(cfg, data, strategy_kind::streaming_diloco);
    for (std::size_t w = 0; w < 3; ++w) CHECK(bitwise_equal(plain.replicas[w], stream.replicas[w]));
    CHECK(plain.bytes_sent == stream.bytes_sent);
    CHECK(plain.rows.back().peak_bytes == stream.rows.back().peak_bytes);
}

TEST_CASE("runs: streaming-diloco over comm::async sends each fragment apart, so its peak op shrinks") {
    sim_config cfg = sim_test::tiny_config(3, 30);
    cfg.outer_interval = 10;
    cfg.fragments = 3; // tiny_config's MLP has 5 tensors: embedding, hidden weight and bias, output weight and bias
    cfg.overlap_steps = 2;
    const dataset data = prepare_data(cfg);
    const run_result plain = run_strategy(cfg, data, strategy_kind::diloco);
    const run_result a = run_strategy(cfg, data, strategy_kind::streaming_diloco);
    const run_result b = run_strategy(cfg, data, strategy_kind::streaming_diloco);
    // Deterministic through the progress thread.
    for (std::size_t w = 0; w < 3; ++w) CHECK(bitwise_equal(a.replicas[w], b.replicas[w]));
    // Every fragment's peak is below the whole model's.
    CHECK(a.rows.back().peak_bytes < plain.rows.back().peak_bytes);
    CHECK(a.rows.back().peak_bytes > 0);
    // The fragments overlapped: their operations are on the hidden side of the log, tau steps.
    CHECK(a.shape.hide_steps == 2);
    std::uint64_t hidden = 0, blocking = 0;
    for (const auto& e : a.traffic[0]) {
        hidden += e.hidden_ops;
        blocking += e.blocking_ops;
    }
    CHECK(hidden > 0);
    CHECK(blocking == 0);
    CHECK(std::isfinite(a.rows.back().eval_loss));
    CHECK(a.rows.back().eval_loss < a.rows.front().eval_loss + 0.5);
    // mix 1 keeps the local parameters: the replicas never agree.
    cfg.mix = 1.0;
    const run_result local = run_strategy(cfg, data, strategy_kind::streaming_diloco);
    CHECK(!bitwise_equal(local.replicas[0], local.replicas[1]));
}

TEST_CASE("runs: sparta --overlap sends what sparta sends and lands its last exchange") {
    sim_config cfg = sim_test::tiny_config(3, 20);
    cfg.fraction = 0.05;
    const dataset data = prepare_data(cfg);
    const run_result plain = run_strategy(cfg, data, strategy_kind::sparta);
    cfg.sparta_overlap = true;
    const run_result over = run_strategy(cfg, data, strategy_kind::sparta);
    // The same selections and counts: the same bytes, exchange for exchange.
    CHECK(over.bytes_sent == plain.bytes_sent);
    CHECK(over.rows.back().peak_bytes == plain.rows.back().peak_bytes);
    // One exchange per step, the last one landed by the final flush (blocking in the model).
    std::uint64_t ops = 0;
    for (const auto& e : over.traffic[0]) ops += e.hidden_ops + e.blocking_ops;
    CHECK(ops == 20);
    CHECK(over.traffic[0].front().step == 2); // step 1's exchange lands at step 2
    CHECK(over.traffic[0].back().blocking_ops == 1);
    CHECK(over.shape.hide_steps == 1);
    // Different rule, different bits, similar training.
    CHECK(!bitwise_equal(over.replicas[0], plain.replicas[0]));
    CHECK(over.rows.back().eval_loss == doctest::Approx(plain.rows.back().eval_loss).epsilon(0.05));
    // sparta-diloco with --overlap: outer steps still leave the replicas identical.
    sim_config sd = cfg;
    sd.outer_interval = 10;
    const run_result both = run_strategy(sd, data, strategy_kind::sparta_diloco);
    for (const auto& rep : both.replicas) CHECK(bitwise_equal(rep, both.replicas[0]));
}

TEST_CASE("runs: value codecs travel through gossip (and islands) and keep training") {
    sim_config cfg = sim_test::tiny_config(4, 30);
    cfg.outer_interval = 10;
    cfg.topology = topology_kind::gossip;
    const dataset data = prepare_data(cfg);
    const run_result plain = run_strategy(cfg, data, strategy_kind::diloco);
    cfg.outer_codec = codec_kind::int8;
    const run_result int8 = run_strategy(cfg, data, strategy_kind::diloco);
    // Fewer bytes than fp32 through the same topology, and still learning.
    CHECK(static_cast<double>(int8.bytes_sent[0]) < 0.5 * static_cast<double>(plain.bytes_sent[0]));
    CHECK(int8.bytes_sent[0] > 0);
    CHECK(int8.rows.back().eval_loss == doctest::Approx(plain.rows.back().eval_loss).epsilon(0.05));
    // SPARTA's values in bf16 through gossip: about half of fp32's bytes.
    sim_config s = sim_test::tiny_config(4, 20);
    s.fraction = 0.05;
    s.topology = topology_kind::gossip;
    const run_result sp = run_strategy(s, data, strategy_kind::sparta);
    s.codec = codec_kind::bf16;
    const run_result sb = run_strategy(s, data, strategy_kind::sparta);
    CHECK(static_cast<double>(sb.bytes_sent[0]) < 0.6 * static_cast<double>(sp.bytes_sent[0]));
    CHECK(sb.bytes_sent[0] > 0);
    s.topology = topology_kind::islands;
    const run_result si = run_strategy(s, data, strategy_kind::sparta);
    CHECK(si.bytes_sent[0] > 0);
}

TEST_CASE("runs: the network model's sim_wall_s is compute plus the busiest worker's exposed communication") {
    sim_config cfg = sim_test::tiny_config(4, 20);
    cfg.outer_interval = 10;
    cfg.eval_every = 10;
    cfg.step_time_s = 0.010;                      // 10 ms per step
    cfg.networks = {{"8Mbps,1ms", 1e6, 1e-3}, {"datacenter", 100e9 / 8, 10e-6}}; // 1 MB/s, 1 ms per round
    const dataset data = prepare_data(cfg);

    // diloco: two blocking all-reduces of n + 1 floats, 2 (N - 1) = 6 rounds each.
    const run_result d = run_strategy(cfg, data, strategy_kind::diloco);
    std::uint64_t busiest = 0;
    for (int w = 0; w < 4; ++w)
        busiest = std::max(busiest, trickle::detail::all_reduce_bytes(d.parameters + 1, sizeof(float), 4, w) + reports(4));
    REQUIRE(d.rows.size() == 2);
    const double op = 6 * 1e-3 + static_cast<double>(busiest) / 1e6;
    CHECK(d.rows[0].sim_wall_s[0] == doctest::Approx(10 * 0.010 + op).epsilon(1e-12));
    CHECK(d.rows[1].sim_wall_s[0] == doctest::Approx(20 * 0.010 + 2 * op).epsilon(1e-12));
    CHECK(d.rows[1].sim_wall_s[1] ==
          doctest::Approx(20 * 0.010 + 2 * (6 * 10e-6 + static_cast<double>(busiest) / (100e9 / 8))).epsilon(1e-12));
    CHECK(d.rows[1].step_compute_s == 0.010);

    // streaming-diloco, 2 fragments, tau 5: each fragment's all-reduce runs behind 5 steps
    // (50 ms), so on this link only what exceeds 50 ms shows. Fragment 0 steps at 10 and 20
    // (lands at 15: the one at 20 is still in flight at the end), fragment 1 at 5 and 15.
    cfg.fragments = 2;
    cfg.overlap_steps = 5;
    const run_result s = run_strategy(cfg, data, strategy_kind::streaming_diloco);
    double exposed_most = 0;
    for (const auto& log : s.traffic) {
        double e = 0;
        for (const auto& t : log) {
            CHECK(t.blocking_ops == 0);
            e += std::max(0.0, t.hidden_ops * 6 * 1e-3 + static_cast<double>(t.hidden_bytes) / 1e6 - 5 * 0.010);
        }
        exposed_most = std::max(exposed_most, e);
    }
    CHECK(s.rows[1].sim_wall_s[0] == doctest::Approx(20 * 0.010 + exposed_most).epsilon(1e-12));
    CHECK(s.rows[1].sim_wall_s[0] < d.rows[1].sim_wall_s[0]);

    // ddp: one blocking all-reduce of n floats per step.
    const run_result p = run_strategy(cfg, data, strategy_kind::ddp);
    CHECK(p.rows[1].sim_wall_s[0] ==
          doctest::Approx(20 * 0.010 + 20 * (6 * 1e-3 + static_cast<double>(p.ddp_bytes_per_step) / 1e6)).epsilon(1e-12));
    // none: compute alone.
    const run_result n = run_strategy(cfg, data, strategy_kind::none);
    CHECK(n.rows[1].sim_wall_s[0] == doctest::Approx(20 * 0.010).epsilon(1e-12));

    // Without --step-time the measured compute per step is used, and it is positive.
    cfg.step_time_s = 0;
    const run_result m = run_strategy(cfg, data, strategy_kind::none);
    CHECK(m.rows[1].step_compute_s > 0);
    CHECK(m.rows[1].sim_wall_s[0] == doctest::Approx(20 * m.rows[1].step_compute_s).epsilon(1e-12));
}

TEST_CASE("runs: --network fills sim_wall_s and a column per further network, and the table") {
    const sim_test::temp_file csv("network.csv");
    std::vector<std::string> args{"--strategy", "diloco,streaming-diloco", "--workers", "2", "--steps", "10",
                                  "--eval-every", "10", "--batch", "4", "--context", "3", "--embed", "3",
                                  "--hidden", "8", "--layers", "1", "--corpus-chars", "20000", "--eval-size", "64",
                                  "--outer-interval", "5", "--fragments", "2", "--overlap-steps", "1",
                                  "--network", "internet+10Mbps,2ms", "--step-time", "50", "--quiet", "--csv",
                                  csv.path()};
    std::ostringstream out, err;
    REQUIRE(run_cli(args, out, err) == 0);
    CHECK(out.str().find("modelled wall time") != std::string::npos);
    std::ifstream in(csv.path());
    std::string line;
    REQUIRE(std::getline(in, line));
    CHECK(line == std::string(csv_header) + ",sim_wall_s_10Mbps_2ms");
    int rows = 0;
    while (std::getline(in, line)) {
        const auto r = split(line, ',');
        REQUIRE(r.size() == 12);
        CHECK(std::stod(r[10]) >= 10 * 0.050); // at least the compute
        CHECK(std::stod(r[11]) >= 10 * 0.050);
        ++rows;
    }
    CHECK(rows == 2);
}

TEST_CASE("runs: demo and demo-shared keep replicas bit-identical, learn, and send what the engine counts") {
    sim_config cfg = sim_test::tiny_config(3, 30);
    cfg.demo_chunk = 8; // the tiny model's tensors are 16 to 44 wide: several chunks each
    cfg.demo_k = 2;
    // DeMo exchanges among all the workers: --topology (here set for a sparta beside it) is not its.
    cfg.topology = topology_kind::ring;
    const dataset data = prepare_data(cfg);
    const run_result ddp = run_strategy(cfg, data, strategy_kind::ddp);
    for (auto kind : {strategy_kind::demo, strategy_kind::demo_shared}) {
        CAPTURE(name_of(kind));
        const run_result r = run_strategy(cfg, data, kind);
        // Every worker applies the same update: the replicas never part.
        for (const auto& rep : r.replicas) CHECK(bitwise_equal(rep, r.replicas[0]));
        for (const auto& row : r.rows) CHECK(row.correlation == 1.0);
        CHECK(r.rows.back().eval_loss < r.rows.front().eval_loss - 0.05);
        CHECK(r.rows.back().train_loss < r.rows.front().train_loss);

        const auto stats = kind == strategy_kind::demo ? demo_engine_stats<trickle::demo_select::top_k>(cfg, data, 30)
                                                       : demo_engine_stats<trickle::demo_select::shared>(cfg, data, 30);
        std::uint64_t peak = 0;
        for (std::size_t w = 0; w < 3; ++w) {
            CHECK(stats[w].exchanges == 30);
            CHECK(r.bytes_sent[w] == stats[w].total.bytes_sent);
            CHECK(r.bytes_sent[w] * 8 < ddp.bytes_sent[w]);
            peak = std::max(peak, stats[w].last.bytes_sent);
            // top-k sends each worker's own positions; the shared seed's need none.
            if (kind == strategy_kind::demo)
                CHECK(stats[w].sent.indices > 0);
            else
                CHECK(stats[w].sent.indices == 0);
            // One blocking exchange per step, at the all-reduce's rounds.
            REQUIRE(r.traffic[w].size() == 30);
            for (const auto& t : r.traffic[w]) {
                CHECK(t.blocking_ops == 1);
                CHECK(t.hidden_ops == 0);
            }
        }
        CHECK(r.rows.back().peak_bytes == peak);
        CHECK(r.shape.rounds == exchange_rounds(topology_kind::all_reduce, 3, 0));
        CHECK(r.shape.hide_steps == 0);
    }
}

TEST_CASE("runs: demo's values through a lossy codec keep the replicas identical; the header names the settings") {
    sim_config cfg = sim_test::tiny_config(3, 20);
    cfg.demo_chunk = 8;
    cfg.demo_k = 2;
    cfg.demo_values = codec_kind::sign2;
    cfg.codec_block = 4;
    const dataset data = prepare_data(cfg);
    const run_result r = run_strategy(cfg, data, strategy_kind::demo);
    for (const auto& rep : r.replicas) CHECK(bitwise_equal(rep, r.replicas[0]));
    CHECK(r.rows.back().eval_loss < r.rows.front().eval_loss);
    const auto stats = demo_engine_stats<trickle::demo_select::top_k>(cfg, data, 20);
    for (std::size_t w = 0; w < 3; ++w) CHECK(r.bytes_sent[w] == stats[w].total.bytes_sent);

    std::vector<std::string> args{"--strategy", "demo,demo-shared", "--workers", "2", "--steps", "4",
                                  "--eval-every", "2", "--batch", "4", "--context", "3", "--embed", "3",
                                  "--hidden", "8", "--layers", "1", "--corpus-chars", "20000", "--eval-size", "64",
                                  "--demo-chunk", "4", "--demo-k", "3", "--demo-decay", "0.9", "--quiet"};
    std::ostringstream out, err;
    REQUIRE(run_cli(args, out, err) == 0);
    CHECK(err.str().empty());
    CHECK(out.str().find("demo: chunk 4, top 3 coefficients per chunk, compression decay 0.9, values fp32") !=
          std::string::npos);
    for (const char* s : {"demo", "demo-shared"}) CHECK(out.str().find(std::string("\n") + s + " ") != std::string::npos);
}
