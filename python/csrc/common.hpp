// python/csrc/common.hpp: what the three binding files of trickle._C share.
//
// The Python package builds each algorithm from a few run-time names (sampler, schedule,
// topology, outer optimizer). To keep the number of template instantiations small, the
// schedule and the topology are the variant policies schedule::any and topology::any, so
// only the sampler (SPARTA), the outer optimizer (DiLoCo), or both (SPARTA + DiLoCo) are
// template arguments; the model wrappers of trickle/torch/algorithms.hpp instantiate one
// engine per host dtype (float32, float16, bfloat16) of each.
#pragma once

#include <torch/extension.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <pybind11/stl.h>

#include <trickle/outer.hpp>
#include <trickle/sampler.hpp>
#include <trickle/schedule/any.hpp>
#include <trickle/topology/any.hpp>
#include <trickle/torch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace trickle_py {

namespace py = pybind11;

using process_group_ptr = c10::intrusive_ptr<c10d::ProcessGroup>;
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
    trickle::sampler::block block() const { return trickle::sampler::block{.block_size = block_size}; }
    trickle::sampler::layerwise layerwise() const {
        trickle::sampler::layerwise s;
        if (layerwise_mode == "per_tensor")
            s.how = trickle::sampler::layerwise::mode::per_tensor;
        else if (layerwise_mode == "rotating")
            s.how = trickle::sampler::layerwise::mode::rotating;
        else
            throw trickle::invalid_argument("trickle: unknown layerwise_mode '" + layerwise_mode +
                                            "' (valid: per_tensor, rotating)");
        return s;
    }
};

// Calls f(sampler) with the named sampler; each sampler is one instantiation.
template <class F>
decltype(auto) with_sampler(const sampler_config& c, F&& f) {
    if (c.name == "uniform") return f(trickle::sampler::uniform{});
    if (c.name == "permutation") return f(trickle::sampler::permutation{});
    if (c.name == "block") return f(c.block());
    if (c.name == "layerwise") return f(c.layerwise());
    throw trickle::invalid_argument("trickle: unknown sampler '" + c.name +
                                    "' (valid: uniform, permutation, block, layerwise)");
}

inline trickle::schedule::any make_schedule(const py::dict& d) {
    namespace s = trickle::schedule;
    const auto name = get<std::string>(d, "schedule");
    const auto end_fraction = get<double>(d, "end_fraction");
    const auto steps = get<std::uint64_t>(d, "schedule_steps");
    const auto warmup_steps = get<std::uint64_t>(d, "warmup_steps");
    const auto start = get<double>(d, "warmup_start_fraction");
    if (name == "piecewise") {
        if (warmup_steps != 0)
            throw trickle::invalid_argument("trickle: warmup_steps cannot be combined with the piecewise schedule");
        s::piecewise p;
        p.points = get<std::vector<std::pair<std::uint64_t, double>>>(d, "points");
        return p;
    }
    if (name == "constant") {
        if (warmup_steps == 0) return s::constant{};
        return s::warmup<s::constant>{.steps = warmup_steps, .start_fraction = start};
    }
    if (name == "linear") {
        s::linear l{.end_fraction = end_fraction, .steps = steps};
        if (warmup_steps == 0) return l;
        return s::warmup<s::linear>{.steps = warmup_steps, .start_fraction = start, .then = l};
    }
    if (name == "cosine") {
        s::cosine c{.end_fraction = end_fraction, .steps = steps};
        if (warmup_steps == 0) return c;
        return s::warmup<s::cosine>{.steps = warmup_steps, .start_fraction = start, .then = c};
    }
    throw trickle::invalid_argument("trickle: unknown schedule '" + name +
                                    "' (valid: constant, linear, cosine, piecewise)");
}

inline trickle::topology::any make_topology(const py::dict& d) {
    namespace t = trickle::topology;
    const auto name = get<std::string>(d, "topology");
    if (name == "all_reduce") return t::all_reduce{};
    if (name == "ring") return t::ring{};
    if (name == "gossip") return t::gossip{};
    if (name == "exponential") return t::exponential{};
    if (name == "islands") return t::islands{.size = get<int>(d, "island_size")};
    throw trickle::invalid_argument("trickle: unknown topology '" + name +
                                    "' (valid: all_reduce, ring, gossip, exponential, islands)");
}

