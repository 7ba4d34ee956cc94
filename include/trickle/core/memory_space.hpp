// trickle/core/memory_space.hpp: memory-space tags and the runtime check of a pointer's space.
#pragma once

#include <trickle/config.hpp>
#include <trickle/error.hpp>

#include <string>
#include <type_traits>

TRICKLE_NAMESPACE_BEGIN

// Memory reachable by ordinary host code (pageable, pinned or managed).
struct host_space {
    static constexpr const char* name = "host";
};

// CUDA device memory (cudaMalloc'd or managed).
struct cuda_space {
    static constexpr const char* name = "cuda";
};

template <class S>
concept memory_space = std::is_same_v<S, host_space> || std::is_same_v<S, cuda_space>;

namespace detail {

// Checks, where the CUDA runtime can tell, that p lives in Space. Without the CUDA
// runtime every pointer is taken as host memory, so a cuda_space pointer cannot be used
// at all and the check fails for it.
template <class Space>
void check_pointer_space(const void* p, const std::string& what) {
    if (p == nullptr) return;
#if TRICKLE_HAS_CUDA
    cudaPointerAttributes attr{};
    const cudaError_t rc = cudaPointerGetAttributes(&attr, p);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        // No device or no driver: nothing can be device memory.
        if constexpr (std::is_same_v<Space, cuda_space>)
            throw invalid_argument(what + " is declared as CUDA memory, but the CUDA runtime "
                                          "cannot inspect it (" +
                                   std::string(cudaGetErrorString(rc)) + ")");
        return;
    }
    const bool device = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
    const bool host = attr.type != cudaMemoryTypeDevice; // unregistered, pinned or managed
    if constexpr (std::is_same_v<Space, cuda_space>) {
        if (!device)
            throw invalid_argument(what + " is declared as CUDA memory but points to host memory");
    } else {
        if (!host)
            throw invalid_argument(what + " is declared as host memory but points to CUDA device memory");
    }
#else
    if constexpr (std::is_same_v<Space, cuda_space>)
        throw invalid_argument(what + " is declared as CUDA memory, but this build has no CUDA "
                                      "runtime (link trickle::cuda or compile with nvcc)");
#endif
}

} // namespace detail

TRICKLE_NAMESPACE_END
