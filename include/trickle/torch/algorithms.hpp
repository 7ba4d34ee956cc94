// trickle/torch/algorithms.hpp: SPARTA, DiLoCo, SPARTA + DiLoCo and the dense baseline (ddp)
// over a whole torch model.
//
// Part of the trickle::torch component. Each wrapper takes a module (or a list of
// tensors, or model_params) and a communicator, builds one trickle algorithm per
// (dtype, device) group of the parameters, and steps them all in step():
//
//   trickle::comm::process_group comm(pg);                 // or comm::mpi, comm::local, ...
//   trickle::torch::sparta<trickle::sampler::permutation> sparta(*model, comm, {.fraction = 0.005, .seed = 42});
//   (a codec is the last policy, as for trickle::sparta: codec::native sends each group in its own dtype)
//   ...
//   optimizer.step();
//   sparta.step();
//
// Host parameters step on exec::host; CUDA parameters (with a communicator over device
// memory, such as comm::nccl) on the communicator's stream, which must then be the stream
// the trainer's kernels use (or be ordered with it).
//
// Autograd: trickle writes the parameters in place through their storage. After every
// step that wrote them (an exchange, an outer step, the initial broadcast) the wrapper
// moves the tensors' version counters on, so if step() ran between a forward pass and
// its backward, the backward raises PyTorch's "modified by an inplace operation" error
// instead of silently using the averaged values. The rule: call step() after
// optimizer.step() and before the next forward pass.
#pragma once

#include <trickle/algorithm/agreement.hpp>
#include <trickle/algorithm/ddp.hpp>
#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/algorithm/sparta_diloco.hpp>
#include <trickle/algorithm/stats.hpp>
#include <trickle/comm/view.hpp>
#include <trickle/config.hpp>
#include <trickle/core/config_record.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/torch/params.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace torch {

// The seed of group g: the options' seed for the first group (so a single-dtype model
// samples exactly as trickle::sparta over the same group), distinct streams for the others.
inline std::uint64_t group_seed(std::uint64_t seed, std::size_t g) {
    return seed + static_cast<std::uint64_t>(g) * 0x9e3779b97f4a7c15ull;
}

namespace detail {

// One trickle algorithm (Algo: trickle::sparta<...>, diloco<...> or sparta_diloco<...>)
// per parameter group of a model.
template <class Algo>
class model_algorithm {
public:
    model_algorithm() = default;
    model_algorithm(model_algorithm&&) noexcept = default;
    model_algorithm& operator=(model_algorithm&&) noexcept = default;

    // Collective: steps every group's algorithm, in group order, then bumps the version
    // counters of the groups it wrote.
    void step() {
        require(!algos_.empty(), kind_, "::step: this object is empty (default-constructed or moved from)");
        for (std::size_t g = 0; g < algos_.size(); ++g) params_.groups[g].check_unmoved(kind_);
        for (std::size_t g = 0; g < algos_.size(); ++g) {
            const std::uint64_t before = algos_[g].stats().exchanges;
            stepper_(algos_[g]);
            if (algos_[g].stats().exchanges != before) params_.groups[g].bump_versions();
        }
    }

    // Applies every group's overlapped exchange still pending (SPARTA's overlap, in group
    // order), waiting for it if it still travels, and bumps the versions of the groups it
    // wrote; nothing for a group without one. Call it on every worker at the same step
    // before save() (save refuses a pending exchange).
    void flush() {
        require(!algos_.empty(), kind_, "::flush: this object is empty (default-constructed or moved from)");
        for (std::size_t g = 0; g < algos_.size(); ++g) {
            const std::uint64_t before = algos_[g].stats().exchanges;
            flusher_(algos_[g]);
            if (algos_[g].stats().exchanges != before) params_.groups[g].bump_versions();
        }
    }

    // The sum over groups (steps as one group counts them; dense_bytes for all parameters).
    exchange_stats stats() const {
        return sum_over_groups([](const Algo& a) -> const exchange_stats& { return a.stats(); });
    }
    const exchange_stats& stats(std::size_t group) const { return at(group).stats(); }

