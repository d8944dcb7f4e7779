// The Python module of the CUDA build; the kernels live in cuda_ops.cu (compiled by nvcc).
#include "bindings.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) { talk_hf::bind_operators(module); }
