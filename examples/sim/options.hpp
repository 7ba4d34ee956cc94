// examples/sim/options.hpp: trickle-sim's configuration and its command-line parser.
//
// parse_cli returns a complete, validated configuration or throws usage_error naming the
// option at fault; nothing on the command line is ever ignored (a value that would have
// no effect with the chosen strategies is an error too, so a typo cannot pass unnoticed).
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <trickle/aggregate/aggregate.hpp>
#include <trickle/codec/registry.hpp>
#include <trickle/core/fields.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/kernels/dct.hpp>
#include <trickle/outer/registry.hpp>
#include <trickle/sampler/registry.hpp>
#include <trickle/schedule/registry.hpp>
#include <trickle/topology/registry.hpp>

#include "byzantine.hpp"
#include "plan.hpp"

namespace trickle_sim {

// Bad input from the user: an option, a value or a data file. trickle-sim exits with 2.
class usage_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class strategy_kind { ddp, none, sparta, diloco, sparta_diloco, streaming_diloco, demo, demo_shared };
enum class shard_mode { iid, non_iid };
enum class model_kind { mlp, gpt };
enum class round_policy_kind { deadline, wait, adaptive };

// The policies: a kind is the position of the policy in its family's registry
// (include/trickle/<family>/registry.hpp), and its name is the policy's own. The
// enumerators name the built-in policies for the code that treats one of them specially; a
// policy added to a registry is a kind (and a value of its option) without one.
enum class sampler_kind { uniform, permutation, block, layerwise };
enum class schedule_kind { constant, linear, cosine };
enum class topology_kind { all_reduce, ring, gossip, exponential, islands };
enum class outer_kind { sgd, momentum, nesterov, adam, average };
enum class codec_kind { fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, fp8_block, int8, int4, sign2 };

// The registry a kind numbers.
template <class Kind>
struct registry_of;
template <>
struct registry_of<sampler_kind> {
    using type = trickle::sampler::registry;
};
template <>
struct registry_of<schedule_kind> {
    using type = trickle::schedule::registry;
};
template <>
struct registry_of<topology_kind> {
    using type = trickle::topology::registry;
};
template <>
struct registry_of<outer_kind> {
    using type = trickle::outer::registry;
};
template <>
struct registry_of<codec_kind> {
    using type = trickle::codec::registry;
};
template <class Kind>
using registry_t = typename registry_of<Kind>::type;

namespace detail {
// Whether each enumerator is the position of the policy of its name in the registry.
template <class Kind, std::size_t N>
constexpr bool numbered_as_registry(const std::pair<Kind, std::string_view> (&named)[N]) {
    for (const auto& [kind, name] : named)
        if (trickle::index_of_name<registry_t<Kind>>(name) != static_cast<std::size_t>(kind)) return false;
    return true;
}
} // namespace detail

static_assert(detail::numbered_as_registry<sampler_kind>({{sampler_kind::uniform, "uniform"},
                                                          {sampler_kind::permutation, "permutation"},
                                                          {sampler_kind::block, "block"},
                                                          {sampler_kind::layerwise, "layerwise"}}));
static_assert(detail::numbered_as_registry<schedule_kind>(
    {{schedule_kind::constant, "constant"}, {schedule_kind::linear, "linear"}, {schedule_kind::cosine, "cosine"}}));
static_assert(detail::numbered_as_registry<topology_kind>({{topology_kind::all_reduce, "all_reduce"},
                                                           {topology_kind::ring, "ring"},
                                                           {topology_kind::gossip, "gossip"},
                                                           {topology_kind::exponential, "exponential"},
                                                           {topology_kind::islands, "islands"}}));
static_assert(detail::numbered_as_registry<outer_kind>({{outer_kind::sgd, "sgd"},
                                                        {outer_kind::momentum, "momentum"},
                                                        {outer_kind::nesterov, "nesterov"},
                                                        {outer_kind::adam, "adam"},
                                                        {outer_kind::average, "average"}}));
static_assert(detail::numbered_as_registry<codec_kind>(
    {{codec_kind::fp32, "fp32"}, {codec_kind::bf16, "bf16"}, {codec_kind::fp16, "fp16"},
     {codec_kind::fp8_e4m3, "fp8_e4m3"}, {codec_kind::fp8_e5m2, "fp8_e5m2"}, {codec_kind::fp8_block, "fp8_block"},
     {codec_kind::int8, "int8"}, {codec_kind::int4, "int4"}, {codec_kind::sign2, "sign2"}}));

// Every kind of a family, in the registry's order.
template <class Kind>
std::vector<Kind> all_kinds() {
    std::vector<Kind> out;
    for (std::size_t i = 0; i < registry_t<Kind>::size; ++i) out.push_back(static_cast<Kind>(i));
    return out;
}

// Calls f(std::type_identity<P>{}) for the policy P of kind k and returns its result.
template <class Kind, class F>
decltype(auto) visit_kind(Kind k, F&& f) {
    return trickle::visit_index<registry_t<Kind>>(static_cast<std::size_t>(k), std::forward<F>(f));
}

// What the command line sets on a policy, found by its fields: a codec's block_size
// (--codec-block), a sampler's block_size (--block-size), a topology's group size
// (--island-size), a schedule's end and length (--fraction-end, --outer-lr-end), an outer
// optimizer's lr and momentum (--outer-lr, --outer-momentum). A policy added to a registry
// takes the options its fields name, and no others.
// The field traits are the library's (trickle/core/fields.hpp), by the names used here.
template <class P>
using block_size_field = trickle::fields::block_size<P>;
template <class P>
using group_size_field = trickle::fields::group_size<P>;
template <class P>
using decay_fields = trickle::fields::decay<P>;
template <class P>
using lr_field = trickle::fields::lr<P>;
template <class P>
using momentum_field = trickle::fields::momentum<P>;

// The schedules trickle-sim builds from its options: those with no parameters and those
// that decay to --fraction-end (or --outer-lr-end) over the run. piecewise, whose points no
// option gives, is the library's and Python's only.
template <class S>
struct cli_schedule : std::bool_constant<std::is_empty_v<S> || decay_fields<S>::value> {};

// Whether the policy of kind k has what Has looks for.
template <class Kind, template <class> class Has>
bool kind_has(Kind k) {
    return visit_kind(k, [](auto t) { return Has<typename decltype(t)::type>::value; });
}

inline constexpr std::string_view strategy_names[] = {"ddp", "none", "sparta", "diloco", "sparta-diloco",
                                                       "streaming-diloco", "demo", "demo-shared"};
inline constexpr std::string_view shard_names[] = {"iid", "non-iid"};
inline constexpr std::string_view model_names[] = {"mlp", "gpt"};
inline constexpr std::string_view round_policy_names[] = {"deadline", "wait", "adaptive"};

template <class E, std::size_t N>
std::string_view name_of(E e, const std::string_view (&names)[N]) {
    return names[static_cast<std::size_t>(e)];
}
inline std::string_view name_of(strategy_kind s) { return name_of(s, strategy_names); }
inline std::string_view name_of(shard_mode s) { return name_of(s, shard_names); }
inline std::string_view name_of(model_kind s) { return name_of(s, model_names); }
inline std::string_view name_of(round_policy_kind s) { return name_of(s, round_policy_names); }

// A policy's name: its registry's (trickle::names_of).
template <class Kind>
std::string_view policy_name(Kind k) {
    const auto& names = trickle::names_of<registry_t<Kind>>();
    const auto i = static_cast<std::size_t>(k);
    return i < names.size() ? names[i] : std::string_view("(unregistered)");
}
inline std::string_view name_of(sampler_kind s) { return policy_name(s); }
inline std::string_view name_of(schedule_kind s) { return policy_name(s); }
inline std::string_view name_of(topology_kind s) { return policy_name(s); }
inline std::string_view name_of(codec_kind s) { return policy_name(s); }
inline std::string_view name_of(outer_kind s) { return policy_name(s); }

// The spelling trickle-sim had before the registry: '-' for '_' (all-reduce, fp8-e4m3). It
// is still accepted, as a deprecated alias of the registry's name; --help shows the
// registry's names. The messages that list names keep this spelling, which scripts and
// tests match (tests/sim/test_cli.cpp).
inline std::string dashed(std::string_view name) {
    std::string s(name);
    for (char& ch : s)
        if (ch == '_') ch = '-';
    return s;
}

// The values an option offers: the default first, then every other kind of the family that
// `offered` accepts, in the registry's order.
template <class Kind>
std::vector<Kind> choices(Kind default_kind, bool (*offered)(Kind) = nullptr) {
    std::vector<Kind> out{default_kind};
    for (Kind k : all_kinds<Kind>())
        if (k != default_kind && (offered == nullptr || offered(k))) out.push_back(k);
    return out;
}

// The schedules --fraction-schedule and --outer-lr-schedule offer (cli_schedule), and the
// shapes of the trainer's own --lr-schedule (model.hpp, learning_rate).
inline bool cli_offers_schedule(schedule_kind k) { return kind_has<schedule_kind, cli_schedule>(k); }
inline std::vector<schedule_kind> schedule_choices() { return choices(schedule_kind::constant, &cli_offers_schedule); }
inline std::vector<schedule_kind> lr_schedule_choices() {
    return {schedule_kind::constant, schedule_kind::linear, schedule_kind::cosine};
}
inline std::vector<sampler_kind> sampler_choices() { return choices(sampler_kind::uniform); }
inline std::vector<topology_kind> topology_choices() { return choices(topology_kind::all_reduce); }
inline std::vector<outer_kind> outer_choices() { return choices(outer_kind::nesterov); }
inline std::vector<codec_kind> codec_choices() { return choices(codec_kind::fp32); }

// "a|b|c" of the kinds' names (registry spelling), or "a, b and c" / "a or b" in prose.
template <class Kind>
std::string joined(const std::vector<Kind>& kinds, std::string_view separator, std::string_view last_separator,
                   std::string (*spell)(std::string_view) = nullptr) {
    std::string out;
    for (std::size_t i = 0; i < kinds.size(); ++i) {
        if (i) out += i + 1 == kinds.size() ? last_separator : separator;
        out += spell ? spell(name_of(kinds[i])) : std::string(name_of(kinds[i]));
    }
    return out;
}
template <class Kind>
std::string joined(const std::vector<Kind>& kinds, std::string_view separator = "|") {
    return joined(kinds, separator, separator);
}

// The kinds among `kinds` whose policy has the fields Has looks for.
template <template <class> class Has, class Kind>
std::vector<Kind> kinds_with(const std::vector<Kind>& kinds) {
    std::vector<Kind> out;
    for (Kind k : kinds)
        if (kind_has<Kind, Has>(k)) out.push_back(k);
    return out;
}

inline bool uses_sparta(strategy_kind s) { return s == strategy_kind::sparta || s == strategy_kind::sparta_diloco; }
inline bool uses_diloco(strategy_kind s) {
    return s == strategy_kind::diloco || s == strategy_kind::sparta_diloco || s == strategy_kind::streaming_diloco;
}
inline bool uses_demo(strategy_kind s) { return s == strategy_kind::demo || s == strategy_kind::demo_shared; }

// The outer learning rate used when --outer-lr is not given: the values the simulator was
// tuned with for the built-in optimizers, and an added optimizer's own default.
inline double default_outer_lr(outer_kind o) {
    switch (o) {
    case outer_kind::nesterov:
    case outer_kind::momentum: return 0.7; // DiLoCo's tuned value
    case outer_kind::sgd: return 0.7;      // as nesterov, so the two differ only by momentum (1.0 = average)
    case outer_kind::adam: return 0.03;    // per-coordinate steps; best of 0.003..0.3 at the default settings
    case outer_kind::average: return 1.0;  // no learning rate: params = snapshot - mean change
    }
    return visit_kind(o, [](auto t) {
        using O = typename decltype(t)::type;
        if constexpr (lr_field<O>::value)
            return static_cast<double>(O{}.lr);
        else
            return 1.0;
    });
}

// The GPT's defaults where they differ from the MLP's: what --model gpt means when
// --context, --batch, --lr-schedule or --clip are not given (docs/simulator.md says why).
struct gpt_defaults {
    static constexpr int context = 32;
    static constexpr int batch = 4;
    static constexpr int d_model = 64;
    static constexpr int heads = 4;
    static constexpr float clip = 1.0f;
};

// One worker's own link in a --network item ('SPEC;W=SPEC'): worker W's bandwidth and latency.
struct network_link {
    int worker = 0;
    double bandwidth_bytes_per_s = 0; // > 0
    double latency_s = 0;             // >= 0, per message round
};

// One link of the network model (--network): every worker's link to the others, except the
// workers with a link of their own (`links`, by ascending worker id).
struct network_config {
    std::string label;                  // the preset's name, or the spec as given ("1Gbps,50ms", "internet;2=1Mbps,80ms")
    double bandwidth_bytes_per_s = 0;   // > 0
    double latency_s = 0;               // >= 0, per message round
    std::vector<network_link> links{};  // per-worker overrides (empty: every worker on the link above)

