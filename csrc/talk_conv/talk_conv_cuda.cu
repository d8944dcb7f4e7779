// Tiled CUDA kernels of talk_conv, built just in time by talk_hf.ops._extension.  The per-element
// math comes from talk_math.h, shared with the C++ CPU kernels that the CPU test suite runs; the block
// layout from cuda_tiles.h.  The forward is ops.h's talk_forward for every shape (faster than a
// streaming forward at every shape measured on an H200); the backward, talk_backward_tiled, runs
// only where the streaming backward (talk_conv_cuda_stream.cu) does not take a shape (cuda_fallback.h).
//
// talk_conv forward: one pass over the rows the tile's offsets reach, kept in shared memory as a
// local prefix sum (in chunks, so any reach works), then the interpolation at both edges.
// talk_conv backward: grad_x of a tile as the running sum of a difference array in shared memory
// (one private copy per threadIdx.y, reduced without atomics), fed by every token whose window
// reaches the tile (the reach comes from a reduction kernel, not from the host); the offset
// gradients are one warp per (b, t, h) dot product.
//
// Packed rows: every kernel reads token t's span through `spans` (talk_math.h: RowSpans, the row
// [0, T - 1], or DocumentSpans, t's document) and clamps t's window edges into it, as the CPU
// kernels do; each kernel is instantiated once per kind of span, the RowSpans one the unpacked kernel.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <type_traits>

#include "cuda_fallback.h"
#include "cuda_tiles.h"
#include "cuda_variants.h"
#include "ops.h"
#include "tensors.h"

namespace talk_hf {
namespace {

using namespace tiled;

constexpr int kBackwardTile = 32;
constexpr int kSharedBytes = 40 * 1024;  // stays under the 48 KiB default
constexpr int kReachThreads = 256;       // threads per block of talk_reach_kernel
constexpr int kReachBlocks = 1024;       // most blocks of talk_reach_kernel (it strides over the rest)

// Rows of the forward's shared prefix sum: row 0 carries the sum of the previous chunk.
template <typename acc_t>
constexpr int prefix_rows() {
  return kSharedBytes / (kChannels * static_cast<int>(sizeof(acc_t)));
}

// Row-splitting of the backward: one private difference array per threadIdx.y.
template <typename acc_t>
constexpr int backward_rows() {
  return kSharedBytes / ((kBackwardTile + 1) * kChannels * static_cast<int>(sizeof(acc_t)));
}

// In-place inclusive scan of rows [1, rows] of each channel's column of prefix (plus the carry in
// row 0): threadIdx.y scans a segment, then adds the totals of the segments before it.
template <typename acc_t>
__device__ void scan_columns(acc_t (*prefix)[kChannels], acc_t (*totals)[kChannels], int rows) {
  const int segment = (rows + kRows - 1) / kRows;
  const int begin = 1 + threadIdx.y * segment;
  const int stop = begin + segment < rows + 1 ? begin + segment : rows + 1;
  acc_t running = 0;
  for (int k = begin; k < stop; ++k) {
    running += prefix[k][threadIdx.x];
    prefix[k][threadIdx.x] = running;
  }
  totals[threadIdx.y][threadIdx.x] = running;
  __syncthreads();
  acc_t before = prefix[0][threadIdx.x];
  for (int y = 0; y < static_cast<int>(threadIdx.y); ++y) before += totals[y][threadIdx.x];
  for (int k = begin; k < stop; ++k) prefix[k][threadIdx.x] += before;
  __syncthreads();
}

// The window edges of a tile's tokens (candidate talk_forward_shared_edges, cuda_variants.h): side 0
// the left edge, side 1 the right one, of token tile.first + slot.
template <typename acc_t>
struct TileEdges {
  int64_t index[2][kTile];
  acc_t frac[2][kTile];
};
static_assert(kChannels * kRows == 2 * kTile, "one edge a thread: a block has a thread per edge of its tile");

template <typename value_t>
__device__ value_t warp_min(value_t value) {
  for (int lanes = kWarpSize / 2; lanes > 0; lanes /= 2) {
    const value_t other = __shfl_xor_sync(kFullWarp, value, lanes);
    value = other < value ? other : value;
  }
  return value;
}

template <typename value_t>
__device__ value_t warp_max(value_t value) {
  for (int lanes = kWarpSize / 2; lanes > 0; lanes /= 2) {
    const value_t other = __shfl_xor_sync(kFullWarp, value, lanes);
    value = other > value ? other : value;
  }
  return value;
}

// kSharedEdges (only where every channel of the block lies in one head, so every thread is active and
// the edges are the block's): thread (x, y) computes edge side = linear / kTile of token slot = linear
// % kTile once, into shared memory, and each warp adds its lowest and highest row with one atomic.
// Without it, every warp computes the edges of its tokens for its channels' heads, once for the rows
// and once per chunk.
template <typename scalar_t, typename acc_t, typename Spans, bool kSharedEdges>
__global__ void __launch_bounds__(kChannels* kRows)
    talk_forward_kernel(TalkOffsets<scalar_t, acc_t> offsets, Spans spans, Layout layout,
                        const scalar_t* __restrict__ x, scalar_t* __restrict__ out) {
  constexpr int kPerThread = kTile / kRows;
  constexpr int kPrefixRows = prefix_rows<acc_t>() - kRows;  // leave room for the segment totals
  __shared__ acc_t prefix[kPrefixRows][kChannels];
  __shared__ acc_t totals[kRows][kChannels];
  __shared__ unsigned long long lowest_row, highest_row;
  __shared__ std::conditional_t<kSharedEdges, TileEdges<acc_t>, char> tile_edges;

  const TileCoordinates tile(layout, kTile);
  const acc_t normalizer = window_normalizer<acc_t>(offsets.max_left, offsets.max_right);
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    lowest_row = static_cast<unsigned long long>(layout.length);
    highest_row = 0;
  }
  if (threadIdx.y == 0) prefix[0][threadIdx.x] = 0;
  __syncthreads();

