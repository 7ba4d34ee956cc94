// tests/sim/test_cli.cpp: trickle-sim's command line: every option parses, every bad input is a clear error (exit 2).
#include "app.hpp"
#include "gpt.hpp"
#include "model.hpp"
#include "options.hpp"
#include "sim_test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>

using namespace trickle_sim;

namespace {

sim_config parse(std::initializer_list<std::string> args) {
    const std::vector<std::string> v(args);
    return parse_cli(v);
}

// The usage_error message for these arguments ("" when they parse).
std::string error_of_args(const std::vector<std::string>& args) {
    try {
        parse_cli(args);
    } catch (const usage_error& e) {
        return e.what();
    }
    return "";
}
std::string error_of(std::initializer_list<std::string> args) { return error_of_args(std::vector<std::string>(args)); }

struct cli_result {
    int code;
    std::string out, err;
};

cli_result run(std::initializer_list<std::string> args) {
    const std::vector<std::string> v(args);
    std::ostringstream out, err;
    const int code = run_cli(v, out, err);
    return {code, out.str(), err.str()};
}

} // namespace

TEST_CASE("cli: defaults compare ddp, none, sparta, diloco and sparta-diloco with the documented settings") {
    const sim_config c = parse({});
    CHECK(c.strategies == std::vector<strategy_kind>{strategy_kind::ddp, strategy_kind::none, strategy_kind::sparta,
                                                     strategy_kind::diloco, strategy_kind::sparta_diloco});
    CHECK(c.workers == 4);
    CHECK(c.fraction == 0.005);
    CHECK(c.interval == 1);
    CHECK(c.sampler == sampler_kind::uniform);
    CHECK(c.fraction_schedule == schedule_kind::constant);
    CHECK(c.fraction_end == c.fraction);
    CHECK(c.outer == outer_kind::nesterov);
    CHECK(c.outer_lr == doctest::Approx(0.7));
    CHECK(c.outer_momentum == doctest::Approx(0.9));
    CHECK(c.outer_lr_schedule == schedule_kind::constant);
    CHECK(c.outer_lr_end == 1.0);
    CHECK(c.topology == topology_kind::all_reduce);
    CHECK(c.shards == shard_mode::iid);
    CHECK(c.data_file.empty());
    CHECK(c.csv.empty());
    CHECK_FALSE(c.help);
}

TEST_CASE("cli: every option is read, in both --opt V and --opt=V forms") {
    const sim_config c = parse({"--strategy", "sparta-diloco,ddp", "--workers=8", "--steps", "123", "--eval-every=7",
                                "--seed", "18446744073709551615", "--batch", "5", "--lr=0.02", "--warmup", "0",
                                "--weight-decay", "0.5", "--data", "x.txt", "--shards", "non-iid", "--eval-size", "99",
                                "--context", "3", "--embed", "5", "--hidden", "6", "--layers", "3", "--fraction",
                                "0.25", "--sampler", "block", "--block-size", "64", "--interval", "5",
                                "--fraction-schedule", "cosine", "--fraction-end", "0.01", "--outer-interval", "20",
                                "--outer", "momentum", "--outer-lr", "0.5", "--outer-momentum", "0.8",
                                "--outer-lr-schedule=linear", "--outer-lr-end", "0.25", "--drop-prob",
                                "0.25", "--prune", "0.5", "--topology", "ring", "--csv", "out.csv", "--quiet"});
    CHECK(c.strategies == std::vector<strategy_kind>{strategy_kind::sparta_diloco, strategy_kind::ddp});
    CHECK(c.workers == 8);
    CHECK(c.steps == 123);
    CHECK(c.eval_every == 7);
    CHECK(c.seed == 18446744073709551615ull);
    CHECK(c.batch == 5);
    CHECK(c.lr == doctest::Approx(0.02));
    CHECK(c.warmup == 0);
    CHECK(c.weight_decay == doctest::Approx(0.5));
    CHECK(c.data_file == "x.txt");
    CHECK(c.shards == shard_mode::non_iid);
    CHECK(c.eval_size == 99);
    CHECK(c.model.context == 3);
    CHECK(c.model.embed == 5);
    CHECK(c.model.hidden == 6);
    CHECK(c.model.layers == 3);
    CHECK(c.fraction == 0.25);
    CHECK(c.sampler == sampler_kind::block);
    CHECK(c.block_size == 64);
    CHECK(c.interval == 5);
    CHECK(c.fraction_schedule == schedule_kind::cosine);
    CHECK(c.fraction_end == 0.01);
    CHECK(c.outer_interval == 20);
    CHECK(c.outer == outer_kind::momentum);
    CHECK(c.outer_lr == doctest::Approx(0.5));
    CHECK(c.outer_momentum == doctest::Approx(0.8));
    CHECK(c.outer_lr_schedule == schedule_kind::linear);
    CHECK(c.outer_lr_end == 0.25);
    CHECK(c.drop_prob == 0.25);
    CHECK(c.prune == 0.5);
    CHECK(c.topology == topology_kind::ring);
    CHECK(c.csv == "out.csv");
    CHECK(c.quiet);

    const sim_config z = parse({"--strategy", "sparta-diloco", "--codec", "fp8-e5m2", "--outer-codec=sign2",
                                "--codec-block", "32", "--error-feedback", "0.9", "--outer-topk", "64:2"});
    CHECK(z.topk_chunk == 64);
    CHECK(z.topk_k == 2);
    CHECK(z.codec == codec_kind::fp8_e5m2);
    CHECK(z.outer_codec == codec_kind::sign2);
    CHECK(z.codec_block == 32);
    CHECK(z.error_feedback == 0.9);
}

TEST_CASE("cli: --model gpt and its options; the mlp's defaults stay as they were") {
    const sim_config mlp = parse({});
    CHECK(mlp.model.kind == model_kind::mlp);
    CHECK(mlp.model.context == 12);
    CHECK(mlp.model.layers == 2);
    CHECK(mlp.batch == 32);
    CHECK(mlp.lr_schedule == schedule_kind::constant);
    CHECK(mlp.clip == 0.0f);

    // The gpt's own defaults for what is not given.
    const sim_config g = parse({"--model", "gpt"});
    CHECK(g.model.kind == model_kind::gpt);
    CHECK(g.model.context == gpt_defaults::context);
    CHECK(g.model.d_model == gpt_defaults::d_model);
    CHECK(g.model.heads == gpt_defaults::heads);
    CHECK(g.model.layers == 2);
    CHECK(g.batch == gpt_defaults::batch);
    CHECK(g.lr_schedule == schedule_kind::cosine);
    CHECK(g.clip == gpt_defaults::clip);
    CHECK(g.threads == 1);

    // Given values win over those defaults.
    const sim_config r = parse({"--model=gpt", "--layers", "4", "--d-model", "128", "--heads", "8", "--context", "128",
                                "--batch", "16", "--lr-schedule", "constant", "--clip", "0"});
    CHECK(r.model.layers == 4);
    CHECK(r.model.d_model == 128);
    CHECK(r.model.heads == 8);
    CHECK(r.model.context == 128);
    CHECK(r.batch == 16);
    CHECK(r.lr_schedule == schedule_kind::constant);
    CHECK(r.clip == 0.0f);
#if TRICKLE_SIM_HAVE_OPENMP
    CHECK(parse({"--model", "gpt", "--threads", "2"}).threads == 2);
#else
    CHECK(error_of({"--model", "gpt", "--threads", "2"}).find("--threads: this build of trickle-sim has no OpenMP") == 0);
#endif

    // The schedule and the clip apply to the mlp too when asked for.
    const sim_config m = parse({"--lr-schedule", "linear", "--clip", "2.5"});
    CHECK(m.lr_schedule == schedule_kind::linear);
    CHECK(m.clip == 2.5f);
}

