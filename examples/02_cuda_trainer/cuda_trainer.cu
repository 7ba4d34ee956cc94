// A CUDA trainer, one process per GPU under mpirun, that adds SPARTA in a few lines.
//
//   mpirun -np 4 cuda_trainer [steps]
//
// Each process trains its own replica of a linear model on its own data shard with its
// own kernels and its own NCCL communicator — the trainer's, not trickle's. The lines
// marked "trickle" are all it takes to keep the replicas together while exchanging 0.5%
// of the parameters per step, enqueued on the trainer's stream with no host sync.
#include <trickle/comm/mpi.hpp>
#include <trickle/comm/nccl.hpp>
#include <trickle/trickle.hpp>

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr std::size_t dim = 1 << 16; // parameters
constexpr std::size_t batch = 64;

// The shared ground truth the shards are drawn from.
TRICKLE_HOST_DEVICE float true_weight(std::size_t j) { return trickle::uniform01(static_cast<std::uint32_t>(trickle::random_u64(7, 0, j))) - 0.5f; }

// x[b][j] of a sample: sparse features, 8 active per sample, drawn per (rank, step, b).
TRICKLE_HOST_DEVICE std::size_t feature(int rank, std::uint64_t step, std::size_t b, int f) {
    return static_cast<std::size_t>(trickle::bounded(trickle::random_u64(100 + rank, step * batch + b, f), dim));
}

// pred[b] - y[b] for the current batch.
struct residual_body {
    const float* w;
    float* residual;
    int rank;
    std::uint64_t step;
    TRICKLE_HOST_DEVICE void operator()(std::size_t b) const {
        float pred = 0, target = 0;
        for (int f = 0; f < 8; ++f) {
            const std::size_t j = feature(rank, step, b, f);
            pred += w[j];
            target += true_weight(j);
        }
        residual[b] = pred - target;
    }
};

// w[j] -= lr * dL/dw[j], with the gradient scattered from the batch's residuals. Uses
// atomicAdd, so this body runs on the device only.
struct sgd_body {
    float* w;
    const float* residual;
    int rank;
    std::uint64_t step;
    float lr;
    __device__ void operator()(std::size_t b) const {
        for (int f = 0; f < 8; ++f) atomicAdd(&w[feature(rank, step, b, f)], -lr * 2.0f * residual[b] / batch);
    }
};

#define CHECK_NCCL(call)                                                                      \
    do {                                                                                      \
        ncclResult_t rc_ = (call);                                                            \
        if (rc_ != ncclSuccess) {                                                             \
            std::fprintf(stderr, "%s failed: %s\n", #call, ncclGetErrorString(rc_));          \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                     \
        }                                                                                     \
    } while (0)

} // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1, devices = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        if (rank == 0) std::printf("cuda_trainer: no CUDA device on this machine; nothing to do\n");
        MPI_Finalize();
        return 0;
    }
    const int steps = argc > 1 ? std::atoi(argv[1]) : 2000;
    TRICKLE_CUDA_CHECK(cudaSetDevice(rank % devices));

    // The trainer's own NCCL communicator and stream.
    ncclUniqueId id;
    if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t nccl_comm;
    CHECK_NCCL(ncclCommInitRank(&nccl_comm, size, id, rank));
    cudaStream_t stream;
    TRICKLE_CUDA_CHECK(cudaStreamCreate(&stream));
    {
        trickle::buffer<float, trickle::cuda_space> w(dim), residual(batch);
        const trickle::exec::cuda ex{stream};

        // trickle: describe the parameters, wrap the communicator, build SPARTA.
        trickle::param_group<float, trickle::cuda_space> params{{"w", w.data(), dim}};
        trickle::comm::nccl comm(nccl_comm, stream);
        trickle::sparta<trickle::sampler::block> sparta(params, comm, {.fraction = 0.005, .seed = 42},
                                                        trickle::sampler::block{.block_size = 256});

        std::vector<float> r(batch);
        for (int step = 0; step < steps; ++step) {
            trickle::for_each_index(ex, batch, residual_body{w.data(), residual.data(), rank, static_cast<std::uint64_t>(step)});
            trickle::for_each_index(ex, batch, sgd_body{w.data(), residual.data(), rank, static_cast<std::uint64_t>(step), 0.5f});
            sparta.step(ex); // trickle: one call after the optimizer step
            if (rank == 0 && (step % 500 == 0 || step == steps - 1)) {
                TRICKLE_CUDA_CHECK(cudaMemcpyAsync(r.data(), residual.data(), batch * sizeof(float), cudaMemcpyDeviceToHost, stream));
                TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
                double loss = 0;
                for (float x : r) loss += static_cast<double>(x) * x / batch;
                std::printf("step %5d  loss %.5f  sent %llu bytes (%.0fx less than dense)\n", step, loss,
                            static_cast<unsigned long long>(sparta.stats().total.bytes_sent), sparta.stats().reduction());
            }
        }
        TRICKLE_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    ncclCommDestroy(nccl_comm);
    cudaStreamDestroy(stream);
    MPI_Finalize();
    return 0;
}
