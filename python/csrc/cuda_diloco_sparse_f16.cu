// python/csrc/cuda_diloco_sparse_f16.cu (nvcc, CUDA builds only): DiLoCo's engines over f16 CUDA
// parameters, the outer gradient through a sparsifier.
#include "cuda_engines.hpp"

TRICKLE_PY_DILOCO_ENGINES(template, ::trickle::half, ::trickle::codec::any_sparsifier)