    std::size_t group_count() const { return algos_.size(); }
    // Over an elastic communicator (comm::elastic_group, comm::elastic_local): the view,
    // its changes and the protocol's costs (docs/elastic.md); the one group's.
    membership_stats membership() const { return at(0).membership(); }
    const model_params& params() const { return params_; }
    explicit operator bool() const { return !algos_.empty(); }

    Algo& algorithm(std::size_t group) { return algos_.at(group); }
    const Algo& at(std::size_t group) const { return algos_.at(group); }

    // Every group's state, in group order.
    void save(std::ostream& os) const {
        for (const auto& a : algos_) a.save(os);
    }

    // Collective. The groups' checkpoints follow each other in `is`: every group but the
    // last is read leaving what follows it, the last under `trailing` (checkpoint.hpp).
    // If any group fails to load, the groups already loaded are put back, on every worker
    // alike, and the error is rethrown.
    void load(std::istream& is, const std::string& source = "stream",
              checkpoint_trailing trailing = checkpoint_trailing::refuse) {
        std::ostringstream backup;
        save(backup);
        std::size_t loaded = 0;
        auto rule = [&](std::size_t g) { return g + 1 < algos_.size() ? checkpoint_trailing::leave : trailing; };
        try {
            for (; loaded < algos_.size(); ++loaded) algos_[loaded].load(is, source, rule(loaded));
        } catch (...) {
            std::istringstream restore(backup.str());
            for (std::size_t g = 0; g < algos_.size(); ++g) {
                if (g < loaded) {
                    algos_[g].load(restore, "backup", checkpoint_trailing::leave);
                } else {
                    std::ostringstream skip;
                    algos_[g].save(skip); // same size as this group's part of the backup
                    restore.seekg(static_cast<std::streamoff>(skip.str().size()), std::ios::cur);
                }
            }
            throw;
        }
    }

    // The sections of this worker's state that are its own rather than equal on every
    // worker (replica_state::own_sections), over all groups, without repeats: empty when a
    // state saved by any one worker restores every worker alike (the traffic counts aside).
    std::vector<std::string> own_state() const {
        std::vector<std::string> out;
        for (const auto& a : algos_)
            for (auto& s : a.own_state())
                if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
        return out;
    }

    std::string save_bytes() const {
        std::ostringstream os;
        save(os);
        return os.str();
    }
    // The whole string is the state: bytes after the last group's checkpoint are an error.
    void load_bytes(const std::string& bytes) {
        std::istringstream is(bytes);
        load(is, "state_dict", checkpoint_trailing::refuse);
    }

protected:
    // part(algorithm) summed over groups, as stats() sums.
    template <class Part>
    exchange_stats sum_over_groups(Part part) const {
        exchange_stats s{};
        for (std::size_t g = 0; g < algos_.size(); ++g) {
            const exchange_stats& o = part(algos_[g]);
            if (g == 0) {
                s = o;
                continue;
            }
            s += o;
            s.dense_bytes += o.dense_bytes;
        }
        return s;
    }