TEST_CASE("cli: enumerations accept exactly their documented names") {
    for (auto [name, s] : {std::pair{"ddp", strategy_kind::ddp}, std::pair{"none", strategy_kind::none},
                           std::pair{"sparta", strategy_kind::sparta}, std::pair{"diloco", strategy_kind::diloco},
                           std::pair{"sparta-diloco", strategy_kind::sparta_diloco}, std::pair{"demo", strategy_kind::demo},
                           std::pair{"demo-shared", strategy_kind::demo_shared}})
        CHECK(parse({"--strategy", name}).strategies == std::vector<strategy_kind>{s});
    for (auto [name, s] : {std::pair{"uniform", sampler_kind::uniform}, std::pair{"permutation", sampler_kind::permutation},
                           std::pair{"block", sampler_kind::block}, std::pair{"layerwise", sampler_kind::layerwise}})
        CHECK(parse({"--strategy", "sparta", "--sampler", name}).sampler == s);
    for (auto [name, s] : {std::pair{"linear", schedule_kind::linear}, std::pair{"cosine", schedule_kind::cosine}})
        CHECK(parse({"--strategy", "sparta", "--fraction-schedule", name, "--fraction-end", "0.1"}).fraction_schedule == s);
    for (auto [name, s] : {std::pair{"nesterov", outer_kind::nesterov}, std::pair{"sgd", outer_kind::sgd},
                           std::pair{"momentum", outer_kind::momentum}, std::pair{"adam", outer_kind::adam},
                           std::pair{"average", outer_kind::average}})
        CHECK(parse({"--strategy", "diloco", "--outer", name}).outer == s);
    CHECK(parse({"--strategy", "diloco", "--outer", "adam"}).outer_lr == doctest::Approx(default_outer_lr(outer_kind::adam)));
    CHECK(parse({"--strategy", "sparta", "--topology", "all-reduce"}).topology == topology_kind::all_reduce);
    CHECK(parse({"--strategy", "sparta", "--topology", "gossip"}).topology == topology_kind::gossip);
    CHECK(parse({"--strategy", "diloco", "--topology", "exponential"}).topology == topology_kind::exponential);
    {
        const sim_config isl = parse({"--strategy", "sparta", "--topology", "islands", "--island-size", "3"});
        CHECK(isl.topology == topology_kind::islands);
        CHECK(isl.island_size == 3);
        CHECK(topology_label(isl) == "islands of 3");
        CHECK(parse({"--strategy", "sparta", "--topology", "islands"}).island_size == 2);
        CHECK(parse({"--strategy", "sparta", "--topology", "islands", "--island-size", "4", "--workers", "4"}).island_size == 4);
    }
    CHECK(parse({"--shards", "iid"}).shards == shard_mode::iid);
    CHECK(parse({"--help"}).help);
    CHECK(parse({"-h"}).help);
}

