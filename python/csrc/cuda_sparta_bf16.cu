// python/csrc/cuda_sparta_bf16.cu (nvcc, CUDA builds only): SPARTA's engines over bf16 CUDA parameters.
#include "cuda_engines.hpp"

TRICKLE_PY_SPARTA_ENGINES(template, ::trickle::bfloat16)