    // Collects the parameters, agrees with every worker on their groups (so a rank whose
    // model is bad or different throws together with the others instead of leaving them
    // waiting), then builds make(group, comm, g) for each group g. Over an elastic
    // communicator the model must be one group (one dtype and device: each group's
    // algorithm would renew and admit on its own), and a joiner (`join`) skips the
    // agreement: it is outside the view until admitted, and the welcome compares its
    // configuration (the layout included) with a member's.
    template <class Comm, class Collect, class Make>
    void build(const char* kind, Comm& comm, Collect&& collect, Make&& make, bool join = false) {
        using space = typename Comm::memory_space;
        constexpr bool comm_on_device = std::is_same_v<space, cuda_space>;
        kind_ = kind;
        model_params p;
        config_record rec(std::string("torch.") + kind);
        try {
            p = collect();
        } catch (const error& e) {
            rec.set_error(e.what());
        }
        rec.add("groups", p.groups.size());
        for (std::size_t g = 0; g < p.groups.size(); ++g) {
            const tensor_group& tg = p.groups[g];
            rec.add(trickle::detail::concat("group", g),
                    trickle::detail::concat(trickle::torch::detail::dtype_name(tg.dtype), '@',
                                            tg.on_cuda() ? "cuda" : "cpu", ':', tg.tensors.size(), " tensors, ",
                                            tg.elements(), " elements"));
            std::vector<std::string> tensors;
            for (std::size_t i = 0; i < tg.tensors.size(); ++i)
                tensors.push_back(trickle::detail::concat(tg.names[i], " ", tg.tensors[i].sizes()));
            rec.add_detail(trickle::detail::concat("group", g, "'s tensors in order"), std::move(tensors),
                           trickle::detail::concat("group", g));
            if (tg.on_cuda() != comm_on_device && rec.error().empty())
                rec.set_error(trickle::detail::concat(
                    kind, ": parameter '", tg.names.front(), "' is on ", tg.device.str(), " but the communicator moves ",
                    space::name, " memory",
                    p.groups.size() > 1 ? " (a model split over CPU and CUDA needs one algorithm per device)" : ""));
        }
        if (p.groups.empty() && rec.error().empty()) rec.set_error(trickle::detail::concat(kind, ": the model has no parameters"));
        constexpr bool elastic = comm::elastic_communicator<Comm>;
        if (elastic && p.groups.size() > 1 && rec.error().empty())
            rec.set_error(trickle::detail::concat(
                kind, ": over an elastic communicator the model must have one parameter group (one dtype and "
                      "device) in this version; this one has ",
                p.groups.size()));
        if (elastic && join) {
            if (!rec.error().empty()) throw invalid_argument(rec.error());
        } else {
            agree(comm, rec);
        }

        std::vector<Algo> algos;
        for (std::size_t g = 0; g < p.groups.size(); ++g)
            std::visit(
                [&](const auto& pg) {
                    using G = std::remove_cvref_t<decltype(pg)>;
                    if constexpr (std::is_same_v<typename G::memory_space, space>)
                        algos.push_back(make(pg, comm, g));
                },
                p.groups[g].group);
        for (std::size_t g = 0; g < algos.size(); ++g)
            if (algos[g].stats().initial.calls != 0) p.groups[g].bump_versions();
        params_ = std::move(p);
        algos_ = std::move(algos);
        stepper_ = [&comm](Algo& a) {
            if constexpr (comm_on_device)
                a.step(exec::cuda{comm.stream()});
            else
                a.step(exec::host{});
        };
        flusher_ = [](Algo& a) {
            if constexpr (requires { a.flush(); }) // the erased handles (a host exchange; nothing on a device)
                a.flush();
            else if constexpr (requires { a.flush(exec::host{}); })
                a.flush(exec::host{});
        };
    }

private:
    const char* kind_ = "trickle::torch";
    model_params params_;
    std::vector<Algo> algos_;
    std::function<void(Algo&)> stepper_;
    std::function<void(Algo&)> flusher_;
};

// What a wrapper's constructor accepts as the model.
template <class M>
concept module_like = std::is_base_of_v<::torch::nn::Module, std::remove_cvref_t<M>>;

template <class M>
model_params collect(const M& m) {
    if constexpr (module_like<M>)
        return trickle::torch::params(m, /*trainable_only=*/false);
    else if constexpr (requires { m.ptr(); *m; })
        return trickle::torch::params(*m, false); // a ModuleHolder (TORCH_MODULE)
    else if constexpr (std::is_same_v<M, model_params>)
        return m;
    else
        return trickle::torch::params(m); // tensors, or (name, tensor) pairs
}

} // namespace detail

// SPARTA over every parameter group of a model. `model` is a torch::nn::Module, a
// TORCH_MODULE holder, a std::vector<at::Tensor>, named tensors, or model_params.
template <class Sampler = sampler::uniform, class Schedule = schedule::constant, class Topology = topology::all_reduce,
          class Codec = codec::fp32>
class sparta : public detail::model_algorithm<trickle::sparta<Sampler, Schedule, Topology, Codec>> {
public:
    sparta() = default;

