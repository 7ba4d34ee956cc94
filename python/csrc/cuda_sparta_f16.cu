// python/csrc/cuda_sparta_f16.cu (nvcc, CUDA builds only): SPARTA's engines over f16 CUDA parameters.
#include "cuda_engines.hpp"

TRICKLE_PY_SPARTA_ENGINES(template, ::trickle::half)
