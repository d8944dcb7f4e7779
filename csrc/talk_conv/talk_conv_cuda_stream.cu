// Streaming CUDA kernels of talk_conv's backward (for x and both offsets): ops.h's talk_backward on
// CUDA (cuda_fallback.h; the forward is the tiled kernel of talk_conv_cuda.cu).  The per-element math
// (edges, fractions, normaliser, scatter entries, offset gradient factor, reach) is talk_math.h's,
// shared with the CPU kernels that the CPU test suite runs.  Indices are 32-bit (larger tensors fall
// back to the tiled kernels).  Accumulation is float32 (float64 for float64).  Nothing reads back to
// the host: the reach over all tokens is reduced on the device.
//
// Backward for x (talk_stream_grad_x_kernel): one thread owns one channel of one batch row and a
// chunk of kBackwardChunk rows, with a difference array of those rows in shared memory (its own); it
// walks every token whose window may touch the chunk (bounded by the device-side reach), adds the
// token's four scatter entries times grad_out[t] (entries before the chunk land on its first row,
// entries after it are dropped), then writes the running sum of the difference array.  One channel a
// thread, not a 16-byte vector of them: on an H200 at Table 6's shape the vector-wide thread took
// 1.6x (float32) to 1.7x (bfloat16) as long, its four V-wide shared loads and stores per token
// hidden by too few resident warps (benchmarks/README.md).
//   Bytes per element: read grad_out (s) once plus the reach halo (max_left + max_right + 3) /
//   kBackwardChunk rows (L2 hits), write grad_x (s), offsets 2 s / head_size per token walked.
//
// Backward for the offsets (talk_stream_offsets_kernel): one thread per (b, t, head) takes the dot
// products <grad_out[t], x[left edge]> and <grad_out[t], x[right edge]> over the head's channels
// with vector loads (V = 16 bytes / element size: 4 float32, 8 bfloat16/float16, 2 float64; 1 where
// a head's channels do not split into aligned vectors) and multiplies them by the offset gradient
// factor.
//   Bytes per element: read grad_out (s) and the two edge rows of x (s each; neighbouring tokens'
//   edges share rows, so mostly one DRAM read of x and L2 hits), write 2 s / head_size.
//   Instructions per element: 2 fused multiply-adds, 3/V vector loads.
//
// The reach kernel (talk_stream_reach_kernel) reads the offsets once (2 s / head_size per element)
// and reduces the farthest scatter entry before and after a token with atomicMax into two ints.  It
// runs only where the sequence spans several chunks: a single chunk's block walks every token of its
// row whatever the reach, so there grad_x takes no reach (the bound T, known on the host) and the
// backward is two launches and three allocations (its gradients), nothing zero-filled.
//
// Packed rows: every kernel reads token t's span through `spans` (talk_math.h: RowSpans, the row
// [0, T - 1], or DocumentSpans, t's document from the (B, T, 2) edges, 8 bytes per token read) and
// clamps t's window edges into it; nothing else changes, since the difference array holds for any
// edges.  Each kernel is instantiated once per kind of span, and the RowSpans one is the unpacked
// kernel.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda_fallback.h"
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

constexpr int kBackwardThreads = 32;  // channels per block of grad_x
constexpr int kBackwardChunk = 64;    // time steps per block of grad_x (rows of its difference array)
constexpr int kGradXWidth = 1;        // channels per thread of grad_x (see the file comment)
constexpr int kOffsetThreads = 128;   // (b, t, head) triples per block of the offsets kernel
constexpr int kReachThreads = 256;    // threads per block of the reach kernel
constexpr int kReachBlocks = 1024;    // most blocks of the reach kernel (it strides over the rest)
constexpr int kWarpSize = 32;
static_assert(kOffsetThreads <= kReachBlocks * kReachThreads,
              "talk_stream_fallback's index headroom covers the offsets kernel");
static_assert(kBackwardChunk * kBackwardThreads * kGradXWidth * sizeof(double) <= stream::kDefaultSharedBytes,
              "grad_x's shared memory needs no opt-in, even in float64");
constexpr unsigned kFullWarp = 0xffffffffu;  // every lane of a warp takes part in a shuffle
constexpr int kScatterEntries = 4;  // scatter_entry's four entries per token (talk_math.h)

// Sizes shared by the kernels, as 32-bit ints (the host checks that they fit).
struct TalkShape {
  int length, channels, heads, head_size, max_left, max_right;
};

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
// reach: the reach kernel's two ints, or nullptr for the bound T (every token of the row is walked:
// what a single chunk walks anyway).
// Launched at kWidth = kGradXWidth (1); the width stays a parameter so that this is the source the
// H200 ran at every width, and so that a later measurement can choose another.
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
  const int before = reach != nullptr ? reach[0] : shape.length, after = reach != nullptr ? reach[1] : shape.length;
  const int t_begin = first - after > 0 ? first - after : 0;
  const int t_last = end - 1 + before < shape.length - 1 ? end - 1 + before : shape.length - 1;
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
  return TalkShape{static_cast<int>(x.size(1)),         static_cast<int>(x.size(2)),
                   static_cast<int>(heads),             static_cast<int>(x.size(2) / heads),
                   static_cast<int>(max_left),          static_cast<int>(max_right)};
}

