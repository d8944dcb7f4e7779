// The Python module of a compiled backend: the same functions for the CPU and CUDA builds.
#pragma once

#include <torch/extension.h>

#include "ops.h"

namespace talk_hf {

inline void bind_operators(pybind11::module_& module) {
  module.def("talk_forward", &talk_forward, "TaLK convolution, forward");
  module.def("talk_backward", &talk_backward, "TaLK convolution, backward (grad x, offsets)");
  module.def("conv_forward", &conv_forward, "DynamicConv/LightConv, forward");
  module.def("conv_backward", &conv_backward, "DynamicConv/LightConv, backward (grad x, grad weight per token or summed)");
  module.def("depthwise_forward", &depthwise_forward, "depthwise convolution, forward");
  module.def("depthwise_backward", &depthwise_backward, "depthwise convolution, backward (grad x, grad weight summed)");
}

}  // namespace talk_hf
