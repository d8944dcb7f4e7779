// Streaming CUDA kernels of talk_conv (forward; backward for x and both offsets), behind the switch
// $TALK_HF_UNVERIFIED_CUDA=talk_conv until a GPU has verified them (cuda_stream.h).  The per-element
// math (edges, fractions, normaliser, scatter entries, offset gradient factor, reach) is talk_math.h's,
// shared with the CPU kernels that the CPU test suite runs.
//
// Design: one thread owns V consecutive channels of one head (V = 16 bytes / element size: 4 float32,
// 8 bfloat16/float16, 2 float64; 1 where a head's channels do not split into aligned vectors) in
// one batch row and walks a chunk of time in order.  Indices are 32-bit (larger tensors fall back to
// the tiled kernels of talk_conv_cuda.cu).  Accumulation is float32 (float64 for float64).  Nothing reads
// back to the host: the backward's reach over all tokens is reduced on the device.
//
// Forward (talk_stream_forward_kernel): the thread keeps a running prefix sum P of its channels from
// the first row its chunk's windows reach, and a ring, in shared memory, of the last
// max_left + max_right + 3 prefix rows (its own: no block synchronisation, no atomics, no scan across
// threads).  Token t is answered when row t + max_right + 2 has been added: both window edges and
// their successors lie in the ring, and x at an edge is the difference of two prefix rows.  An edge
// outside the ring (an offset above 1, e.g. after dropout) is answered by summing x from global
// memory between the edge and the ring: correct for any offset, slow only for those windows.
//   Bytes per element: read x (element size s) once from DRAM, plus (max_left + max_right + 2) /
//   kForwardChunk halo rows re-read per chunk (L2 hits, as the neighbouring chunk reads them); write
//   out (s); offsets 2 s / head_size.  Table 6 (s = 4, 31 + 31, head size 64): ~8.1 B from DRAM.
//   Instructions per element (float32, V = 4): 1 add to P, 1/V vector load, 1/V (fp32) shared store,
//   4 shared vector loads per V (prefix and successor at both edges), ~5 arithmetic (two edge
//   differences and interpolations, difference, scale), and the edge math of one (t, head), ~40
//   instructions, shared by the V channels: ~20 per element in float32, ~13 in bfloat16.
//
// Backward for x (talk_stream_grad_x_kernel), the mirror image: the thread owns the same V channels
// of a chunk of kBackwardChunk rows and a difference array of those rows in shared memory (its own);
// it walks every token whose window may touch the chunk (bounded by the device-side reach), adds the
// token's four scatter entries times grad_out[t] (entries before the chunk land on its first row,
// entries after it are dropped), then writes the running sum of the difference array.
//   Bytes per element: read grad_out (s) once plus the reach halo (max_left + max_right + 3) /
//   kBackwardChunk rows (L2 hits), write grad_x (s), offsets 2 s / head_size per token walked.
//   Instructions per element and token walked (float32, V = 4): 4 fused multiply-adds into the
//   difference array (each a shared load and store per V), 1/V vector load, ~40 / V edge math: ~16;
//   times (1 + halo / chunk) (~2 at Table 6), plus 2 for the running sum and the store: ~34.
//
// Backward for the offsets (talk_stream_offsets_kernel): one thread per (b, t, head) takes the dot
// products <grad_out[t], x[left edge]> and <grad_out[t], x[right edge]> over the head's channels
// with vector loads and multiplies them by the offset gradient factor.
//   Bytes per element: read grad_out (s) and the two edge rows of x (s each; neighbouring tokens'
//   edges share rows, so mostly one DRAM read of x and L2 hits), write 2 s / head_size.
//   Instructions per element: 2 fused multiply-adds, 3/V vector loads.
//
// The reach kernel (talk_stream_reach_kernel) reads the offsets once (2 s / head_size per element)
// and reduces the farthest scatter entry before and after a token with atomicMax into two ints.
//
// Packed rows: every kernel reads token t's span through `spans` (talk_math.h: RowSpans, the row
// [0, T - 1], or DocumentSpans, t's document from the (B, T, 2) edges, 8 bytes per token read) and
// clamps t's window edges into it; nothing else changes, since the prefix ring's differences and
// the difference array hold for any edges.  Each kernel is instantiated once per kind of span, and
// the RowSpans one is the unpacked kernel.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda_stream.h"
#include "cuda_stream_device.h"
#include "ops.h"
#include "tensors.h"

