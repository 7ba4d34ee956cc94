// trickle/exec/cuda.hpp: the CUDA execution space (a stream on a device), device scopes, and the generic launch.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>
#include <trickle/exec/dispatch.hpp>

#include <cstddef>
#include <type_traits>
#include <vector>

// The CUDA runtime's stream handle type, declared here so exec::cuda exists (and types
// holding it look the same) in every translation unit, with or without the toolkit.
struct CUstream_st;
struct CUmemPoolHandle_st;

TRICKLE_NAMESPACE_BEGIN

namespace exec {

// Runs kernel bodies as CUDA kernels enqueued on a stream; never synchronizes the host.
// stream is a cudaStream_t (nullptr: the legacy default stream, which trickle's
// algorithms refuse: pass a stream of your own). device is the ordinal the stream belongs
// to; -1 (the default) means "the device of the stream" (found with cudaStreamGetDevice
// where the runtime has it, the current device otherwise). Launches made through an
// algorithm always run on the parameters' device, whatever device is current. pool is a
// cudaMemPool_t that stream-ordered buffers made with this exec::cuda come from (nullptr:
// the device's default pool).
struct cuda {
    using memory_space = cuda_space;
    static constexpr const char* name = "cuda";
    CUstream_st* stream = nullptr;
    int device = -1;
    CUmemPoolHandle_st* pool = nullptr;
};

} // namespace exec

TRICKLE_NAMESPACE_END

#if TRICKLE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

TRICKLE_NAMESPACE_BEGIN

namespace detail {

template <class>
inline constexpr bool dependent_false = false;

#if TRICKLE_HAS_CUDA
// Makes `device` current for a scope and gives the caller back its own device after, so
// a trainer that drives several GPUs from one thread finds its device unchanged. A
// negative device leaves the current one.
class device_scope {
public:
    explicit device_scope(int device) {
        TRICKLE_CUDA_CHECK(cudaGetDevice(&previous_));
        if (device >= 0 && previous_ != device) TRICKLE_CUDA_CHECK(cudaSetDevice(device));
    }
    device_scope(const device_scope&) = delete;
    device_scope& operator=(const device_scope&) = delete;
    ~device_scope() {
        int now = previous_;
        if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
    }

private:
    int previous_ = 0;
};

// The device a stream belongs to (the current device for the legacy stream, or where the
// runtime cannot tell).
inline int stream_device(cudaStream_t stream) {
    int device = -1;
#if CUDART_VERSION >= 12080
    if (stream != nullptr) {
        TRICKLE_CUDA_CHECK(cudaStreamGetDevice(stream, &device));
        return device;
    }
#else
    (void)stream;
#endif
    TRICKLE_CUDA_CHECK(cudaGetDevice(&device));
    return device;
}

// The device an exec::cuda launches on: its own, or its stream's.
inline int device_of(const exec::cuda& ex) { return ex.device >= 0 ? ex.device : stream_device(ex.stream); }

// What the dispatch knows of a device (its multiprocessor count), cached per device.
inline exec::device_facts device_facts_of(int device) {
    constexpr int cached = 64;
    static thread_local exec::device_facts cache[cached] = {};
    static thread_local bool have[cached] = {};
    if (device >= 0 && device < cached && have[device]) return cache[device];
    exec::device_facts f;
    TRICKLE_CUDA_CHECK(cudaDeviceGetAttribute(&f.multiprocessors, cudaDevAttrMultiProcessorCount, device));
    if (device >= 0 && device < cached) {
        cache[device] = f;
        have[device] = true;
    }
    return f;
}

// Whether work is being captured into a CUDA graph on this stream.
inline bool stream_capturing(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    TRICKLE_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    return status != cudaStreamCaptureStatusNone;
}
#endif

#if TRICKLE_CUDA_COMPILER
// Blocks of `kernel` (launched with `threads` threads and no dynamic shared memory) that
// fit on one multiprocessor of the current device: one occupancy query per kernel,
// thread count, device and host thread (kernels of one signature share a type, so the
// cache is keyed by the kernel's address, not its type).
template <class Kernel>
int resident_blocks(Kernel kernel, int threads) {
    int device = 0;
    TRICKLE_CUDA_CHECK(cudaGetDevice(&device));
    struct entry {
        const void* kernel;
        int threads, device, blocks;
    };
    static thread_local std::vector<entry> cache;
    const void* key = reinterpret_cast<const void*>(kernel);
    for (const entry& e : cache)
        if (e.kernel == key && e.threads == threads && e.device == device) return e.blocks;
    int blocks = 0;
    TRICKLE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0));
    if (blocks < 1) blocks = 1;
    cache.push_back({key, threads, device, blocks});
    return blocks;
}

// The grid for `tiles` units (block passes) of `kernel` with tuning t on the current
// device: every block that fits, capped by the work (exec::size_grid).
template <class Kernel>
exec::grid_shape plan_grid(Kernel kernel, const exec::tuning& t, std::size_t tiles) {
    int device = 0;
    TRICKLE_CUDA_CHECK(cudaGetDevice(&device));
    return exec::size_grid(tiles, t, device_facts_of(device), resident_blocks(kernel, t.threads));
}

template <class Body>
__global__ void for_each_index_kernel(std::size_t n, Body body) {
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        body(i);
}
#endif

} // namespace detail

// Enqueues a grid-stride kernel on ex.stream, on ex's device, that calls body(i) for every
// i in [0, n): the generic launch for small and element-wise bodies (the exchange and the
// DiLoCo passes have vectorized agents of their own, kernels/device_*.hpp). The grid comes
// from the dispatch (exec/dispatch.hpp). Needs nvcc: the kernel is instantiated in the
// calling translation unit (a g++ translation unit reaches the algorithms' CUDA steps
// through explicit instantiations, see algorithm/instantiate.hpp).
template <class Body>
void for_each_index(const exec::cuda& ex, std::size_t n, const Body& body) {
#if TRICKLE_CUDA_COMPILER
    static_assert(std::is_trivially_copyable_v<Body>, "a CUDA kernel body must be trivially copyable");
    if (n == 0) return;
    detail::device_scope on(ex.device);
    constexpr exec::tuning t{256, 1, 4};
    const auto grid = detail::plan_grid(detail::for_each_index_kernel<Body>, t, (n + t.threads - 1) / t.threads);
    detail::for_each_index_kernel<<<grid.blocks, grid.threads, 0, ex.stream>>>(n, body);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
#else
    (void)ex;
    (void)n;
    (void)body;
    static_assert(detail::dependent_false<Body>,
                  "for_each_index(exec::cuda, ...) launches a kernel: compile this translation unit with nvcc, "
                  "or reach the algorithms' CUDA steps through TRICKLE_INSTANTIATE_* (algorithm/instantiate.hpp)");
#endif
}

TRICKLE_NAMESPACE_END
