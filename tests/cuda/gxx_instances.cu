// The nvcc half of the g++ trainer test (gxx_trainer.cpp): the CUDA members of exactly the
// algorithms the trainer builds.
#include <trickle/comm/local_cuda.hpp>
#include <trickle/trickle.hpp>

TRICKLE_INSTANTIATE_SPARTA(trickle::sampler::block, trickle::schedule::constant, trickle::topology::all_reduce, float,
                           trickle::comm::local_cuda)
TRICKLE_INSTANTIATE_DILOCO(trickle::outer::nesterov, trickle::topology::all_reduce, float, trickle::comm::local_cuda)
