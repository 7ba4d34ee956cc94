// trickle/torch/params.hpp: the parameters of a torch::nn::Module (or a list of tensors) as trickle param_groups.
//
// Part of the trickle::torch component. A model whose parameters have several dtypes or
// live on several devices gives one group per (dtype, device), in the order the module
// lists them; the algorithm wrappers of trickle/torch/algorithms.hpp step every group.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/dtype.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/core/param_group.hpp>
#include <trickle/error.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

// A module's parameters are read through its own interface (named_parameters()), so the
// module API is only declared here: its header (<torch/nn/module.h>, which a program that
// defines a module includes anyway) costs every translation unit of a binding that never
// sees a module about 12 seconds of parsing.
namespace torch::nn {
class Module;
} // namespace torch::nn

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

TRICKLE_NAMESPACE_BEGIN

namespace torch {

// One (dtype, device) group of a model's parameters: the tensors, their names, and the
// trickle param_group over their storage (host_space for CPU tensors, cuda_space for CUDA
// ones).
struct tensor_group {
    using any_group = std::variant<param_group<float>, param_group<half>, param_group<bfloat16>,
                                   param_group<float, cuda_space>, param_group<half, cuda_space>,
                                   param_group<bfloat16, cuda_space>>;

    at::ScalarType dtype = at::kFloat;
    c10::Device device{c10::kCPU};
    std::vector<std::string> names;
    std::vector<at::Tensor> tensors; // keep the storage alive and tell whether it moved
    any_group group;

    std::size_t elements() const {
        return std::visit([](const auto& g) { return g.total_size(); }, group);
    }
    bool on_cuda() const { return device.is_cuda(); }

    // Throws invalid_argument when a tensor's storage is no longer where the group points
    // (the model was moved with .to(), or a parameter's .data was replaced).
    void check_unmoved(const char* who) const {
        std::visit(
            [&](const auto& g) {
                for (std::size_t i = 0; i < tensors.size(); ++i)
                    require(static_cast<const void*>(g[i].view.data()) == tensors[i].data_ptr() &&
                                g[i].view.size() == static_cast<std::size_t>(tensors[i].numel()),
                            who, ": parameter '", names[i],
                            "' was moved or reallocated after the algorithm was built (module.to(), or an assignment "
                            "to .data); build the algorithm again over the model as it is now");
            },
            group);
    }

    // Tells autograd that trickle wrote the tensors in place (their version counters move
    // on), so a backward pass through a graph that saved them raises PyTorch's in-place
    // modification error instead of using the new values silently.
    void bump_versions() const {
        for (const auto& t : tensors) ::torch::autograd::impl::bump_version(t);
    }
};

// A model's parameters, grouped by (dtype, device).
struct model_params {
    std::vector<tensor_group> groups;

    std::size_t elements() const {
        std::size_t n = 0;
        for (const auto& g : groups) n += g.elements();
        return n;
    }
    std::size_t tensor_count() const {
        std::size_t n = 0;
        for (const auto& g : groups) n += g.tensors.size();
        return n;
    }
};

namespace detail {

template <class T, class Space>
void add_to(tensor_group::any_group& any, const std::string& name, const at::Tensor& t) {
    auto& g = std::get<param_group<T, Space>>(any);
    void* p = t.data_ptr();
    g.add(name, static_cast<T*>(p), static_cast<std::size_t>(t.numel()));
}

template <class T>
tensor_group::any_group make_group(bool cuda) {
    if (cuda) return param_group<T, cuda_space>{};
    return param_group<T>{};
}

inline const char* dtype_name(at::ScalarType s) { return c10::toString(s); }

} // namespace detail

// The parameters of named tensors, one group per (dtype, device) in order of first
// appearance. Throws trickle::invalid_argument, naming the tensor, for an undefined,
// sparse, non-contiguous or empty-named tensor, a dtype other than float32, float16 and
// bfloat16, a device other than CPU and CUDA, or tensors that overlap. A tensor listed
// twice (tied weights: the same storage, offset and size) is kept once, as PyTorch's own
// named_parameters() does.
inline model_params params(const std::vector<std::pair<std::string, at::Tensor>>& named) {
    model_params out;
    for (const auto& [name, t] : named) {
        require(t.defined(), "trickle::torch::params: parameter '", name, "' is an undefined tensor");
        require(t.layout() == c10::kStrided, "trickle::torch::params: parameter '", name,
                "' is not a dense (strided) tensor");
        require(t.is_contiguous(), "trickle::torch::params: parameter '", name,
                "' is not contiguous; trickle writes parameters in place through their storage "
                "(make it contiguous before building the algorithm, e.g. p.data = p.data.contiguous())");
        const at::ScalarType dt = t.scalar_type();
        require(dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16, "trickle::torch::params: parameter '", name,
                "' has dtype ", detail::dtype_name(dt), "; trickle exchanges float32, float16 and bfloat16 parameters");
        require(t.device().is_cpu() || t.device().is_cuda(), "trickle::torch::params: parameter '", name,
                "' is on device ", t.device().str(), "; trickle supports CPU and CUDA tensors");
        bool duplicate = false;
        for (const auto& g : out.groups)
            for (const auto& u : g.tensors)
                duplicate = duplicate || (u.data_ptr() == t.data_ptr() && u.numel() == t.numel() &&
                                          u.scalar_type() == dt && u.device() == t.device());
        if (duplicate) continue;
        tensor_group* g = nullptr;
        for (auto& candidate : out.groups)
            if (candidate.dtype == dt && candidate.device == t.device()) g = &candidate;
        if (g == nullptr) {
            tensor_group fresh;
            fresh.dtype = dt;
            fresh.device = t.device();
            const bool cuda = t.device().is_cuda();
            fresh.group = dt == at::kFloat  ? detail::make_group<float>(cuda)
                          : dt == at::kHalf ? detail::make_group<half>(cuda)
                                            : detail::make_group<bfloat16>(cuda);
            out.groups.push_back(std::move(fresh));
            g = &out.groups.back();
        }
        // param_group::add checks the name, the pointer and overlaps.
        std::visit(
            [&](auto& pg) {
                using G = std::remove_cvref_t<decltype(pg)>;
                detail::add_to<typename G::value_type, typename G::memory_space>(g->group, name, t);
            },
            g->group);
        g->names.push_back(name);
        g->tensors.push_back(t);
    }
    std::erase_if(out.groups, [](const tensor_group& g) { return g.tensors.empty(); });
    return out;
}

// Unnamed tensors are named by their position: "0", "1", ...
inline model_params params(const std::vector<at::Tensor>& tensors) {
    std::vector<std::pair<std::string, at::Tensor>> named;
    named.reserve(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) named.emplace_back(std::to_string(i), tensors[i]);
    return params(named);
}

// A module's parameters (named_parameters(), recursively), or only those that require
// gradients when trainable_only is true. Module is torch::nn::Module or a class derived
// from it (a template only so that this header need not include the module API).
template <class Module>
    requires std::is_base_of_v<::torch::nn::Module, Module>
model_params params(const Module& module, bool trainable_only = false) {
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
        if (trainable_only && !item.value().requires_grad()) continue;
        named.emplace_back(item.key(), item.value());
    }
    return params(named);
}

} // namespace torch

TRICKLE_NAMESPACE_END