TEST_CASE("cli: bad input is an error that names the option") {
    struct bad {
        std::initializer_list<std::string> args;
        const char* must_contain;
    };
    const bad cases[] = {
        {{"--bogus", "1"}, "unknown option '--bogus'"},
        {{"--Workers", "2"}, "unknown option '--Workers'"},
        {{"-w", "2"}, "unexpected argument '-w'"},
        {{"stray"}, "unexpected argument 'stray'"},
        {{"--strategy", "allreduce"}, "--strategy: expected one of ddp|none|sparta|diloco|sparta-diloco|streaming-diloco|demo|demo-shared, got 'allreduce'"},
        {{"--strategy", "ddp,,none"}, "--strategy: expected one of"},
        {{"--strategy", "ddp,"}, "--strategy: expected one of"},
        {{"--strategy", ""}, "--strategy"},
        {{"--strategy", "ddp,ddp"}, "lists 'ddp' twice"},
        {{"--strategy", "sparta", "--fraction", "0"}, "--fraction: must be in (0, 1], got '0'"},
        {{"--strategy", "sparta", "--fraction", "1.5"}, "--fraction: must be in (0, 1], got '1.5'"},
        {{"--strategy", "sparta", "--fraction", "-0.1"}, "--fraction: must be in (0, 1]"},
        {{"--strategy", "sparta", "--fraction", "nan"}, "--fraction: expected a finite number"},
        {{"--strategy", "sparta", "--fraction", "0.1x"}, "--fraction: expected a finite number"},
        {{"--workers", "0"}, "--workers: must be in [1, 256], got '0'"},
        {{"--workers", "-3"}, "--workers: must be in [1, 256]"},
        {{"--workers", "1000"}, "--workers: must be in [1, 256]"},
        {{"--workers", "2.5"}, "--workers: expected an integer, got '2.5'"},
        {{"--workers", "99999999999999999999"}, "--workers: must be in"},
        {{"--workers"}, "--workers: missing value"},
        {{"--workers", "2", "--workers", "3"}, "--workers: given more than once"},
        {{"--strategy", "sparta", "--codec", "int3"}, "--codec: expected one of fp32|bf16|fp16|fp8-e4m3|fp8-e5m2|fp8-block|int8|int4|sign2, got 'int3'"},
        {{"--strategy", "diloco", "--codec", "bf16"}, "--codec: applies to sparta and sparta-diloco"},
        {{"--strategy", "sparta", "--outer-codec", "int8"}, "--outer-codec: applies to diloco, sparta-diloco and streaming-diloco"},
        {{"--strategy", "diloco", "--outer-codec", "bf16", "--codec-block", "32"}, "--codec-block: applies to the fp8-block, int8, int4 and sign2 codecs only"},
        {{"--strategy", "diloco", "--outer-codec", "int8", "--codec-block", "0"}, "--codec-block: must be in [1, "},
        {{"--strategy", "diloco", "--outer-topk", "64:4", "--topology", "ring"}, "--outer-topk: sparsified outer gradients are summed through --topology all-reduce only, not ring"},
        {{"--strategy", "sparta-diloco", "--outer-topk", "64:4", "--topology", "gossip"}, "--outer-topk: sparsified outer gradients are summed through --topology all-reduce only, not gossip"},
        {{"--strategy", "diloco", "--error-feedback", "0.9"}, "--error-feedback: needs a lossy --outer-codec"},
        {{"--strategy", "diloco", "--outer-topk", "64"}, "--outer-topk: expected C:K, got '64'"},
        {{"--strategy", "diloco", "--outer-topk", "8:9"}, "--outer-topk: K must be at most C, got '8:9'"},
        {{"--strategy", "sparta", "--outer-topk", "64:4"}, "--outer-topk: applies to diloco, sparta-diloco and streaming-diloco"},
        {{"--strategy", "diloco", "--outer-codec", "sign2", "--error-feedback", "1.5"}, "--error-feedback: must be in (0, 1], got '1.5'"},
        {{"--quiet=yes"}, "--quiet: takes no value"},
        {{"--steps", "0"}, "--steps: must be in"},
        {{"--eval-every", "0"}, "--eval-every: must be in"},
        {{"--batch", "0"}, "--batch: must be in"},
        {{"--lr", "0"}, "--lr: must be in (0, 10]"},
        {{"--lr", "inf"}, "--lr: expected a finite number"},
        {{"--weight-decay", "-1"}, "--weight-decay: must be in [0, 100]"},
        {{"--seed", "-1"}, "--seed"},
        {{"--data", ""}, "--data: expected a file name"},
        {{"--csv="}, "--csv: expected a file name"},
        {{"--corpus-chars", "100"}, "--corpus-chars: must be in"},
        {{"--shards", "random"}, "--shards: expected one of iid|non-iid"},
        {{"--context", "0"}, "--context: must be in [1, 256]"},
        {{"--layers", "9"}, "--layers: must be in [1, 8]"},
        {{"--strategy", "sparta", "--sampler", "random"}, "--sampler: expected one of uniform|permutation|block|layerwise"},
        {{"--strategy", "sparta", "--interval", "0"}, "--interval: must be in"},
        {{"--strategy", "sparta", "--block-size", "8"}, "--block-size: applies to --sampler block only"},
        {{"--strategy", "sparta", "--fraction-schedule", "step"}, "--fraction-schedule: expected one of constant|linear|cosine"},
        {{"--strategy", "sparta", "--fraction-schedule", "linear"}, "--fraction-schedule linear: needs --fraction-end"},
        {{"--strategy", "sparta", "--fraction-end", "0.1"}, "--fraction-end: needs --fraction-schedule linear or cosine"},
        {{"--strategy", "sparta", "--fraction-schedule", "cosine", "--fraction-end", "0"}, "--fraction-end: must be in (0, 1]"},
        {{"--strategy", "diloco", "--outer", "lookahead"}, "--outer: expected one of nesterov|sgd|momentum|adam|average"},
        {{"--strategy", "diloco", "--outer-interval", "0"}, "--outer-interval: must be in"},
        {{"--strategy", "diloco", "--outer-lr", "0"}, "--outer-lr: must be in (0, 100]"},
        {{"--strategy", "diloco", "--outer-momentum", "1"}, "--outer-momentum: must be in [0, 1)"},
        {{"--strategy", "diloco", "--outer", "sgd", "--outer-momentum", "0.5"}, "--outer-momentum: applies to --outer nesterov and momentum only"},
        {{"--strategy", "diloco", "--outer", "average", "--outer-lr", "0.5"}, "--outer-lr: --outer average has no learning rate"},
        {{"--strategy", "diloco", "--outer-lr-schedule", "step"}, "--outer-lr-schedule: expected one of constant|linear|cosine"},
        {{"--strategy", "diloco", "--outer-lr-schedule", "cosine"}, "--outer-lr-schedule cosine: needs --outer-lr-end"},
        {{"--strategy", "diloco", "--outer-lr-end", "0.5"}, "--outer-lr-end: needs --outer-lr-schedule linear or cosine"},
        {{"--strategy", "diloco", "--outer-lr-schedule", "linear", "--outer-lr-end", "1.5"}, "--outer-lr-end: must be in (0, 1]"},
        {{"--strategy", "diloco", "--outer", "average", "--outer-lr-schedule", "cosine", "--outer-lr-end", "0.5"},
         "--outer-lr-schedule: --outer average has no learning rate"},
        {{"--strategy", "sparta", "--outer-lr-schedule", "cosine"}, "--outer-lr-schedule: applies to diloco, sparta-diloco and streaming-diloco"},
        {{"--strategy", "diloco", "--drop-prob", "1"}, "--drop-prob: must be in [0, 1)"},
        {{"--strategy", "diloco", "--prune", "-0.5"}, "--prune: must be in [0, 1)"},
        {{"--strategy", "diloco", "--topology", "star"}, "--topology: expected one of all-reduce|ring|gossip|exponential|islands"},
        {{"--strategy", "sparta", "--topology", "gossip", "--workers", "1"}, "--topology gossip: needs at least 2 workers"},
        {{"--strategy", "diloco", "--topology", "exponential", "--workers", "1"}, "--topology exponential: needs at least 2 workers"},
        {{"--strategy", "sparta", "--topology", "islands", "--island-size", "5"},
         "--island-size: islands of 5 workers are larger than the world (--workers 4)"},
        {{"--strategy", "diloco", "--workers", "8", "--topology", "islands", "--island-size", "9"},
         "islands of 9 workers are larger than the world (--workers 8)"},
        {{"--strategy", "sparta", "--topology", "islands", "--island-size", "0"}, "--island-size: must be in"},
        {{"--strategy", "sparta", "--topology", "gossip", "--island-size", "2"}, "--island-size: applies to --topology islands only"},
        // Options that would have no effect are refused, not ignored.
        {{"--strategy", "ddp,none", "--fraction", "0.1"}, "--fraction: applies to sparta and sparta-diloco, but --strategy is ddp,none"},
        {{"--strategy", "sparta", "--outer-interval", "10"}, "--outer-interval: applies to diloco, sparta-diloco and streaming-diloco, but --strategy is sparta"},
        {{"--strategy", "ddp", "--topology", "ring"}, "--topology: applies to sparta and diloco strategies"},
        // --model gpt and its sizes.
        {{"--model", "transformer"}, "--model: expected one of mlp|gpt, got 'transformer'"},
        {{"--model", "gpt", "--heads", "5"}, "--heads: 5 heads do not divide --d-model 64"},
        {{"--model", "gpt", "--d-model", "30", "--heads", "4"}, "--heads: 4 heads do not divide --d-model 30"},
        {{"--model", "gpt", "--d-model", "0"}, "--d-model: must be in [1, 4096], got '0'"},
        {{"--model", "gpt", "--d-model", "-8"}, "--d-model: must be in [1, 4096]"},
        {{"--model", "gpt", "--heads", "0"}, "--heads: must be in [1, 256], got '0'"},
        {{"--model", "gpt", "--layers", "0"}, "--layers: must be in [1, 8], got '0'"},
        {{"--model", "gpt", "--layers", "-1"}, "--layers: must be in [1, 8]"},
        {{"--model", "gpt", "--context", "0"}, "--context: must be in [1, 256], got '0'"},
        {{"--model", "gpt", "--context", "-4"}, "--context: must be in [1, 256]"},
        {{"--d-model", "64"}, "--d-model: applies to --model gpt only, but --model is mlp"},
        {{"--model", "mlp", "--heads", "2"}, "--heads: applies to --model gpt only, but --model is mlp"},
        {{"--model", "gpt", "--hidden", "64"}, "--hidden: applies to --model mlp only"},
        {{"--model", "gpt", "--embed", "8"}, "--embed: applies to --model mlp only"},
        {{"--threads", "2"}, "--threads: applies to --model gpt only, but --model is mlp"},
        {{"--model", "gpt", "--threads", "0"}, "--threads: must be in [1, 256], got '0'"},
        {{"--lr-schedule", "exponential"}, "--lr-schedule: expected one of constant|linear|cosine"},
        {{"--clip", "-1"}, "--clip: must be in [0, 1e6]"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.must_contain);
        const std::string msg = error_of(c.args);
        CHECK_MESSAGE(msg.find(c.must_contain) != std::string::npos, "got: ", msg);
    }
}

