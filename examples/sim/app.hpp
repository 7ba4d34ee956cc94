// examples/sim/app.hpp: trickle-sim as a function: arguments in, report out, exit code back.
//
// main() is this function on std::cout and std::cerr; the tests call it directly to check
// what the program prints and returns for good and bad input.
#pragma once

#include "corpus.hpp"
#include "gemm.hpp"
#include "options.hpp"
#include "report.hpp"
#include "trainer.hpp"

#include <cstddef>
#include <exception>
#include <filesystem>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace trickle_sim {

// What is about to run, so a saved report says how it was made.
inline void print_header(std::ostream& out, const sim_config& cfg, const dataset& data) {
    out << "trickle-sim: " << cfg.workers << " workers x " << cfg.steps << " steps, batch " << cfg.batch
        << " per worker, lr " << cfg.lr;
    if (cfg.lr_schedule != schedule_kind::constant) out << " (" << name_of(cfg.lr_schedule) << " decay)";
    if (cfg.clip > 0) out << ", gradient clip " << cfg.clip;
    out << ", seed " << cfg.seed << '\n';
    out << "data: " << data.source << ", " << data.tokens.size() << " bytes, vocabulary " << data.vocab() << ", "
        << name_of(cfg.shards) << " shards of ~" << data.shards[0].size() << " positions, ";
    if (cfg.model.kind == model_kind::gpt)
        out << data.eval_positions.size() << " held-out windows of " << cfg.model.context << '\n';
    else
        out << data.eval_positions.size() << " held-out positions\n";
    const std::size_t parameters = parameter_count(cfg.model, data.vocab());
    if (cfg.model.kind == model_kind::gpt)
        out << "model: gpt, context " << cfg.model.context << ", layers " << cfg.model.layers << ", d_model "
            << cfg.model.d_model << ", heads " << cfg.model.heads << ", " << parameters
            << " parameters (matrix products: " << gemm_backend() << ", " << cfg.threads
            << " thread(s) per worker)\n";
    else
        out << "model: context " << cfg.model.context << ", embedding " << cfg.model.embed << ", " << cfg.model.layers
            << " x " << cfg.model.hidden << " tanh, " << parameters << " parameters (matrix products: "
            << gemm_backend() << ")\n";
    bool sparta = false, diloco = false, demo = false;
    for (auto s : cfg.strategies) {
        sparta = sparta || uses_sparta(s);
        diloco = diloco || uses_diloco(s);
        demo = demo || uses_demo(s);
    }
    if (sparta) {
        out << "sparta: fraction " << cfg.fraction;
        if (cfg.fraction_schedule != schedule_kind::constant)
            out << " -> " << cfg.fraction_end << " (" << name_of(cfg.fraction_schedule) << ")";
        out << ", sampler " << name_of(cfg.sampler) << ", every " << cfg.interval << " step(s), topology "
            << topology_label(cfg);
        if (cfg.codec != codec_kind::fp32) out << ", codec " << name_of(cfg.codec);
        out << '\n';
    }
    if (diloco) {
        out << "diloco: outer step every " << cfg.outer_interval << " steps, outer " << name_of(cfg.outer);
        if (kind_has<outer_kind, lr_field>(cfg.outer)) out << " lr " << cfg.outer_lr;
        if (cfg.outer_lr_schedule != schedule_kind::constant)
            out << " -> " << cfg.outer_lr * cfg.outer_lr_end << " (" << name_of(cfg.outer_lr_schedule) << ")";
        if (kind_has<outer_kind, momentum_field>(cfg.outer)) out << " momentum " << cfg.outer_momentum;
        out << ", drop probability " << cfg.drop_prob << ", prune " << cfg.prune << ", topology "
            << topology_label(cfg);
        if (cfg.topk_k > 0) out << ", top " << cfg.topk_k << " of every " << cfg.topk_chunk;
        if (cfg.outer_codec != codec_kind::fp32) out << ", outer codec " << name_of(cfg.outer_codec);
        if (cfg.error_feedback > 0) out << " with error feedback " << cfg.error_feedback;
        if (cfg.aggregate.robust()) out << ", aggregate " << cfg.aggregate.name();
        out << '\n';
    }
    if (demo)
        out << "demo: chunk " << cfg.demo_chunk << ", top " << cfg.demo_k
            << " coefficients per chunk, compression decay " << cfg.demo_decay << ", values " << name_of(cfg.demo_values)
            << ", sign step --lr, weight decay " << cfg.weight_decay << " on every tensor\n";
    if (!cfg.byzantine.empty()) {
        out << "byzantine:";
        for (std::size_t i = 0; i < cfg.byzantine.size(); ++i)
            out << (i ? ", worker " : " worker ") << cfg.byzantine[i].worker << ' '
                << byzantine_kind_name(cfg.byzantine[i]);
        out << '\n';
    }
    for (auto s : cfg.strategies)
        if (s == strategy_kind::streaming_diloco) {
            out << "streaming-diloco: " << cfg.fragments << " fragment(s), overlap " << cfg.overlap_steps
                << " step(s), ";
            if (cfg.carry_local)
                out << "carrying the local progress\n";
            else
                out << "mix " << cfg.mix << '\n';
        }
    if (cfg.sparta_overlap) out << "sparta: overlapped (each exchange applied one step later)\n";
    if (elastic_run(cfg)) {
        const auto list = [](const std::vector<membership_event>& evs) {
            std::ostringstream s;
            for (std::size_t i = 0; i < evs.size(); ++i) s << (i ? "," : "") << evs[i].worker << '@' << evs[i].step;
            return evs.empty() ? std::string("none") : s.str();
        };
        out << "elastic: comm::elastic_local, " << world_capacity(cfg) << " worker id(s), failures " << list(cfg.fails)
            << ", joins " << list(cfg.joins) << ", min workers " << cfg.min_workers << ", timeout " << cfg.timeout_ms
            << " ms\n";
    }
    if (timed_run(cfg)) {
        out << "speeds:";
        for (double s : cfg.speeds) out << ' ' << s;
        out << ", rounds " << name_of(cfg.round_policy) << '\n';
    }
    for (const auto& net : cfg.networks) {
        out << "network model: " << net.label << " = " << net.bandwidth_bytes_per_s * 8 / 1e9 << " Gbit/s, "
            << net.latency_s * 1e3 << " ms per round; compute ";
        if (cfg.step_time_s > 0)
            out << cfg.step_time_s * 1e3 << " ms per step (--step-time)\n";
        else
            out << "as measured per step\n";
        for (const auto& l : net.links)
            out << "  worker " << l.worker << "'s own link: " << l.bandwidth_bytes_per_s * 8 / 1e9 << " Gbit/s, "
                << l.latency_s * 1e3 << " ms per round\n";
    }
}

