// The Python module of the CUDA build; the kernels live in csrc/<op>/<op>_cuda*.cu (compiled by nvcc).
#include "bindings.h"
#include "cuda_stream.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  talk_hf::bind_operators(module);
  // The streaming kernels (talk_conv_cuda_stream.cu, dynamic_conv_cuda_stream.cu), behind $TALK_HF_UNVERIFIED_CUDA.
  module.def("talk_forward_stream", &talk_hf::talk_forward_stream, "TaLK convolution, forward (streaming kernel)");
  module.def("talk_backward_stream", &talk_hf::talk_backward_stream, "TaLK convolution, backward (streaming kernels)");
  module.def("conv_forward_stream", &talk_hf::conv_forward_stream, "DynamicConv/LightConv, forward (streaming kernel)");
  module.def("conv_backward_stream", &talk_hf::conv_backward_stream,
             "DynamicConv/LightConv, backward (streaming kernels)");
  module.def("talk_stream_fallback", &talk_hf::talk_stream_fallback,
             "why talk_conv's streaming kernels fall back to the tiled ones for these inputs ('' where they do not)");
  module.def("conv_stream_fallback", &talk_hf::conv_stream_fallback,
             "why the conv streaming kernels fall back to the tiled ones for these inputs ('' where they do not)");
}
