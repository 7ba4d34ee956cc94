// python/csrc/common.hpp: what the three binding files of trickle._C share.
//
// The Python package builds each algorithm from a few run-time names (sampler, schedule,
// topology, codec, outer optimizer), found in the library's registries
// (include/trickle/*/registry.hpp) by the name each policy declares: no table of names is
// kept here, and trickle._C.registry hands the same lists to the Python layer. To keep
// the number of template instantiations small, the schedule, the topology and the codec
// are the variant policies schedule::any, topology::any and codec::any, so only the
// sampler (SPARTA), the outer optimizer (DiLoCo), or both (SPARTA + DiLoCo) are template
// arguments; the model wrappers of trickle/torch/algorithms.hpp instantiate one engine per
// host dtype (float32, float16, bfloat16) of each.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <pybind11/stl.h>

#include <trickle/codec/any.hpp>
#include <trickle/core/type_list.hpp>
#include <trickle/outer.hpp>
#include <trickle/sampler.hpp>
#include <trickle/schedule/any.hpp>
#include <trickle/topology/any.hpp>
#include <trickle/torch.hpp>
#include <trickle/torch/elastic_group.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
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
// momentum (momentum), betas (betas) and eps (eps). A policy added to a registry takes the
// keywords its fields name; trickle._C.policy_options tells the Python layer which those
// are, so that it refuses a keyword the chosen policy has no use for.
template <class P>
inline constexpr bool has_block_size = requires(P p) { p.block_size = std::size_t{1}; };
template <class P>
inline constexpr bool has_layerwise_mode = requires(P p) { p.how = trickle::sampler::layerwise::mode::per_tensor; };
template <class P>
inline constexpr bool has_decay = requires(P p) {
    p.end_fraction = 0.5;
    p.steps = std::uint64_t{1};
};
template <class P>
inline constexpr bool has_points = requires(P p) { p.points = std::vector<std::pair<std::uint64_t, double>>{}; };
template <class P>
inline constexpr bool warms_up = trickle::type_list_contains<trickle::schedule::warmed, P>;
template <class P>
inline constexpr bool has_group_size = requires(P p) { p.size = 1; };
template <class P>
inline constexpr bool has_lr = requires(P p) { p.lr = 0.5; };
template <class P>
inline constexpr bool has_momentum = requires(P p) { p.momentum = 0.5; };
template <class P>
inline constexpr bool has_betas = requires(P p) {
    p.beta1 = 0.5;
    p.beta2 = 0.5;
};
template <class P>
inline constexpr bool has_eps = requires(P p) { p.eps = 0.5; };

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

inline trickle::schedule::any make_schedule(const py::dict& d) {
    const auto name = get<std::string>(d, "schedule");
    const auto end_fraction = get<double>(d, "end_fraction");
    const auto steps = get<std::uint64_t>(d, "schedule_steps");
    const auto warmup_steps = get<std::uint64_t>(d, "warmup_steps");
    const auto start = get<double>(d, "warmup_start_fraction");
    return trickle::visit_name<trickle::schedule::registry>(name, "schedule", [&](auto t) -> trickle::schedule::any {
        using S = typename decltype(t)::type;
        S s{};
        if constexpr (has_decay<S>) {
            s.end_fraction = end_fraction;
            s.steps = steps;
        }
        if constexpr (has_points<S>) s.points = get<std::vector<std::pair<std::uint64_t, double>>>(d, "points");
        if (warmup_steps == 0) return s;
        if constexpr (warms_up<S>)
            return trickle::schedule::warmup<S>{.steps = warmup_steps, .start_fraction = start, .then = s};
        else
            throw trickle::invalid_argument("trickle: warmup_steps cannot be combined with the " + name + " schedule");
    });
}

inline trickle::topology::any make_topology(const py::dict& d) {
    const auto name = get<std::string>(d, "topology");
    return trickle::visit_name<trickle::topology::registry>(name, "topology", [&](auto t) -> trickle::topology::any {
        typename decltype(t)::type top{};
        if constexpr (has_group_size<decltype(top)>) top.size = get<int>(d, "island_size");
        return top;
    });
}

// A codec by name (codec_block: values per scale of the codecs that have blocks).
inline trickle::codec::any make_codec(const py::dict& d, const char* key) {
    const auto name = get<std::string>(d, key);
    const auto block = get<std::size_t>(d, "codec_block");
    return trickle::visit_name<trickle::codec::registry>(name, key, [&](auto t) -> trickle::codec::any {
        typename decltype(t)::type c{};
        if constexpr (has_block_size<decltype(c)>) c.block_size = block;
        return c;
    });
}

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

// The outer optimizer's plain values, read under the GIL.
struct outer_values {
    std::string name;
    bool has_lr = false, has_momentum = false;
    double lr = 0, momentum = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

    static outer_values from(const py::dict& d) {
        const outer_config c = outer_config::from(d);
        outer_values v;
        v.name = c.name;
        v.has_lr = !c.lr.is_none();
        v.has_momentum = !c.momentum.is_none();
        if (v.has_lr) v.lr = c.lr.cast<double>();
        if (v.has_momentum) v.momentum = c.momentum.cast<double>();
        v.beta1 = c.beta1;
        v.beta2 = c.beta2;
        v.eps = c.eps;
        return v;
    }
};