TEST_CASE("cli: run_cli exits 2 with the message on stderr for bad options and bad data files") {
    auto r = run({"--bogus"});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find("unknown option '--bogus'") != std::string::npos);

    r = run({"--strategy", "sparta", "--fraction", "0"});
    CHECK(r.code == 2);
    CHECK(r.err.find("--fraction") != std::string::npos);

    r = run({"--strategy", "sparta", "--topology", "gossip", "--workers", "1"});
    CHECK(r.code == 2);
    CHECK(r.err.find("--topology gossip: needs at least 2 workers") != std::string::npos);

    r = run({"--strategy", "sparta", "--topology", "islands", "--island-size", "6"});
    CHECK(r.code == 2);
    CHECK(r.err.find("larger than the world") != std::string::npos);

    r = run({"--workers", "0"});
    CHECK(r.code == 2);
    CHECK(r.err.find("--workers") != std::string::npos);

    r = run({"--data", "/nonexistent/trickle-sim-no-such-file.txt", "--quiet"});
    CHECK(r.code == 2);
    CHECK(r.err.find("--data: file '/nonexistent/trickle-sim-no-such-file.txt' does not exist") != std::string::npos);

    const sim_test::temp_file small("small.txt", "just a few bytes of text, far too few to shard\n");
    r = run({"--data", small.path(), "--quiet"});
    CHECK(r.code == 2);
    CHECK(r.err.find("too few to shard over 4 workers") != std::string::npos);

    const sim_test::temp_file empty("empty.txt");
    { std::ofstream(empty.path()); }
    r = run({"--data", empty.path(), "--quiet"});
    CHECK(r.code == 2);
    CHECK(r.err.find("is empty") != std::string::npos);

    r = run({"--data", std::filesystem::temp_directory_path().string(), "--quiet"});
    CHECK(r.code == 2);
    CHECK(r.err.find("is not a regular file") != std::string::npos);

    r = run({"--model", "gpt", "--heads", "5"});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find("--heads: 5 heads do not divide --d-model 64") != std::string::npos);

    r = run({"--model", "tiny-gpt"});
    CHECK(r.code == 2);
    CHECK(r.err.find("--model: expected one of mlp|gpt") != std::string::npos);

    r = run({"--heads", "2"});
    CHECK(r.code == 2);
    CHECK(r.err.find("--heads: applies to --model gpt only") != std::string::npos);

    // A context longer than the text allows: the gpt's window must fit in the held-out tenth.
    const sim_test::temp_file text("gpt-text.txt", std::string(1000, 'a') + std::string(1000, 'b'));
    r = run({"--model", "gpt", "--data", text.path(), "--context", "256", "--quiet"});
    CHECK(r.code == 2);
    CHECK(r.err.find("bytes are too few to shard over 4 workers with context 256") != std::string::npos);

    r = run({"--strategy", "none", "--steps", "1", "--csv", "/nonexistent/dir/out.csv", "--quiet",
             "--corpus-chars", "20000", "--hidden", "4", "--embed", "2", "--context", "2", "--eval-size", "8"});
    CHECK(r.code == 2);
    CHECK(r.err.find("--csv: cannot open '/nonexistent/dir/out.csv'") != std::string::npos);
}

TEST_CASE("cli: --help documents every option and exits 0") {
    const auto r = run({"--help"});
    CHECK(r.code == 0);
    CHECK(r.err.empty());
    for (const char* opt : {"--strategy", "--workers", "--steps", "--eval-every", "--seed", "--batch", "--lr",
                            "--warmup", "--weight-decay", "--data", "--corpus-chars", "--shards", "--eval-size",
                            "--context", "--embed", "--hidden", "--layers", "--fraction", "--sampler", "--block-size",
                            "--interval", "--fraction-schedule", "--fraction-end", "--outer-interval", "--outer",
                            "--outer-lr", "--outer-momentum", "--outer-lr-schedule", "--outer-lr-end", "--drop-prob",
                            "--prune", "--topology", "--island-size", "--csv", "--codec", "--outer-codec",
                            "--codec-block", "--error-feedback", "--outer-topk", "--model", "--d-model", "--heads",
                            "--lr-schedule", "--clip", "--threads", "--quiet", "--help", "--fragments",
                            "--overlap-steps", "--mix", "--overlap", "--network", "--step-time", "streaming-diloco",
                            "datacenter", "cross-region", "internet", "demo-shared", "--demo-chunk", "--demo-k",
                            "--demo-decay", "--demo-values"})
        CHECK_MESSAGE(r.out.find(opt) != std::string::npos, opt);
    CHECK(r.out.find("correlation,bytes_sent_per_worker,reduction_vs_ddp,wall_s,peak_bytes,") != std::string::npos);
}

