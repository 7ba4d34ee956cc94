// Shared by test_device_sparta.cu and test_device_diloco.cu: N workers on one GPU
// (comm::local_cuda) against the host (comm::local), same seeds, bit for bit.
#pragma once

#include <trickle/comm/local.hpp>
#include <trickle/comm/local_cuda.hpp>
#include <trickle/trickle.hpp>

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

using namespace trickle;

namespace device_path {

// The "training step" between exchanges, identical on both backends: every parameter
// moves by a deterministic per-rank, per-step amount (products rounded alone: no FMA).
template <class T>
struct perturb_body {
    flat_view<T> params;
    std::uint64_t rank, step;
    TRICKLE_HOST_DEVICE void operator()(std::size_t i) const {
        const auto r = static_cast<int>(random_u64(rank + 1, step, i) % 2001u) - 1000;
        T& p = params[i];
        p = from_float<T>(to_float(p) + mul_rn(static_cast<float>(r), 1e-4f));
    }
};

template <class T>
std::vector<std::vector<T>> initial_tensors(const std::vector<std::size_t>& sizes, int rank) {
    std::vector<std::vector<T>> out;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
        std::vector<T> v(sizes[t]);
        for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = from_float<T>(static_cast<float>(static_cast<int>((i * 2654435761u + 97u * t) % 1999u) - 999) * 1e-3f +
                                 0.01f * static_cast<float>(rank));
        out.push_back(std::move(v));
    }
    return out;
}

template <class T>
std::vector<T> flatten(const std::vector<std::vector<T>>& ts) {
    std::vector<T> out;
    for (const auto& v : ts) out.insert(out.end(), v.begin(), v.end());
    return out;
}

// Runs make(group, comm) for `steps` steps on N workers, host and device, and returns each
// rank's final parameters from both.
template <class T, class Make>
void compare(int workers, const std::vector<std::size_t>& sizes, int steps, const Make& make, const std::string& what) {
    std::vector<std::vector<T>> host(static_cast<std::size_t>(workers)), dev(static_cast<std::size_t>(workers));
    comm::run_local(workers, [&](comm::local& c) {
        auto ts = initial_tensors<T>(sizes, c.rank());
        param_group<T> g;
        for (std::size_t t = 0; t < ts.size(); ++t) g.add("t" + std::to_string(t), ts[t].data(), ts[t].size());
        auto alg = make(g, c);
        flat_params<T, host_space> f(g);
        for (int s = 0; s < steps; ++s) {
            for_each_index(exec::host{}, f.total(),
                           perturb_body<T>{f.view(), static_cast<std::uint64_t>(c.rank()), static_cast<std::uint64_t>(s)});
            alg.step(exec::host{});
        }
        host[static_cast<std::size_t>(c.rank())] = flatten(ts);
    });
    comm::run_local_cuda(workers, 0, [&](comm::local_cuda& c) {
        const auto ts = initial_tensors<T>(sizes, c.rank());
        std::vector<buffer<T, cuda_space>> bufs;
        param_group<T, cuda_space> g;
        for (std::size_t t = 0; t < ts.size(); ++t) {
            bufs.emplace_back(ts[t].size());
            copy_elements<cuda_space, host_space>(bufs.back().data(), ts[t].data(), ts[t].size());
        }
        for (std::size_t t = 0; t < ts.size(); ++t) g.add("t" + std::to_string(t), bufs[t].data(), bufs[t].size());
        const exec::cuda ex{c.stream(), c.device()};
        auto alg = make(g, c);
        flat_params<T, cuda_space> f(g, ex);
        for (int s = 0; s < steps; ++s) {
            for_each_index(ex, f.total(),
                           perturb_body<T>{f.view(), static_cast<std::uint64_t>(c.rank()), static_cast<std::uint64_t>(s)});
            alg.step(ex);
        }
        c.synchronize();
        std::vector<T> out;
        for (std::size_t t = 0; t < ts.size(); ++t) {
            std::vector<T> h(ts[t].size());
            copy_elements<host_space, cuda_space>(h.data(), bufs[t].data(), h.size());
            out.insert(out.end(), h.begin(), h.end());
        }
        dev[static_cast<std::size_t>(c.rank())] = std::move(out);
    });
    for (int r = 0; r < workers; ++r) {
        INFO(what << ", " << workers << " workers, rank " << r);
        const auto& a = host[static_cast<std::size_t>(r)];
        const auto& b = dev[static_cast<std::size_t>(r)];
        REQUIRE(a.size() == b.size());
        std::size_t first_diff = a.size();
        for (std::size_t i = 0; i < a.size() && first_diff == a.size(); ++i)
            if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) first_diff = i;
        INFO("first differing element: " << first_diff);
        CHECK(first_diff == a.size());
    }
}

const std::vector<std::size_t> odd_layout{5000, 3, 70001};       // tensors start off the 16-byte grid
const std::vector<std::size_t> aligned_layout{4096, 8, 65536};   // every piece moves as vectors

template <class S, class Sch = schedule::constant, class Top = topology::all_reduce>
auto make_sparta(sparta_options o, S s = {}, Sch sch = {}, Top top = {}) {
    return [=](const auto& g, auto& c) { return sparta<S, Sch, Top>(g, c, o, s, sch, top); };
}

template <class O, class Top = topology::all_reduce>
auto make_diloco(diloco_options o, O outer = {}, Top top = {}) {
    return [=](const auto& g, auto& c) {
        diloco_options mine = o;
        mine.weight = 1.0f + 0.5f * static_cast<float>(c.rank());
        return diloco<O, Top>(g, c, mine, outer, top);
    };
}

} // namespace device_path
