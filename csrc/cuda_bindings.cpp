// The Python module of the CUDA build; the kernels live in csrc/<op>/<op>_cuda*.cu (compiled by nvcc).
#include "bindings.h"
#include "cuda_fallback.h"
#include "cuda_variants.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  talk_hf::bind_operators(module);
  // The tiled kernels that the streaming ones fall back to (cuda_fallback.h), bound so that the gpu
  // tests and compute-sanitizer run them on shapes small enough to test.
  module.def("talk_backward_tiled", &talk_hf::talk_backward_tiled, "TaLK convolution, backward (tiled kernels)");
  module.def("conv_forward_tiled", &talk_hf::conv_forward_tiled, "DynamicConv/LightConv, forward (tiled kernel)");
  module.def("conv_backward_tiled", &talk_hf::conv_backward_tiled, "DynamicConv/LightConv, backward (tiled kernels)");
  module.def("talk_stream_fallback", &talk_hf::talk_stream_fallback,
             "why talk_conv's streaming backward falls back to the tiled one for these inputs ('' where it does not)");
  module.def("conv_stream_fallback", &talk_hf::conv_stream_fallback,
             "why the conv streaming kernels fall back to the tiled ones for these inputs ('' where they do not)");
  // The candidate kernels that no GPU has verified yet (cuda_variants.h), off until switched on.
  module.def("cuda_variant_names", &talk_hf::cuda_variant_names, "the candidate kernels' names");
  module.def("set_cuda_variant", &talk_hf::set_cuda_variant, pybind11::arg("name"), pybind11::arg("enabled"),
             "switch a candidate kernel on or off; False for a name that is not a candidate");
}