namespace talk_hf {
namespace {

using stream::fill;
using stream::full_width;
using stream::load_pack;
using stream::load_shared;
using stream::store_pack;
using stream::store_shared;

constexpr int kForwardThreads = 32;   // channel vectors per block of the forward
constexpr int kForwardChunk = 128;    // time steps per block of the forward
constexpr int kPrefetchRows = 8;      // rows of x each thread loads before adding them (loads in flight)
constexpr int kPrefixLead = 2;        // prefix rows needed past t + max_right: the right edge's row + 1
constexpr int kBackwardThreads = 32;  // channel vectors per block of grad_x
constexpr int kBackwardChunk = 64;    // time steps per block of grad_x (rows of its difference array)
constexpr int kOffsetThreads = 128;   // (b, t, head) triples per block of the offsets kernel
constexpr int kReachThreads = 256;    // threads per block of the reach kernel
constexpr int kReachBlocks = 1024;    // most blocks of the reach kernel (it strides over the rest)
constexpr int kWarpSize = 32;
static_assert(kOffsetThreads <= kReachBlocks * kReachThreads,
              "talk_stream_fallback's index headroom covers the offsets kernel");
constexpr unsigned kFullWarp = 0xffffffffu;  // every lane of a warp takes part in a shuffle
constexpr int kScatterEntries = 4;  // scatter_entry's four entries per token (talk_math.h)

// Sizes shared by the kernels, as 32-bit ints (the host checks that they fit).
struct TalkShape {
  int length, channels, heads, head_size, max_left, max_right;
  int ring_rows;  // prefix rows kept by each forward thread
};

// Rows of the forward's prefix ring: every prefix row a window with offsets in [0, 1] needs.
int64_t ring_rows(int64_t max_left, int64_t max_right) { return max_left + max_right + kPrefixLead + 1; }

// The window edges of token t (offsets at `index`, its (b, t, head) triple), clamped into the
// token's span: [0, T - 1] (RowSpans), or its document in a packed row (DocumentSpans).
template <typename scalar_t, typename acc_t>
__device__ __forceinline__ Edge<acc_t> stream_left_edge(const scalar_t* __restrict__ offset_left, int index, int t,
                                                        Span span, const TalkShape& shape) {
  return left_edge<acc_t>(t, span, static_cast<acc_t>(offset_left[index]), shape.max_left);
}

template <typename scalar_t, typename acc_t>
__device__ __forceinline__ Edge<acc_t> stream_right_edge(const scalar_t* __restrict__ offset_right, int index, int t,
                                                         Span span, const TalkShape& shape) {
  if (offset_right == nullptr) return causal_right_edge<acc_t>(t);
  return right_edge<acc_t>(t, span, static_cast<acc_t>(offset_right[index]), shape.max_right);
}

// One forward thread's prefix rows: P[j] = x[begin] + ... + x[j - 1] of its V channels for the
// rows j of [begin, newest_row] still in its ring, and `running` = P[newest_row + 1].
template <typename scalar_t, typename acc_t, int kWidth>
struct PrefixRing {
  acc_t* slots;  // this thread's slot 0; slot k at slots + k * stride
  int stride, rows, begin, newest_row, newest_slot;
  const scalar_t* column;  // x of this thread's first channel at row 0; row j at column + j * channels
  int channels, length;
  acc_t running[kWidth];

  __device__ void push(const acc_t (&x_row)[kWidth]) {
    ++newest_row;
    newest_slot = newest_slot + 1 == rows ? 0 : newest_slot + 1;
    store_shared(slots + newest_slot * stride, running);
#pragma unroll
    for (int i = 0; i < kWidth; ++i) running[i] += x_row[i];
  }

  __device__ void read_slot(int row, acc_t (&value)[kWidth]) const {
    int slot = newest_slot - (newest_row - row);
    if (slot < 0) slot += rows;
    load_shared(slots + slot * stride, value);
  }

