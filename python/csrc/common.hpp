// python/csrc/common.hpp: what the three binding files of trickle._C share.
//
// The Python package builds each algorithm from a few run-time names (sampler, schedule,
// topology, codec, outer optimizer), found in the library's registries
// (include/trickle/*/registry.hpp) by the name each policy declares: no table of names is
// kept here, and trickle._C.registry hands the same lists to the Python layer. To keep
// the number of template instantiations small, the schedule, the topology, the codec and
// the outer optimizer are the variant policies schedule::any, topology::any, codec::any
// and outer::any, so only SPARTA's sampler is a template argument, and DiLoCo's outer
// gradient travels either through a codec (codec::any) or through a sparsifier
// (codec::any_sparsifier): two instantiations. The model wrappers below (after
// trickle/torch/algorithms.hpp's) instantiate one engine per host dtype (float32, float16,
// bfloat16) of each. Three choices cost no instantiation: an outer learning-rate schedule
// (outer::any holds outer::maybe_lr_scheduled, which holds the schedule as a
// schedule::any, or none), "native" (the codec of each group's dtype, chosen per group at
// run time), and Streaming DiLoCo (plain diloco_options fields).
#pragma once

// torch's pybind11 (with its casters for tensors and intrusive_ptr holders), not
// <torch/extension.h>: that one also parses the whole C++ frontend (modules, optimizers,
// data loaders, serialization), 28 s of every unit's 39 s of headers on this machine.
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <pybind11/stl.h>

#include <trickle/aggregate/aggregate.hpp>
#include <trickle/comm/async.hpp>
#include <trickle/codec/any.hpp>
#include <trickle/codec/any_sparsifier.hpp>
#include <trickle/core/fields.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/outer.hpp>
#include <trickle/sampler.hpp>
#include <trickle/schedule/any.hpp>
#include <trickle/topology/any.hpp>
#include <trickle/torch.hpp>
#include <trickle/torch/elastic_group.hpp>

#include "policies.hpp"

#if TRICKLE_PY_CUDA
// A CUDA build: the engines over CUDA parameters are compiled by nvcc (cuda_*.cu) and only
// declared here.
#include <trickle/comm/channel.hpp>
#include <trickle/torch/process_group_cuda.hpp>

#include "cuda_engines.hpp"

#if !TRICKLE_HAS_TORCH_CUDA
#error "trickle._C: a CUDA build needs a torch built with CUDA (its c10/cuda headers) and the CUDA toolkit's headers"
#endif

