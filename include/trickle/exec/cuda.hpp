// trickle/exec/cuda.hpp: the CUDA execution space (a stream) and its grid-stride for_each_index.
#pragma once

#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>
#include <trickle/error.hpp>

#include <cstddef>
#include <type_traits>

// The CUDA runtime's stream handle type, declared here so exec::cuda exists (and types
// holding it look the same) in every translation unit, with or without the toolkit.
struct CUstream_st;

TRICKLE_NAMESPACE_BEGIN

namespace exec {

// Runs kernel bodies as CUDA kernels enqueued on a stream; never synchronizes the host.
// stream is a cudaStream_t (nullptr: the legacy default stream).
struct cuda {
    using memory_space = cuda_space;
    static constexpr const char* name = "cuda";
    CUstream_st* stream = nullptr;
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

// Launch shape for grid-stride loops: a value, chosen per device.
struct launch_policy {
    int threads_per_block = 256;
    int blocks_per_sm = 8;
};

#if TRICKLE_HAS_CUDA
// Multiprocessor count of the current device, cached per device and thread.
inline int multiprocessor_count() {
    int device = 0;
    TRICKLE_CUDA_CHECK(cudaGetDevice(&device));
    constexpr int cached_devices = 64;
    static thread_local int cache[cached_devices] = {};
    if (device < cached_devices && cache[device] != 0) return cache[device];
    int sms = 0;
    TRICKLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    if (device < cached_devices) cache[device] = sms;
    return sms;
}
#endif

#if TRICKLE_CUDA_COMPILER
template <class Body>
__global__ void for_each_index_kernel(std::size_t n, Body body) {
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        body(i);
}
#endif

} // namespace detail

// Enqueues a grid-stride kernel on ex.stream that calls body(i) for every i in [0, n).
// Needs nvcc: the kernel is instantiated in the calling translation unit, and using
// exec::cuda from a translation unit that g++ compiles is a compile-time error.
template <class Body>
void for_each_index(const exec::cuda& ex, std::size_t n, const Body& body) {
#if TRICKLE_CUDA_COMPILER
    static_assert(std::is_trivially_copyable_v<Body>, "a CUDA kernel body must be trivially copyable");
    if (n == 0) return;
    constexpr detail::launch_policy policy{};
    const int sms = detail::multiprocessor_count();
    const std::size_t wanted = (n + policy.threads_per_block - 1) / policy.threads_per_block;
    const std::size_t cap = static_cast<std::size_t>(sms) * policy.blocks_per_sm;
    const unsigned blocks = static_cast<unsigned>(wanted < cap ? wanted : cap);
    detail::for_each_index_kernel<<<blocks, policy.threads_per_block, 0, ex.stream>>>(n, body);
    TRICKLE_CUDA_CHECK(cudaGetLastError());
#else
    (void)ex;
    (void)n;
    (void)body;
    static_assert(detail::dependent_false<Body>,
                  "for_each_index(exec::cuda, ...) launches a kernel: compile this translation unit with nvcc");
#endif
}

TRICKLE_NAMESPACE_END
