// Compiled, never run (no GPU, and Debian's PyTorch is CPU-only): the model wrappers over a
// communicator in device memory (comm::nccl) instantiate and type-check with g++, as a
// libtorch trainer with CUDA tensors would use them (its .cu file of TRICKLE_INSTANTIATE_*
// lines provides the CUDA members at link time). process_group_cuda_compile.cpp does the
// same for comm::process_group_cuda, which needs a CUDA build of torch's headers.
#include <trickle/comm/nccl.hpp>

#include "device_wrappers.hpp"

void trickle_torch_nccl_wrappers(torch::nn::Module& m, trickle::comm::nccl& c) {
    trickle_step_device_wrappers<trickle::sampler::block>(m, c);
}