TEST_CASE("cli: demo and demo-shared parse with DeMo's defaults and their own options") {
    sim_config c = parse({"--strategy", "demo"});
    CHECK(c.strategies == std::vector<strategy_kind>{strategy_kind::demo});
    CHECK(c.demo_chunk == 64);
    CHECK(c.demo_k == 32);
    CHECK(c.demo_decay == 0.999);
    CHECK(c.demo_values == codec_kind::fp32);
    c = parse({"--strategy", "ddp,demo-shared", "--demo-chunk", "16", "--demo-k=256", "--demo-decay", "0",
               "--demo-values", "int8", "--codec-block", "32"});
    CHECK(c.strategies == std::vector<strategy_kind>{strategy_kind::ddp, strategy_kind::demo_shared});
    CHECK(c.demo_chunk == 16);
    CHECK(c.demo_k == 256); // every coefficient of a 16 x 16 tile
    CHECK(c.demo_decay == 0.0);
    CHECK(c.demo_values == codec_kind::int8);
    CHECK(c.codec_block == 32);
    c = parse({"--strategy", "demo", "--demo-chunk", "256", "--demo-k", "65536", "--demo-decay", "1",
               "--demo-values", "fp8-e4m3"});
    CHECK(c.demo_chunk == 256);
    CHECK(c.demo_k == 65536);
    CHECK(c.demo_decay == 1.0);
    CHECK(c.demo_values == codec_kind::fp8_e4m3);
    CHECK(parse({"--strategy", "demo", "--demo-chunk", "1", "--demo-k", "1"}).demo_chunk == 1);
}

TEST_CASE("cli: bad DeMo input, and DeMo's options without a demo strategy, are refused before any run") {
    struct bad {
        std::initializer_list<std::string> args;
        const char* message;
    };
    const bad cases[] = {
        {{"--strategy", "demo", "--demo-chunk", "0"}, "--demo-chunk: must be in [1, 256], got '0'"},
        {{"--strategy", "demo", "--demo-chunk", "257"}, "--demo-chunk: must be in [1, 256], got '257'"},
        {{"--strategy", "demo", "--demo-chunk", "8.5"}, "--demo-chunk: expected an integer, got '8.5'"},
        {{"--strategy", "demo", "--demo-k", "0"}, "--demo-k: must be in [1, 65536], got '0'"},
        {{"--strategy", "demo", "--demo-chunk", "4", "--demo-k", "17"},
         "--demo-k: K must be at most the 16 coefficients of a --demo-chunk 4 tile, got 17"},
        {{"--strategy", "demo-shared", "--demo-chunk", "4"},
         "--demo-k: K must be at most the 16 coefficients of a --demo-chunk 4 tile, got 32 (the default)"},
        {{"--strategy", "demo", "--demo-decay", "1.5"}, "--demo-decay: must be in [0, 1], got '1.5'"},
        {{"--strategy", "demo", "--demo-decay", "-0.1"}, "--demo-decay: must be in [0, 1], got '-0.1'"},
        {{"--strategy", "demo", "--demo-decay", "nan"}, "--demo-decay: expected a finite number, got 'nan'"},
        {{"--strategy", "demo", "--demo-values", "int3"},
         "--demo-values: expected one of fp32|bf16|fp16|fp8-e4m3|fp8-e5m2|fp8-block|int8|int4|sign2, got 'int3' "
         "(the registry's spelling: fp32|bf16|fp16|fp8_e4m3|fp8_e5m2|fp8_block|int8|int4|sign2)"},
        {{"--strategy", "demo", "--demo-k", "4", "--demo-k", "8"}, "--demo-k: given more than once"},
        // DeMo's options with no demo strategy: refused, not ignored.
        {{"--demo-chunk", "16"},
         "--demo-chunk: applies to demo and demo-shared, but --strategy is ddp,none,sparta,diloco,sparta-diloco"},
        {{"--strategy", "ddp", "--demo-k", "4"}, "--demo-k: applies to demo and demo-shared, but --strategy is ddp"},
        {{"--strategy", "sparta,diloco", "--demo-decay", "0.9"},
         "--demo-decay: applies to demo and demo-shared, but --strategy is sparta,diloco"},
        {{"--strategy", "streaming-diloco", "--demo-values", "bf16"},
         "--demo-values: applies to demo and demo-shared, but --strategy is streaming-diloco"},
        // The other strategies' options with only DeMo.
        {{"--strategy", "demo", "--codec", "bf16"}, "--codec: applies to sparta and sparta-diloco, but --strategy is demo"},
        {{"--strategy", "demo", "--outer-codec", "bf16"},
         "--outer-codec: applies to diloco, sparta-diloco and streaming-diloco, but --strategy is demo"},
        {{"--strategy", "demo-shared", "--topology", "ring"},
         "--topology: applies to sparta and diloco strategies, but --strategy is demo-shared"},
        {{"--strategy", "demo", "--codec-block", "32"}, "--codec-block: applies to the fp8-block, int8, int4 and sign2 codecs only"},
        {{"--strategy", "demo", "--aggregate", "median"},
         "--aggregate: applies to --strategy diloco and sparta-diloco only (DiLoCo's outer step), but --strategy is demo"},
        {{"--strategy", "demo", "--fail", "1@10"},
         "--fail: applies to --strategy diloco, sparta and sparta-diloco (the elastic rounds of trickle's algorithms; "
         "ddp, none, demo and demo-shared have none, and streaming-diloco is refused over an elastic world), but "
         "--strategy is demo"},
        {{"--strategy", "demo", "--workers", "2", "--speeds", "1,0.5"},
         "--speeds: applies to --strategy diloco only (rounds at a deadline use DiLoCo's manual outer steps; every "
         "other strategy meets in lock step), but --strategy is demo"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.message);
        CHECK(error_of(c.args) == c.message);
    }
    // The program exits 2 before the header, let alone a run.
    const auto r = run({"--strategy", "demo", "--demo-chunk", "2", "--demo-k", "5"});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "trickle-sim: --demo-k: K must be at most the 4 coefficients of a --demo-chunk 2 tile, got 5\n");
}

TEST_CASE("cli: streaming-diloco and --overlap parse, with their defaults") {
    sim_config c = parse({"--strategy", "streaming-diloco"});
    CHECK(c.strategies == std::vector<strategy_kind>{strategy_kind::streaming_diloco});
    CHECK(c.fragments == 4);
    CHECK(c.overlap_steps == 1);
    CHECK(c.mix == 0.0);
    CHECK(!c.sparta_overlap);
    c = parse({"--strategy", "diloco,streaming-diloco", "--fragments", "2", "--overlap-steps", "5", "--mix", "0.5",
               "--outer-interval", "50", "--outer-codec", "bf16"});
    CHECK(c.fragments == 2);
    CHECK(c.overlap_steps == 5);
    CHECK(c.mix == 0.5);
    CHECK(c.outer_interval == 50);
    c = parse({"--strategy", "streaming-diloco", "--fragments", "7", "--overlap-steps", "99", "--mix", "1"});
    CHECK(c.fragments == 7); // the default MLP's 7 tensors
    CHECK(c.overlap_steps == 99);
    c = parse({"--strategy", "sparta,sparta-diloco", "--overlap"});
    CHECK(c.sparta_overlap);
    // Value codecs with every topology.
    for (const char* top : {"all-reduce", "ring", "gossip", "exponential", "islands"}) {
        CAPTURE(top);
        CHECK(error_of({"--strategy", "sparta-diloco", "--codec", "int8", "--outer-codec", "int4", "--topology", top})
                  .empty());
    }
}

