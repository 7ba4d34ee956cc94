// Helpers of the trickle::torch tests: N ranks as threads, each with a Gloo process group
// over one in-memory store.
#pragma once

#include <trickle/torch.hpp>
#include <trickle/torch/gloo.hpp>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <barrier>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace trickle_torch_test {

inline c10::intrusive_ptr<c10d::ProcessGroup> gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                         int size) {
    return trickle::comm::gloo_group(store, rank, size);
}

// Runs fn(comm::process_group&) on `workers` threads; returns each rank's exception text
// ("" when it returned normally). No rank destroys its group (closing its Gloo pairs)
// before every rank is done: a rank whose fn sends nothing (n = 0, say) would otherwise
// close its sockets while a peer's side of a pair may still be finishing its handshake,
// and that peer fails with "Connection closed by peer" (seen once in CI's run of
// test_torch, N = 3, n = 0). Every test here ends with every rank returning or throwing.
template <class Fn>
std::vector<std::string> run_gloo(int workers, Fn&& fn, trickle::comm::process_group_options options = {}) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::vector<std::string> errors(static_cast<std::size_t>(workers));
    std::barrier done(workers);
    std::vector<std::thread> threads;
    for (int r = 0; r < workers; ++r)
        threads.emplace_back([&, r] {
            std::optional<trickle::comm::process_group> comm;
            try {
                comm.emplace(gloo_group(store, r, workers), options);
                fn(*comm);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
            done.arrive_and_wait();
        });
    for (auto& t : threads) t.join();
    return errors;
}

// What comm::process_group's all_reduce_sum of n floats sends from this rank: one
// all-gather ((N-1) n values) where the communicator chooses it, else the ring
// all-reduce's reduce-scatter and all-gather (the cost model of comm/communicator.hpp).
inline std::uint64_t all_reduce_bytes(const trickle::comm::process_group& c, std::size_t n) {
    if (c.size() > 1 && n != 0 && c.all_reduce_gathers(n))
        return static_cast<std::uint64_t>(c.size() - 1) * n * sizeof(float);
    return trickle::detail::all_reduce_bytes(n, sizeof(float), c.size(), c.rank());
}

// Every rank's error text contains `part`.
inline void require_all(const std::vector<std::string>& errors, const std::string& part) {
    for (std::size_t r = 0; r < errors.size(); ++r) {
        INFO("rank ", r, ": ", errors[r]);
        CHECK(errors[r].find(part) != std::string::npos);
    }
}

// Every rank returned normally.
inline void require_ok(const std::vector<std::string>& errors) {
    for (std::size_t r = 0; r < errors.size(); ++r) {
        INFO("rank ", r);
        CHECK(errors[r] == std::string());
    }
}

// A small two-layer network; `seed` sets its initial weights.
struct netImpl : ::torch::nn::Module {
    ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
    netImpl(int in, int hidden, int out, std::uint64_t seed) {
        fc1 = register_module("fc1", ::torch::nn::Linear(in, hidden));
        fc2 = register_module("fc2", ::torch::nn::Linear(hidden, out));
        // A generator of its own: the global one is not safe to share between threads.
        ::torch::NoGradGuard no_grad;
        auto gen = at::detail::createCPUGenerator(seed);
        for (auto& p : parameters()) p.copy_(at::randn(p.sizes(), gen, p.options()) * 0.5);
    }
    at::Tensor forward(const at::Tensor& x) { return fc2(::torch::tanh(fc1(x))); }
};
TORCH_MODULE(net);

// Every parameter of a module as one flat float vector (any dtype, converted).
inline std::vector<float> flat(const ::torch::nn::Module& m) {
    std::vector<float> out;
    for (const auto& p : m.parameters()) {
        const at::Tensor f = p.detach().to(at::kFloat).contiguous();
        out.insert(out.end(), f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
    }
    return out;
}

// A rank-specific change of every parameter, as a training step would make.
inline void perturb(::torch::nn::Module& m, int rank, int step) {
    ::torch::NoGradGuard no_grad;
    auto gen = at::detail::createCPUGenerator(static_cast<std::uint64_t>(1000 * rank + step));
    for (auto& p : m.parameters()) p.add_(at::randn(p.sizes(), gen, p.options().dtype(at::kFloat)).to(p.scalar_type()) * 0.01);
}

} // namespace trickle_torch_test
