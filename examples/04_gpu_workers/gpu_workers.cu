// Four workers on one GPU: each trains its own replica of a sparse linear model on its own
// data, with its own CUDA stream, and SPARTA + DiLoCo keeps the replicas together. Nothing
// here needs more than one GPU, MPI or NCCL: comm::local_cuda plays the network, and the
// bytes it counts are what a real network would carry.
//
//   gpu_workers [steps]
#include <trickle/comm/local_cuda.hpp>
#include <trickle/trickle.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace {

constexpr std::size_t dim = 1 << 18; // parameters per replica
constexpr std::size_t batch = 256;
constexpr int features = 8;

TRICKLE_HOST_DEVICE float true_weight(std::size_t j) {
    return trickle::uniform01(static_cast<std::uint32_t>(trickle::random_u64(7, 0, j))) - 0.5f;
}

TRICKLE_HOST_DEVICE std::size_t feature(int rank, std::uint64_t step, std::size_t b, int f) {
    return static_cast<std::size_t>(trickle::bounded(trickle::random_u64(100 + rank, step * batch + b, f), dim));
}

// One SGD step of worker `rank` on its own batch: residual, then the gradient scattered
// with atomics (a device-only body: the trainer's own kernel, not trickle's).
struct sgd_body {
    float* w;
    float* loss;
    int rank;
    std::uint64_t step;
    float lr;
    __device__ void operator()(std::size_t b) const {
        float pred = 0, target = 0;
        for (int f = 0; f < features; ++f) {
            const std::size_t j = feature(rank, step, b, f);
            pred += w[j];
            target += true_weight(j);
        }
        const float r = pred - target;
        atomicAdd(loss, r * r / batch);
        for (int f = 0; f < features; ++f) atomicAdd(&w[feature(rank, step, b, f)], -lr * 2.0f * r / batch);
    }
};

} // namespace

int main(int argc, char** argv) {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    const int workers = 4;
    std::mutex print;
    trickle::comm::run_local_cuda(workers, 0, [&](trickle::comm::local_cuda& comm) {
        const trickle::exec::cuda ex{comm.stream(), comm.device()};
        trickle::buffer<float, trickle::cuda_space> w(dim, ex), loss(1, ex);
        trickle::param_group<float, trickle::cuda_space> params{{"w", w.data(), dim}};

        // trickle: average 1% of the parameters every step (block sampler: coalesced), and
        // an outer Nesterov step on the averaged change every 50 steps.
        trickle::sparta_diloco<trickle::sampler::block> sync(params, comm, {.fraction = 0.01, .seed = 42},
                                                             {.interval = 50}, trickle::sampler::block{.block_size = 256});

        float last = 0;
        for (int step = 0; step < steps; ++step) {
            TRICKLE_CUDA_CHECK(cudaMemsetAsync(loss.data(), 0, sizeof(float), ex.stream));
            trickle::for_each_index(ex, batch, sgd_body{w.data(), loss.data(), comm.rank(), static_cast<std::uint64_t>(step), 0.5f});
            sync.step(ex); // trickle: enqueued on this worker's stream, no host synchronization
            if (step == steps - 1) {
                TRICKLE_CUDA_CHECK(cudaMemcpyAsync(&last, loss.data(), sizeof(float), cudaMemcpyDeviceToHost, ex.stream));
                TRICKLE_CUDA_CHECK(cudaStreamSynchronize(ex.stream));
            }
        }
        comm.synchronize();
        const auto& st = sync.stats();
        std::lock_guard lock(print);
        std::printf("worker %d: last batch loss %.4f, sent %.2f MB, %.0fx less than a dense all-reduce every step\n",
                    comm.rank(), last, static_cast<double>(st.total.bytes_sent) / 1e6, st.reduction());
    });
    return 0;
}