  // value = P[row] for any row in [0, length + 1]: from the ring, or (an edge an offset above 1
  // put outside it) from the nearest ring row and the x rows in between, read from global memory.
  __device__ void at(int row, acc_t (&value)[kWidth]) const {
    const int oldest = newest_row - rows + 1 > begin ? newest_row - rows + 1 : begin;
    if (row >= oldest && row <= newest_row) {
      read_slot(row, value);
      return;
    }
    acc_t x_row[kWidth];
    if (row > newest_row) {  // P[row] = P[newest + 1] + x[newest + 1] + ... + x[row - 1]
#pragma unroll
      for (int i = 0; i < kWidth; ++i) value[i] = running[i];
      for (int j = newest_row + 1; j < row && j < length; ++j) {
        load_pack<acc_t, scalar_t, kWidth>(column + j * channels, x_row);
#pragma unroll
        for (int i = 0; i < kWidth; ++i) value[i] += x_row[i];
      }
      return;
    }
    read_slot(oldest, value);  // P[row] = P[oldest] - x[row] - ... - x[oldest - 1], row < oldest <= length
    for (int j = row; j < oldest && j < length; ++j) {
      load_pack<acc_t, scalar_t, kWidth>(column + j * channels, x_row);
#pragma unroll
      for (int i = 0; i < kWidth; ++i) value[i] -= x_row[i];
    }
  }

