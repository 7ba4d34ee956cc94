// python/csrc/cuda_diloco_sparse_f32.cu (nvcc, CUDA builds only): DiLoCo's engines over f32 CUDA
// parameters, the outer gradient through a sparsifier.
#include "cuda_engines.hpp"

TRICKLE_PY_DILOCO_ENGINES(template, float, ::trickle::codec::any_sparsifier)