TRICKLE_PY_CUDA_ENGINES(extern template)
#endif

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace trickle_py {

namespace py = pybind11;

using process_group_ptr = c10::intrusive_ptr<c10d::ProcessGroup>;
using store_ptr = c10::intrusive_ptr<c10d::Store>;
using named_tensors = std::vector<std::pair<std::string, at::Tensor>>;

// ---- options read from the dict the Python layer builds (under the GIL) ----

inline py::object item(const py::dict& d, const char* key) {
    if (!d.contains(key)) throw trickle::invalid_argument(std::string("trickle._C: missing option '") + key + "'");
    return d[key];
}
template <class T>
T get(const py::dict& d, const char* key) {
    return item(d, key).cast<T>();
}

// ---- policies by name ----

// The keyword arguments that set a policy's fields, found by the fields it has: a
// sampler's block_size (block_size) and layerwise mode (layerwise_mode); a schedule's end
// and length (end_fraction, schedule_steps), its points (points), and whether a warm-up
// may lead into it (warmup_steps, warmup_start_fraction); a topology's group size
// (island_size); a codec's block_size (codec_block); an outer optimizer's lr (outer_lr),
// momentum (momentum), betas (betas) and eps (eps), and for one with a learning rate its
// schedule (outer_lr_schedule, whose own keywords are the schedule's, prefixed outer_lr_);
// a sparsifier's chunk and k (sparse_chunk, sparse_k) or fraction (sparse_fraction). A
// policy added to a registry takes the keywords its fields name; trickle._C.policy_options
// tells the Python layer which those are, so that it refuses a keyword the chosen policy
// has no use for.
// The field traits are the library's (trickle/core/fields.hpp); the two below are this
// package's keywords for fields of one sampler and of the warm-up.
using trickle::fields::has_betas;
using trickle::fields::has_block_size;
using trickle::fields::has_chunk_k;
using trickle::fields::has_decay;
using trickle::fields::has_eps;
using trickle::fields::has_fraction;
using trickle::fields::has_group_size;
using trickle::fields::has_lr;
using trickle::fields::has_momentum;
using trickle::fields::has_points;
template <class P>
inline constexpr bool has_layerwise_mode = requires(P p) { p.how = trickle::sampler::layerwise::mode::per_tensor; };
template <class P>
inline constexpr bool warms_up = trickle::type_list_contains<trickle::schedule::warmed, P>;

// The keywords each family's policies may take, as above.
template <class S>
std::vector<std::string> sampler_keys() {
    std::vector<std::string> k;
    if constexpr (has_block_size<S>) k.emplace_back("block_size");
    if constexpr (has_layerwise_mode<S>) k.emplace_back("layerwise_mode");
    return k;
}
template <class S>
std::vector<std::string> schedule_keys() {
    std::vector<std::string> k;
    if constexpr (has_decay<S>) k.insert(k.end(), {"end_fraction", "schedule_steps"});
    if constexpr (has_points<S>) k.emplace_back("points");
    if constexpr (warms_up<S>) k.insert(k.end(), {"warmup_steps", "warmup_start_fraction"});
    return k;
}
template <class T>
std::vector<std::string> topology_keys() {
    std::vector<std::string> k;
    if constexpr (has_group_size<T>) k.emplace_back("island_size");
    return k;
}
template <class C>
std::vector<std::string> codec_keys() {
    std::vector<std::string> k;
    if constexpr (has_block_size<C>) k.emplace_back("codec_block");
    return k;
}
template <class O>
std::vector<std::string> outer_keys() {
    std::vector<std::string> k;
    if constexpr (has_lr<O>) k.emplace_back("outer_lr");
    if constexpr (has_momentum<O>) k.emplace_back("momentum");
    if constexpr (has_betas<O>) k.emplace_back("betas");
    if constexpr (has_eps<O>) k.emplace_back("eps");
    if constexpr (trickle::outer::has_learning_rate<O>) k.emplace_back("outer_lr_schedule");
    return k;
}
template <class S>
std::vector<std::string> sparsifier_keys() {
    std::vector<std::string> k;
    if constexpr (has_chunk_k<S>) k.insert(k.end(), {"sparse_chunk", "sparse_k"});
    if constexpr (has_fraction<S>) k.emplace_back("sparse_fraction");
    return k;
}

struct sampler_config {
    std::string name = "uniform";
    std::size_t block_size = 256;
    std::string layerwise_mode = "per_tensor";

    static sampler_config from(const py::dict& d) {
        sampler_config c;
        c.name = get<std::string>(d, "sampler");
        c.block_size = get<std::size_t>(d, "block_size");
        c.layerwise_mode = get<std::string>(d, "layerwise_mode");
        return c;
    }
    // Sets the fields of s that these options give.
    template <class S>
    void configure(S& s) const {
        if constexpr (has_block_size<S>) s.block_size = block_size;
        if constexpr (has_layerwise_mode<S>) {
            using mode = trickle::sampler::layerwise::mode;
            if (layerwise_mode == "per_tensor")
                s.how = mode::per_tensor;
            else if (layerwise_mode == "rotating")
                s.how = mode::rotating;
            else
                throw trickle::invalid_argument("trickle: unknown layerwise_mode '" + layerwise_mode +
                                                "' (valid: per_tensor, rotating)");
        }
    }
};

// Calls f(sampler) with the named sampler; each sampler is one instantiation.
template <class F>
decltype(auto) with_sampler(const sampler_config& c, F&& f) {
    return trickle::visit_name<trickle::sampler::registry>(c.name, "sampler", [&](auto t) -> decltype(auto) {
        typename decltype(t)::type s{};
        c.configure(s);
        return f(s);
    });
}

// A schedule by name, from the options under `prefix`: "" for SPARTA's fraction schedule
// (schedule, end_fraction, schedule_steps, points, warmup_steps, warmup_start_fraction),
// "outer_lr_" for DiLoCo's outer learning-rate schedule (outer_lr_schedule,
// outer_lr_end_fraction, ...), whose fractions are multipliers of the outer lr.
inline trickle::schedule::any make_schedule(const py::dict& d, const std::string& prefix = "") {
    auto key = [&](const char* k) { return prefix + k; };
    const auto name = get<std::string>(d, key("schedule").c_str());
    const auto end_fraction = get<double>(d, key("end_fraction").c_str());
    const auto steps = get<std::uint64_t>(d, key("schedule_steps").c_str());
    const auto warmup_steps = get<std::uint64_t>(d, key("warmup_steps").c_str());
    const auto start = get<double>(d, key("warmup_start_fraction").c_str());
    return trickle::visit_name<trickle::schedule::registry>(name, key("schedule").c_str(), [&](auto t) -> trickle::schedule::any {
        using S = typename decltype(t)::type;
        S s{};
        if constexpr (has_decay<S>) {
            s.end_fraction = end_fraction;
            s.steps = steps;
        }
        if constexpr (has_points<S>)
            s.points = get<std::vector<std::pair<std::uint64_t, double>>>(d, key("points").c_str());
        if (warmup_steps == 0) return s;
        if constexpr (warms_up<S>)
            return trickle::schedule::warmup<S>{.steps = warmup_steps, .start_fraction = start, .then = s};
        else
            throw trickle::invalid_argument("trickle: " + key("warmup_steps") + " cannot be combined with the " + name +
                                            " schedule");
    });
}

// DiLoCo's outer learning-rate schedule, or none: constant without a warm-up is no
// schedule at all (the optimizer as it is: the same bits, configuration and checkpoints).
inline std::optional<trickle::schedule::any> make_lr_schedule(const py::dict& d) {
    if (get<std::string>(d, "outer_lr_schedule") == "constant" && get<std::uint64_t>(d, "outer_lr_warmup_steps") == 0)
        return std::nullopt;
    return make_schedule(d, "outer_lr_");
}

inline trickle::topology::any make_topology(const py::dict& d) {
    const auto name = get<std::string>(d, "topology");
    return trickle::visit_name<trickle::topology::registry>(name, "topology", [&](auto t) -> trickle::topology::any {
        typename decltype(t)::type top{};
        if constexpr (has_group_size<decltype(top)>) top.size = get<int>(d, "island_size");
        return top;
    });
}

// ---- codecs and sparsifiers, chosen per parameter group ----

// A codec by name, or "native": each parameter group's values in its own dtype (fp32 for
// float32, bf16 for bfloat16, fp16 for float16: codec::resolve_t<codec::native, T>, what
// trickle::torch::sparta<..., codec::native> does), decided per group at construction.
struct codec_choice {
    trickle::codec::any codec{};
    bool native = false;

    template <class T>
    trickle::codec::any for_type() const {
        if (native) return trickle::codec::resolve_t<trickle::codec::native, T>{};
        return codec;
    }
};

// codec_block: values per scale of the codecs that have blocks.
inline codec_choice make_codec(const py::dict& d, const char* key) {
    const auto name = get<std::string>(d, key);
    if (name == trickle::codec::native::name) return codec_choice{.native = true};
    const auto block = get<std::size_t>(d, "codec_block");
    return codec_choice{.codec = trickle::visit_name<trickle::codec::registry>(name, key, [&](auto t) -> trickle::codec::any {
        typename decltype(t)::type c{};
        if constexpr (has_block_size<decltype(c)>) c.block_size = block;
        return c;
    })};
}

// outer_sparsifier= with its fields (the library's sparsifier_settings), the values' codec
// resolved per group as codec_choice.
struct sparse_choice {
    std::string name;
    trickle::codec::sparsifier_settings settings{};
    codec_choice values{};

    template <class T>
    trickle::codec::any_sparsifier for_type() const {
        trickle::codec::sparsifier_settings s = settings;
        s.values = values.for_type<T>();
        return trickle::codec::any_sparsifier::from_name(name, s, "outer_sparsifier");
    }
};

// How DiLoCo's outer gradient travels: a codec, or a sparsifier (outer_sparsifier= given).
struct outer_wire {
    codec_choice codec{};
    std::optional<sparse_choice> sparse{};

    static outer_wire from(const py::dict& d) {
        outer_wire w;
        w.codec = make_codec(d, "outer_codec");
        const py::object s = item(d, "outer_sparsifier");
        if (!s.is_none()) {
            sparse_choice c;
            c.name = s.cast<std::string>();
            c.settings.chunk = get<std::size_t>(d, "sparse_chunk");
            c.settings.k = get<std::size_t>(d, "sparse_k");
            c.settings.fraction = get<double>(d, "sparse_fraction");
            c.values = w.codec;
            w.sparse = c;
        }
        return w;
    }
};

// ---- outer optimizers, with an optional learning-rate schedule ----

struct outer_config {
    std::string name = "nesterov";
    py::object lr, momentum; // None: the optimizer's default
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

    static outer_config from(const py::dict& d) {
        outer_config c;
        c.name = get<std::string>(d, "outer");
        c.lr = item(d, "outer_lr");
        c.momentum = item(d, "momentum");
        c.beta1 = get<double>(d, "beta1");
        c.beta2 = get<double>(d, "beta2");
        c.eps = get<double>(d, "eps");
        return c;
    }
};

// The outer optimizer's name, fields and lr schedule, read under the GIL.
struct outer_values {
    std::string name;
    trickle::outer::outer_settings settings{};
    std::optional<trickle::schedule::any> lr_schedule{};

    static outer_values from(const py::dict& d) {
        const outer_config c = outer_config::from(d);
        outer_values v;
        v.name = c.name;
        if (!c.lr.is_none()) v.settings.lr = c.lr.cast<double>();
        if (!c.momentum.is_none()) v.settings.momentum = c.momentum.cast<double>();
        v.settings.beta1 = c.beta1;
        v.settings.beta2 = c.beta2;
        v.settings.eps = c.eps;
        v.lr_schedule = make_lr_schedule(d);
        return v;
    }
};

// The named outer optimizer held by trickle::outer::any (the fields the values give set,
// the others the optimizer's defaults; with the lr schedule if any): one engine serves
// every optimizer, the type cuda_engines.hpp instantiates. An unknown name, or a schedule
// for an optimizer without a learning rate, throws invalid_argument.
inline outer_type make_outer(const outer_values& v) {
    return outer_type::named(v.name, v.settings, v.lr_schedule);
}

// The options' plain fields, by the library's list (trickle::for_each_option): each read
// from the key of its name (SPARTA's interval from interval_key: "sparta_interval" in
// SPARTADiLoCo).
inline trickle::sparta_options sparta_opts(const py::dict& d, const char* interval_key) {
    trickle::sparta_options o;
    trickle::for_each_option(o, [&](std::string_view name, auto& field) {
        field = get<std::remove_reference_t<decltype(field)>>(d, name == "interval" ? interval_key
                                                                                     : std::string(name).c_str());
    });
    return o;
}

inline trickle::diloco_options diloco_opts(const py::dict& d) {
    trickle::diloco_options o;
    trickle::for_each_option(o, [&](std::string_view name, auto& field) {
        field = get<std::remove_reference_t<decltype(field)>>(d, std::string(name).c_str());
    });
    // How the outer step combines the contributions (docs/robustness.md): the rule's text,
    // read by the library's parser (the Python layer checked it through trickle._C.
    // parse_aggregate before the ranks agreed). Whether it suits the topology, the outer
    // codec, streaming and the number of workers is the constructor's check, on every rank.
    o.aggregate = trickle::aggregate::parse(get<std::string>(d, "aggregate"));
    return o;
}

// Everything DiLoCo's part is built from, read under the GIL.
struct diloco_config {
    outer_values outer;
    trickle::diloco_options options;
    trickle::topology::any topology;
    outer_wire wire;

    static diloco_config from(const py::dict& d) {
        return {outer_values::from(d), diloco_opts(d), make_topology(d), outer_wire::from(d)};
    }
};

// And SPARTA's part.
struct sparta_config {
    sampler_config sampler;
    trickle::sparta_options options;
    trickle::schedule::any schedule;
    codec_choice codec;

    static sparta_config from(const py::dict& d, const char* interval_key) {
        return {sampler_config::from(d), sparta_opts(d, interval_key), make_schedule(d), make_codec(d, "codec")};
    }
};

// ---- the model wrappers ----

// trickle::torch's wrappers (trickle/torch/algorithms.hpp) with the codecs chosen per
// parameter group: the same collection of the model, agreement on its groups, per-group
// seeds (torch::group_seed) and stepping (they are model_algorithm's), and each group's
// algorithm built with its codec resolved for the group's dtype (codec_choice, sparse_choice).
namespace ttd = trickle::torch::detail;

template <class Group>
using group_value_t = typename std::remove_cvref_t<Group>::value_type;

template <class Sampler>
class model_sparta : public ttd::model_algorithm<sparta_algo<Sampler>> {
public:
    template <class Comm>
    model_sparta(const named_tensors& params, Comm& comm, const sparta_config& c, const Sampler& sampler,
                 const trickle::topology::any& topology) {
        this->build(
            "sparta", comm, [&] { return ttd::collect(params); },
            [&](const auto& group, Comm& cm, std::size_t g) {
                trickle::sparta_options o = c.options;
                o.seed = trickle::torch::group_seed(c.options.seed, g);
                return sparta_algo<Sampler>(group, cm, o, sampler, c.schedule, topology,
                                            c.codec.template for_type<group_value_t<decltype(group)>>());
            },
            c.options.join);
    }
};

template <class Outer, class Wire>
class model_diloco : public ttd::model_algorithm<trickle::diloco<Outer, trickle::topology::any, Wire>> {
    using algo = trickle::diloco<Outer, trickle::topology::any, Wire>;

public:
    template <class Comm, class Choice>
    model_diloco(const named_tensors& params, Comm& comm, const trickle::diloco_options& options, const Outer& outer,
                 const trickle::topology::any& topology, const Choice& wire) {
        this->build(
            "diloco", comm, [&] { return ttd::collect(params); },
            [&](const auto& group, Comm& cm, std::size_t g) {
                trickle::diloco_options o = options;
                o.seed = trickle::torch::group_seed(options.seed, g);
                return algo(group, cm, o, outer, topology, wire.template for_type<group_value_t<decltype(group)>>());
            },
            options.join);
    }
};

template <class Sampler, class Outer, class Wire>
class model_sparta_diloco : public ttd::model_algorithm<sparta_diloco_algo<Sampler, Outer, Wire>> {
    using algo = sparta_diloco_algo<Sampler, Outer, Wire>;

public:
    template <class Comm, class Choice>
    model_sparta_diloco(const named_tensors& params, Comm& comm, const sparta_config& sc, const Sampler& sampler,
                        const trickle::diloco_options& options, const Outer& outer,
                        const trickle::topology::any& topology, const Choice& wire) {
        this->build(
            "sparta_diloco", comm, [&] { return ttd::collect(params); },
            [&](const auto& group, Comm& cm, std::size_t g) {
                using T = group_value_t<decltype(group)>;
                trickle::sparta_options s = sc.options;
                trickle::diloco_options o = options;
                s.seed = trickle::torch::group_seed(sc.options.seed, g);
                o.seed = trickle::torch::group_seed(options.seed, g);
                return algo(group, cm, s, o, sampler, sc.schedule, topology, outer, sc.codec.template for_type<T>(),
                            wire.template for_type<T>());
            },
            options.join);
    }

    // Each part's account, summed over groups (the initial broadcast is on the DiLoCo part),
    // as trickle::torch::sparta_diloco sums them.
    trickle::exchange_stats sparse_stats() const {
        return this->sum_over_groups([](const auto& a) -> const trickle::exchange_stats& { return a.sparse_stats(); });
    }
    trickle::exchange_stats outer_stats() const {
        return this->sum_over_groups([](const auto& a) -> const trickle::exchange_stats& { return a.outer_stats(); });
    }
};

// ---- the bound object ----

// Which account of an algorithm: the whole (for SPARTA + DiLoCo the sum of its parts), or
// one part of SPARTA + DiLoCo.
enum class stats_part { total = 0, sparse = 1, outer = 2 };

// What every algorithm offers Python, whatever its policies.
class algorithm_base {
public:
    virtual ~algorithm_base() = default;
    virtual void step() = 0;
    // Applies an overlapped exchange still pending (SPARTA's overlap); before save_bytes().
    virtual void flush() = 0;
    virtual trickle::exchange_stats stats(stats_part part) const = 0;
    // One parameter group's account (group order as params().groups).
    virtual trickle::exchange_stats group_stats(std::size_t group, stats_part part) const = 0;
    // DiLoCo and SPARTA + DiLoCo: this worker's weight in the coming outer steps (local).
    virtual void set_weight(float w) = 0;
    virtual std::string save_bytes() const = 0;
    virtual void load_bytes(const std::string&) = 0;
    virtual const trickle::torch::model_params& params() const = 0;
    virtual trickle::membership_stats membership() const = 0;
    // DiLoCo and SPARTA + DiLoCo: how one parameter group's outer steps combined the
    // workers' contributions (group order as params().groups); SPARTA: the empty record.
    virtual trickle::aggregation_stats aggregation(std::size_t group) const = 0;
    // The sections of this worker's state that are its own (model_algorithm::own_state).
    virtual std::vector<std::string> own_state() const = 0;
    // How the exchanges travel against compute (the route's decision; every group alike).
    virtual trickle::overlap_plan overlap() const = 0;
};

template <class Wrapper>
class algorithm_impl final : public algorithm_base {
public:
    template <class... Args>
    explicit algorithm_impl(Args&&... args) : w_(std::forward<Args>(args)...) {}

    void step() override { w_.step(); }
    void flush() override { w_.flush(); }
    trickle::exchange_stats stats(stats_part part) const override {
        if constexpr (requires { w_.sparse_stats(); }) {
            if (part == stats_part::sparse) return w_.sparse_stats();
            if (part == stats_part::outer) return w_.outer_stats();
        }
        return w_.stats();
    }
    trickle::exchange_stats group_stats(std::size_t group, stats_part part) const override {
        if (group >= w_.group_count())
            throw trickle::invalid_argument(trickle::detail::concat("trickle: group ", group, " does not exist; the model has ",
                                                                    w_.group_count(), " parameter group(s)"));
        const auto& a = w_.at(group);
        if constexpr (requires { a.sparse_stats(); }) {
            if (part == stats_part::sparse) return a.sparse_stats();
            if (part == stats_part::outer) return a.outer_stats();
        }
        return a.stats();
    }
    void set_weight(float w) override {
        for (std::size_t g = 0; g < w_.group_count(); ++g) w_.algorithm(g).set_weight(w);
    }
    std::string save_bytes() const override { return w_.save_bytes(); }
    void load_bytes(const std::string& b) override { w_.load_bytes(b); }
    const trickle::torch::model_params& params() const override { return w_.params(); }
    trickle::membership_stats membership() const override { return w_.membership(); }
    trickle::aggregation_stats aggregation(std::size_t group) const override {
        if (group >= w_.group_count())
            throw trickle::invalid_argument(trickle::detail::concat("trickle: group ", group, " does not exist; the model has ",
                                                                    w_.group_count(), " parameter group(s)"));
        const auto& a = w_.at(group);
        if constexpr (requires { a.aggregation(); })
            return a.aggregation();
        else
            return trickle::aggregation_stats{};
    }

    std::vector<std::string> own_state() const override { return w_.own_state(); }
    trickle::overlap_plan overlap() const override {
        if constexpr (requires { w_.at(0).overlap(); })
            return w_.group_count() == 0 ? trickle::overlap_plan{} : w_.at(0).overlap();
        else
            return trickle::overlap_plan{};
    }

private:
    Wrapper w_;
};

// Owns the communicator (a process group's, the same over CUDA memory, or an elastic
// group's) and the algorithm over it (declared in that order, so the algorithm, which
// refers to the communicator, is destroyed first).
class bound_algorithm {
public:
    // Over a torch.distributed group, the argument checks in the payload: every size the
    // algorithms pass follows from the configuration and the model layout the ranks compare
    // at construction, so an exchange over a small model is one collective
    // (docs/communicators.md, comm::process_group).
    //
    // The engines run on comm::async over it: every collective runs on a progress thread of
    // this object's, in the order started, so an overlapped exchange (SPARTA's overlap,
    // DiLoCo's overlap_steps) travels while the trainer computes; a blocking one is a start
    // and a wait. The Python layer gives an overlapping object a process group of its own,
    // so its collectives never interleave with the trainer's.
    bound_algorithm(std::string kind, process_group_ptr pg)
        : kind_(std::move(kind)), comm_(std::make_unique<host_comm>(std::move(pg))) {}
#if TRICKLE_PY_CUDA
    // Over a torch.distributed group, for parameters on CUDA device `device`: the engines
    // run on comm::cuda_channel (cuda_engines.hpp) over comm::process_group_cuda, on torch's
    // current stream; NCCL takes the device buffers, any other backend is staged through
    // pinned host memory (trickle/torch/process_group_cuda.hpp).
    bound_algorithm(std::string kind, process_group_ptr pg, int device)
        : kind_(std::move(kind)),
          cuda_(std::make_unique<trickle::comm::process_group_cuda>(
              std::move(pg), device, std::nullopt,
              trickle::comm::process_group_options{.checks = trickle::comm::argument_checks::in_payload})),
          channel_(std::make_unique<trickle::comm::channel_of<trickle::comm::process_group_cuda>>(*cuda_)) {}
#endif
    bound_algorithm(std::string kind, store_ptr store, int id, trickle::comm::elastic_group_options o)
        : kind_(std::move(kind)),
          elastic_(std::make_unique<trickle::comm::elastic_group>(std::move(store), id, std::move(o))) {}

    bound_algorithm(const bound_algorithm&) = delete;
    bound_algorithm& operator=(const bound_algorithm&) = delete;

    // Without the GIL: dropping the last reference to the c10d::ProcessGroup (after
    // torch.distributed.destroy_process_group(), say) joins the group's worker threads,
    // and one of them may need the GIL to free the Python-owned tensors of an earlier
    // collective. Destroying the group under the GIL would deadlock there (torch's own
    // ProcessGroup binding releases the GIL in its destructor for the same reason).
    ~bound_algorithm() {
        if (Py_IsInitialized() && PyGILState_Check()) {
            py::gil_scoped_release release;
            release_all();
        } else {
            release_all();
        }
    }

    // Calls f(communicator) with the communicator the engines run on: the CUDA channel for
    // CUDA parameters, the process group's otherwise.
    template <class F>
    decltype(auto) with_comm(F&& f) {
#if TRICKLE_PY_CUDA
        if (channel_) return f(static_cast<trickle::comm::cuda_channel&>(*channel_));
#endif
        return f(comm_->async);
    }
    // Calls f(communicator) with the host communicator, for the algorithms that average
    // host memory only (trickle.DDP); an object bound over CUDA memory has none.
    template <class F>
    decltype(auto) with_host_comm(F&& f) {
        if (!comm_) throw trickle::invalid_argument(kind_ + ": this object has no host communicator");
        return f(comm_->async);
    }
    trickle::comm::elastic_group& elastic() { return *elastic_; }
    bool is_elastic() const { return elastic_ != nullptr; }
    bool on_cuda() const {
#if TRICKLE_PY_CUDA
        return cuda_ != nullptr;
#else
        return false;
#endif
    }
    // Over CUDA parameters: whether the group's collectives are staged through host memory
    // (any backend but NCCL).
    bool stages_through_host() const {
#if TRICKLE_PY_CUDA
        if (cuda_) return cuda_->stages_through_host();
#endif
        return false;
    }
    void set(std::unique_ptr<algorithm_base> a) { algo_ = std::move(a); }
    algorithm_base& algo() const {
        if (!algo_) throw trickle::invalid_argument("trickle." + kind_ + ": the object is empty");
        return *algo_;
    }
    const std::string& kind() const { return kind_; }
    // The collectives this worker's communicator started (over a torch.distributed group;
    // over trickle.Elastic, the current epoch's group's, 0 between epochs).
    std::uint64_t collectives() const {
#if TRICKLE_PY_CUDA
        if (cuda_) return cuda_->collectives();
#endif
        if (comm_) return comm_->async.inspect([](const trickle::comm::process_group& c) { return c.collectives(); });
        return 0;
    }
    int rank() const {
#if TRICKLE_PY_CUDA
        if (cuda_) return cuda_->rank();
#endif
        return comm_ ? comm_->async.rank() : elastic_->rank();
    }
    int size() const {
#if TRICKLE_PY_CUDA
        if (cuda_) return cuda_->size();
#endif
        return comm_ ? comm_->async.size() : elastic_->size();
    }

private:
    void release_all() {
        algo_.reset();
#if TRICKLE_PY_CUDA
        channel_.reset();
        cuda_.reset();
#endif
        comm_.reset();
        elastic_.reset();
    }

    // The process group's communicator and the progress thread over it (destroyed first).
    struct host_comm {
        explicit host_comm(process_group_ptr pg)
            : group(std::move(pg),
                    trickle::comm::process_group_options{.checks = trickle::comm::argument_checks::in_payload}),
              async(group) {}
        trickle::comm::process_group group;
        trickle::comm::async<trickle::comm::process_group> async;
    };

    std::string kind_;
    std::unique_ptr<host_comm> comm_;
#if TRICKLE_PY_CUDA
    std::unique_ptr<trickle::comm::process_group_cuda> cuda_;
    std::unique_ptr<trickle::comm::channel_of<trickle::comm::process_group_cuda>> channel_;
#endif
    std::unique_ptr<trickle::comm::elastic_group> elastic_;
    std::unique_ptr<algorithm_base> algo_;
};

// The CUDA device of the first parameter on one, or -1 when every parameter is on the CPU.
inline int cuda_device(const named_tensors& params) {
    for (const auto& [name, t] : params)
        if (t.is_cuda()) return static_cast<int>(t.get_device());
    return -1;
}

// The bound object for `params` over `pg`: over CUDA memory when a parameter is on CUDA (a
// model that mixes CPU and CUDA parameters is then refused by the wrapper, on every rank:
// its CPU group does not match the communicator), over host memory otherwise. A build
// without CUDA gets CUDA parameters only past the Python layer's check; the wrapper then
// refuses them the same way.
inline std::unique_ptr<bound_algorithm> bind_group(std::string kind, process_group_ptr pg, const named_tensors& params) {
#if TRICKLE_PY_CUDA
    if (const int device = cuda_device(params); device >= 0)
        return std::make_unique<bound_algorithm>(std::move(kind), std::move(pg), device);
#else
    (void)params;
#endif
    return std::make_unique<bound_algorithm>(std::move(kind), std::move(pg));
}

// The factories, one per binding file. Each is called under the GIL and releases it
// while the (collective) construction runs.
std::unique_ptr<bound_algorithm> make_sparta(process_group_ptr pg, const named_tensors& params, const py::dict& opts);
std::unique_ptr<bound_algorithm> make_diloco(process_group_ptr pg, const named_tensors& params, const py::dict& opts);
// An algorithm over comm::elastic_group (elastic.cpp): `kind` "SPARTA", "DiLoCo" or
// "SPARTADiLoCo"; the view in `store`, this worker's id, the group's options.
std::unique_ptr<bound_algorithm> make_elastic(const std::string& kind, store_ptr store, int id, int initial,
                                              std::int64_t timeout_ms, std::int64_t liveness_ms, const std::string& job,
                                              std::int64_t start_timeout_ms, std::int64_t join_timeout_ms,
                                              const std::string& hostname, int renew_every, std::int64_t store_recovery_ms,
                                              const std::string& carry_name,
                                              py::object carry_save, py::object carry_load,
                                              const named_tensors& params, const py::dict& opts);
// Their engines over the elastic group, each in its own file so that they compile in
// parallel: SPARTA (elastic_sparta.cpp, one instantiation per sampler) and SPARTA + DiLoCo
// with the outer gradient through a codec (elastic_sparta_diloco.cpp, one per sampler).
std::unique_ptr<algorithm_base> sparta_on_elastic(trickle::comm::elastic_group& comm, const named_tensors& params,
                                                  const sparta_config& c, const trickle::topology::any& topology);
std::unique_ptr<algorithm_base> sparta_diloco_on_elastic(trickle::comm::elastic_group& comm,
                                                         const named_tensors& params, const sparta_config& sc,
                                                         const diloco_config& c);
// And with the outer gradient through a sparsifier (elastic_sparta_diloco_sparse.cpp, one
// per sampler).
std::unique_ptr<algorithm_base> sparta_diloco_sparsified_on_elastic(trickle::comm::elastic_group& comm,
                                                                    const named_tensors& params,
                                                                    const sparta_config& sc, const diloco_config& c);
std::unique_ptr<bound_algorithm> make_sparta_diloco(process_group_ptr pg, const named_tensors& params,
                                                    const py::dict& opts);
// The dense baseline (ddp.cpp): every parameter averaged every `interval` steps.
std::unique_ptr<bound_algorithm> make_ddp(process_group_ptr pg, const named_tensors& params, const py::dict& opts);
// trickle.DeMo's engine class, _C.DeMoEngine (demo.cpp).
void bind_demo(py::module_& m);
// trickle::exchange_stats as the dict trickle.Stats reads (module.cpp).
py::dict stats_dict(const trickle::exchange_stats& s);

// DiLoCo over `comm` with the outer gradient through `wire` (a codec_choice or a
// sparse_choice), one instantiation (the outer optimizer is outer::any); called without
// the GIL.
template <class Comm, class Choice>
std::unique_ptr<algorithm_base> build_diloco(Comm& comm, const named_tensors& params, const diloco_config& c,
                                             const Choice& wire) {
    using wire_type = decltype(wire.template for_type<float>());
    using wrapper = model_diloco<outer_type, wire_type>;
    return std::make_unique<algorithm_impl<wrapper>>(params, comm, c.options, make_outer(c.outer), c.topology, wire);
}

// The sparsifier instantiations live in their own files (diloco_sparse.cpp,
// sparta_diloco_sparse.cpp), so that the two halves compile in parallel.
std::unique_ptr<algorithm_base> diloco_sparsified(bound_algorithm& out, const named_tensors& params,
                                                  const diloco_config& c);
std::unique_ptr<algorithm_base> sparta_diloco_sparsified(bound_algorithm& out, const named_tensors& params,
                                                         const sparta_config& sc, const diloco_config& c);

// SPARTA + DiLoCo over `comm`, one instantiation per sampler (the outer optimizer is
// outer::any).
template <class Comm, class Choice>
std::unique_ptr<algorithm_base> build_sparta_diloco(Comm& comm, const named_tensors& params, const sparta_config& sc,
                                                    const diloco_config& c, const Choice& wire) {
    return with_sampler(sc.sampler, [&](const auto& s) -> std::unique_ptr<algorithm_base> {
        using wire_type = decltype(wire.template for_type<float>());
        using wrapper = model_sparta_diloco<std::remove_cvref_t<decltype(s)>, outer_type, wire_type>;
        return std::make_unique<algorithm_impl<wrapper>>(params, comm, sc, s, c.options, make_outer(c.outer), c.topology,
                                                         wire);
    });
}

} // namespace trickle_py