    template <class Model, class Comm>
    sparta(const Model& model, Comm& comm, sparta_options options = {}, Sampler sampler = {}, Schedule schedule = {},
           Topology topology = {}, Codec codec = {}) {
        this->build(
            "sparta", comm, [&] { return detail::collect(model); },
            [&](const auto& group, Comm& c, std::size_t g) {
                sparta_options o = options;
                o.seed = group_seed(options.seed, g);
                return trickle::sparta<Sampler, Schedule, Topology, Codec>(group, c, o, sampler, schedule, topology, codec);
            },
            options.join);
    }
};

// DiLoCo over every parameter group of a model.
template <class Outer = outer::nesterov, class Topology = topology::all_reduce, class Codec = codec::fp32>
class diloco : public detail::model_algorithm<trickle::diloco<Outer, Topology, Codec>> {
public:
    diloco() = default;

    template <class Model, class Comm>
    diloco(const Model& model, Comm& comm, diloco_options options = {}, Outer outer = {}, Topology topology = {},
           Codec codec = {}) {
        this->build(
            "diloco", comm, [&] { return detail::collect(model); },
            [&](const auto& group, Comm& c, std::size_t g) {
                diloco_options o = options;
                o.seed = group_seed(options.seed, g);
                return trickle::diloco<Outer, Topology, Codec>(group, c, o, outer, topology, codec);
            },
            options.join);
    }
};

// SPARTA inside DiLoCo's rounds, over every parameter group of a model.
template <class Sampler = sampler::uniform, class Schedule = schedule::constant, class Topology = topology::all_reduce,
          class Outer = outer::nesterov, class Codec = codec::fp32, class OuterCodec = codec::fp32>
class sparta_diloco
    : public detail::model_algorithm<trickle::sparta_diloco<Sampler, Schedule, Topology, Outer, Codec, OuterCodec>> {
public:
    sparta_diloco() = default;

    template <class Model, class Comm>
    sparta_diloco(const Model& model, Comm& comm, sparta_options sparse = {}, diloco_options outer_opts = {},
                  Sampler sampler = {}, Schedule schedule = {}, Topology topology = {}, Outer outer = {},
                  Codec codec = {}, OuterCodec outer_codec = {}) {
        this->build(
            "sparta_diloco", comm, [&] { return detail::collect(model); },
            [&](const auto& group, Comm& c, std::size_t g) {
                sparta_options s = sparse;
                diloco_options o = outer_opts;
                s.seed = group_seed(sparse.seed, g);
                o.seed = group_seed(outer_opts.seed, g);
                return trickle::sparta_diloco<Sampler, Schedule, Topology, Outer, Codec, OuterCodec>(
                    group, c, s, o, sampler, schedule, topology, outer, codec, outer_codec);
            },
            outer_opts.join);
    }

    // Each part's account, summed over groups (the initial broadcast is on the DiLoCo part).
    exchange_stats sparse_stats() const {
        return this->sum_over_groups([](const auto& a) -> const exchange_stats& { return a.sparse_stats(); });
    }
    exchange_stats outer_stats() const {
        return this->sum_over_groups([](const auto& a) -> const exchange_stats& { return a.outer_stats(); });
    }
};

// The dense baseline (trickle::ddp: every parameter averaged every `interval` steps, one
// fp32 sum over the communicator) over every parameter group of a model, with the face of
// the others (stats, checkpoints, the initial broadcast, agreement), so that a comparison
// with SPARTA or DiLoCo changes one line. Host parameters only: trickle::ddp refuses
// device memory.
class ddp : public detail::model_algorithm<trickle::ddp> {
public:
    ddp() = default;

    template <class Model, class Comm>
    ddp(const Model& model, Comm& comm, ddp_options options = {}) {
        this->build(
            "ddp", comm, [&] { return detail::collect(model); },
            [&](const auto& group, Comm& c, std::size_t) { return trickle::ddp(group, c, options); });
    }
};

} // namespace torch

TRICKLE_NAMESPACE_END