  // The rows [lowest, highest] of the prefix sum that the tile's offsets need.
  if constexpr (kSharedEdges) {
    const int linear = threadIdx.y * kChannels + threadIdx.x;
    const int slot = linear % kTile, side = linear / kTile;
    const int64_t t = tile.first + slot;
    unsigned long long lowest_here = static_cast<unsigned long long>(layout.length), highest_here = 0;
    if (t < tile.end) {
      const Span span = spans(tile.b, t);
      const Edge<acc_t> edge = side == 0 ? offsets.left(tile.b, t, tile.head, span) : offsets.right(tile.b, t, tile.head, span);
      tile_edges.index[side][slot] = edge.index;
      tile_edges.frac[side][slot] = edge.frac;
      lowest_here = highest_here = static_cast<unsigned long long>(edge.index);
    }
    lowest_here = warp_min(lowest_here);
    highest_here = warp_max(highest_here);
    if (threadIdx.x == 0) {  // a warp is one threadIdx.y (blockDim.x == kWarpSize)
      atomicMin(&lowest_row, lowest_here);
      atomicMax(&highest_row, highest_here);
    }
  } else {
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t t = tile.first + threadIdx.y + kRows * i;
      if (!tile.active || t >= tile.end) continue;
      const Span span = spans(tile.b, t);
      const Edge<acc_t> left = offsets.left(tile.b, t, tile.head, span);
      const Edge<acc_t> right = offsets.right(tile.b, t, tile.head, span);
      atomicMin(&lowest_row, static_cast<unsigned long long>(left.index < right.index ? left.index : right.index));
      atomicMax(&highest_row, static_cast<unsigned long long>(left.index > right.index ? left.index : right.index));
    }
  }
  __syncthreads();
  const int64_t lowest = static_cast<int64_t>(lowest_row), highest = static_cast<int64_t>(highest_row);

