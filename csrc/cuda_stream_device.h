// Shared pieces of the streaming CUDA kernels (talk_conv_cuda_stream.cu,
// dynamic_conv_cuda_stream.cu): vector loads and stores of one thread's channels, and the host
// checks that choose the vector width and decide whether 32-bit indices and the shared-memory
// budget hold.  Included by .cu files only.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

namespace talk_hf {
namespace stream {

constexpr int kVectorBytes = 16;  // one 128-bit load or store per thread and row
constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();  // kernels index with int32
constexpr int64_t kMaxGridYZ = 65535;                               // gridDim.y and gridDim.z limit
constexpr int kDefaultSharedBytes = 48 * 1024;  // dynamic shared memory without an opt-in
constexpr int kSharedBudget = 96 * 1024;        // the most a streaming block asks for (sm_80: 163 KiB)
constexpr int kSharedAlignment = 32;            // of dynamic shared memory: 8 float32 accumulators

// Channels per thread and row at full vector width: 4 float32, 8 bfloat16/float16, 2 float64.
template <typename scalar_t>
constexpr int full_width() {
  return kVectorBytes / static_cast<int>(sizeof(scalar_t));
}

// kWidth consecutive values, aligned so that one instruction moves them (128 bits at full width).
template <typename scalar_t, int kWidth>
struct alignas(sizeof(scalar_t) * kWidth) Pack {
  scalar_t value[kWidth];
};

// values[i] = source[i] in the accumulation type; source is aligned to the pack.
template <typename acc_t, typename scalar_t, int kWidth>
__device__ __forceinline__ void load_pack(const scalar_t* __restrict__ source, acc_t (&values)[kWidth]) {
  const Pack<scalar_t, kWidth> pack = *reinterpret_cast<const Pack<scalar_t, kWidth>*>(source);
#pragma unroll
  for (int i = 0; i < kWidth; ++i) values[i] = static_cast<acc_t>(pack.value[i]);
}

// destination[i] = values[i] * scale, rounded to scalar_t; destination is aligned to the pack.
template <typename acc_t, typename scalar_t, int kWidth>
__device__ __forceinline__ void store_pack(scalar_t* __restrict__ destination, const acc_t (&values)[kWidth],
                                           acc_t scale) {
  Pack<scalar_t, kWidth> pack;
#pragma unroll
  for (int i = 0; i < kWidth; ++i) pack.value[i] = static_cast<scalar_t>(values[i] * scale);
  *reinterpret_cast<Pack<scalar_t, kWidth>*>(destination) = pack;
}

// A thread's kWidth accumulators in shared memory, moved as one pack (128-bit accesses where they
// fill one); slot is aligned to the pack (kWidth-aligned offsets from a kSharedAlignment base).
template <typename acc_t, int kWidth>
__device__ __forceinline__ void load_shared(const acc_t* slot, acc_t (&values)[kWidth]) {
  const Pack<acc_t, kWidth> pack = *reinterpret_cast<const Pack<acc_t, kWidth>*>(slot);
#pragma unroll
  for (int i = 0; i < kWidth; ++i) values[i] = pack.value[i];
}

template <typename acc_t, int kWidth>
__device__ __forceinline__ void store_shared(acc_t* slot, const acc_t (&values)[kWidth]) {
  Pack<acc_t, kWidth> pack;
#pragma unroll
  for (int i = 0; i < kWidth; ++i) pack.value[i] = values[i];
  *reinterpret_cast<Pack<acc_t, kWidth>*>(slot) = pack;
}

template <typename acc_t, int kWidth>
__device__ __forceinline__ void fill(acc_t (&values)[kWidth], acc_t value) {
#pragma unroll
  for (int i = 0; i < kWidth; ++i) values[i] = value;
}

// The vector width the kernels use: full width where a head's channels split into whole vectors and
// every tensor's data is aligned to a vector, else 1 (a scalar thread: any C, any alignment).
inline int vector_width(int64_t head_size, int64_t element_size, std::initializer_list<const at::Tensor*> tensors) {
  const int64_t full = kVectorBytes / element_size;
  if (head_size % full != 0) return 1;
  for (const at::Tensor* tensor : tensors) {
    if (reinterpret_cast<std::uintptr_t>(tensor->const_data_ptr()) % kVectorBytes != 0) return 1;
  }
  return static_cast<int>(full);
}

// The shared memory a streaming block may ask for on GPU `device`: kSharedBudget, or less where the
// GPU allows less (its opt-in limit per block: a device attribute, read without a sync).
inline int64_t shared_budget_of(int device) {
  int limit = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return limit < kSharedBudget ? limit : kSharedBudget;
}

inline int64_t shared_budget(const at::Tensor& x) { return shared_budget_of(x.get_device()); }

// Opts a kernel into dynamic shared memory above the default, for a launch of `bytes` (at most the
// budget) on the current device.  The limit set is the device's whole budget, the same for every
// launch: host threads launching with different sizes never lower it under each other's launch.
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, int64_t bytes) {
  if (bytes > kDefaultSharedBytes) {
    int device = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));  // the caller's guard made the tensors' device current
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared_budget_of(device))));
  }
}

// "" where every count fits the kernels' 32-bit indices and grid, else the first that does not.
inline std::string limits_fault(int64_t batch, int64_t time_blocks, int64_t largest_index, int64_t shared_bytes,
                                int64_t budget) {
  if (batch > kMaxGridYZ) return "batch of " + std::to_string(batch) + " rows is above the grid limit";
  if (time_blocks > kMaxGridYZ) return "sequence needs " + std::to_string(time_blocks) + " time blocks";
  if (largest_index > kMaxIndex) return "an index reaches " + std::to_string(largest_index) + ", beyond int32";
  if (shared_bytes > budget) {
    return "needs " + std::to_string(shared_bytes) + " bytes of shared memory, above " + std::to_string(budget);
  }
  return "";
}

}  // namespace stream
}  // namespace talk_hf
