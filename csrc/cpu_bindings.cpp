// The Python module of the CPU build; the kernels live in csrc/<op>/<op>_cpu.cpp.
#include "bindings.h"
#include "linear/linear_cpu.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  talk_hf::bind_operators(module);
  module.def("few_rows_linear", &talk_hf::few_rows_linear, "input (..., in) x weight (out, in)^T + bias, for a few input rows");
}