  acc_t result[kPerThread];
  for (int i = 0; i < kPerThread; ++i) result[i] = 0;
  // Chunks of rows: prefix[k] = x[lowest] + ... + x[row0 + k - 1] covers indices [row0, row0 + rows].
  for (int64_t row0 = lowest;;) {
    const int rows = static_cast<int>(highest - row0 < kPrefixRows - 1 ? highest - row0 : kPrefixRows - 1);
    for (int k = threadIdx.y; k < rows; k += kRows) {
      prefix[k + 1][threadIdx.x] = tile.active ? static_cast<acc_t>(x[tile.offset(row0 + k, layout)]) : acc_t(0);
    }
    __syncthreads();
    scan_columns<acc_t>(prefix, totals, rows);
    const bool last_chunk = row0 + rows == highest;
    for (int i = 0; i < kPerThread; ++i) {
      const int slot = threadIdx.y + kRows * i;
      const int64_t t = tile.first + slot;
      if (!tile.active || t >= tile.end) continue;
      Edge<acc_t> edges[2];
      if constexpr (kSharedEdges) {
        for (int side = 0; side < 2; ++side) {
          edges[side] = Edge<acc_t>{tile_edges.index[side][slot], tile_edges.frac[side][slot], true};
        }
      } else {
        const Span span = spans(tile.b, t);
        edges[0] = offsets.left(tile.b, t, tile.head, span);
        edges[1] = offsets.right(tile.b, t, tile.head, span);
      }
      for (int side = 0; side < 2; ++side) {
        const Edge<acc_t>& edge = edges[side];
        if (edge.index < row0 || (edge.index >= row0 + rows && !last_chunk)) continue;
        const acc_t x_at = edge.index < layout.length ? static_cast<acc_t>(x[tile.offset(edge.index, layout)]) : acc_t(0);
        const acc_t value = integral_to(edge, prefix[edge.index - row0][threadIdx.x], x_at);
        result[i] += side == 0 ? -value : value;
      }
    }
    if (last_chunk) break;
    row0 += rows;
    __syncthreads();  // every thread has read this chunk before row 0 takes the carry
    if (threadIdx.y == 0) prefix[0][threadIdx.x] = prefix[rows][threadIdx.x];
    __syncthreads();
  }
  for (int i = 0; i < kPerThread; ++i) {
    const int64_t t = tile.first + threadIdx.y + kRows * i;
    if (tile.active && t < tile.end) out[tile.offset(t, layout)] = static_cast<scalar_t>(result[i] / normalizer);
  }
}

// Per-block maxima of the reach over (b, t, h); the caller reduces the (blocks, 2) partials.
template <typename scalar_t, typename acc_t, typename Spans>
__global__ void talk_reach_kernel(TalkOffsets<scalar_t, acc_t> offsets, Spans spans, int64_t count, int64_t* partials) {
  __shared__ int64_t before[kReachThreads], after[kReachThreads];
  Reach reach{0, 0};
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < count;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = index % offsets.heads, t = (index / offsets.heads) % offsets.length;
    const int64_t b = index / (offsets.heads * offsets.length);
    const Span span = spans(b, t);
    widen_reach(reach, t, offsets.left(b, t, h, span), offsets.right(b, t, h, span));
  }
  before[threadIdx.x] = reach.before;
  after[threadIdx.x] = reach.after;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      const int other = threadIdx.x + stride;
      if (before[other] > before[threadIdx.x]) before[threadIdx.x] = before[other];
      if (after[other] > after[threadIdx.x]) after[threadIdx.x] = after[other];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = before[0];
    partials[2 * blockIdx.x + 1] = after[0];
  }
}

