// trickle/config.hpp: compiler detection, the versioned namespace and feature macros.
#pragma once

#define TRICKLE_VERSION_MAJOR 0
#define TRICKLE_VERSION_MINOR 1
#define TRICKLE_VERSION_PATCH 0

// Every public entity lives in trickle::v0 (inline), so two versions linked into one
// program never clash while users keep writing trickle::name.
#define TRICKLE_NAMESPACE_BEGIN namespace trickle { inline namespace v0 {
#define TRICKLE_NAMESPACE_END } }

// Functions that run on both the host and a CUDA device. Under g++ they are plain inline
// functions, which is why every kernel body is testable without the CUDA toolkit.
#if defined(__CUDACC__)
#define TRICKLE_HOST_DEVICE __host__ __device__ inline
#define TRICKLE_DEVICE __device__ inline
#define TRICKLE_CUDA_COMPILER 1
#else
#define TRICKLE_HOST_DEVICE inline
#define TRICKLE_CUDA_COMPILER 0
#endif

// TRICKLE_HAS_CUDA: the CUDA runtime API is available (cudaMalloc, streams, pointer
// attributes). True under nvcc, and in host translation units that link the
// trickle::cuda target (which defines TRICKLE_ENABLE_CUDA). Launching kernels still
// needs nvcc (TRICKLE_CUDA_COMPILER).
#if defined(__CUDACC__) || defined(TRICKLE_ENABLE_CUDA)
#define TRICKLE_HAS_CUDA 1
#else
#define TRICKLE_HAS_CUDA 0
#endif

// TRICKLE_HAS_OPENMP: exec::openmp is available.
#if defined(_OPENMP)
#define TRICKLE_HAS_OPENMP 1
#else
#define TRICKLE_HAS_OPENMP 0
#endif

// TRICKLE_HAS_MPI / TRICKLE_HAS_NCCL are defined to 1 by the trickle::mpi and
// trickle::nccl CMake targets; without them comm/mpi.hpp and comm/nccl.hpp declare nothing.
#if !defined(TRICKLE_HAS_MPI)
#define TRICKLE_HAS_MPI 0
#endif
#if !defined(TRICKLE_HAS_NCCL)
#define TRICKLE_HAS_NCCL 0
#endif

#if defined(__CUDA_ARCH__)
#define TRICKLE_ON_DEVICE 1
#else
#define TRICKLE_ON_DEVICE 0
#endif

// Before a loop of constant trip count over a small register array (a codec quad): nvcc
// unrolls it fully, so every index is a constant and the array stays in registers.
#if defined(__CUDACC__)
#define TRICKLE_UNROLL _Pragma("unroll")
#else
#define TRICKLE_UNROLL
#endif

// The same for the host compiler as well, before a loop of constant trip count over an
// array of accumulators that must stay in registers for the host build to vectorize it at
// -O2 too (the DCT's, kernels/dct.hpp: g++ -O2 unrolls no loop by itself, and the array
// then round-trips through the stack on every iteration, half the speed of -O3).
#if defined(__CUDACC__) || defined(__clang__)
#define TRICKLE_UNROLL_ALL _Pragma("unroll")
#elif defined(__GNUC__)
#define TRICKLE_UNROLL_ALL _Pragma("GCC unroll 64")
#else
#define TRICKLE_UNROLL_ALL
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TRICKLE_RESTRICT __restrict__
#else
#define TRICKLE_RESTRICT
#endif
