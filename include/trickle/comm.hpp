// trickle/comm.hpp: the communicator concept and every communicator this build has.
#pragma once

#include <trickle/comm/async.hpp>
#include <trickle/comm/communicator.hpp>
#include <trickle/comm/local.hpp>
#include <trickle/comm/local_cuda.hpp>
#include <trickle/comm/mpi.hpp>
#include <trickle/comm/nccl.hpp>
#include <trickle/comm/elastic.hpp>
