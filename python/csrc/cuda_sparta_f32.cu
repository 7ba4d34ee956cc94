// python/csrc/cuda_sparta_f32.cu (nvcc, CUDA builds only): SPARTA's engines over f32 CUDA parameters.
#include "cuda_engines.hpp"

TRICKLE_PY_SPARTA_ENGINES(template, float)
