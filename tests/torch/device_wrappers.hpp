// The model wrappers over a communicator in device memory, for the compile-only checks
// (nccl_wrappers_compile.cpp, process_group_cuda_compile.cpp): each of the three
// algorithms built over `comm` and stepped once, as a libtorch trainer with CUDA tensors
// would use them.
#pragma once

#include <trickle/torch.hpp>

#include <torch/torch.h>

template <class Sampler, class Comm>
void trickle_step_device_wrappers(torch::nn::Module& m, Comm& comm) {
    trickle::torch::sparta<Sampler> s(m, comm, {.fraction = 0.01});
    s.step();
    (void)s.own_state();
    trickle::torch::diloco<> d(m, comm, {.interval = 10});
    d.step();
    trickle::torch::sparta_diloco<> both(m, comm, {.fraction = 0.01}, {.interval = 10});
    both.step();
}