  // F(edge) = P[index] + frac * x[index], with x[index] = P[index + 1] - P[index] (talk_math.h).
  __device__ void integral(const Edge<acc_t>& edge, acc_t (&value)[kWidth]) const {
    acc_t next[kWidth];
    at(static_cast<int>(edge.index), value);
    at(static_cast<int>(edge.index) + 1, next);
#pragma unroll
    for (int i = 0; i < kWidth; ++i) value[i] = integral_to(edge, value[i], next[i] - value[i]);
  }
};

// Grid (channel vectors / kForwardThreads, chunks of kForwardChunk steps, B); dynamic shared memory
// ring_rows * kForwardThreads * kWidth accumulators.  x, out (B, T, C); offsets (B, T, H); spans(b, t)
// the tokens token t's window may cover.
template <typename scalar_t, typename acc_t, int kWidth, typename Spans>
__global__ void __launch_bounds__(kForwardThreads)
    talk_stream_forward_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ offset_left,
                               const scalar_t* __restrict__ offset_right, scalar_t* __restrict__ out, TalkShape shape,
                               Spans spans) {
  extern __shared__ __align__(stream::kSharedAlignment) unsigned char shared_bytes[];
  const int vector = blockIdx.x * kForwardThreads + threadIdx.x;
  if (vector * kWidth >= shape.channels) return;  // nothing below synchronises the block
  const int channel = vector * kWidth, head = channel / shape.head_size, b = blockIdx.z;
  const int first = blockIdx.y * kForwardChunk;
  const int end = first + kForwardChunk < shape.length ? first + kForwardChunk : shape.length;
  const int lead = shape.max_right + kPrefixLead;  // token t is answered once row t + lead is in
  const int last_row = end - 1 + lead;             // rows at or past T are zeros (x[T] = 0)

  PrefixRing<scalar_t, acc_t, kWidth> ring;
  ring.slots = reinterpret_cast<acc_t*>(shared_bytes) + threadIdx.x * kWidth;
  ring.stride = kForwardThreads * kWidth;
  ring.rows = shape.ring_rows;
  ring.begin = first - shape.max_left > 0 ? first - shape.max_left : 0;
  ring.newest_row = ring.begin - 1;
  ring.newest_slot = -1;
  ring.column = x + b * shape.length * shape.channels + channel;
  ring.channels = shape.channels;
  ring.length = shape.length;
  fill(ring.running, acc_t(0));

  const acc_t scale = acc_t(1) / window_normalizer<acc_t>(shape.max_left, shape.max_right);
  for (int group = ring.begin; group <= last_row; group += kPrefetchRows) {
    acc_t rows[kPrefetchRows][kWidth];
#pragma unroll
    for (int r = 0; r < kPrefetchRows; ++r) {
      const int row = group + r;
      if (row < shape.length && row <= last_row) {
        load_pack<acc_t, scalar_t, kWidth>(ring.column + row * shape.channels, rows[r]);
      } else {
        fill(rows[r], acc_t(0));
      }
    }
#pragma unroll
    for (int r = 0; r < kPrefetchRows; ++r) {
      if (group + r > last_row) break;
      ring.push(rows[r]);
      const int t = group + r - lead;
      if (t < first) continue;
      const int offset_index = (b * shape.length + t) * shape.heads + head;
      const Span span = spans(b, t);
      const Edge<acc_t> left = stream_left_edge<scalar_t, acc_t>(offset_left, offset_index, t, span, shape);
      const Edge<acc_t> right = stream_right_edge<scalar_t, acc_t>(offset_right, offset_index, t, span, shape);
      acc_t upper[kWidth], lower[kWidth];
      ring.integral(right, upper);
      ring.integral(left, lower);
#pragma unroll
      for (int i = 0; i < kWidth; ++i) upper[i] -= lower[i];
      store_pack<acc_t, scalar_t, kWidth>(out + (b * shape.length + t) * shape.channels + channel, upper, scale);
    }
  }
}

// reach[0] = max(0, t - lowest scatter entry), reach[1] = max(0, highest scatter entry - t) over
// every (b, t, head) (talk_math.h's widen_reach); reach starts at zeros.
template <typename scalar_t, typename acc_t, typename Spans>
__global__ void __launch_bounds__(kReachThreads)
    talk_stream_reach_kernel(const scalar_t* __restrict__ offset_left, const scalar_t* __restrict__ offset_right,
                             TalkShape shape, Spans spans, int count, int* __restrict__ reach) {
  Reach widest{0, 0};
  for (int index = blockIdx.x * kReachThreads + threadIdx.x; index < count; index += gridDim.x * kReachThreads) {
    const int bt = index / shape.heads, t = bt % shape.length;
    const Span span = spans(bt / shape.length, t);
    widen_reach(widest, t, stream_left_edge<scalar_t, acc_t>(offset_left, index, t, span, shape),
                stream_right_edge<scalar_t, acc_t>(offset_right, index, t, span, shape));
  }
  int before = static_cast<int>(widest.before), after = static_cast<int>(widest.after);
  for (int lanes = kWarpSize / 2; lanes > 0; lanes /= 2) {
    const int other_before = __shfl_down_sync(kFullWarp, before, lanes);
    const int other_after = __shfl_down_sync(kFullWarp, after, lanes);
    before = other_before > before ? other_before : before;
    after = other_after > after ? other_after : after;
  }
  if (threadIdx.x % kWarpSize == 0) {
    atomicMax(reach, before);
    atomicMax(reach + 1, after);
  }
}

// Grid (channel vectors / kBackwardThreads, chunks of kBackwardChunk steps, B); dynamic shared
// memory kBackwardChunk * kBackwardThreads * kWidth accumulators.  grad_out, grad_x (B, T, C).
template <typename scalar_t, typename acc_t, int kWidth, typename Spans>
__global__ void __launch_bounds__(kBackwardThreads)
    talk_stream_grad_x_kernel(const scalar_t* __restrict__ grad_out, const scalar_t* __restrict__ offset_left,
                              const scalar_t* __restrict__ offset_right, const int* __restrict__ reach,
                              scalar_t* __restrict__ grad_x, TalkShape shape, Spans spans) {
  extern __shared__ __align__(stream::kSharedAlignment) unsigned char shared_bytes[];
  const int vector = blockIdx.x * kBackwardThreads + threadIdx.x;
  if (vector * kWidth >= shape.channels) return;  // nothing below synchronises the block
  const int channel = vector * kWidth, head = channel / shape.head_size, b = blockIdx.z;
  const int first = blockIdx.y * kBackwardChunk;
  const int end = first + kBackwardChunk < shape.length ? first + kBackwardChunk : shape.length;
  acc_t* difference = reinterpret_cast<acc_t*>(shared_bytes) + threadIdx.x * kWidth;  // row r at r * stride
  constexpr int stride = kBackwardThreads * kWidth;
  acc_t zeros[kWidth];
  fill(zeros, acc_t(0));
  for (int r = 0; r < end - first; ++r) store_shared(difference + r * stride, zeros);

  // Tokens whose scatter entries may straddle a row of the chunk (reach[0] before, reach[1] after).
  const int t_begin = first - reach[1] > 0 ? first - reach[1] : 0;
  const int t_last = end - 1 + reach[0] < shape.length - 1 ? end - 1 + reach[0] : shape.length - 1;
  const scalar_t* grad_column = grad_out + b * shape.length * shape.channels + channel;
  for (int t = t_begin; t <= t_last; ++t) {
    const int offset_index = (b * shape.length + t) * shape.heads + head;
    const Span span = spans(b, t);
    const Edge<acc_t> left = stream_left_edge<scalar_t, acc_t>(offset_left, offset_index, t, span, shape);
    const Edge<acc_t> right = stream_right_edge<scalar_t, acc_t>(offset_right, offset_index, t, span, shape);
    acc_t grad[kWidth];
    load_pack<acc_t, scalar_t, kWidth>(grad_column + t * shape.channels, grad);
#pragma unroll
    for (int which = 0; which < kScatterEntries; ++which) {
      const ScatterEntry<acc_t> entry = scatter_entry(left, right, which);
      if (entry.position >= end || entry.weight == acc_t(0)) continue;
      const int row = static_cast<int>(entry.position > first ? entry.position : first) - first;
      acc_t sum[kWidth];
      load_shared(difference + row * stride, sum);
#pragma unroll
      for (int i = 0; i < kWidth; ++i) sum[i] += entry.weight * grad[i];
      store_shared(difference + row * stride, sum);
    }
  }

  const acc_t scale = acc_t(1) / window_normalizer<acc_t>(shape.max_left, shape.max_right);
  acc_t running[kWidth];
  fill(running, acc_t(0));
  for (int r = 0; r < end - first; ++r) {
    acc_t row[kWidth];
    load_shared(difference + r * stride, row);
#pragma unroll
    for (int i = 0; i < kWidth; ++i) running[i] += row[i];
    store_pack<acc_t, scalar_t, kWidth>(grad_x + (b * shape.length + first + r) * shape.channels + channel, running,
                                        scale);
  }
}

// One thread per (b, t, head): grad_left = factor(left) * <grad_out[t], x[left edge]> over the head's
// channels, grad_right likewise (grad_right is nullptr in the causal form).
template <typename scalar_t, typename acc_t, int kWidth, typename Spans>
__global__ void __launch_bounds__(kOffsetThreads)
    talk_stream_offsets_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ grad_out,
                               const scalar_t* __restrict__ offset_left, const scalar_t* __restrict__ offset_right,
                               scalar_t* __restrict__ grad_left, scalar_t* __restrict__ grad_right, TalkShape shape,
                               Spans spans, int count) {
  const int index = blockIdx.x * kOffsetThreads + threadIdx.x;
  if (index >= count) return;
  const int head = index % shape.heads, bt = index / shape.heads, t = bt % shape.length, b = bt / shape.length;
  const Span span = spans(b, t);
  const Edge<acc_t> left = stream_left_edge<scalar_t, acc_t>(offset_left, index, t, span, shape);
  const Edge<acc_t> right = stream_right_edge<scalar_t, acc_t>(offset_right, index, t, span, shape);
  const bool right_inside = grad_right != nullptr && right.index < shape.length;
  const int head_channel = head * shape.head_size;
  const scalar_t* grad_row = grad_out + bt * shape.channels + head_channel;
  const scalar_t* x_left = x + (b * shape.length + static_cast<int>(left.index)) * shape.channels + head_channel;
  const scalar_t* x_right =
      x + (b * shape.length + static_cast<int>(right_inside ? right.index : left.index)) * shape.channels + head_channel;
  acc_t dot_left = 0, dot_right = 0;
  for (int c = 0; c < shape.head_size; c += kWidth) {
    acc_t grad[kWidth], at_left[kWidth], at_right[kWidth];
    load_pack<acc_t, scalar_t, kWidth>(grad_row + c, grad);
    load_pack<acc_t, scalar_t, kWidth>(x_left + c, at_left);
#pragma unroll
    for (int i = 0; i < kWidth; ++i) dot_left += grad[i] * at_left[i];
    if (right_inside) {
      load_pack<acc_t, scalar_t, kWidth>(x_right + c, at_right);
#pragma unroll
      for (int i = 0; i < kWidth; ++i) dot_right += grad[i] * at_right[i];
    }
  }
  const acc_t normalizer = window_normalizer<acc_t>(shape.max_left, shape.max_right);
  grad_left[index] = static_cast<scalar_t>(offset_gradient_factor(left, shape.max_left, normalizer) * dot_left);
  if (grad_right != nullptr) {
    grad_right[index] = static_cast<scalar_t>(offset_gradient_factor(right, shape.max_right, normalizer) * dot_right);
  }
}