TEST_CASE("cli: the tensor count --fragments is checked against is the models' own") {
    for (int layers : {1, 2, 3, 8}) {
        model_config m;
        m.layers = layers;
        CHECK(model_tensor_count(m) == static_cast<int>(mlp(m, 50).tensors().size()));
        m.kind = model_kind::gpt;
        CHECK(model_tensor_count(m) == static_cast<int>(gpt(m, 50).tensors().size()));
    }
}

TEST_CASE("cli: --network reads presets, BW,LAT in every unit, and several joined by '+'") {
    sim_config c = parse({"--network", "datacenter"});
    REQUIRE(c.networks.size() == 1);
    CHECK(c.networks[0].label == "datacenter");
    CHECK(c.networks[0].bandwidth_bytes_per_s == 100e9 / 8);
    CHECK(c.networks[0].latency_s == 10e-6);
    c = parse({"--network", "cross-region+internet"});
    REQUIRE(c.networks.size() == 2);
    CHECK(c.networks[0].bandwidth_bytes_per_s == 10e9 / 8);
    CHECK(c.networks[0].latency_s == 30e-3);
    CHECK(c.networks[1].label == "internet");
    CHECK(c.networks[1].bandwidth_bytes_per_s == 1e9 / 8);
    CHECK(c.networks[1].latency_s == 50e-3);
    struct unit_case {
        const char* spec;
        double bytes_per_s, latency_s;
    };
    const unit_case units[] = {{"1Gbps,50ms", 1e9 / 8, 50e-3}, {"800bps,1s", 100, 1.0},
                               {"2.5Kbps,250us", 2500.0 / 8, 250e-6}, {"40Mbps,0.5ms", 40e6 / 8, 0.5e-3},
                               {"10Gbps,0s", 10e9 / 8, 0.0}};
    for (const auto& u : units) {
        CAPTURE(u.spec);
        c = parse({"--network", u.spec});
        REQUIRE(c.networks.size() == 1);
        CHECK(c.networks[0].label == u.spec);
        CHECK(c.networks[0].bandwidth_bytes_per_s == doctest::Approx(u.bytes_per_s).epsilon(1e-12));
        CHECK(c.networks[0].latency_s == doctest::Approx(u.latency_s).epsilon(1e-12));
    }
    c = parse({"--network", "internet", "--step-time", "250"});
    CHECK(c.step_time_s == doctest::Approx(0.25));
}

TEST_CASE("cli: bad streaming, overlap and network input exits 2 naming the option") {
    struct bad {
        std::initializer_list<std::string> args;
        const char* must_contain;
    };
    const bad cases[] = {
        {{"--strategy", "diloco", "--fragments", "2"}, "--fragments: applies to streaming-diloco, but --strategy is diloco"},
        {{"--strategy", "sparta", "--overlap-steps", "2"}, "--overlap-steps: applies to streaming-diloco"},
        {{"--strategy", "diloco", "--mix", "0.5"}, "--mix: applies to streaming-diloco"},
        {{"--strategy", "diloco,streaming-diloco", "--overlap"}, "--overlap: applies to sparta and sparta-diloco, but --strategy is diloco,streaming-diloco"},
        {{"--strategy", "sparta", "--overlap=1"}, "--overlap: takes no value"},
        {{"--strategy", "sparta", "--overlap", "--overlap"}, "--overlap: given more than once"},
        {{"--strategy", "streaming-diloco", "--overlap-steps", "100"}, "--overlap-steps: tau = 100 must be less than --outer-interval (H = 100)"},
        {{"--strategy", "streaming-diloco", "--outer-interval", "5", "--overlap-steps", "7"}, "must be less than --outer-interval (H = 5)"},
        {{"--strategy", "streaming-diloco", "--outer-interval", "1"}, "--overlap-steps: tau = 1 must be less than --outer-interval (H = 1)"},
        {{"--strategy", "streaming-diloco", "--overlap-steps", "-1"}, "--overlap-steps: must be in [0, "},
        {{"--strategy", "streaming-diloco", "--fragments", "8"}, "--fragments: 8 fragments, but the model has only 7 tensors"},
        {{"--strategy", "streaming-diloco", "--layers", "1", "--fragments", "6"}, "the model has only 5 tensors"},
        {{"--strategy", "streaming-diloco", "--fragments", "0"}, "--fragments: must be in [1, "},
        {{"--strategy", "streaming-diloco", "--mix", "1.5"}, "--mix: must be in [0, 1], got '1.5'"},
        {{"--strategy", "streaming-diloco", "--mix", "-0.1"}, "--mix: must be in [0, 1], got '-0.1'"},
        {{"--network", "lan"}, "--network: expected a preset (datacenter|cross-region|internet) or BANDWIDTH,LATENCY such as 1Gbps,50ms, got 'lan'"},
        {{"--network", "0Gbps,1ms"}, "--network: the bandwidth must be > 0, got '0Gbps,1ms'"},
        {{"--network", "1GBps,1ms"}, "--network: unknown unit 'GBps' of the bandwidth (expected bps|Kbps|Mbps|Gbps), got '1GBps,1ms'"},
        {{"--network", "1Gbps,1min"}, "--network: unknown unit 'min' of the latency (expected us|ms|s)"},
        {{"--network", "1Gbps,50"}, "--network: unknown unit '' of the latency"},
        {{"--network", "Gbps,50ms"}, "--network: expected bandwidth as a number and a unit"},
        {{"--network", "-1Gbps,50ms"}, "--network: expected bandwidth as a number and a unit"},
        {{"--network", "1Gbps,"}, "--network: expected latency as a number and a unit"},
        {{"--network", "internet+"}, "--network: expected a preset"},
        {{"--network", "internet+internet"}, "--network: lists 'internet' twice"},
        {{"--network", "internet", "--network", "datacenter"}, "--network: given more than once"},
        {{"--step-time", "100"}, "--step-time: applies to the network model; give --network too"},
        {{"--network", "internet", "--step-time", "0"}, "--step-time: must be a positive number of milliseconds"},
        {{"--network", "internet", "--step-time", "-5"}, "--step-time: must be a positive number of milliseconds"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.must_contain);
        const std::string msg = error_of(c.args);
        CHECK_MESSAGE(msg.find(c.must_contain) != std::string::npos, "got: ", msg);
    }
    const auto r = run({"--strategy", "streaming-diloco", "--network", "1Tbps,1ms"});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find("--network: unknown unit 'Tbps'") != std::string::npos);
}

