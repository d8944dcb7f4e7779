// Shared pieces of the tiled CUDA kernels (talk_conv/talk_conv_cuda.cu,
// dynamic_conv/dynamic_conv_cuda.cu): the block shape, the tile coordinates of a block, warp sums
// and grid sizes.  Included by .cu files only.
//
// Layout: a thread block covers one batch row, a tile of time steps and kChannels consecutive
// channels (threadIdx.x = channel, so every row access of a warp is coalesced); threadIdx.y
// splits the tile's rows.  Indices are 64-bit.  Accumulation is float32 (float64 for float64).
#pragma once

#include <ATen/core/Tensor.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "talk_math.h"

namespace talk_hf {
namespace tiled {

constexpr int kChannels = 32;  // channels per block: blockDim.x
constexpr int kRows = 8;       // blockDim.y of the forward kernels
constexpr int kTile = 128;     // time steps per block of the forward kernels
constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;  // every lane of a warp takes part in a shuffle

struct Layout {
  int64_t length, channels, head_size;
};

// Block coordinates shared by the tile kernels: batch row, tile [first, end), channel, head.
struct TileCoordinates {
  int64_t b, first, end, channel, head;
  bool active;  // the channel exists (the last chunk of channels may be partial)

  __device__ TileCoordinates(const Layout& layout, int64_t tile) {
    b = blockIdx.z;
    first = static_cast<int64_t>(blockIdx.x) * tile;
    end = first + tile < layout.length ? first + tile : layout.length;
    channel = static_cast<int64_t>(blockIdx.y) * kChannels + threadIdx.x;
    active = channel < layout.channels;
    head = active ? channel / layout.head_size : 0;
  }
  __device__ int64_t offset(int64_t t, const Layout& layout) const {
    return (b * layout.length + t) * layout.channels + channel;
  }
};

inline dim3 tile_grid(int64_t batch, const Layout& layout, int64_t tile) {
  TORCH_CHECK(batch <= 65535, "the CUDA kernels take at most 65535 batch rows, got ", batch);
  return dim3(static_cast<unsigned>(ceil_div(layout.length, tile)),
              static_cast<unsigned>(ceil_div(layout.channels, kChannels)), static_cast<unsigned>(batch));
}

template <typename acc_t>
__device__ acc_t warp_sum(acc_t value) {
  for (int lanes = kWarpSize / 2; lanes > 0; lanes /= 2) value += __shfl_down_sync(kFullWarp, value, lanes);
  return value;
}

constexpr int kWarpsPerBlock = 8;  // of the one-warp-per-(b, t, h) kernels

inline unsigned warp_blocks(int64_t warps) { return static_cast<unsigned>(ceil_div(warps, kWarpsPerBlock)); }

inline Layout layout_of(const at::Tensor& x, int64_t heads) {
  return Layout{x.size(1), x.size(2), x.size(2) / heads};
}

}  // namespace tiled
}  // namespace talk_hf