// Calls f(outer) with the named outer optimizer; each optimizer is one instantiation. The
// fields the values give are set, the others keep the optimizer's defaults.
template <class F>
decltype(auto) with_outer(const outer_values& v, F&& f) {
    return trickle::visit_name<trickle::outer::registry>(v.name, "outer optimizer", [&](auto t) -> decltype(auto) {
        using O = typename decltype(t)::type;
        O o{};
        if constexpr (has_lr<O>)
            if (v.has_lr) o.lr = v.lr;
        if constexpr (has_momentum<O>)
            if (v.has_momentum) o.momentum = v.momentum;
        if constexpr (has_betas<O>) {
            o.beta1 = v.beta1;
            o.beta2 = v.beta2;
        }
        if constexpr (has_eps<O>) o.eps = v.eps;
        return f(o);
    });
}

inline trickle::sparta_options sparta_opts(const py::dict& d, const char* interval_key) {
    trickle::sparta_options o;
    o.fraction = get<double>(d, "fraction");
    o.interval = get<std::uint64_t>(d, interval_key);
    o.seed = get<std::uint64_t>(d, "seed");
    o.broadcast_initial = get<bool>(d, "broadcast_initial");
    o.stochastic_rounding = get<bool>(d, "stochastic_rounding");
    return o;
}

inline trickle::diloco_options diloco_opts(const py::dict& d) {
    trickle::diloco_options o;
    o.interval = get<std::uint64_t>(d, "interval");
    o.seed = get<std::uint64_t>(d, "seed");
    o.weight = get<float>(d, "weight");
    o.drop_probability = get<double>(d, "drop_probability");
    o.prune_fraction = get<double>(d, "prune_fraction");
    o.error_feedback = get<double>(d, "error_feedback");
    o.broadcast_initial = get<bool>(d, "broadcast_initial");
    o.stochastic_rounding = get<bool>(d, "stochastic_rounding");
    return o;
}

// ---- the bound object ----

// What every algorithm offers Python, whatever its policies.
class algorithm_base {
public:
    virtual ~algorithm_base() = default;
    virtual void step() = 0;
    virtual trickle::exchange_stats stats() const = 0;
    virtual trickle::exchange_stats sparse_stats() const = 0;
    virtual trickle::exchange_stats outer_stats() const = 0;
    virtual std::string save_bytes() const = 0;
    virtual void load_bytes(const std::string&) = 0;
    virtual const trickle::torch::model_params& params() const = 0;
    virtual trickle::membership_stats membership() const = 0;
};

template <class Wrapper>
class algorithm_impl final : public algorithm_base {
public:
    template <class... Args>
    explicit algorithm_impl(Args&&... args) : w_(std::forward<Args>(args)...) {}

    void step() override { w_.step(); }
    trickle::exchange_stats stats() const override { return w_.stats(); }
    trickle::exchange_stats sparse_stats() const override {
        if constexpr (requires { w_.sparse_stats(); })
            return w_.sparse_stats();
        else
            return w_.stats();
    }
    trickle::exchange_stats outer_stats() const override {
        if constexpr (requires { w_.outer_stats(); })
            return w_.outer_stats();
        else
            return w_.stats();
    }
    std::string save_bytes() const override { return w_.save_bytes(); }
    void load_bytes(const std::string& b) override { w_.load_bytes(b); }
    const trickle::torch::model_params& params() const override { return w_.params(); }
    trickle::membership_stats membership() const override { return w_.membership(); }

private:
    Wrapper w_;
};

// Owns the communicator (a process group's, or an elastic group's) and the algorithm over
// it (declared in that order, so the algorithm, which refers to the communicator, is
// destroyed first).
class bound_algorithm {
public:
    bound_algorithm(std::string kind, process_group_ptr pg)
        : kind_(std::move(kind)), comm_(std::make_unique<trickle::comm::process_group>(std::move(pg))) {}
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
            algo_.reset();
            comm_.reset();
            elastic_.reset();
        } else {
            algo_.reset();
            comm_.reset();
            elastic_.reset();
        }
    }

    trickle::comm::process_group& comm() { return *comm_; }
    trickle::comm::elastic_group& elastic() { return *elastic_; }
    bool is_elastic() const { return elastic_ != nullptr; }
    void set(std::unique_ptr<algorithm_base> a) { algo_ = std::move(a); }
    algorithm_base& algo() const {
        if (!algo_) throw trickle::invalid_argument("trickle." + kind_ + ": the object is empty");
        return *algo_;
    }
    const std::string& kind() const { return kind_; }
    int rank() const { return comm_ ? comm_->rank() : elastic_->rank(); }
    int size() const { return comm_ ? comm_->size() : elastic_->size(); }

private:
    std::string kind_;
    std::unique_ptr<trickle::comm::process_group> comm_;
    std::unique_ptr<trickle::comm::elastic_group> elastic_;
    std::unique_ptr<algorithm_base> algo_;
};

// The three factories, one per binding file. Each is called under the GIL and releases it
// while the (collective) construction runs.
std::unique_ptr<bound_algorithm> make_sparta(process_group_ptr pg, const named_tensors& params, const py::dict& opts);
std::unique_ptr<bound_algorithm> make_diloco(process_group_ptr pg, const named_tensors& params, const py::dict& opts);
// DiLoCo over comm::elastic_group (elastic.cpp): the view in `store`, this worker's id.
std::unique_ptr<bound_algorithm> make_diloco_elastic(store_ptr store, int id, int initial, std::int64_t timeout_ms,
                                                     std::int64_t liveness_ms, const std::string& job,
                                                     const named_tensors& params, const py::dict& opts);
std::unique_ptr<bound_algorithm> make_sparta_diloco(process_group_ptr pg, const named_tensors& params,
                                                    const py::dict& opts);

} // namespace trickle_py