TEST_CASE("cli: a real value other than 0 must be a normal fp32 number; 0 stays allowed where the range has it") {
    // Options whose value must be positive, each with what else it needs.
    const std::vector<std::vector<std::string>> positive = {
        {"--lr"},
        {"--strategy", "sparta", "--fraction"},
        {"--strategy", "sparta", "--fraction-schedule", "linear", "--fraction-end"},
        {"--strategy", "diloco", "--outer-lr"},
        {"--strategy", "diloco", "--outer-lr-schedule", "cosine", "--outer-lr-end"},
        {"--strategy", "diloco", "--outer-codec", "int8", "--error-feedback"},
        {"--network", "internet", "--step-time"},
    };
    for (const auto& prefix : positive) {
        const std::string opt = prefix.back();
        for (const char* tiny : {"1e-300", "1e-40", "-1e-300"}) { // 0 in fp32, a subnormal, -0
            CAPTURE(opt);
            CAPTURE(tiny);
            std::vector<std::string> args = prefix;
            args.emplace_back(tiny);
            const std::string msg = error_of_args(args);
            CHECK_MESSAGE(msg == opt + ": rounds to 0 or a subnormal in fp32 (the smallest normal is about 1.2e-38), got '" +
                                     tiny + "'",
                          "got: ", msg);
        }
        std::vector<std::string> args = prefix;
        args.emplace_back("1.2e-38"); // fp32's smallest normal is 1.17549e-38
        CHECK_MESSAGE(error_of_args(args).empty(), opt);
    }
    CHECK(parse({"--lr", "1.2e-38"}).lr > 0);
    CHECK(std::isnormal(parse({"--lr", "1e-30"}).lr));

    // 0 is a legitimate weight decay, clip, momentum, drop probability, prune fraction and mix;
    // a tiny value other than 0 is not.
    CHECK(parse({"--weight-decay", "0"}).weight_decay == 0.0f);
    CHECK(parse({"--clip", "0"}).clip == 0.0f);
    CHECK(parse({"--strategy", "diloco", "--outer-momentum", "0"}).outer_momentum == 0.0);
    CHECK(parse({"--strategy", "diloco", "--drop-prob", "0", "--prune", "0"}).prune == 0.0);
    CHECK(parse({"--strategy", "streaming-diloco", "--mix", "0"}).mix == 0.0);
    CHECK(error_of({"--weight-decay", "1e-300"}).find("--weight-decay: rounds to 0 or a subnormal in fp32") == 0);
    CHECK(error_of({"--clip", "1e-45"}).find("--clip: rounds to 0 or a subnormal in fp32") == 0);
    CHECK(error_of({"--clip", "1e39"}) == "--clip: is beyond fp32's range (about 3.4e38), got '1e39'");

    const auto r = run({"--lr", "1e-300"});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "trickle-sim: --lr: rounds to 0 or a subnormal in fp32 (the smallest normal is about 1.2e-38), "
                   "got '1e-300'\n");
    const auto o = run({"--strategy", "diloco", "--outer-lr", "1e-300"});
    CHECK(o.code == 2);
    CHECK(o.out.empty());
    CHECK(o.err.find("--outer-lr: rounds to 0 or a subnormal in fp32") != std::string::npos);
}

TEST_CASE("cli: echoed values have their control bytes escaped, so every message is one line") {
    CHECK(printable("plain text, UTF-8 \xc3\xa9") == "plain text, UTF-8 \xc3\xa9");
    CHECK(printable(std::string("a\nb\tc\rd\x1b" "e\x7f" "f\\g\0h", 15)) == "a\\nb\\tc\\rd\\x1be\\x7ff\\\\g\\x00h");
    CHECK(quoted_value("x\ny") == "'x\\ny'");

    struct bad {
        std::initializer_list<std::string> args;
        const char* message;
    };
    const bad cases[] = {
        {{"--workers", "2\n3"}, "--workers: expected an integer, got '2\\n3'"},
        {{"--bo\ngus", "1"}, "unknown option '--bo\\ngus' (see --help)"},
        {{"--bo\x01gus=1"}, "unknown option '--bo\\x01gus' (see --help)"},
        {{"stray\targ"}, "unexpected argument 'stray\\targ' (options start with --; see --help)"},
        {{"--strategy", "ddp,ddp\n"}, "--strategy: expected one of ddp|none|sparta|diloco|sparta-diloco|streaming-diloco|demo|demo-shared, got 'ddp\\n'"},
        {{"--model", "gpt\r"}, "--model: expected one of mlp|gpt, got 'gpt\\r'"},
        {{"--lr", "0.1\n"}, "--lr: expected a finite number, got '0.1\\n'"},
        {{"--workers", "a\\b"}, "--workers: expected an integer, got 'a\\\\b'"},
        {{"--network", "1Gbps,5m\ns"}, "--network: unknown unit 'm\\ns' of the latency (expected us|ms|s), got '1Gbps,5m\\ns'"},
        {{"--network", "lan\x7f"}, "got 'lan\\x7f'"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.message);
        const std::string msg = error_of(c.args);
        CHECK_MESSAGE(msg.find(c.message) != std::string::npos, "got: ", msg);
        CHECK(msg.find('\n') == std::string::npos);
    }

    // Through run_cli: one line on stderr, for a parse error and for a file name.
    for (const auto& args : {std::vector<std::string>{"--eval-size", "1\n2"},
                             std::vector<std::string>{"--data", "/nonexistent/trickle\nsim.txt", "--quiet"},
                             std::vector<std::string>{"--csv", "/nonexistent/dir\n/out.csv", "--quiet", "--corpus-chars",
                                                      "20000", "--strategy", "none", "--steps", "1"}}) {
        std::ostringstream out, err;
        CHECK(run_cli(args, out, err) == 2);
        const std::string e = err.str();
        CAPTURE(e);
        CHECK(std::count(e.begin(), e.end(), '\n') == 1);
        CHECK(e.back() == '\n');
        CHECK(e.find("\\n") != std::string::npos);
        CHECK(out.str().empty());
    }
}

