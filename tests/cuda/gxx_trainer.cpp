// A trainer that g++ compiles (no nvcc): it builds and steps SPARTA, DiLoCo and SPARTA +
// DiLoCo over CUDA parameters, with and without codecs, reaching their CUDA members
// through gxx_instances.cu, the one file of its own that nvcc compiles
// (algorithm/instantiate.hpp). Two workers on one GPU give the replicas the host gives.
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

// The algorithms the trainer runs, each on a parameter vector of its own (index p): plain
// SPARTA and DiLoCo on vector 0, both with a codec on vector 1 (int8 blocks, bf16), and
// SPARTA + DiLoCo with a codec per part on vector 2. Constructed in the same order on
// every worker (each constructor is collective).
constexpr int vectors = 3;

template <class Group, class Comm, class Exec>
void run_all(const Group (&g)[vectors], Comm& c, const Exec& ex, int steps, const auto& between) {
    sparta<sampler::block> s(g[0], c, {.fraction = 0.05, .seed = 5});
    diloco<outer::nesterov> d(g[0], c, {.interval = 3});
    sparta<sampler::block, schedule::constant, topology::all_reduce, codec::int8_block> sc(g[1], c,
                                                                                           {.fraction = 0.05, .seed = 6});
    diloco<outer::nesterov, topology::all_reduce, codec::bf16> dc(g[1], c, {.interval = 2});
    sparta_diloco<sampler::uniform, schedule::constant, topology::all_reduce, outer::nesterov, codec::bf16,
                  codec::int8_block>
        sd(g[2], c, {.fraction = 0.02, .seed = 1}, {.interval = 3});
    for (int t = 0; t < steps; ++t) {
        between(t);
        s.step(ex);
        d.step(ex);
        sc.step(ex);
        dc.step(ex);
        sd.step(ex);
    }
}

} // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("SKIPPED: no CUDA device; the g++ trainer and its nvcc instantiations were compiled and linked\n");
        return 77;
    }
    const int workers = 2, steps = 6;
    std::vector<std::vector<float>> host(workers * vectors), dev(workers * vectors);
    comm::run_local(workers, [&](comm::local& c) {
        std::vector<float> v[vectors];
        param_group<float> g[vectors];
        for (int p = 0; p < vectors; ++p) {
            v[p] = initial(c.rank() + 3 * p);
            g[p].add("w", v[p].data(), n);
        }
        run_all(g, c, exec::host{}, steps, [&](int t) {
            for (auto& x : v) drift(x, c.rank(), t);
        });
        for (int p = 0; p < vectors; ++p) host[static_cast<std::size_t>(c.rank() * vectors + p)] = v[p];
    });
    comm::run_local_cuda(workers, 0, [&](comm::local_cuda& c) {
        const exec::cuda ex{c.stream(), c.device()};
        std::vector<float> v[vectors];
        std::vector<buffer<float, cuda_space>> b;
        b.reserve(vectors); // g holds the buffers' pointers
        param_group<float, cuda_space> g[vectors];
        for (int p = 0; p < vectors; ++p) {
            v[p] = initial(c.rank() + 3 * p);
            b.emplace_back(n);
            copy_elements<cuda_space, host_space>(b[p].data(), v[p].data(), n, ex);
            g[p].add("w", b[p].data(), n);
        }
        run_all(g, c, ex, steps, [&](int t) {
            for (int p = 0; p < vectors; ++p) {
                copy_elements<host_space, cuda_space>(v[p].data(), b[p].data(), n, ex);
                drift(v[p], c.rank(), t);
                copy_elements<cuda_space, host_space>(b[p].data(), v[p].data(), n, ex);
            }
        });
        for (int p = 0; p < vectors; ++p) {
            copy_elements<host_space, cuda_space>(v[p].data(), b[p].data(), n, ex);
            dev[static_cast<std::size_t>(c.rank() * vectors + p)] = v[p];
        }
    });
    int failures = 0;
    for (int r = 0; r < workers; ++r)
        for (int p = 0; p < vectors; ++p) {
            const auto k = static_cast<std::size_t>(r * vectors + p);
            if (std::memcmp(host[k].data(), dev[k].data(), n * sizeof(float)) != 0) {
                std::printf("rank %d, vector %d: the device replicas differ from the host's\n", r, p);
                ++failures;
            }
        }
    std::printf("%d passed, %d failed\n", workers * vectors - failures, failures);
    return failures == 0 ? 0 : 1;
}
