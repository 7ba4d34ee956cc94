// A trainer that g++ compiles (no nvcc): it builds and steps SPARTA and DiLoCo over CUDA
// parameters, reaching their CUDA members through gxx_instances.cu, the one file of its
// own that nvcc compiles (algorithm/instantiate.hpp). Two workers on one GPU give the
// replicas the host gives.
#include <trickle/comm/local.hpp>
#include <trickle/comm/local_cuda.hpp>
#include <trickle/trickle.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <vector>

static_assert(!TRICKLE_CUDA_COMPILER, "this file is the g++ side of the test");

using namespace trickle;

namespace {

constexpr std::size_t n = 50000;

std::vector<float> initial(int rank) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7919u + 13u * static_cast<unsigned>(rank)) % 1000u) * 1e-3f;
    return v;
}

// The trainer's own update between exchanges, done on the host side for both runs (the
// device copy goes through cudaMemcpy): every worker drifts its own way.
void drift(std::vector<float>& v, int rank, int step) {
    for (std::size_t i = 0; i < n; i += 97) v[i] += static_cast<float>(rank + 1) * 1e-2f * static_cast<float>(step + 1);
}

} // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIPPED: no CUDA device; the g++ trainer and its nvcc instantiations were compiled and linked\n");
        return 77;
    }
    const int workers = 2, steps = 6;
    std::vector<std::vector<float>> host(workers), dev(workers);
    comm::run_local(workers, [&](comm::local& c) {
        auto v = initial(c.rank());
        param_group<float> g{{"w", v.data(), n}};
        sparta<sampler::block> s(g, c, {.fraction = 0.05, .seed = 5});
        diloco<outer::nesterov> d(g, c, {.interval = 3});
        for (int t = 0; t < steps; ++t) {
            drift(v, c.rank(), t);
            s.step(exec::host{});
            d.step(exec::host{});
        }
        host[static_cast<std::size_t>(c.rank())] = v;
    });
    comm::run_local_cuda(workers, 0, [&](comm::local_cuda& c) {
        auto v = initial(c.rank());
        buffer<float, cuda_space> b(n);
        const exec::cuda ex{c.stream(), c.device()};
        copy_elements<cuda_space, host_space>(b.data(), v.data(), n, ex);
        param_group<float, cuda_space> g{{"w", b.data(), n}};
        sparta<sampler::block> s(g, c, {.fraction = 0.05, .seed = 5});
        diloco<outer::nesterov> d(g, c, {.interval = 3});
        for (int t = 0; t < steps; ++t) {
            copy_elements<host_space, cuda_space>(v.data(), b.data(), n, ex);
            drift(v, c.rank(), t);
            copy_elements<cuda_space, host_space>(b.data(), v.data(), n, ex);
            s.step(ex);
            d.step(ex);
        }
        copy_elements<host_space, cuda_space>(v.data(), b.data(), n, ex);
        dev[static_cast<std::size_t>(c.rank())] = v;
    });
    int failures = 0;
    for (int r = 0; r < workers; ++r)
        if (std::memcmp(host[r].data(), dev[r].data(), n * sizeof(float)) != 0) {
            std::printf("rank %d: the device replicas differ from the host's\n", r);
            ++failures;
        }
    std::printf("%d passed, %d failed\n", workers - failures, failures);
    return failures == 0 ? 0 : 1;
}
