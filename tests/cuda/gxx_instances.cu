// The nvcc half of the g++ trainer test (gxx_trainer.cpp): the CUDA members of exactly the
// algorithms the trainer builds, the ones with a codec included (the codec is the macros'
// optional last argument; sparta_diloco takes one per part).
#include <trickle/comm/local_cuda.hpp>
#include <trickle/trickle.hpp>

TRICKLE_INSTANTIATE_SPARTA(trickle::sampler::block, trickle::schedule::constant, trickle::topology::all_reduce, float,
                           trickle::comm::local_cuda)
TRICKLE_INSTANTIATE_DILOCO(trickle::outer::nesterov, trickle::topology::all_reduce, float, trickle::comm::local_cuda)
TRICKLE_INSTANTIATE_SPARTA(trickle::sampler::block, trickle::schedule::constant, trickle::topology::all_reduce, float,
                           trickle::comm::local_cuda, trickle::codec::int8_block)
TRICKLE_INSTANTIATE_DILOCO(trickle::outer::nesterov, trickle::topology::all_reduce, float, trickle::comm::local_cuda,
                           trickle::codec::bf16)
TRICKLE_INSTANTIATE_SPARTA_DILOCO(trickle::sampler::uniform, trickle::schedule::constant, trickle::topology::all_reduce,
                                  trickle::outer::nesterov, float, trickle::comm::local_cuda, trickle::codec::bf16,
                                  trickle::codec::int8_block)