// A codec by name (codec_block: values per scale of int8, int4, sign2).
inline trickle::codec::any make_codec(const py::dict& d, const char* key) {
    namespace c = trickle::codec;
    const auto name = get<std::string>(d, key);
    const auto block = get<std::size_t>(d, "codec_block");
    if (name == "fp32") return c::fp32{};
    if (name == "bf16") return c::bf16{};
    if (name == "fp16") return c::fp16{};
    if (name == "fp8_e4m3") return c::fp8_e4m3{};
    if (name == "fp8_e5m2") return c::fp8_e5m2{};
    if (name == "fp8_block") return c::fp8_block{.block_size = block};
    if (name == "int8") return c::int8_block{.block_size = block};
    if (name == "int4") return c::int4_block{.block_size = block};
    if (name == "sign2") return c::sign2_block{.block_size = block};
    throw trickle::invalid_argument(std::string("trickle: unknown ") + key + " '" + name +
                                    "' (valid: fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, fp8_block, int8, int4, sign2)");
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

// Calls f(outer) with the named outer optimizer; each optimizer is one instantiation.
template <class F>
decltype(auto) with_outer(const outer_values& v, F&& f) {
    namespace o = trickle::outer;
    if (v.name == "sgd") {
        o::sgd s;
        if (v.has_lr) s.lr = v.lr;
        return f(s);
    }
    if (v.name == "momentum" || v.name == "nesterov") {
        if (v.name == "momentum") {
            o::momentum m;
            if (v.has_lr) m.lr = v.lr;
            if (v.has_momentum) m.momentum = v.momentum;
            return f(m);
        }
        o::nesterov m;
        if (v.has_lr) m.lr = v.lr;
        if (v.has_momentum) m.momentum = v.momentum;
        return f(m);
    }
    if (v.name == "adam") {
        o::adam a;
        if (v.has_lr) a.lr = v.lr;
        a.beta1 = v.beta1;
        a.beta2 = v.beta2;
        a.eps = v.eps;
        return f(a);
    }
    if (v.name == "average") return f(o::average{});
    throw trickle::invalid_argument("trickle: unknown outer optimizer '" + v.name +
                                    "' (valid: sgd, momentum, nesterov, adam, average)");
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

private:
    Wrapper w_;
};

// Owns the communicator and the algorithm over it (declared in that order, so the
// algorithm, which refers to the communicator, is destroyed first).
class bound_algorithm {
public:
    bound_algorithm(std::string kind, process_group_ptr pg)
        : kind_(std::move(kind)), comm_(std::make_unique<trickle::comm::process_group>(std::move(pg))) {}

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
        } else {
            algo_.reset();
            comm_.reset();
        }
    }

    trickle::comm::process_group& comm() { return *comm_; }
    void set(std::unique_ptr<algorithm_base> a) { algo_ = std::move(a); }
    algorithm_base& algo() const {
        if (!algo_) throw trickle::invalid_argument("trickle." + kind_ + ": the object is empty");
        return *algo_;
    }
    const std::string& kind() const { return kind_; }
    int rank() const { return comm_->rank(); }
    int size() const { return comm_->size(); }

private:
    std::string kind_;
    std::unique_ptr<trickle::comm::process_group> comm_;
    std::unique_ptr<algorithm_base> algo_;
};

// The three factories, one per binding file. Each is called under the GIL and releases it
// while the (collective) construction runs.
std::unique_ptr<bound_algorithm> make_sparta(process_group_ptr pg, const named_tensors& params, const py::dict& opts);
std::unique_ptr<bound_algorithm> make_diloco(process_group_ptr pg, const named_tensors& params, const py::dict& opts);
std::unique_ptr<bound_algorithm> make_sparta_diloco(process_group_ptr pg, const named_tensors& params,
                                                    const py::dict& opts);

} // namespace trickle_py
