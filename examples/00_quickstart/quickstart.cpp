// Quick start: four workers, each with its own copy of a model, keep their replicas
// together by averaging 1% of the parameters after every step.
//
// The workers are threads in one process (comm::local); with comm::mpi or comm::nccl the
// same code runs one worker per process or per GPU.
#include <trickle/trickle.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

// Stands in for a trainer's forward, backward and optimizer step: every worker drifts
// its parameters in its own random direction.
void train_step(std::vector<float>& w, std::mt19937& rng) {
    std::normal_distribution<float> noise(0.0f, 0.01f);
    for (float& x : w) x += noise(rng);
}

double max_spread(const std::vector<std::vector<float>>& replicas) {
    double spread = 0;
    for (std::size_t i = 0; i < replicas[0].size(); ++i) {
        float lo = replicas[0][i], hi = lo;
        for (const auto& r : replicas) {
            lo = std::fmin(lo, r[i]);
            hi = std::fmax(hi, r[i]);
        }
        spread += hi - lo;
    }
    return spread / static_cast<double>(replicas[0].size());
}

int main() {
    constexpr int workers = 4;
    constexpr int steps = 300;
    std::vector<std::vector<float>> weights(workers, std::vector<float>(10000, 0.0f));
    std::vector<std::vector<float>> biases(workers, std::vector<float>(100, 0.0f));
    std::vector<trickle::exchange_stats> stats(workers);

    trickle::comm::run_local(workers, [&](trickle::comm::local& comm) {
        const int r = comm.rank();
        std::mt19937 rng(1000 + r);

        // 1. Describe the parameters: named tensors, same order on every worker.
        trickle::param_group<float> params;
        params.add("weight", weights[r].data(), weights[r].size());
        params.add("bias", biases[r].data(), biases[r].size());

        // 2. Pick the policies and options (every worker the same, checked at construction).
        trickle::sparta<trickle::sampler::uniform> sparta(params, comm, {.fraction = 0.01, .interval = 1, .seed = 42});

        // 3. After each optimizer step, one call.
        for (int step = 0; step < steps; ++step) {
            train_step(weights[r], rng);
            train_step(biases[r], rng);
            sparta.step(trickle::exec::host{});
        }
        stats[r] = sparta.stats();
    });

    const auto& s = stats[0];
    std::printf("SPARTA, %d workers, %d steps, 1%% of %zu parameters per step\n", workers, steps,
                weights[0].size() + biases[0].size());
    std::printf("  mean spread between replicas: %.4f (independent replicas would be ~%.4f)\n", max_spread(weights),
                0.01 * std::sqrt(static_cast<double>(steps)) * 2.0);
    std::printf("  values exchanged per worker:  %llu\n", static_cast<unsigned long long>(s.values));
    std::printf("  bytes sent per worker:        %llu (dense all-reduce every step: %llu)\n",
                static_cast<unsigned long long>(s.total.bytes_sent), static_cast<unsigned long long>(s.dense_bytes));
    std::printf("  communication reduction:      %.0fx\n", s.reduction());
    return s.exchanges == steps ? 0 : 1;
}
