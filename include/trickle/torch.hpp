// trickle/torch.hpp: the trickle::torch component (link the trickle::torch CMake target).
//
// trickle::torch::params(module)       a model's parameters as param_groups, one per (dtype, device)
// trickle::torch::sparta / diloco / sparta_diloco   the algorithms over a whole model
// trickle::comm::process_group         a communicator over a torch.distributed process group
#pragma once

#include <trickle/trickle.hpp>
#include <trickle/torch/algorithms.hpp>
#include <trickle/torch/params.hpp>
#include <trickle/torch/process_group.hpp>
