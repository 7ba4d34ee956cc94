// trickle/algorithm/instantiate.hpp: CUDA steps for translation units that g++ compiles.
//
// An algorithm's CUDA work (the kernels of a SPARTA exchange or a DiLoCo outer step) is in
// member functions that only nvcc compiles. A trainer compiled by g++ (a libtorch
// program, say) can still construct and step sparta / diloco / sparta_diloco over
// cuda_space parameters: it links against the members that one .cu file of its own
// instantiates explicitly, the way CUB and Thrust users instantiate their algorithms:
//
//   // trickle_instances.cu (nvcc, linked with trickle::cuda)
//   #include <trickle/trickle.hpp>
//   #include <trickle/comm/nccl.hpp>
//   TRICKLE_INSTANTIATE_SPARTA(trickle::sampler::block, trickle::schedule::constant,
//                              trickle::topology::all_reduce, float, trickle::comm::nccl)
//
//   // trainer.cpp (g++, linked with trickle::cuda / trickle::nccl and trickle_instances.cu)
//   trickle::sparta<trickle::sampler::block> s(params, comm, {.fraction = 0.005});
//   s.step(trickle::exec::cuda{stream});
//
// The arguments name the engine exactly as the trainer's objects build it: sparta<S, Sch,
// Top> over param_group<T, cuda_space> and communicator Comm is sparta_engine<S, Sch, Top,
// T, cuda_space, Comm>. A combination that was not instantiated fails to link, naming
// the missing member (exchange_cuda, start_cuda, outer_step_cuda). Arguments must not
// contain top-level commas (use an alias for such a type).
#pragma once

#include <trickle/algorithm/diloco.hpp>
#include <trickle/algorithm/sparta.hpp>
#include <trickle/algorithm/sparta_diloco.hpp>
#include <trickle/config.hpp>
#include <trickle/core/memory_space.hpp>

// sparta<Sampler, Schedule, Topology> over cuda_space parameters of type T and Comm.
#define TRICKLE_INSTANTIATE_SPARTA(Sampler, Schedule, Topology, T, Comm)                                             \
    template class ::trickle::sparta_engine<Sampler, Schedule, Topology, T, ::trickle::cuda_space, Comm>;

// diloco<Outer, Topology> over cuda_space parameters of type T and Comm.
#define TRICKLE_INSTANTIATE_DILOCO(Outer, Topology, T, Comm)                                                          \
    template class ::trickle::diloco_engine<Outer, Topology, T, ::trickle::cuda_space, Comm>;

// sparta_diloco<Sampler, Schedule, Topology, Outer>: both engines it is made of.
#define TRICKLE_INSTANTIATE_SPARTA_DILOCO(Sampler, Schedule, Topology, Outer, T, Comm)                                \
    TRICKLE_INSTANTIATE_SPARTA(Sampler, Schedule, Topology, T, Comm)                                                  \
    TRICKLE_INSTANTIATE_DILOCO(Outer, Topology, T, Comm)
