// The quick start's worker: the same function runs as a thread (comm::local) or as an MPI process (comm::mpi).
#pragma once

#include <trickle/trickle.hpp>

#include <cstdint>
#include <random>
#include <vector>

struct worker_result {
    std::vector<float> weight, bias; // this worker's parameters at the end
    trickle::exchange_stats stats;
};

// Stands in for a trainer's forward, backward and optimizer step: every worker drifts
// its parameters in its own random direction.
inline void train_step(std::vector<float>& w, std::mt19937& rng) {
    std::normal_distribution<float> noise(0.0f, 0.01f);
    for (float& x : w) x += noise(rng);
}

template <class Comm>
worker_result quickstart_worker(Comm& comm, int steps) {
    worker_result out{std::vector<float>(10000, 0.0f), std::vector<float>(100, 0.0f), {}};
    std::mt19937 rng(1000 + comm.rank());

    // 1. Describe the parameters: named tensors, same order on every worker.
    trickle::param_group<float> params;
    params.add("weight", out.weight.data(), out.weight.size());
    params.add("bias", out.bias.data(), out.bias.size());

    // 2. Pick the policies and options (every worker the same, checked at construction).
    trickle::sparta<trickle::sampler::uniform> sparta(params, comm, {.fraction = 0.01, .interval = 1, .seed = 42});

    // 3. After each optimizer step, one call.
    for (int step = 0; step < steps; ++step) {
        train_step(out.weight, rng);
        train_step(out.bias, rng);
        sparta.step(trickle::exec::host{});
    }
    out.stats = sparta.stats();
    return out;
}
