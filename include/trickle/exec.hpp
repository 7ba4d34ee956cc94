// trickle/exec.hpp: execution spaces, for_each_index and scratch buffers.
#pragma once

#include <trickle/exec/buffer.hpp>
#include <trickle/exec/cuda.hpp>
#include <trickle/exec/execution_space.hpp>
#include <trickle/exec/host.hpp>
#include <trickle/exec/workspace.hpp>
