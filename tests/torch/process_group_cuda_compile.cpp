// Compiled, never run here (no GPU): comm::process_group_cuda and the model wrappers over
// it type-check with g++ against a CUDA build of torch's headers (PyPI's torch; Debian's
// libtorch-dev is CPU-only and its c10/cuda headers are incomplete), directly and through
// comm::cuda_channel (how the Python package builds them: its nvcc translation units
// instantiate the engines over the channel, without torch's headers). Built by CMake where
// those headers are found, and by scripts/test.sh against the PyPI torch it installs.
#include <trickle/comm/channel.hpp>
#include <trickle/torch.hpp>
#include <trickle/torch/process_group_cuda.hpp>

#include <torch/nn/module.h>

#include "device_wrappers.hpp"

#include <optional>

#if !TRICKLE_HAS_TORCH_CUDA
#error "process_group_cuda_compile.cpp: comm::process_group_cuda was not declared (TRICKLE_ENABLE_CUDA and a CUDA build of torch's headers are needed)"
#endif

void trickle_torch_process_group_cuda_wrappers(torch::nn::Module& m, const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
    trickle::comm::process_group_cuda c(pg, 0, std::nullopt,
                                        {.checks = trickle::comm::argument_checks::in_payload});
    trickle_step_device_wrappers<trickle::sampler::block>(m, c);
    // The same wrappers over the communicator as a cuda_channel.
    trickle::comm::channel_of<trickle::comm::process_group_cuda> channel(c);
    trickle::comm::cuda_channel& any = channel;
    trickle_step_device_wrappers<trickle::sampler::uniform>(m, any);
}