// grad_x's dynamic shared memory: kBackwardChunk rows of its kBackwardThreads channels' accumulators.
int64_t grad_x_shared_bytes(int64_t acc_size) {
  return static_cast<int64_t>(kBackwardChunk) * kBackwardThreads * kGradXWidth * acc_size;
}

template <typename scalar_t, typename acc_t, int kOffsetsWidth, typename Spans>
void launch_backward(const TalkInputs& inputs, const TalkShape& shape, const Spans& spans, const at::Tensor& grad_out,
                     at::Tensor& grad_x, at::Tensor& grad_left, at::Tensor& grad_right, cudaStream_t stream) {
  const scalar_t* offset_left = inputs.offset_left.const_data_ptr<scalar_t>();
  const scalar_t* offset_right = optional_data<scalar_t>(inputs.offset_right);
  const int count = static_cast<int>(inputs.offset_left.numel());  // (b, t, head) triples

  const dim3 grad_x_grid(static_cast<unsigned>(ceil_div(inputs.x.size(2), kBackwardThreads)),
                         static_cast<unsigned>(ceil_div(inputs.x.size(1), kBackwardChunk)),
                         static_cast<unsigned>(inputs.x.size(0)));
  at::Tensor reach;  // undefined where one chunk covers the row (grad_x then walks it whole)
  if (grad_x_grid.y > 1) {
    reach = at::zeros({2}, inputs.x.options().dtype(at::kInt));
    const unsigned reach_blocks =
        static_cast<unsigned>(std::min<int64_t>(ceil_div(count, kReachThreads), kReachBlocks));
    talk_stream_reach_kernel<scalar_t, acc_t, Spans><<<reach_blocks, kReachThreads, 0, stream>>>(
        offset_left, offset_right, shape, spans, count, reach.mutable_data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  talk_stream_grad_x_kernel<scalar_t, acc_t, kGradXWidth, Spans>
      <<<grad_x_grid, kBackwardThreads, grad_x_shared_bytes(sizeof(acc_t)), stream>>>(
          grad_out.const_data_ptr<scalar_t>(), offset_left, offset_right, optional_data<int>(reach),
          grad_x.mutable_data_ptr<scalar_t>(), shape, spans);
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  talk_stream_offsets_kernel<scalar_t, acc_t, kOffsetsWidth, Spans>
      <<<static_cast<unsigned>(ceil_div(count, kOffsetThreads)), kOffsetThreads, 0, stream>>>(
          inputs.x.const_data_ptr<scalar_t>(), grad_out.const_data_ptr<scalar_t>(), offset_left, offset_right,
          grad_left.mutable_data_ptr<scalar_t>(),
          inputs.offset_right.defined() ? grad_right.mutable_data_ptr<scalar_t>() : nullptr, shape, spans, count);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

std::string talk_stream_fallback(const at::Tensor& x, const at::Tensor& offset_left, int64_t max_left,
                                 int64_t max_right) {
  if (x.numel() == 0) return "no elements";
  const int64_t acc_size = at::elementSize(at::toOpMathType(x.scalar_type()));
  const int64_t farthest = 2 * x.size(1) + max_left + max_right + kBackwardChunk + 2;  // tokens walked and reach
  // The reach kernel's grid-stride index runs up to one stride past the (b, t, head) count (the
  // offsets kernel's, up to one block past it): that index must fit too.
  const int64_t offsets_index = offset_left.numel() + static_cast<int64_t>(kReachBlocks) * kReachThreads;
  return stream::limits_fault(x.size(0), ceil_div(x.size(1), kBackwardChunk),
                              std::max({x.numel(), offsets_index, farthest}), grad_x_shared_bytes(acc_size),
                              stream::shared_budget(x));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> talk_backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                             const at::Tensor& offset_left_in,
                                                             const std::optional<at::Tensor>& offset_right_in,
                                                             int64_t max_left, int64_t max_right,
                                                             const std::optional<at::Tensor>& document_edges) {
  if (!talk_stream_fallback(x_in, offset_left_in, max_left, max_right).empty()) {
    return talk_backward_tiled(grad_out_in, x_in, offset_left_in, offset_right_in, max_left, max_right, document_edges);
  }
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor grad_out = grad_out_in.contiguous();
  const TalkInputs inputs(x_in, offset_left_in, offset_right_in);
  at::Tensor grad_x, grad_left, grad_right;
  std::tie(grad_x, grad_left, grad_right) = inputs.empty_gradients();
  const TalkShape shape = talk_shape(inputs.x, inputs.offset_left, max_left, max_right);
  // The offsets kernel's vector width: full where a head's channels split into aligned vectors of x
  // and grad_out (it reads nothing else by channel).
  const int offsets_width = stream::vector_width(shape.head_size, inputs.x.element_size(), {&inputs.x, &grad_out});
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, inputs.x.scalar_type(), "talk_backward_stream", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_document_spans(document_edges, inputs.x, [&](const auto& spans) {
      if (offsets_width == full_width<scalar_t>()) {
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
