// python/csrc/cuda_engines.hpp: the engines a CUDA build of trickle._C steps CUDA parameters on.
//
// Every engine over CUDA parameters runs on comm::cuda_channel (trickle/comm/channel.hpp),
// behind which the bound object puts comm::process_group_cuda, so the engines' CUDA members
// are compiled once, by nvcc, in the cuda_*.cu files (without torch's headers), and the
// g++ translation units that build and step them (common.hpp) declare them extern and link
// against those. The engines are those of common.hpp's wrappers: one SPARTA engine per
// (sampler, dtype), one DiLoCo engine per (wire, dtype) (the outer optimizer is
// outer::any, which holds every registered one); SPARTA + DiLoCo is one of each. A sampler
// added to its registry must be added to the list below too: the static_assert says so.
#pragma once

#include "policies.hpp"

#include <trickle/algorithm/instantiate.hpp>
#include <trickle/comm/channel.hpp>
#include <trickle/core/dtype.hpp>

#include <type_traits>

#if !TRICKLE_HAS_CUDA
#error "cuda_engines.hpp: a CUDA build of trickle._C needs trickle's CUDA support (TRICKLE_ENABLE_CUDA or nvcc)"
#endif

static_assert(std::is_same_v<trickle::sampler::registry,
                             trickle::type_list<trickle::sampler::uniform, trickle::sampler::permutation,
                                                trickle::sampler::block, trickle::sampler::layerwise>>,
              "cuda_engines.hpp: sampler::registry changed; update TRICKLE_PY_SPARTA_ENGINES");

// PREFIX is `template` (an explicit instantiation definition: the cuda_*.cu files) or
// `extern template` (a declaration: common.hpp, for the g++ side).
#define TRICKLE_PY_SPARTA_ENGINE(PREFIX, T, S)                                                                        \
    PREFIX class ::trickle::sparta_engine<::trickle::sampler::S, ::trickle::schedule::any, ::trickle::topology::any, \
                                          T, ::trickle::cuda_space, ::trickle::comm::cuda_channel,                    \
                                          ::trickle::codec::any>;
#define TRICKLE_PY_SPARTA_ENGINES(PREFIX, T)                                                                          \
    TRICKLE_PY_SPARTA_ENGINE(PREFIX, T, uniform)                                                                      \
    TRICKLE_PY_SPARTA_ENGINE(PREFIX, T, permutation)                                                                  \
    TRICKLE_PY_SPARTA_ENGINE(PREFIX, T, block)                                                                        \
    TRICKLE_PY_SPARTA_ENGINE(PREFIX, T, layerwise)

// Wire: ::trickle::codec::any or ::trickle::codec::any_sparsifier.
#define TRICKLE_PY_DILOCO_ENGINES(PREFIX, T, Wire)                                                                    \
    PREFIX class ::trickle::diloco_engine<::trickle_py::outer_type, ::trickle::topology::any, T, ::trickle::cuda_space, \
                                          ::trickle::comm::cuda_channel, Wire>;

// Every engine, for the dtypes trickle::torch::params groups parameters by.
#define TRICKLE_PY_CUDA_ENGINES(PREFIX)                                                                               \
    TRICKLE_PY_SPARTA_ENGINES(PREFIX, float)                                                                          \
    TRICKLE_PY_SPARTA_ENGINES(PREFIX, ::trickle::half)                                                                \
    TRICKLE_PY_SPARTA_ENGINES(PREFIX, ::trickle::bfloat16)                                                            \
    TRICKLE_PY_DILOCO_ENGINES(PREFIX, float, ::trickle::codec::any)                                                   \
    TRICKLE_PY_DILOCO_ENGINES(PREFIX, ::trickle::half, ::trickle::codec::any)                                         \
    TRICKLE_PY_DILOCO_ENGINES(PREFIX, ::trickle::bfloat16, ::trickle::codec::any)                                     \
    TRICKLE_PY_DILOCO_ENGINES(PREFIX, float, ::trickle::codec::any_sparsifier)                                          \
    TRICKLE_PY_DILOCO_ENGINES(PREFIX, ::trickle::half, ::trickle::codec::any_sparsifier)                                \
    TRICKLE_PY_DILOCO_ENGINES(PREFIX, ::trickle::bfloat16, ::trickle::codec::any_sparsifier)