template <typename scalar_t, typename acc_t, typename Spans>
__global__ void __launch_bounds__(kChannels* backward_rows<acc_t>())
    talk_grad_x_kernel(TalkOffsets<scalar_t, acc_t> offsets, Spans spans, Layout layout,
                       const scalar_t* __restrict__ grad_out, const int64_t* __restrict__ reach,
                       scalar_t* __restrict__ grad_x) {
  constexpr int kCopies = backward_rows<acc_t>();
  __shared__ acc_t difference[kCopies][kBackwardTile + 1][kChannels];
  const TileCoordinates tile(layout, kBackwardTile);
  const acc_t normalizer = window_normalizer<acc_t>(offsets.max_left, offsets.max_right);
  for (int k = 0; k <= kBackwardTile; ++k) difference[threadIdx.y][k][threadIdx.x] = 0;

  // Every token whose window reaches the tile adds its four difference-array entries; entries
  // below the tile land on its first row, entries past it are dropped.
  const int64_t first_contributor = tile.first - reach[1] > 0 ? tile.first - reach[1] : 0;
  const int64_t last_contributor = tile.end - 1 + reach[0] < layout.length - 1 ? tile.end - 1 + reach[0] : layout.length - 1;
  if (tile.active) {
    for (int64_t t = first_contributor + threadIdx.y; t <= last_contributor; t += kCopies) {
      const Span span = spans(tile.b, t);
      const Edge<acc_t> left = offsets.left(tile.b, t, tile.head, span);
      const Edge<acc_t> right = offsets.right(tile.b, t, tile.head, span);
      const acc_t grad = static_cast<acc_t>(grad_out[tile.offset(t, layout)]);
      for (int which = 0; which < 4; ++which) {
        const ScatterEntry<acc_t> entry = scatter_entry(left, right, which);
        if (entry.position >= tile.end || entry.weight == acc_t(0)) continue;
        const int64_t row = (entry.position > tile.first ? entry.position : tile.first) - tile.first;
        difference[threadIdx.y][row][threadIdx.x] += entry.weight * grad;
      }
    }
  }
  __syncthreads();
  for (int k = threadIdx.y; k < kBackwardTile; k += kCopies) {
    for (int copy = 1; copy < kCopies; ++copy) difference[0][k][threadIdx.x] += difference[copy][k][threadIdx.x];
  }
  __syncthreads();
  if (threadIdx.y == 0) {
    acc_t running = 0;
    for (int k = 0; k < kBackwardTile; ++k) {
      running += difference[0][k][threadIdx.x];
      difference[0][k][threadIdx.x] = running;
    }
  }
  __syncthreads();
  for (int64_t t = tile.first + threadIdx.y; t < tile.end; t += kCopies) {
    if (tile.active) grad_x[tile.offset(t, layout)] = static_cast<scalar_t>(difference[0][t - tile.first][threadIdx.x] / normalizer);
  }
}

// One warp per (b, t, h): factor * <grad_out[b, t, head h], x[b, edge, head h]> for both edges.
template <typename scalar_t, typename acc_t, typename Spans>
__global__ void talk_grad_offsets_kernel(TalkOffsets<scalar_t, acc_t> offsets, Spans spans, Layout layout, int64_t count,
                                         const scalar_t* __restrict__ x, const scalar_t* __restrict__ grad_out,
                                         scalar_t* __restrict__ grad_left, scalar_t* __restrict__ grad_right) {
  const int64_t index = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (index >= count) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t h = index % offsets.heads, t = (index / offsets.heads) % layout.length;
  const int64_t b = index / (offsets.heads * layout.length);
  const Span span = spans(b, t);
  const Edge<acc_t> left = offsets.left(b, t, h, span), right = offsets.right(b, t, h, span);
  const bool right_inside = right.index < layout.length;
  const scalar_t* grad_row = grad_out + (b * layout.length + t) * layout.channels + h * layout.head_size;
  const scalar_t* x_left = x + (b * layout.length + left.index) * layout.channels + h * layout.head_size;
  const scalar_t* x_right = x + (b * layout.length + (right_inside ? right.index : 0)) * layout.channels + h * layout.head_size;
  acc_t dot_left = 0, dot_right = 0;
  for (int64_t c = lane; c < layout.head_size; c += kWarpSize) {
    const acc_t grad = static_cast<acc_t>(grad_row[c]);
    dot_left += grad * static_cast<acc_t>(x_left[c]);
    if (right_inside) dot_right += grad * static_cast<acc_t>(x_right[c]);
  }
  dot_left = warp_sum(dot_left);
  dot_right = warp_sum(dot_right);
  if (lane != 0) return;
  const acc_t normalizer = window_normalizer<acc_t>(offsets.max_left, offsets.max_right);
  grad_left[index] = static_cast<scalar_t>(offset_gradient_factor(left, offsets.max_left, normalizer) * dot_left);
  if (grad_right != nullptr) {
    grad_right[index] = static_cast<scalar_t>(offset_gradient_factor(right, offsets.max_right, normalizer) * dot_right);
  }
}

}  // namespace