// What parse_cli cannot see of --csv, checked before anything is read or written: the
// file must be a regular file or not exist yet (opening a FIFO for writing would wait for a
// reader forever; a device or a directory holds no table), and it must not be the --data file.
inline void check_csv_path(const sim_config& cfg) {
    if (cfg.csv.empty()) return;
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(cfg.csv, ec);
    if (!std::filesystem::exists(st)) return; // created when opened, or refused then
    if (!std::filesystem::is_regular_file(st))
        throw usage_error("--csv: " + quoted_value(cfg.csv) + " is not a regular file");
    if (!cfg.data_file.empty() && std::filesystem::equivalent(cfg.csv, cfg.data_file, ec))
        throw usage_error("--csv: " + quoted_value(cfg.csv) +
                          " is the --data file; writing the CSV would overwrite the training text");
}

// What parse_cli cannot see of the model's size, which the data's vocabulary sets: the
// block sampler's blocks must fit in the model (a larger block would be allocated whole).
inline void check_model_size(const sim_config& cfg, const dataset& data) {
    bool sparta = false;
    for (auto s : cfg.strategies) sparta = sparta || uses_sparta(s);
    if (!sparta || !kind_has<sampler_kind, block_size_field>(cfg.sampler)) return;
    const std::size_t parameters = parameter_count(cfg.model, data.vocab());
    if (static_cast<std::size_t>(cfg.block_size) > parameters)
        throw usage_error("--block-size: " + std::to_string(cfg.block_size) + " is larger than the model's " +
                          std::to_string(parameters) + " parameters");
}

// Runs a parsed configuration: the header, one training run per strategy, the table.
// Every usage_error (the --csv path, the network model, the data, the block size, the CSV's header) comes
// before the first training step.
inline int run_simulation(const sim_config& cfg, std::ostream& out) {
    single_threaded_blas();
    check_csv_path(cfg);
    check_network_model(cfg);
    const dataset data = prepare_data(cfg);
    check_model_size(cfg, data);
    std::optional<csv_writer> csv;
    if (!cfg.csv.empty()) csv.emplace(cfg.csv, cfg.networks, round_trained(cfg));

    print_header(out, cfg, data);
    out << std::flush;

    progress_line progress(!cfg.quiet);
    std::vector<run_result> runs;
    for (std::size_t i = 0; i < cfg.strategies.size(); ++i) {
        const auto s = cfg.strategies[i];
        std::ostringstream label;
        label << '[' << i + 1 << '/' << cfg.strategies.size() << ' ' << name_of(s) << ']';
        progress.begin(label.str(), cfg.steps,
                       static_cast<double>(cfg.workers) * cfg.batch * targets_per_example(cfg.model));
        runs.push_back(run_strategy(cfg, data, s, &progress));
        progress.end();
        if (csv) csv->write(runs.back());
    }
    out << '\n';
    print_table(out, runs);
    print_network_table(out, runs, cfg.networks);
    print_membership_table(out, runs);
    print_aggregation_table(out, runs, cfg);
    out << "\neval loss/ppl: the averaged model (mean of the replicas) on held-out text, in nats per character;\n"
           "replica loss: the replicas alone on the same text (mean); train loss: the replicas on their own\n"
           "batches since the previous evaluation; corr: mean pairwise correlation of the replicas' changes since\n"
           "initialisation; sent/worker: bytes the busiest worker sent for training, from trickle's counters;\n"
           "vs ddp: ddp's bytes for the same steps divided by this strategy's.\n";
    return 0;
}

// Exit codes: 0 success (or --help), 2 bad input (message on err, naming the option or
// file), 1 any other failure.
inline int run_cli(std::span<const std::string> args, std::ostream& out, std::ostream& err) {
    sim_config cfg;
    try {
        cfg = parse_cli(args);
        if (cfg.help) {
            out << help_text();
            return 0;
        }
        return run_simulation(cfg, out);
    } catch (const usage_error& e) {
        err << "trickle-sim: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        err << "trickle-sim: error: " << e.what() << '\n';
        return 1;
    }
}

} // namespace trickle_sim