TEST_CASE("cli: --corpus-chars with --data is refused, not ignored") {
    CHECK(error_of({"--data", "x.txt", "--corpus-chars", "30000"}) ==
          "--corpus-chars: applies to the generated corpus only, not with --data");
    CHECK(error_of({"--corpus-chars=30000", "--data=x.txt"}) ==
          "--corpus-chars: applies to the generated corpus only, not with --data");
    CHECK(parse({"--corpus-chars", "30000"}).corpus_chars == 30000);
    const auto r = run({"--data", "/nonexistent/x.txt", "--corpus-chars", "30000"});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "trickle-sim: --corpus-chars: applies to the generated corpus only, not with --data\n");
}

TEST_CASE("cli: a --block-size larger than the model is refused before training") {
    const std::initializer_list<std::string> small_model = {
        "--strategy", "sparta", "--sampler", "block", "--steps", "1", "--corpus-chars", "20000", "--context", "2",
        "--embed", "2", "--hidden", "4", "--layers", "1", "--eval-size", "8", "--quiet"};
    const sim_config cfg = parse(small_model);
    const dataset data = prepare_data(cfg);
    const std::size_t n = parameter_count(cfg.model, data.vocab());

    // The check alone: the model's size is allowed, one more is not.
    sim_config fits = cfg;
    fits.block_size = static_cast<int>(n);
    CHECK_NOTHROW(check_model_size(fits, data));
    sim_config too_big = cfg;
    too_big.block_size = static_cast<int>(n) + 1;
    const std::string expected =
        "--block-size: " + std::to_string(n + 1) + " is larger than the model's " + std::to_string(n) + " parameters";
    CHECK_THROWS_WITH_AS(check_model_size(too_big, data), expected.c_str(), usage_error);
    // Only the block sampler has blocks.
    sim_config uniform = too_big;
    uniform.sampler = sampler_kind::uniform;
    CHECK_NOTHROW(check_model_size(uniform, data));

    // The whole program: exit 2 before the header or a CSV, instead of allocating 2^31 floats.
    const sim_test::temp_file csv("block.csv");
    std::vector<std::string> args(small_model);
    for (const char* a : {"--block-size", "2147483647", "--csv"}) args.emplace_back(a);
    args.push_back(csv.path());
    std::ostringstream out, err;
    CHECK(run_cli(args, out, err) == 2);
    CHECK(out.str().empty());
    CHECK(err.str() == "trickle-sim: --block-size: 2147483647 is larger than the model's " + std::to_string(n) +
                           " parameters\n");
    CHECK_FALSE(std::filesystem::exists(csv.path()));
}

TEST_CASE("cli: a --data file that cannot be read exits 2 before training") {
    if (std::filesystem::exists("/proc/self/mem")) {
        // A regular file by stat, but reading it from offset 0 fails (EIO): not "empty".
        const auto r = run({"--data", "/proc/self/mem", "--quiet"});
        CHECK(r.code == 2);
        CHECK(r.out.empty());
        CHECK_MESSAGE(r.err.find("trickle-sim: --data: cannot read '/proc/self/mem': ") == 0, r.err);
    }
    auto r = run({"--data", std::filesystem::temp_directory_path().string(), "--quiet"});
    CHECK(r.code == 2);
    CHECK(r.err.find("--data: '" + std::filesystem::temp_directory_path().string() + "' is not a regular file") !=
          std::string::npos);
    r = run({"--data", "/nonexistent/trickle-sim-missing.txt", "--quiet"});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "trickle-sim: --data: file '/nonexistent/trickle-sim-missing.txt' does not exist\n");
}

TEST_CASE("cli: a --csv that cannot be written exits 2 before training") {
    const std::initializer_list<std::string> quick = {"--strategy", "none", "--steps", "1", "--corpus-chars", "20000",
                                                      "--hidden", "4", "--embed", "2", "--context", "2",
                                                      "--eval-size", "8", "--quiet"};
    const auto run_with_csv = [&](const std::string& path, std::vector<std::string> extra = {}) {
        std::vector<std::string> args(quick);
        args.emplace_back("--csv");
        args.push_back(path);
        args.insert(args.end(), extra.begin(), extra.end());
        std::ostringstream out, err;
        const int code = run_cli(args, out, err);
        return cli_result{code, out.str(), err.str()};
    };

    // A device: refused by its type, before it is opened.
    if (std::filesystem::exists("/dev/full")) {
        const auto r = run_with_csv("/dev/full");
        CHECK(r.code == 2);
        CHECK(r.out.empty());
        CHECK(r.err == "trickle-sim: --csv: '/dev/full' is not a regular file\n");
        // A write that fails (ENOSPC) is found when the header is flushed, not after a run.
        CHECK_THROWS_WITH_AS(csv_writer("/dev/full"), "--csv: cannot write to '/dev/full'", usage_error);
    }

    // A directory, and a path in a directory that does not exist.
    auto r = run_with_csv(std::filesystem::temp_directory_path().string());
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find("is not a regular file") != std::string::npos);
    r = run_with_csv("/nonexistent/dir/out.csv");
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "trickle-sim: --csv: cannot open '/nonexistent/dir/out.csv' for writing\n");

    // A FIFO: opening it for writing would block until a reader came; refused from its stat.
    {
        const sim_test::temp_file fifo("out.fifo");
        REQUIRE(::mkfifo(fifo.path().c_str(), 0600) == 0);
        r = run_with_csv(fifo.path());
        CHECK(r.code == 2);
        CHECK(r.out.empty());
        CHECK(r.err == "trickle-sim: --csv: '" + fifo.path() + "' is not a regular file\n");
    }

    // The --data file, by its own name or another (a symbolic link): refused, text untouched.
    {
        std::string text;
        for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog. ";
        const sim_test::temp_file data("same.txt", text);
        const sim_test::temp_file link("same-link.txt");
        std::filesystem::create_symlink(data.path(), link.path());
        for (const std::string& csv_path : {data.path(), link.path()}) {
            CAPTURE(csv_path);
            std::vector<std::string> args = {"--strategy", "none", "--steps", "1", "--hidden", "4", "--embed", "2",
                                             "--context", "2", "--eval-size", "8", "--quiet", "--data", data.path(),
                                             "--csv", csv_path};
            std::ostringstream out, err;
            CHECK(run_cli(args, out, err) == 2);
            CHECK(out.str().empty());
            CHECK(err.str() == "trickle-sim: --csv: '" + csv_path +
                                   "' is the --data file; writing the CSV would overwrite the training text\n");
            std::ifstream in(data.path(), std::ios::binary);
            CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == text);
        }
    }

    // A regular file that exists is fine (it is replaced), as is a new one.
    const sim_test::temp_file fresh("fresh.csv");
    r = run_with_csv(fresh.path());
    CHECK(r.code == 0);
    CHECK(std::filesystem::is_regular_file(fresh.path()));
    r = run_with_csv(fresh.path());
    CHECK(r.code == 0);
}