at::Tensor talk_forward(const at::Tensor& x_in, const at::Tensor& offset_left_in,
                        const std::optional<at::Tensor>& offset_right_in, int64_t max_left, int64_t max_right,
                        const std::optional<at::Tensor>& document_edges) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const TalkInputs inputs(x_in, offset_left_in, offset_right_in);
  const at::Tensor &x = inputs.x, &offset_left = inputs.offset_left, &offset_right = inputs.offset_right;
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const Layout layout = layout_of(x, offset_left.size(2));
  const bool shared_edges =
      layout.head_size % kChannels == 0 && cuda_variant_enabled(CudaVariant::kTalkForwardSharedEdges);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk_forward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_document_spans(document_edges, x, [&](const auto& spans) {
      using Spans = std::decay_t<decltype(spans)>;
      const auto launch = [&](auto shared_edges_tag) {  // std::true_type or std::false_type
        talk_forward_kernel<scalar_t, acc_t, Spans, decltype(shared_edges_tag)::value>
            <<<tile_grid(x.size(0), layout, kTile), dim3(kChannels, kRows), 0, stream>>>(
                talk_offsets<scalar_t, acc_t>(offset_left, offset_right, max_left, max_right), spans, layout,
                x.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      if (shared_edges) {
        launch(std::true_type{});
      } else {
        launch(std::false_type{});
      }
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> talk_backward_tiled(const at::Tensor& grad_out_in,
                                                                   const at::Tensor& x_in,
                                                                   const at::Tensor& offset_left_in,
                                                                   const std::optional<at::Tensor>& offset_right_in,
                                                                   int64_t max_left, int64_t max_right,
                                                                   const std::optional<at::Tensor>& document_edges) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor grad_out = grad_out_in.contiguous();
  const TalkInputs inputs(x_in, offset_left_in, offset_right_in);
  const at::Tensor &x = inputs.x, &offset_left = inputs.offset_left, &offset_right = inputs.offset_right;
  at::Tensor grad_x, grad_left, grad_right;
  std::tie(grad_x, grad_left, grad_right) = inputs.empty_gradients();
  if (x.numel() == 0) return {grad_x, grad_left.zero_(), grad_right.zero_()};  // C == 0: offsets are still (B, T, H)
  const Layout layout = layout_of(x, offset_left.size(2));
  const int64_t pairs = offset_left.numel();  // (b, t, h) triples
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto offsets = talk_offsets<scalar_t, acc_t>(offset_left, offset_right, max_left, max_right);
    const unsigned reach_blocks =
        static_cast<unsigned>(std::min<int64_t>(ceil_div(pairs, kReachThreads), kReachBlocks));
    with_document_spans(document_edges, x, [&](const auto& spans) {
      using Spans = std::decay_t<decltype(spans)>;
      at::Tensor partials = at::empty({reach_blocks, 2}, x.options().dtype(at::kLong));
      talk_reach_kernel<scalar_t, acc_t, Spans>
          <<<reach_blocks, kReachThreads, 0, stream>>>(offsets, spans, pairs, partials.mutable_data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      const at::Tensor reach = at::amax(partials, 0);  // stays on the device: no host sync

      talk_grad_x_kernel<scalar_t, acc_t, Spans>
          <<<tile_grid(x.size(0), layout, kBackwardTile), dim3(kChannels, backward_rows<acc_t>()), 0, stream>>>(
              offsets, spans, layout, grad_out.const_data_ptr<scalar_t>(), reach.const_data_ptr<int64_t>(),
              grad_x.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      talk_grad_offsets_kernel<scalar_t, acc_t, Spans><<<warp_blocks(pairs), kWarpSize * kWarpsPerBlock, 0, stream>>>(
          offsets, spans, layout, pairs, x.const_data_ptr<scalar_t>(), grad_out.const_data_ptr<scalar_t>(),
          grad_left.mutable_data_ptr<scalar_t>(),
          offset_right.defined() ? grad_right.mutable_data_ptr<scalar_t>() : nullptr);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {grad_x, grad_left, grad_right};
}

}  // namespace talk_hf
