// Candidate CUDA kernels that no GPU has verified yet, each off until it is switched on by name.
//
// A candidate is written on a machine without a GPU (#56: "write the candidate variants on the CPU")
// and compiled by CI; the GPU verification (benchmarks/gpu_suite.sh, stage `variants`) switches it on,
// runs the gpu tests and compute-sanitizer on it, and times it against the default kernel in the
// same call.  The faster kernel that passes stays and the other is deleted in the same change, so
// this list is empty between GPU runs.  Python switches a candidate through the CUDA extension's
// set_cuda_variant (talk_hf/ops/_cuda_variants.py: from $TALK_HF_CUDA_VARIANTS when the extension
// loads, or around one benchmark row).
//
//   talk_forward_shared_edges   talk_conv's tiled forward computes the window edges of a tile's tokens
//                               once per block, one edge a thread, into shared memory, and reduces the
//                               rows they reach with one shared atomic per warp; the default kernel
//                               computes them in every warp of the block, twice (the profile found the
//                               forward bound by its instruction issue).  Only where a block's channels
//                               lie in one head (head size a multiple of 32); other shapes run the
//                               default kernel.
#pragma once

#include <atomic>
#include <string>
#include <vector>

namespace talk_hf {

enum class CudaVariant { kTalkForwardSharedEdges, kCount };

// The candidates' names, in CudaVariant's order.
inline const std::vector<std::string>& cuda_variant_names() {
  static const std::vector<std::string> names{"talk_forward_shared_edges"};
  return names;
}

inline std::atomic<bool>* cuda_variant_switches() {
  static std::atomic<bool> switches[static_cast<int>(CudaVariant::kCount)] = {};
  return switches;
}

// Whether a candidate is switched on (read on every launch: one relaxed load).
inline bool cuda_variant_enabled(CudaVariant variant) {
  return cuda_variant_switches()[static_cast<int>(variant)].load(std::memory_order_relaxed);
}

// Switches the candidate `name` on or off; false for a name that is not a candidate (the caller says so).
inline bool set_cuda_variant(const std::string& name, bool enabled) {
  const std::vector<std::string>& names = cuda_variant_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) {
      cuda_variant_switches()[i].store(enabled, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

}  // namespace talk_hf