    // Worker w's link: its override, or the common one.
    network_link link_of(int w) const {
        for (const auto& l : links)
            if (l.worker == w) return l;
        return {w, bandwidth_bytes_per_s, latency_s};
    }
    // The slowest of the links of workers 0 .. workers-1, as one link: the least bandwidth and
    // the most latency (a collective is as slow as its slowest participant's link). Without
    // overrides, this link.
    network_config slowest(int workers) const {
        network_config out{label, bandwidth_bytes_per_s, latency_s, {}};
        for (const auto& l : links)
            if (l.worker < workers) {
                out.bandwidth_bytes_per_s = std::min(out.bandwidth_bytes_per_s, l.bandwidth_bytes_per_s);
                out.latency_s = std::max(out.latency_s, l.latency_s);
            }
        return out;
    }
};

// The presets of --network, with the values docs/simulator.md gives reasons for.
struct network_preset {
    std::string_view name;
    double bandwidth_bits_per_s;
    double latency_s;
};
inline constexpr network_preset network_presets[] = {
    {"datacenter", 100e9, 10e-6},  // 100 Gbit/s, 10 us: one data centre's fabric
    {"cross-region", 10e9, 30e-3}, // 10 Gbit/s, 30 ms: a dedicated link between regions of a cloud
    {"internet", 1e9, 50e-3},      // 1 Gbit/s, 50 ms: a well-connected site over the public internet
};

struct model_config {
    model_kind kind = model_kind::mlp;
    int context = 12;  // characters of context (gpt: the window, and the number of positions)
    int embed = 24;    // mlp: embedding width per character
    int hidden = 256;  // mlp: units per hidden layer
    int layers = 2;    // mlp: hidden layers (tanh); gpt: transformer blocks
    int d_model = gpt_defaults::d_model; // gpt: width of the residual stream
    int heads = gpt_defaults::heads;     // gpt: attention heads (divide d_model)
};

struct sim_config {
    std::vector<strategy_kind> strategies{strategy_kind::ddp, strategy_kind::none, strategy_kind::sparta,
                                          strategy_kind::diloco, strategy_kind::sparta_diloco};
    int workers = 4;
    int steps = 2000;
    int eval_every = 100;
    std::uint64_t seed = 42;
    int batch = 32;
    float lr = 4e-3f;
    int warmup = 50;
    float weight_decay = 0.1f;
    schedule_kind lr_schedule = schedule_kind::constant; // after warm-up; linear and cosine end at 0.1 x lr
    float clip = 0.0f;                                   // global gradient-norm limit (0: no clipping)
    int threads = 1;                                     // gpt: OpenMP threads per worker
    model_config model{};

    std::string data_file;              // empty: the generated corpus
    std::size_t corpus_chars = 400'000; // size of the generated corpus
    shard_mode shards = shard_mode::iid;
    int eval_size = 8192;               // held-out positions evaluated

    // SPARTA
    double fraction = 0.005;
    sampler_kind sampler = sampler_kind::uniform;
    int block_size = 256;
    int interval = 1;
    schedule_kind fraction_schedule = schedule_kind::constant;
    double fraction_end = 0.005;

    // DiLoCo
    int outer_interval = 100;
    outer_kind outer = outer_kind::nesterov;
    double outer_lr = 0.7;
    double outer_momentum = 0.9;
    schedule_kind outer_lr_schedule = schedule_kind::constant;
    double outer_lr_end = 1.0; // final multiple of --outer-lr (1 when constant)
    double drop_prob = 0.0;
    double prune = 0.0;
    trickle::aggregate::rule aggregate{};    // --aggregate: how the outer step combines the workers' deltas
    std::vector<byzantine_spec> byzantine;   // --byzantine: workers that corrupt their outer gradients

    topology_kind topology = topology_kind::all_reduce;
    int island_size = 2; // --topology islands: workers per island

    // Compression
    codec_kind codec = codec_kind::fp32;       // SPARTA's values on the wire
    codec_kind outer_codec = codec_kind::fp32; // DiLoCo's outer gradient on the wire
    int codec_block = 64;                      // values per scale of int8, int4 and sign2
    double error_feedback = 0.0;               // DiLoCo: beta of the compression residual (0: off)
    int topk_chunk = 0, topk_k = 0;            // DiLoCo: keep topk_k of every topk_chunk values (0: off)

    // Streaming and overlap
    int fragments = 4;         // streaming-diloco: F
    int overlap_steps = 1;     // streaming-diloco: tau, in [0, --outer-interval)
    double mix = 0.0;          // streaming-diloco: alpha in [0, 1]
    bool sparta_overlap = false; // --overlap: SPARTA applies each exchange one step later
    bool carry_local = false;    // --carry-local: streaming-diloco lands a late average plus the local progress

    // DeMo (demo, demo-shared): its sign step is --lr's schedule, its weight decay --weight-decay
    int demo_chunk = 64;                       // s: 1-D chunks of s values, s x s tiles
    int demo_k = 32;                           // coefficients kept per chunk, in [1, s * s]
    double demo_decay = 0.999;                 // the compression decay beta in [0, 1]: m <- beta m + g
    codec_kind demo_values = codec_kind::fp32; // the kept coefficients on the wire

    // The network model: empty: no modelled wall time
    std::vector<network_config> networks;
    double step_time_s = 0; // > 0: --step-time (seconds); 0: the measured compute per step

    // Elastic membership (docs/elastic.md, "In the simulator"): with any of --fail, --join
    // and --min-workers the workers talk through comm::elastic_local.
    std::vector<membership_event> fails; // --fail W@STEP: worker W dies before inner step STEP
    std::vector<membership_event> joins; // --join W@STEP: worker W is released then, admitted at the next round
    int min_workers = 1;                 // --min-workers: quorum of a round
    bool min_workers_given = false;
    int timeout_ms = 2000;               // --timeout-ms: the elastic world's timeout
    // Workers at different speeds: one relative speed in (0, 1] per worker (empty: all 1).
    std::vector<double> speeds;
    round_policy_kind round_policy = round_policy_kind::deadline;
    // --round-policy adaptive: DiLoCo's adaptive deadline (trickle::deadline_options), in
    // speed-1 steps; --deadline Q,GRACE,FLOOR,CAP. parse_cli sets the defaults (0.75, 0,
    // --outer-interval, 4 x --outer-interval); the first round's deadline is the cap.
    double deadline_quantile = 0.75, deadline_grace = 0, deadline_floor = 0, deadline_cap = 0;

