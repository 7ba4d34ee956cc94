// Quick start: four workers, each with its own copy of a model, keep their replicas
// together by averaging 1% of the parameters after every step.
//
// Here the workers are threads of one process (comm::local); quickstart_mpi runs the
// same worker as one MPI process each, with the same result.
#include "worker.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

// Mean absolute difference between replicas 0 and 1.
double gap(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += std::fabs(a[i] - b[i]);
    return s / static_cast<double>(a.size());
}

int main() {
    constexpr int workers = 4, steps = 300;
    std::vector<worker_result> results(workers);
    trickle::comm::run_local(workers, [&](trickle::comm::local& comm) {
        results[comm.rank()] = quickstart_worker(comm, steps);
    });

    // The same noise without any exchange, for comparison.
    std::vector<float> free0(10000, 0.0f), free1(10000, 0.0f);
    std::mt19937 rng0(1000), rng1(1001);
    std::vector<float> b0(100), b1(100);
    for (int s = 0; s < steps; ++s) {
        train_step(free0, rng0);
        train_step(b0, rng0);
        train_step(free1, rng1);
        train_step(b1, rng1);
    }

    const auto& s = results[0].stats;
    double checksum = 0;
    for (float x : results[0].weight) checksum += x;
    std::printf("SPARTA, %d workers, %d steps, 1%% of 10100 parameters per step\n", workers, steps);
    std::printf("  gap between replicas 0 and 1: %.4f (without SPARTA: %.4f)\n", gap(results[0].weight, results[1].weight),
                gap(free0, free1));
    std::printf("  bytes sent per worker:        %llu (dense all-reduce every step: %llu)\n",
                static_cast<unsigned long long>(s.total.bytes_sent), static_cast<unsigned long long>(s.dense_bytes));
    std::printf("  communication reduction:      %.0fx\n", s.reduction());
    std::printf("result: rank0_checksum=%.6e bytes_sent=%llu\n", checksum,
                static_cast<unsigned long long>(s.total.bytes_sent));
    return s.exchanges == steps ? 0 : 1;
}