TalkShape talk_shape(const at::Tensor& x, const at::Tensor& offset_left, int64_t max_left, int64_t max_right) {
  const int64_t heads = offset_left.size(2);
  return TalkShape{static_cast<int>(x.size(1)),        static_cast<int>(x.size(2)),
                   static_cast<int>(heads),            static_cast<int>(x.size(2) / heads),
                   static_cast<int>(max_left),         static_cast<int>(max_right),
                   static_cast<int>(ring_rows(max_left, max_right))};
}

int64_t forward_shared_bytes(int64_t max_left, int64_t max_right, int width, int64_t acc_size) {
  return ring_rows(max_left, max_right) * kForwardThreads * width * acc_size;
}

int64_t backward_shared_bytes(int width, int64_t acc_size) {
  return static_cast<int64_t>(kBackwardChunk) * kBackwardThreads * width * acc_size;
}

dim3 stream_grid(const at::Tensor& x, int width, int threads, int chunk) {
  return dim3(static_cast<unsigned>(ceil_div(x.size(2) / width, threads)),
              static_cast<unsigned>(ceil_div(x.size(1), chunk)), static_cast<unsigned>(x.size(0)));
}

template <typename scalar_t, typename acc_t, int kWidth, typename Spans>
void launch_forward(const TalkInputs& inputs, const TalkShape& shape, const Spans& spans, at::Tensor& out,
                    cudaStream_t stream) {
  const int64_t bytes = forward_shared_bytes(shape.max_left, shape.max_right, kWidth, sizeof(acc_t));
  const auto kernel = talk_stream_forward_kernel<scalar_t, acc_t, kWidth, Spans>;
  stream::allow_shared_bytes(kernel, bytes);
  kernel<<<stream_grid(inputs.x, kWidth, kForwardThreads, kForwardChunk), kForwardThreads, bytes, stream>>>(
      inputs.x.const_data_ptr<scalar_t>(), inputs.offset_left.const_data_ptr<scalar_t>(),
      optional_data<scalar_t>(inputs.offset_right), out.mutable_data_ptr<scalar_t>(), shape, spans);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, typename acc_t, int kWidth, typename Spans>
void launch_backward(const TalkInputs& inputs, const TalkShape& shape, const Spans& spans, const at::Tensor& grad_out,
                     at::Tensor& grad_x, at::Tensor& grad_left, at::Tensor& grad_right, cudaStream_t stream) {
  const scalar_t* offset_left = inputs.offset_left.const_data_ptr<scalar_t>();
  const scalar_t* offset_right = optional_data<scalar_t>(inputs.offset_right);
  const int count = static_cast<int>(inputs.offset_left.numel());  // (b, t, head) triples

  const at::Tensor reach = at::zeros({2}, inputs.x.options().dtype(at::kInt));
  const unsigned reach_blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(count, kReachThreads), kReachBlocks));
  talk_stream_reach_kernel<scalar_t, acc_t, Spans><<<reach_blocks, kReachThreads, 0, stream>>>(
      offset_left, offset_right, shape, spans, count, reach.mutable_data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  const int64_t bytes = backward_shared_bytes(kWidth, sizeof(acc_t));
  const auto grad_x_kernel = talk_stream_grad_x_kernel<scalar_t, acc_t, kWidth, Spans>;
  stream::allow_shared_bytes(grad_x_kernel, bytes);
  grad_x_kernel<<<stream_grid(inputs.x, kWidth, kBackwardThreads, kBackwardChunk), kBackwardThreads, bytes, stream>>>(
      grad_out.const_data_ptr<scalar_t>(), offset_left, offset_right, reach.const_data_ptr<int>(),
      grad_x.mutable_data_ptr<scalar_t>(), shape, spans);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  talk_stream_offsets_kernel<scalar_t, acc_t, kWidth, Spans>
      <<<static_cast<unsigned>(ceil_div(count, kOffsetThreads)), kOffsetThreads, 0, stream>>>(
          inputs.x.const_data_ptr<scalar_t>(), grad_out.const_data_ptr<scalar_t>(), offset_left, offset_right,
          grad_left.mutable_data_ptr<scalar_t>(),
          inputs.offset_right.defined() ? grad_right.mutable_data_ptr<scalar_t>() : nullptr, shape, spans, count);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The vector width of the streaming kernels for these (contiguous) tensors.
int talk_width(const at::Tensor& x, const at::Tensor& offset_left,
               std::initializer_list<const at::Tensor*> tensors) {
  return stream::vector_width(x.size(2) / offset_left.size(2), x.element_size(), tensors);
}

}  // namespace

