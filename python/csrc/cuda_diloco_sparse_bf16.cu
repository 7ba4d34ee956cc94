// python/csrc/cuda_diloco_sparse_bf16.cu (nvcc, CUDA builds only): DiLoCo's engines over bf16 CUDA
// parameters, the outer gradient through a sparsifier.
#include "cuda_engines.hpp"

TRICKLE_PY_DILOCO_ENGINES(template, ::trickle::bfloat16, ::trickle::codec::any_sparsifier)