    std::string csv;     // empty: no CSV
    bool quiet = false;  // no progress line
    bool help = false;   // --help was given: print help_text() and exit 0
};

// Whether the run is elastic (comm::elastic_local, with its membership protocol) and
// whether its workers run at different speeds; either way it is trained by
// run_rounds (trainer_elastic.cpp) instead of the lock-step trainer.
inline bool elastic_run(const sim_config& c) { return !c.fails.empty() || !c.joins.empty() || c.min_workers_given; }
inline bool timed_run(const sim_config& c) { return !c.speeds.empty(); }
inline bool round_trained(const sim_config& c) { return elastic_run(c) || timed_run(c); }

// The ticks of one round of strategy s: an outer step of DiLoCo, an exchange of SPARTA;
// SPARTA + DiLoCo has both (its protocol runs at every step that communicates).
inline std::vector<int> round_lengths(const sim_config& c, strategy_kind s) {
    if (s == strategy_kind::sparta) return {c.interval};
    if (s == strategy_kind::sparta_diloco) return {c.interval, c.outer_interval};
    return {c.outer_interval};
}

// Worker ids in all: --workers, plus the new ids that --join brings in (each has its own
// shard of the training text, so the text is dealt into this many shards).
inline int world_capacity(const sim_config& c) {
    int cap = c.workers;
    for (const auto& e : c.joins) cap = std::max(cap, e.worker + 1);
    return cap;
}

// The topology as the run's header names it ("islands of 3" for islands).
inline std::string topology_label(const sim_config& c) {
    std::string s(name_of(c.topology));
    if (kind_has<topology_kind, group_size_field>(c.topology)) s += " of " + std::to_string(c.island_size);
    return s;
}

// The tensors of the model (what --fragments splits between): the MLP has an embedding, a
// weight and a bias per hidden layer and an output weight and bias; the GPT two embeddings,
// twelve tensors per block and the final norm's two (tests/sim checks this against the models).
inline int model_tensor_count(const model_config& m) {
    return m.kind == model_kind::gpt ? 2 + 12 * m.layers + 2 : 1 + 2 * m.layers + 2;
}

inline std::string help_text() {
    std::string text = R"(trickle-sim: train a character-level language model with N simulated workers
(threads over trickle::comm::local) and compare communication strategies.

usage: trickle-sim [options]      (no options: compare ddp, none, sparta, diloco, sparta-diloco)

Model
  --model mlp|gpt        mlp: an MLP over a window of characters (default);
                         gpt: a decoder-only transformer over the bytes

Strategies
  --strategy LIST        comma-separated, each run in turn on identical data and seeds:
                         ddp            average gradients every step (dense all-reduce)
                         none           train replicas independently, never communicate
                         sparta         average a random fraction p of parameters every step
                         diloco         outer optimizer step on the averaged change every H
                         sparta-diloco  both
                         streaming-diloco  diloco with the model cut into --fragments whose
                                        outer steps are staggered over the round, each one's
                                        average applied --overlap-steps steps later
                         demo           DeMo, the optimizer in place of AdamW: a sign step on
                                        the mean of the workers' --demo-k largest DCT
                                        coefficients per chunk of their momentum (all-gather)
                         demo-shared    demo with the coefficients chosen by the shared seed:
                                        no indices, an all-reduce of the values
                         default: ddp,none,sparta,diloco,sparta-diloco
  --workers N            simulated workers, one thread each, 1..256 (default 4)
  --steps S              inner optimizer steps per worker (default 2000)
  --eval-every E         evaluate the averaged model every E steps and at the end (default 100)
  --seed X               seeds data order, initialisation, corpus and samplers (default 42)
  --batch B              examples (context windows) per worker per step, 1..65536
                         (default 32; gpt: 4 windows, each --context targets)
  --lr LR                inner AdamW learning rate; demo: the sign step (default 0.004)
  --warmup W             linear learning-rate warm-up steps, >= 0 (default 50)
  --lr-schedule S        {lr_schedule} after the warm-up; linear and cosine decay to
                         0.1 x --lr at the last step (default constant; gpt: cosine)
  --weight-decay WD      AdamW decoupled weight decay on weight matrices (demo: on every
                         tensor), >= 0 (default 0.1)
  --clip G               clip each step's gradient to global L2 norm G, >= 0; 0: off
                         (default 0; gpt: 1)

Data
  --data FILE            train on this text file (bytes are the vocabulary); without it, a
                         seeded corpus from a small stochastic grammar is generated
  --corpus-chars N       size of the generated corpus, >= 20000 (default 400000); not with --data
  --shards iid|non-iid   iid: 64-character sequences dealt at random to workers;
                         non-iid: each worker gets one contiguous stretch (default iid)
  --eval-size N          held-out positions evaluated (last 10% of the text), >= 1 (default 8192);
                         gpt: consecutive windows covering N targets

Model size
  --context C            characters of context, 1..256 (default 12; gpt: 32)
  --layers L             mlp: hidden tanh layers; gpt: transformer blocks; 1..8 (default 2)
  --embed E              mlp only: embedding width, 1..1024 (default 24)
  --hidden H             mlp only: units per hidden layer, 1..8192 (default 256)
  --d-model D            gpt only: residual stream width, 1..4096 (default 64)
  --heads H              gpt only: attention heads, dividing --d-model, 1..256 (default 4)
  --threads T            gpt only: OpenMP threads per worker for the matrix products and
                         attention, 1..256 (default 1: the workers' own threads fill the
                         cores; T > 1 helps when workers x T <= idle cores, e.g. --workers 1)

SPARTA (sparta, sparta-diloco)
  --fraction P           fraction of parameters averaged per exchange, (0, 1] (default 0.005)
  --sampler KIND         {sampler} (default uniform)
  --block-size N         block sampler's block length, 1..the model's parameters (default 256)
  --interval H           exchange every H steps, >= 1 (default 1)
  --fraction-schedule S  {schedule}: p moves from --fraction to --fraction-end
                         over --steps (default constant)
  --fraction-end P1      final fraction of a linear or cosine schedule, (0, 1]

DiLoCo (diloco, sparta-diloco, streaming-diloco)
  --outer-interval H     inner steps per outer step, >= 1 (default 100)
  --outer KIND           {outer} (default nesterov)
  --outer-lr LR          outer learning rate, > 0 (default 0.7; adam 0.03; not for average)
  --outer-momentum M     momentum of nesterov and momentum, [0, 1) (default 0.9)
  --outer-lr-schedule S  {schedule}: the outer lr moves from --outer-lr to
                         --outer-lr-end x --outer-lr over the run's outer steps (default constant)
  --outer-lr-end F       final multiple of --outer-lr of a linear or cosine schedule, (0, 1]
  --drop-prob Q          probability a worker's outer gradient is dropped in a round, [0, 1)
  --prune Q              fraction of outer-gradient values pruned by magnitude, [0, 1)

DeMo (demo, demo-shared; docs/demo.md)
  --demo-chunk S         chunk size: 1-D chunks of S values, S x S tiles of a matrix, 1..256
                         (default 64)
  --demo-k K             DCT coefficients sent per chunk, 1..S x S; a vector's chunk keeps
                         min(K, S) (default 32)
  --demo-decay B         momentum decay, m <- B m + g, [0, 1] (default 0.999)
  --demo-values C        the coefficients' values on the wire, a --codec name (default fp32)

Open-world training (diloco and sparta-diloco only; docs/simulator.md)
  --aggregate RULE       how the outer step combines the workers' outer gradients: mean
                         (default), trimmed:K (per coordinate the K lowest and K highest
                         dropped; 2K < --workers), median (per coordinate), clip:TAU
                         (centered clipping to radius TAU); the robust rules need
                         --topology all_reduce and --outer-codec fp32
  --byzantine LIST       W:KIND[,W:KIND...]: worker W (0-based, each once) corrupts every
                         outer gradient d it sends: scale:F (F d), sign (-d), noise:S (d + S x
                         rms(d) Gaussian noise), stale:K (its d of K rounds earlier), nan
                         (excluded by the library); not with --fail, --join, --min-workers

Both
  --topology KIND        {topology}: how sparta and diloco
                         average (default all_reduce). ring: with the two neighbours; gossip:
                         with one random peer per exchange; exponential: with peer r XOR 2^k,
                         k cycling over log2 N; islands: within random groups of --island-size.
                         gossip and exponential need >= 2 workers
  --island-size G        workers per island of --topology islands, 1..--workers (default 2)

Compression (any --topology; --outer-topk needs all_reduce)
  --codec C              SPARTA's values on the wire:
                         {codec}
                         (default fp32, today's wire; fp8_block: E4M3 with a scale per block)
  --outer-codec C        DiLoCo's outer gradient on the wire, the same names (default fp32)
  --codec-block B        values per fp32 scale of {blocked}, >= 1
                         (default 64)
  --outer-topk C:K       DiLoCo: send only the K largest of every C values of the outer gradient
                         (chunk top-k, indices packed in ceil(log2 C) bits; the values in
                         --outer-codec), 1 <= K <= C
  --error-feedback BETA  DiLoCo: add BETA x the last outer gradient's compression error to the
                         next one, (0, 1]; needs a lossy --outer-codec or --outer-topk

Streaming and overlap
  --fragments F          streaming-diloco: fragments, cut at tensor boundaries and balanced by
                         size, 1..the model's tensors (default 4)
  --overlap-steps TAU    streaming-diloco: inner steps between a fragment's outer step and the
                         application of its average, 0..--outer-interval - 1 (default 1; 0 blocks)
  --mix ALPHA            streaming-diloco: merge a late average as ALPHA x local + (1 - ALPHA) x
                         global, [0, 1] (default 0: replace)
  --carry-local          streaming-diloco: land a late average plus the worker's progress since its
                         exchange began (no inner step lost; needs --overlap-steps > 0, --mix 0)
  --overlap              sparta, sparta-diloco: apply each exchange one step later, corrected by
                         the local change meanwhile, so it runs while the next step computes

Network model (a model: docs/simulator.md gives the formula)
  --network SPEC         model the wall time on a link: BW,LAT (bandwidth in bps|Kbps|Mbps|Gbps,
                         latency per message round in us|ms|s, e.g. 1Gbps,50ms) or a preset:
                         datacenter (100Gbps,10us), cross-region (10Gbps,30ms), internet
                         (1Gbps,50ms); several joined by '+' model each (first: column
                         sim_wall_s, others: sim_wall_s_<name>). Per-worker links:
                         'SPEC;W=SPEC;...' gives worker W its own link (quote the ';' from the
                         shell), e.g. 'internet;2=100Mbps,80ms'; a collective is as slow as
                         its slowest participant's link. With --speeds, --fail, --join or
                         --min-workers each round adds its outer step's communication time
                         and --step-time is required
  --step-time MS         compute time per inner step in the model, milliseconds, > 0 (default:
                         the measured compute of the simulated model's steps); needs --network

Elastic membership and workers at different speeds (docs/elastic.md; diloco, sparta and
sparta-diloco through --topology all-reduce)
  --fail W@STEP[,...]    worker W dies before inner step STEP, as if its process died; the
                         others carry on (comm::elastic_local)
  --join W@STEP[,...]    worker W (a failed one, or a new id --workers, --workers + 1, ...) is
                         released at STEP, joins at the next round boundary and takes the state
                         from a live member
  --min-workers N        quorum: a round runs only with N or more members, otherwise training
                         goes on locally, 1..--workers (default 1)
  --timeout-ms T         the elastic world's timeout: a peer silent this long is declared
                         failed, >= 1 (default 2000)
  --speeds S1,S2,...     diloco: each worker's relative speed, in (0, 1], one per worker id
                         (--workers, then the new ids --join brings in; 1 = the fastest); time
                         is modelled in units of a speed-1 inner step
  --round-policy P       with --speeds: deadline (default): a round lasts --outer-interval
                         units, worker i does max(1, floor(H x S_i)) steps and weighs its
                         tokens in the average; wait: everyone does H steps, the round lasts
                         H / min(S) units (the slowest of the round's workers); adaptive: the
                         round lasts DiLoCo's adaptive deadline D, worker i does
                         min(H, max(1, floor(D x S_i))) steps, reports arrival H / S_i, and D
                         follows the arrivals (--deadline)
  --deadline Q,GRACE,FLOOR,CAP
                         --round-policy adaptive: D = clamp(the Q-quantile of the last 4
                         rounds' arrivals + GRACE, FLOOR, CAP), in speed-1 steps; Q in (0, 1],
                         0 <= FLOOR <= CAP, CAP > 0; the first round's D is CAP (default
                         0.75,0,H,4H with H = --outer-interval)

Output
  --csv FILE             one row per evaluation: strategy,step,eval_loss,eval_ppl,train_loss,
                         correlation,bytes_sent_per_worker,reduction_vs_ddp,wall_s,peak_bytes,
                         sim_wall_s (nan without --network); a new or regular file, not --data;
                         elastic and --speeds runs add live_workers,epoch,model_time,goodput
  --quiet                no progress line on stderr
  -h, --help             this text

Every option takes its value as "--opt V" or "--opt=V". An unknown option, a bad value, or
an option that has no effect on the chosen strategies is an error (exit code 2).

Policy names (--sampler, --fraction-schedule, --outer, --outer-lr-schedule, --topology,
--codec, --outer-codec, --demo-values) are the library's own, read from its registries
(include/trickle/*/registry.hpp; docs/extending.md). The older spellings with '-' for '_'
({aliases}) are still accepted, as deprecated aliases.
)";
    std::vector<std::string> aliases;
    const auto add_aliases = [&](const auto& kinds) {
        for (auto k : kinds)
            if (dashed(name_of(k)) != name_of(k)) aliases.push_back(dashed(name_of(k)));
    };
    add_aliases(topology_choices());
    add_aliases(codec_choices());
    add_aliases(sampler_choices());
    add_aliases(schedule_choices());
    add_aliases(outer_choices());
    std::string alias_list;
    for (std::size_t i = 0; i < aliases.size(); ++i) alias_list += (i ? ", " : "") + aliases[i];
    const std::pair<std::string_view, std::string> fields[] = {
        {"{lr_schedule}", joined(lr_schedule_choices())},
        {"{sampler}", joined(sampler_choices())},
        {"{schedule}", joined(schedule_choices())},
        {"{outer}", joined(outer_choices())},
        {"{topology}", joined(topology_choices())},
        {"{codec}", joined(codec_choices())},
        {"{blocked}", joined(kinds_with<block_size_field>(codec_choices()), ", ", " and ")},
        {"{aliases}", alias_list.empty() ? std::string("none now") : alias_list},
    };
    for (const auto& [key, value] : fields)
        for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
            text.replace(at, key.size(), value);
    return text;
}

// Text from the command line (or a file name) as an error message quotes it: a control
// byte shows as \n, \t, \r or \xNN and a backslash as \\, so every message stays on one
// line and says exactly what was given. Bytes from 0x80 up pass unchanged (UTF-8 names).
inline std::string printable(std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(s.size());
    for (const char ch : s) {
        const auto b = static_cast<unsigned char>(ch);
        if (ch == '\\') out += "\\\\";
        else if (ch == '\n') out += "\\n";
        else if (ch == '\t') out += "\\t";
        else if (ch == '\r') out += "\\r";
        else if (b < 0x20 || b == 0x7f) {
            out += "\\x";
            out += hex[b >> 4];
            out += hex[b & 0xf];
        } else
            out += ch;
    }
    return out;
}

// printable(s) in single quotes, as the messages quote a value. (Not named "quoted": for a
// std::string argument, argument-dependent lookup would pick std::quoted instead.)
// (Appended rather than "'" + printable(s): GCC 12 at -O3 reports a false -Wrestrict on
// that operator+ once enough callers inline it.)
inline std::string quoted_value(std::string_view s) {
    std::string out(1, '\'');
    out += printable(s);
    out += '\'';
    return out;
}

namespace detail {

[[noreturn]] inline void bad_value(std::string_view opt, std::string_view value, std::string_view why) {
    throw usage_error(std::string(opt) + ": " + std::string(why) + ", got " + quoted_value(value));
}

template <class Int>
Int parse_int(std::string_view opt, std::string_view v, Int lo, Int hi) {
    Int out{};
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (v.empty() || ec == std::errc::invalid_argument || end != v.data() + v.size())
        bad_value(opt, v, "expected an integer");
    if (ec == std::errc::result_out_of_range || out < lo || out > hi)
        bad_value(opt, v, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return out;
}

// A real number. The trainer computes in fp32, so a value other than 0 must also be a
// normal float: one that rounds to 0 or a subnormal (--lr 1e-300) would train nothing
// while seeming accepted, and one beyond fp32's range would become inf.
inline double parse_double(std::string_view opt, std::string_view v) {
    double out = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (v.empty() || ec != std::errc{} || end != v.data() + v.size() || !std::isfinite(out))
        bad_value(opt, v, "expected a finite number");
    if (out != 0 && !std::isnormal(static_cast<float>(out)))
        bad_value(opt, v, std::fabs(out) < 1 ? "rounds to 0 or a subnormal in fp32 (the smallest normal is about 1.2e-38)"
                                             : "is beyond fp32's range (about 3.4e38)");
    return out;
}

template <class E, std::size_t N>
E parse_enum(std::string_view opt, std::string_view v, const std::string_view (&names)[N]) {
    for (std::size_t i = 0; i < N; ++i)
        if (names[i] == v) return static_cast<E>(i);
    std::string list;
    for (std::size_t i = 0; i < N; ++i) {
        if (i) list += '|';
        list += names[i];
    }
    bad_value(opt, v, "expected one of " + list);
}

// A policy among `offered` by its registry name, or by the older spelling with '-' for
// '_' (a deprecated alias). An unknown value is an error that lists the offered names (in
// the older spelling, which scripts and tests match, then in the registry's).
template <class Kind>
Kind parse_policy(std::string_view opt, std::string_view v, const std::vector<Kind>& offered) {
    for (Kind k : offered)
        if (v == name_of(k) || v == dashed(name_of(k))) return k;
    const std::string listed = joined(offered, "|", "|", &dashed), registered = joined(offered);
    std::string why = std::string(opt) + ": expected one of " + listed + ", got " + quoted_value(v);
    if (listed != registered) why += " (the registry's spelling: " + registered + ")";
    throw usage_error(why);
}

// A schedule option and its end value go together: the end only with a schedule that
// decays to it (linear, cosine), which needs it. Returns the end to use: `end`, or
// `constant_end` for a schedule without one.
inline double schedule_end(schedule_kind kind, std::string_view schedule_opt, bool end_given, std::string_view end_opt,
                           double end, double constant_end) {
    if (!kind_has<schedule_kind, decay_fields>(kind)) {
        if (end_given)
            throw usage_error(std::string(end_opt) + ": needs " + std::string(schedule_opt) + " " +
                              joined(kinds_with<decay_fields>(schedule_choices()), ", ", " or "));
        return constant_end;
    }
    if (!end_given)
        throw usage_error(std::string(schedule_opt) + " " + std::string(name_of(kind)) + ": needs " +
                          std::string(end_opt));
    return end;
}

// A number followed by one of `units` (name, multiplier): "2.5Gbps" -> 2.5e9.
template <std::size_t N>
double parse_with_unit(std::string_view opt, std::string_view spec, std::string_view v,
                       const std::pair<std::string_view, double> (&units)[N], std::string_view what) {
    // The number: digits and a decimal point (no sign, no exponent: the unit scales it).
    std::size_t digits = 0;
    while (digits < v.size() && (std::isdigit(static_cast<unsigned char>(v[digits])) || v[digits] == '.')) ++digits;
    const std::string_view number = v.substr(0, digits), unit = v.substr(digits);
    std::string list;
    for (const auto& u : units) {
        if (!list.empty()) list += '|';
        list += u.first;
    }
    double x = 0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), x);
    if (number.empty() || ec != std::errc{} || end != number.data() + number.size() || !std::isfinite(x))
        bad_value(opt, spec, "expected " + std::string(what) + " as a number and a unit (" + list + ")");
    for (const auto& u : units)
        if (u.first == unit) return x * u.second;
    bad_value(opt, spec, "unknown unit " + quoted_value(unit) + " of the " + std::string(what) + " (expected " + list + ")");
}

// One --network item: a preset's name or BW,LAT.
inline network_config parse_network(std::string_view opt, std::string_view spec) {
    for (const auto& p : network_presets)
        if (p.name == spec) return {std::string(p.name), p.bandwidth_bits_per_s / 8.0, p.latency_s};
    const std::size_t comma = spec.find(',');
    if (comma == std::string_view::npos) {
        std::string names;
        for (const auto& p : network_presets) {
            if (!names.empty()) names += '|';
            names += p.name;
        }
        bad_value(opt, spec, "expected a preset (" + names + ") or BANDWIDTH,LATENCY such as 1Gbps,50ms");
    }
    static constexpr std::pair<std::string_view, double> rates[] = {
        {"bps", 1.0}, {"Kbps", 1e3}, {"Mbps", 1e6}, {"Gbps", 1e9}};
    static constexpr std::pair<std::string_view, double> times[] = {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
    const double bits = parse_with_unit(opt, spec, spec.substr(0, comma), rates, "bandwidth");
    const double latency = parse_with_unit(opt, spec, spec.substr(comma + 1), times, "latency");
    if (!(bits > 0)) bad_value(opt, spec, "the bandwidth must be > 0");
    if (!(latency >= 0)) bad_value(opt, spec, "the latency must be >= 0");
    return {std::string(spec), bits / 8.0, latency};
}

// One --network item: SPEC, or SPEC;W=SPEC;W=SPEC... with worker W's own link. The label
// is the item as given.
inline network_config parse_network_item(std::string_view opt, std::string_view item) {
    const std::size_t semi = item.find(';');
    network_config net = parse_network(opt, item.substr(0, semi));
    if (semi == std::string_view::npos) return net;
    net.label = std::string(item);
    std::size_t pos = semi + 1;
    while (true) {
        const std::size_t next = item.find(';', pos);
        const std::string_view o = item.substr(pos, next == std::string_view::npos ? item.npos : next - pos);
        const std::size_t eq = o.find('=');
        if (eq == std::string_view::npos)
            bad_value(opt, o, "expected a worker's own link as W=SPEC (e.g. 2=100Mbps,80ms or 2=internet)");
        const int w = parse_int<int>(std::string(opt) + " (worker)", o.substr(0, eq), 0, 255);
        for (const auto& l : net.links)
            if (l.worker == w) bad_value(opt, item, "gives worker " + std::to_string(w) + " a link twice");
        const network_config link = parse_network(opt, o.substr(eq + 1));
        net.links.push_back({w, link.bandwidth_bytes_per_s, link.latency_s});
        if (next == std::string_view::npos) break;
        pos = next + 1;
    }
    std::sort(net.links.begin(), net.links.end(),
              [](const network_link& a, const network_link& b) { return a.worker < b.worker; });
    return net;
}

// --fail and --join: W@STEP[,W@STEP...]; the steps are checked against --steps later.
inline std::vector<membership_event> parse_events(std::string_view opt, std::string_view v) {
    std::vector<membership_event> out;
    std::size_t pos = 0;
    while (true) {
        const std::size_t comma = v.find(',', pos);
        const std::string_view item = v.substr(pos, comma == std::string_view::npos ? v.npos : comma - pos);
        const std::size_t at = item.find('@');
        if (at == std::string_view::npos) bad_value(opt, item, "expected W@STEP (a worker id and an inner step)");
        const int w = parse_int<int>(std::string(opt) + " (worker)", item.substr(0, at), 0, 255);
        const int s = parse_int<int>(std::string(opt) + " (step)", item.substr(at + 1), 0, std::numeric_limits<int>::max());
        out.push_back({w, s});
        if (comma == std::string_view::npos) break;
        pos = comma + 1;
    }
    return out;
}

// What the elastic options and --speeds need of the rest of the configuration.
inline void check_elastic(const sim_config& c, const std::string& strategy_list, bool timeout_given,
                          bool round_policy_given) {
    const bool elastic = elastic_run(c);
    const std::string opt = !c.fails.empty() ? "--fail" : !c.joins.empty() ? "--join" : "--min-workers";
    if (timeout_given && !elastic)
        throw usage_error("--timeout-ms: applies to elastic runs (--fail, --join, --min-workers)");
    if (round_policy_given && c.speeds.empty()) throw usage_error("--round-policy: applies with --speeds only");
    if (elastic) {
        for (auto s : c.strategies)
            if (s != strategy_kind::diloco && s != strategy_kind::sparta && s != strategy_kind::sparta_diloco)
                throw usage_error(opt + ": applies to --strategy diloco, sparta and sparta-diloco (the elastic rounds "
                                        "of trickle's algorithms; ddp, none, demo and demo-shared have none, and "
                                        "streaming-diloco is refused over an elastic world), but --strategy is " +
                                  strategy_list);
        if (c.topology != topology_kind::all_reduce)
            throw usage_error(opt + ": needs --topology all-reduce (the other topologies fix their groups to the "
                                    "world's size), not " + std::string(name_of(c.topology)));
        if (c.sparta_overlap)
            throw usage_error(opt + ": does not combine with --overlap (an exchange in flight across a change of "
                                    "membership has no defined owner)");
        if (c.min_workers > c.workers)
            throw usage_error("--min-workers: " + std::to_string(c.min_workers) + " is larger than the world (--workers " +
                              std::to_string(c.workers) + ")");
        for (auto s : c.strategies) {
            std::string error;
            make_membership_plan(c.workers, c.steps, round_lengths(c, s), c.fails, c.joins, error);
            if (!error.empty()) throw usage_error(error);
        }
    }
    // Per-worker links name workers of this run; a round-trained run's modelled time
    // must not depend on the measured compute (the same on every worker and every run).
    const int capacity = world_capacity(c);
    for (const auto& net : c.networks)
        for (const auto& l : net.links)
            if (l.worker >= capacity)
                throw usage_error("--network: " + net.label + " gives worker " + std::to_string(l.worker) +
                                  " a link, but it is not in this run (--workers " + std::to_string(c.workers) +
                                  (capacity > c.workers
                                       ? " and the new ids --join brings in: " + std::to_string(capacity) + " ids in all"
                                       : std::string()) +
                                  ")");
    if (!c.networks.empty() && round_trained(c) && !(c.step_time_s > 0))
        throw usage_error("--network: with --speeds, --fail, --join or --min-workers it needs --step-time (a round's "
                          "modelled time adds its communication to its compute, which must not depend on the "
                          "measured compute)");
    if (!c.speeds.empty()) {
        if (c.speeds.size() != static_cast<std::size_t>(capacity)) {
            if (capacity == c.workers)
                throw usage_error("--speeds: gives " + std::to_string(c.speeds.size()) + " speed(s) for --workers " +
                                  std::to_string(c.workers) + " (one per worker)");
            throw usage_error("--speeds: gives " + std::to_string(c.speeds.size()) + " speed(s) for " +
                              std::to_string(capacity) + " worker ids (--workers " + std::to_string(c.workers) +
                              " and the " + std::to_string(capacity - c.workers) +
                              " new id(s) --join brings in; one per id, in id order)");
        }
        if (c.strategies != std::vector<strategy_kind>{strategy_kind::diloco})
            throw usage_error("--speeds: applies to --strategy diloco only (rounds at a deadline use DiLoCo's manual "
                              "outer steps; every other strategy meets in lock step), but --strategy is " +
                              strategy_list);
        if (c.round_policy != round_policy_kind::wait && c.steps % c.outer_interval != 0)
            throw usage_error("--round-policy " + std::string(name_of(c.round_policy)) + ": --steps (" +
                              std::to_string(c.steps) +
                              ") must be a multiple of --outer-interval (" + std::to_string(c.outer_interval) +
                              "), so that every round ends at a deadline");
    }
}

// What --aggregate and --byzantine need of the rest of the configuration.
inline void check_open_world(const sim_config& c, const std::string& strategy_list, bool aggregate_given) {
    const char* opts[] = {"--aggregate", "--byzantine"};
    const bool given[] = {aggregate_given, !c.byzantine.empty()};
    for (int i = 0; i < 2; ++i) {
        if (!given[i]) continue;
        for (auto s : c.strategies)
            if (s != strategy_kind::diloco && s != strategy_kind::sparta_diloco)
                throw usage_error(std::string(opts[i]) +
                                  ": applies to --strategy diloco and sparta-diloco only (DiLoCo's outer step), but "
                                  "--strategy is " + strategy_list);
    }
    for (const auto& b : c.byzantine)
        if (b.worker >= c.workers)
            throw usage_error("--byzantine: worker " + std::to_string(b.worker) + " is not among --workers " +
                              std::to_string(c.workers) + " (ids 0.." + std::to_string(c.workers - 1) + ")");
    if (!c.byzantine.empty() && elastic_run(c))
        throw usage_error("--byzantine: does not combine with --fail, --join or --min-workers in this version (a "
                          "round below quorum or a change of membership has no defined corrupt contribution)");
    if (c.aggregate.robust()) {
        const std::string rule = "--aggregate " + c.aggregate.name();
        if (const std::string why = c.aggregate.problem(c.workers); !why.empty())
            throw usage_error("--aggregate " + why.substr(why.rfind("aggregate ", 0) == 0 ? 10 : 0));
        if (c.topology != topology_kind::all_reduce)
            throw usage_error(rule + ": needs --topology all_reduce (every worker's contribution on every worker), "
                                     "not " + std::string(name_of(c.topology)));
        if (c.outer_codec != codec_kind::fp32)
            throw usage_error(rule + ": needs --outer-codec fp32 (the rule compares the contributions as sent), not " +
                              std::string(name_of(c.outer_codec)));
        if (c.topk_k > 0)
            throw usage_error(rule + ": does not combine with --outer-topk (sparsified contributions are summed, "
                                     "not compared)");
    }
}

} // namespace detail

// Parses the arguments after the program name. Throws usage_error on any bad input.
inline sim_config parse_cli(std::span<const std::string> args) {
    sim_config c;
    // Options whose effect depends on the strategies; checked once all are known.
    std::vector<std::string> sparta_only, diloco_only, both_only, streaming_only, demo_only;
    bool fraction_end_given = false, outer_lr_given = false, outer_momentum_given = false,
         block_size_given = false, outer_lr_schedule_given = false, outer_lr_end_given = false,
         island_size_given = false, codec_block_given = false, corpus_chars_given = false;
    bool context_given = false, batch_given = false, lr_schedule_given = false, clip_given = false;
    std::vector<std::string> mlp_only, gpt_only;
    std::vector<std::string> seen;
    bool timeout_given = false, round_policy_given = false;
    bool deadline_given = false;
    bool aggregate_given = false;
    bool demo_k_given = false;

    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string_view arg = args[i];
        if (arg == "-h" || arg == "--help") {
            c.help = true;
            continue;
        }
        if (arg == "--quiet") {
            c.quiet = true;
            continue;
        }
        if (arg == "--overlap") {
            if (c.sparta_overlap) throw usage_error("--overlap: given more than once");
            c.sparta_overlap = true;
            continue;
        }
        if (arg == "--carry-local") {
            if (c.carry_local) throw usage_error("--carry-local: given more than once");
            c.carry_local = true;
            continue;
        }
        if (arg.size() < 3 || arg.substr(0, 2) != "--")
            throw usage_error("unexpected argument " + quoted_value(arg) + " (options start with --; see --help)");
        std::string opt(arg);
        std::optional<std::string> value;
        if (const auto eq = opt.find('='); eq != std::string::npos) {
            value = opt.substr(eq + 1);
            opt.resize(eq);
            if (opt == "--quiet" || opt == "--help" || opt == "--overlap" || opt == "--carry-local")
                throw usage_error(opt + ": takes no value");
        }
        static constexpr std::string_view known[] = {
            "--strategy", "--workers", "--steps", "--eval-every", "--seed", "--batch", "--lr", "--warmup",
            "--weight-decay", "--data", "--corpus-chars", "--shards", "--eval-size", "--context", "--embed",
            "--hidden", "--layers", "--fraction", "--sampler", "--block-size", "--interval",
            "--fraction-schedule", "--fraction-end", "--outer-interval", "--outer", "--outer-lr",
            "--outer-momentum", "--outer-lr-schedule", "--outer-lr-end", "--drop-prob", "--prune", "--topology",
            "--island-size", "--csv", "--codec", "--outer-codec", "--codec-block", "--error-feedback", "--outer-topk",
            "--model", "--d-model", "--heads", "--lr-schedule", "--clip", "--threads", "--fragments",
            "--overlap-steps", "--mix", "--network", "--step-time", "--fail", "--join", "--min-workers",
            "--deadline",
            "--timeout-ms", "--speeds", "--round-policy", "--aggregate", "--byzantine", "--demo-chunk", "--demo-k",
            "--demo-decay", "--demo-values"};
        bool is_known = false;
        for (auto k : known) is_known = is_known || k == opt;
        if (!is_known) throw usage_error("unknown option " + quoted_value(opt) + " (see --help)");
        for (const auto& s : seen)
            if (s == opt) throw usage_error(opt + ": given more than once");
        seen.push_back(opt);
        if (!value) {
            if (i + 1 >= args.size()) throw usage_error(opt + ": missing value");
            value = args[++i];
        }
        const std::string_view v = *value;
        constexpr int int_max = std::numeric_limits<int>::max();

        if (opt == "--strategy") {
            c.strategies.clear();
            std::size_t pos = 0;
            while (true) {
                const std::size_t comma = v.find(',', pos);
                const std::string_view item = v.substr(pos, comma == std::string_view::npos ? v.npos : comma - pos);
                const auto s = detail::parse_enum<strategy_kind>(opt, item, strategy_names);
                for (auto prev : c.strategies)
                    if (prev == s) detail::bad_value(opt, v, "lists " + quoted_value(item) + " twice");
                c.strategies.push_back(s);
                if (comma == std::string_view::npos) break;
                pos = comma + 1;
            }
        } else if (opt == "--workers") {
            c.workers = detail::parse_int<int>(opt, v, 1, 256);
        } else if (opt == "--steps") {
            c.steps = detail::parse_int<int>(opt, v, 1, int_max);
        } else if (opt == "--eval-every") {
            c.eval_every = detail::parse_int<int>(opt, v, 1, int_max);
        } else if (opt == "--seed") {
            c.seed = detail::parse_int<std::uint64_t>(opt, v, 0, std::numeric_limits<std::uint64_t>::max());
        } else if (opt == "--batch") {
            c.batch = detail::parse_int<int>(opt, v, 1, 65536);
            batch_given = true;
        } else if (opt == "--lr") {
            const double x = detail::parse_double(opt, v);
            if (!(x > 0 && x <= 10)) detail::bad_value(opt, v, "must be in (0, 10]");
            c.lr = static_cast<float>(x);
        } else if (opt == "--warmup") {
            c.warmup = detail::parse_int<int>(opt, v, 0, int_max);
        } else if (opt == "--weight-decay") {
            const double x = detail::parse_double(opt, v);
            if (!(x >= 0 && x <= 100)) detail::bad_value(opt, v, "must be in [0, 100]");
            c.weight_decay = static_cast<float>(x);
        } else if (opt == "--data") {
            if (v.empty()) detail::bad_value(opt, v, "expected a file name");
            c.data_file = std::string(v);
        } else if (opt == "--corpus-chars") {
            c.corpus_chars = detail::parse_int<std::size_t>(opt, v, 20'000, std::size_t{1} << 31);
            corpus_chars_given = true;
        } else if (opt == "--shards") {
            c.shards = detail::parse_enum<shard_mode>(opt, v, shard_names);
        } else if (opt == "--eval-size") {
            c.eval_size = detail::parse_int<int>(opt, v, 1, int_max);
        } else if (opt == "--context") {
            c.model.context = detail::parse_int<int>(opt, v, 1, 256);
            context_given = true;
        } else if (opt == "--embed") {
            c.model.embed = detail::parse_int<int>(opt, v, 1, 1024);
            mlp_only.push_back(opt);
        } else if (opt == "--hidden") {
            c.model.hidden = detail::parse_int<int>(opt, v, 1, 8192);
            mlp_only.push_back(opt);
        } else if (opt == "--model") {
            c.model.kind = detail::parse_enum<model_kind>(opt, v, model_names);
        } else if (opt == "--d-model") {
            c.model.d_model = detail::parse_int<int>(opt, v, 1, 4096);
            gpt_only.push_back(opt);
        } else if (opt == "--heads") {
            c.model.heads = detail::parse_int<int>(opt, v, 1, 256);
            gpt_only.push_back(opt);
        } else if (opt == "--threads") {
            c.threads = detail::parse_int<int>(opt, v, 1, 256);
            gpt_only.push_back(opt);
        } else if (opt == "--lr-schedule") {
            c.lr_schedule = detail::parse_policy(opt, v, lr_schedule_choices());
            lr_schedule_given = true;
        } else if (opt == "--clip") {
            const double x = detail::parse_double(opt, v);
            if (!(x >= 0 && x <= 1e6)) detail::bad_value(opt, v, "must be in [0, 1e6] (0: no clipping)");
            c.clip = static_cast<float>(x);
            clip_given = true;
        } else if (opt == "--layers") {
            c.model.layers = detail::parse_int<int>(opt, v, 1, 8);
        } else if (opt == "--fraction") {
            const double x = detail::parse_double(opt, v);
            if (!(x > 0 && x <= 1)) detail::bad_value(opt, v, "must be in (0, 1]");
            c.fraction = x;
            sparta_only.push_back(opt);
        } else if (opt == "--sampler") {
            c.sampler = detail::parse_policy(opt, v, sampler_choices());
            sparta_only.push_back(opt);
        } else if (opt == "--block-size") {
            c.block_size = detail::parse_int<int>(opt, v, 1, int_max);
            sparta_only.push_back(opt);
            block_size_given = true;
        } else if (opt == "--interval") {
            c.interval = detail::parse_int<int>(opt, v, 1, int_max);
            sparta_only.push_back(opt);
        } else if (opt == "--fraction-schedule") {
            c.fraction_schedule = detail::parse_policy(opt, v, schedule_choices());
            sparta_only.push_back(opt);
        } else if (opt == "--fraction-end") {
            const double x = detail::parse_double(opt, v);
            if (!(x > 0 && x <= 1)) detail::bad_value(opt, v, "must be in (0, 1]");
            c.fraction_end = x;
            fraction_end_given = true;
            sparta_only.push_back(opt);
        } else if (opt == "--outer-interval") {
            c.outer_interval = detail::parse_int<int>(opt, v, 1, int_max);
            diloco_only.push_back(opt);
        } else if (opt == "--outer") {
            c.outer = detail::parse_policy(opt, v, outer_choices());
            diloco_only.push_back(opt);
        } else if (opt == "--outer-lr") {
            const double x = detail::parse_double(opt, v);
            if (!(x > 0 && x <= 100)) detail::bad_value(opt, v, "must be in (0, 100]");
            c.outer_lr = x;
            outer_lr_given = true;
            diloco_only.push_back(opt);
        } else if (opt == "--outer-momentum") {
            const double x = detail::parse_double(opt, v);
            if (!(x >= 0 && x < 1)) detail::bad_value(opt, v, "must be in [0, 1)");
            c.outer_momentum = x;
            outer_momentum_given = true;
            diloco_only.push_back(opt);
        } else if (opt == "--outer-lr-schedule") {
            c.outer_lr_schedule = detail::parse_policy(opt, v, schedule_choices());
            outer_lr_schedule_given = true;
            diloco_only.push_back(opt);
        } else if (opt == "--outer-lr-end") {
            const double x = detail::parse_double(opt, v);
            if (!(x > 0 && x <= 1)) detail::bad_value(opt, v, "must be in (0, 1]");
            c.outer_lr_end = x;
            outer_lr_end_given = true;
            diloco_only.push_back(opt);
        } else if (opt == "--drop-prob") {
            const double x = detail::parse_double(opt, v);
            if (!(x >= 0 && x < 1)) detail::bad_value(opt, v, "must be in [0, 1)");
            c.drop_prob = x;
            diloco_only.push_back(opt);
        } else if (opt == "--prune") {
            const double x = detail::parse_double(opt, v);
            if (!(x >= 0 && x < 1)) detail::bad_value(opt, v, "must be in [0, 1)");
            c.prune = x;
            diloco_only.push_back(opt);
        } else if (opt == "--aggregate") {
            aggregate_given = true;
            try {
                c.aggregate = trickle::aggregate::parse(v);
            } catch (const trickle::invalid_argument& e) {
                std::string why = e.what();
                if (why.rfind("aggregate: ", 0) == 0) why.erase(0, 11);
                throw usage_error("--aggregate: " + why);
            }
        } else if (opt == "--byzantine") {
            std::size_t pos = 0;
            while (true) {
                const std::size_t comma = v.find(',', pos);
                const std::string_view item = v.substr(pos, comma == std::string_view::npos ? v.npos : comma - pos);
                const std::size_t colon = item.find(':');
                if (colon == std::string_view::npos)
                    detail::bad_value(opt, item, "expected W:KIND (a worker id and one of " +
                                                     std::string(byzantine_kinds_text) + ")");
                byzantine_spec b;
                b.worker = detail::parse_int<int>(opt + " (worker)", item.substr(0, colon), 0, 255);
                if (const std::string why = parse_byzantine_kind(item.substr(colon + 1), b); !why.empty())
                    detail::bad_value(opt, item, why);
                for (const auto& prev : c.byzantine)
                    if (prev.worker == b.worker)
                        detail::bad_value(opt, v, "lists worker " + std::to_string(b.worker) + " twice");
                c.byzantine.push_back(b);
                if (comma == std::string_view::npos) break;
                pos = comma + 1;
            }
        } else if (opt == "--topology") {
            c.topology = detail::parse_policy(opt, v, topology_choices());
            both_only.push_back(opt);
        } else if (opt == "--island-size") {
            c.island_size = detail::parse_int<int>(opt, v, 1, 256);
            island_size_given = true;
        } else if (opt == "--codec") {
            c.codec = detail::parse_policy(opt, v, codec_choices());
            sparta_only.push_back(opt);
        } else if (opt == "--outer-codec") {
            c.outer_codec = detail::parse_policy(opt, v, codec_choices());
            diloco_only.push_back(opt);
        } else if (opt == "--codec-block") {
            c.codec_block = detail::parse_int<int>(opt, v, 1, 1 << 20);
            codec_block_given = true;
        } else if (opt == "--outer-topk") {
            const auto colon = v.find(':');
            if (colon == std::string_view::npos) detail::bad_value(opt, v, "expected C:K");
            c.topk_chunk = detail::parse_int<int>(opt, v.substr(0, colon), 1, 1 << 20);
            c.topk_k = detail::parse_int<int>(opt, v.substr(colon + 1), 1, 1 << 20);
            if (c.topk_k > c.topk_chunk) detail::bad_value(opt, v, "K must be at most C");
            diloco_only.push_back(opt);
        } else if (opt == "--error-feedback") {
            const double x = detail::parse_double(opt, v);
            if (!(x > 0 && x <= 1)) detail::bad_value(opt, v, "must be in (0, 1]");
            c.error_feedback = x;
            diloco_only.push_back(opt);
        } else if (opt == "--fragments") {
            c.fragments = detail::parse_int<int>(opt, v, 1, 1 << 16);
            streaming_only.push_back(opt);
        } else if (opt == "--overlap-steps") {
            c.overlap_steps = detail::parse_int<int>(opt, v, 0, int_max);
            streaming_only.push_back(opt);
        } else if (opt == "--mix") {
            const double x = detail::parse_double(opt, v);
            if (!(x >= 0 && x <= 1)) detail::bad_value(opt, v, "must be in [0, 1]");
            c.mix = x;
            streaming_only.push_back(opt);
        } else if (opt == "--demo-chunk") {
            c.demo_chunk = detail::parse_int<int>(opt, v, 1, static_cast<int>(trickle::max_dct_chunk));
            demo_only.push_back(opt);
        } else if (opt == "--demo-k") {
            constexpr auto most = static_cast<int>(trickle::max_dct_chunk * trickle::max_dct_chunk);
            c.demo_k = detail::parse_int<int>(opt, v, 1, most);
            demo_k_given = true;
            demo_only.push_back(opt);
        } else if (opt == "--demo-decay") {
            const double x = detail::parse_double(opt, v);
            if (!(x >= 0 && x <= 1)) detail::bad_value(opt, v, "must be in [0, 1]");
            c.demo_decay = x;
            demo_only.push_back(opt);
        } else if (opt == "--demo-values") {
            c.demo_values = detail::parse_policy(opt, v, codec_choices());
            demo_only.push_back(opt);
        } else if (opt == "--network") {
            std::size_t pos = 0;
            while (true) {
                const std::size_t plus = v.find('+', pos);
                const std::string_view item = v.substr(pos, plus == std::string_view::npos ? v.npos : plus - pos);
                network_config net = detail::parse_network_item(opt, item);
                for (const auto& prev : c.networks)
                    if (prev.label == net.label) detail::bad_value(opt, v, "lists " + quoted_value(net.label) + " twice");
                c.networks.push_back(std::move(net));
                if (plus == std::string_view::npos) break;
                pos = plus + 1;
            }
        } else if (opt == "--step-time") {
            const double x = detail::parse_double(opt, v);
            if (!(x > 0 && x <= 1e9)) detail::bad_value(opt, v, "must be a positive number of milliseconds");
            c.step_time_s = x / 1000.0;
        } else if (opt == "--csv") {
            if (v.empty()) detail::bad_value(opt, v, "expected a file name");
            c.csv = std::string(v);
        } else if (opt == "--fail") {
            c.fails = detail::parse_events(opt, v);
        } else if (opt == "--join") {
            c.joins = detail::parse_events(opt, v);
        } else if (opt == "--min-workers") {
            c.min_workers = detail::parse_int<int>(opt, v, 1, 256);
            c.min_workers_given = true;
        } else if (opt == "--timeout-ms") {
            if (v == "0") detail::bad_value(opt, v, "must be >= 1 (a dead peer must never hang the survivors)");
            c.timeout_ms = detail::parse_int<int>(opt, v, 1, 86'400'000);
            timeout_given = true;
        } else if (opt == "--speeds") {
            std::size_t pos = 0;
            while (true) {
                const std::size_t comma = v.find(',', pos);
                const std::string_view item = v.substr(pos, comma == std::string_view::npos ? v.npos : comma - pos);
                const double x = detail::parse_double(opt, item);
                if (!(x > 0 && x <= 1)) detail::bad_value(opt, item, "each speed must be in (0, 1] (1 = the fastest)");
                c.speeds.push_back(x);
                if (comma == std::string_view::npos) break;
                pos = comma + 1;
            }
        } else if (opt == "--round-policy") {
            c.round_policy = detail::parse_enum<round_policy_kind>(opt, v, round_policy_names);
            round_policy_given = true;
        } else if (opt == "--deadline") {
            double x[4];
            std::size_t pos = 0;
            for (int k = 0; k < 4; ++k) {
                const std::size_t comma = v.find(',', pos);
                if ((k < 3) != (comma != std::string_view::npos))
                    detail::bad_value(opt, v, "expected Q,GRACE,FLOOR,CAP (four numbers)");
                x[k] = detail::parse_double(opt, v.substr(pos, comma == std::string_view::npos ? v.npos : comma - pos));
                pos = comma + 1;
            }
            if (!(x[0] > 0 && x[0] <= 1)) detail::bad_value(opt, v, "the quantile Q must be in (0, 1]");
            if (!(x[1] >= 0)) detail::bad_value(opt, v, "GRACE must be >= 0");
            if (!(x[2] >= 0)) detail::bad_value(opt, v, "FLOOR must be >= 0");
            if (!(x[3] > 0)) detail::bad_value(opt, v, "CAP must be > 0");
            if (x[3] < x[2]) detail::bad_value(opt, v, "CAP must be at least FLOOR");
            c.deadline_quantile = x[0];
            c.deadline_grace = x[1];
            c.deadline_floor = x[2];
            c.deadline_cap = x[3];
            deadline_given = true;
        }
    }

    if (corpus_chars_given && !c.data_file.empty())
        throw usage_error("--corpus-chars: applies to the generated corpus only, not with --data");
    const bool gpt = c.model.kind == model_kind::gpt;
    if (gpt && !mlp_only.empty())
        throw usage_error(mlp_only.front() + ": applies to --model mlp only (the gpt's width is --d-model)");
    if (!gpt && !gpt_only.empty())
        throw usage_error(gpt_only.front() + ": applies to --model gpt only, but --model is mlp");
    if (gpt) {
        if (c.model.d_model % c.model.heads != 0)
            throw usage_error("--heads: " + std::to_string(c.model.heads) + " heads do not divide --d-model " +
                              std::to_string(c.model.d_model));
        if (!context_given) c.model.context = gpt_defaults::context;
        if (!batch_given) c.batch = gpt_defaults::batch;
        if (!lr_schedule_given) c.lr_schedule = schedule_kind::cosine;
        if (!clip_given) c.clip = gpt_defaults::clip;
    }
#if !TRICKLE_SIM_HAVE_OPENMP
    if (c.threads > 1)
        throw usage_error("--threads: this build of trickle-sim has no OpenMP, so each worker runs on one thread");
#endif

    bool any_sparta = false, any_diloco = false, any_demo = false;
    for (auto s : c.strategies) {
        any_sparta = any_sparta || uses_sparta(s);
        any_diloco = any_diloco || uses_diloco(s);
        any_demo = any_demo || uses_demo(s);
    }
    auto strategy_list = [&] {
        std::string s;
        for (std::size_t i = 0; i < c.strategies.size(); ++i) {
            if (i) s += ',';
            s += name_of(c.strategies[i]);
        }
        return s;
    };
    if (!any_sparta && !sparta_only.empty())
        throw usage_error(sparta_only.front() + ": applies to sparta and sparta-diloco, but --strategy is " +
                          strategy_list());
    if (!any_diloco && !diloco_only.empty())
        throw usage_error(diloco_only.front() + ": applies to diloco, sparta-diloco and streaming-diloco, but --strategy is " +
                          strategy_list());
    if (!any_sparta && !any_diloco && !both_only.empty())
        throw usage_error(both_only.front() + ": applies to sparta and diloco strategies, but --strategy is " +
                          strategy_list());
    const bool any_streaming =
        std::find(c.strategies.begin(), c.strategies.end(), strategy_kind::streaming_diloco) != c.strategies.end();
    if (!any_streaming && !streaming_only.empty())
        throw usage_error(streaming_only.front() + ": applies to streaming-diloco, but --strategy is " +
                          strategy_list());
    if (!any_demo && !demo_only.empty())
        throw usage_error(demo_only.front() + ": applies to demo and demo-shared, but --strategy is " +
                          strategy_list());
    if (c.demo_k > c.demo_chunk * c.demo_chunk)
        throw usage_error("--demo-k: K must be at most the " + std::to_string(c.demo_chunk * c.demo_chunk) +
                          " coefficients of a --demo-chunk " + std::to_string(c.demo_chunk) + " tile, got " +
                          std::to_string(c.demo_k) + (demo_k_given ? "" : " (the default)"));
    if (c.sparta_overlap && !any_sparta)
        throw usage_error("--overlap: applies to sparta and sparta-diloco, but --strategy is " + strategy_list());
    if (c.carry_local && !any_streaming)
        throw usage_error("--carry-local: applies to streaming-diloco, but --strategy is " + strategy_list());
    if (any_streaming) {
        if (c.overlap_steps >= c.outer_interval)
            throw usage_error("--overlap-steps: tau = " + std::to_string(c.overlap_steps) +
                              " must be less than --outer-interval (H = " + std::to_string(c.outer_interval) +
                              "): a fragment's average must land before its next outer step");
        const int tensors = model_tensor_count(c.model);
        if (c.fragments > tensors)
            throw usage_error("--fragments: " + std::to_string(c.fragments) + " fragments, but the model has only " +
                              std::to_string(tensors) + " tensors (fragments are cut at tensor boundaries)");
    }
    if (c.step_time_s > 0 && c.networks.empty())
        throw usage_error("--step-time: applies to the network model; give --network too");
    if (block_size_given && !kind_has<sampler_kind, block_size_field>(c.sampler))
        throw usage_error("--block-size: applies to --sampler " +
                          joined(kinds_with<block_size_field>(sampler_choices()), ", ", " or ") + " only");
    const bool grouped = kind_has<topology_kind, group_size_field>(c.topology);
    if (island_size_given && !grouped)
        throw usage_error("--island-size: applies to --topology " +
                          joined(kinds_with<group_size_field>(topology_choices()), ", ", " or ") + " only");
    if (grouped && c.island_size > c.workers)
        throw usage_error("--island-size: islands of " + std::to_string(c.island_size) +
                          " workers are larger than the world (--workers " + std::to_string(c.workers) + ")");
    if ((c.topology == topology_kind::gossip || c.topology == topology_kind::exponential) && c.workers < 2)
        throw usage_error("--topology " + std::string(name_of(c.topology)) +
                          ": needs at least 2 workers to average with a peer (--workers 1)");
    const auto blocked = [](codec_kind k) { return kind_has<codec_kind, block_size_field>(k); };
    if (codec_block_given && !(any_sparta && blocked(c.codec)) && !(any_diloco && blocked(c.outer_codec)) &&
        !(any_demo && blocked(c.demo_values)))
        throw usage_error("--codec-block: applies to the " +
                          joined(kinds_with<block_size_field>(codec_choices()), ", ", " and ", &dashed) +
                          " codecs only");
    // Value codecs travel through every topology (trickle's encoded links); a sparsifier's
    // chunks are summed only by the all-reduce.
    if (c.topk_k > 0 && c.topology != topology_kind::all_reduce)
        throw usage_error("--outer-topk: sparsified outer gradients are summed through --topology all-reduce only, not " +
                          std::string(name_of(c.topology)));
    if (c.error_feedback > 0 && c.outer_codec == codec_kind::fp32 && c.topk_k == 0)
        throw usage_error("--error-feedback: needs a lossy --outer-codec or --outer-topk (fp32 loses nothing to feed back)");
    c.fraction_end = detail::schedule_end(c.fraction_schedule, "--fraction-schedule", fraction_end_given,
                                          "--fraction-end", c.fraction_end, c.fraction);
    const bool outer_has_lr = kind_has<outer_kind, lr_field>(c.outer);
    if (!outer_has_lr && outer_lr_given)
        throw usage_error("--outer-lr: --outer " + std::string(name_of(c.outer)) + " has no learning rate");
    if (outer_momentum_given && !kind_has<outer_kind, momentum_field>(c.outer))
        throw usage_error("--outer-momentum: applies to --outer " +
                          joined(kinds_with<momentum_field>(outer_choices()), ", ", " and ") + " only");
    if (!outer_lr_given) c.outer_lr = default_outer_lr(c.outer);
    if (!outer_has_lr && outer_lr_schedule_given)
        throw usage_error("--outer-lr-schedule: --outer " + std::string(name_of(c.outer)) + " has no learning rate");
    c.outer_lr_end = detail::schedule_end(c.outer_lr_schedule, "--outer-lr-schedule", outer_lr_end_given,
                                          "--outer-lr-end", c.outer_lr_end, 1.0);
    if (deadline_given && !(timed_run(c) && c.round_policy == round_policy_kind::adaptive))
        throw usage_error("--deadline: applies to --round-policy adaptive only (with --speeds)");
    if (!deadline_given) {
        c.deadline_floor = c.outer_interval;
        c.deadline_cap = 4.0 * c.outer_interval;
    }
    detail::check_open_world(c, strategy_list(), aggregate_given);
    detail::check_elastic(c, strategy_list(), timeout_given, round_policy_given);
    return c;
}

inline sim_config parse_cli(int argc, const char* const* argv) {
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
    return parse_cli(std::span<const std::string>(args));
}

} // namespace trickle_sim