std::string talk_stream_fallback(const at::Tensor& x, const at::Tensor& offset_left, int64_t max_left,
                                 int64_t max_right) {
  if (x.numel() == 0) return "no elements";
  const int64_t acc_size = at::elementSize(at::toOpMathType(x.scalar_type()));
  // Width 1 needs the least shared memory: whether full width fits is decided per call (alignment).
  const int64_t bytes = std::max(forward_shared_bytes(max_left, max_right, 1, acc_size), backward_shared_bytes(1, acc_size));
  const int64_t farthest = 2 * x.size(1) + max_left + max_right + kPrefixLead + kForwardChunk;  // rows and reach
  // The reach kernel's grid-stride index runs up to one stride past the (b, t, head) count (the
  // offsets kernel's, up to one block past it): that index must fit too.
  const int64_t offsets_index = offset_left.numel() + static_cast<int64_t>(kReachBlocks) * kReachThreads;
  return stream::limits_fault(x.size(0), ceil_div(x.size(1), std::min(kForwardChunk, kBackwardChunk)),
                              std::max({x.numel(), offsets_index, farthest}), bytes, stream::shared_budget(x));
}

at::Tensor talk_forward_stream(const at::Tensor& x_in, const at::Tensor& offset_left_in,
                               const std::optional<at::Tensor>& offset_right_in, int64_t max_left, int64_t max_right,
                               const std::optional<at::Tensor>& document_edges) {
  if (!talk_stream_fallback(x_in, offset_left_in, max_left, max_right).empty()) {
    return talk_forward(x_in, offset_left_in, offset_right_in, max_left, max_right, document_edges);
  }
  const c10::cuda::CUDAGuard guard(x_in.device());
  const TalkInputs inputs(x_in, offset_left_in, offset_right_in);
  at::Tensor out = at::empty(inputs.x.sizes(), inputs.x.options());
  const TalkShape shape = talk_shape(inputs.x, inputs.offset_left, max_left, max_right);
  int width = talk_width(inputs.x, inputs.offset_left, {&inputs.x, &out});
  const int64_t acc_size = at::elementSize(at::toOpMathType(inputs.x.scalar_type()));
  if (forward_shared_bytes(max_left, max_right, width, acc_size) > stream::shared_budget(inputs.x)) width = 1;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, inputs.x.scalar_type(), "talk_forward_stream", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_document_spans(document_edges, inputs.x, [&](const auto& spans) {
      if (width == full_width<scalar_t>()) {
        launch_forward<scalar_t, acc_t, full_width<scalar_t>()>(inputs, shape, spans, out, stream);
      } else {
        launch_forward<scalar_t, acc_t, 1>(inputs, shape, spans, out, stream);
      }
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> talk_backward_stream(const at::Tensor& grad_out_in,
                                                                    const at::Tensor& x_in,
                                                                    const at::Tensor& offset_left_in,
                                                                    const std::optional<at::Tensor>& offset_right_in,
                                                                    int64_t max_left, int64_t max_right,
                                                                    const std::optional<at::Tensor>& document_edges) {
  if (!talk_stream_fallback(x_in, offset_left_in, max_left, max_right).empty()) {
    return talk_backward(grad_out_in, x_in, offset_left_in, offset_right_in, max_left, max_right, document_edges);
  }
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor grad_out = grad_out_in.contiguous();
  const TalkInputs inputs(x_in, offset_left_in, offset_right_in);
  at::Tensor grad_x, grad_left, grad_right;
  std::tie(grad_x, grad_left, grad_right) = inputs.empty_gradients();
  const TalkShape shape = talk_shape(inputs.x, inputs.offset_left, max_left, max_right);
  int width = talk_width(inputs.x, inputs.offset_left, {&inputs.x, &grad_out, &grad_x});
  const int64_t acc_size = at::elementSize(at::toOpMathType(inputs.x.scalar_type()));
  if (backward_shared_bytes(width, acc_size) > stream::shared_budget(inputs.x)) width = 1;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, inputs.x.scalar_type(), "talk_backward_stream", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_document_spans(document_edges, inputs.x, [&](const auto& spans) {
      if (width == full_width<scalar_t>()) {
        launch_backward<scalar_t, acc_t, full_width<scalar_t>()>(inputs, shape, spans, grad_out, grad_x, grad_left,
                                                                 grad_right, stream);
      } else {
        launch_backward<scalar_t, acc_t, 1>(inputs, shape, spans, grad_out, grad_x, grad_left, grad_right, stream);
      }
    });
  });
  return {grad_x, grad_left, grad_right};
}

}  // namespace talk_hf
