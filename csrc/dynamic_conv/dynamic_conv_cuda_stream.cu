// Streaming CUDA kernels of dynamic_conv and light_conv (forward; backward for x and the weights):
// ops.h's conv_forward and conv_backward on CUDA (cuda_fallback.h).  The tap arithmetic (conv_source, in_sequence) is talk_math.h's, shared with the
// CPU kernels.  LightConv runs as DynamicConv with its (H, K) kernel expanded to zero batch and time
// strides; its weight gradient is the per-token one summed over batch and time, as in dynamic_conv_cuda.cu.
//
// Forward and grad_x (conv_stream_kernel, kTranspose false / true): one thread owns V consecutive
// channels of one head (V = 16 bytes / element size: 4 float32, 8 bfloat16/float16, 2 float64; 1
// where a head's channels do not split into aligned vectors) in one batch row and walks a chunk of
// time in order, keeping the last K input rows of its channels in a ring in shared memory (its
// own).  Each step loads one new row (a 128-bit load), then takes the K taps from the ring and the
// weights from shared memory, where the block stages the weights of its heads for kWeightRows steps
// at a time (coalesced, read once, broadcast to the threads of a head).  The forward reads x at
// t + k - padding_l with the weight of token t; grad_x reads grad_out at j + padding_l - k with the
// weight of that token.  Indices are 32-bit (larger tensors fall back to the tiled kernels), loads
// are of x's dtype, accumulation is float32 (float64 for float64).  No atomics, no host sync.
//   Bytes per element: read the input (element size s) once plus (K - 1) / kConvChunk halo rows
//   (L2 hits), write the output (s), read the weights K s / head_size (dynamic; ~0 for light).
//   Table 6 float32, K = 31, head size 64: ~8.2 B + 1.9 B of weights.
//   Instructions per element: per tap, 1 fused multiply-add, and per V elements one shared vector
//   load of the ring (float32: one 128-bit load; bfloat16's 8 float32 accumulators: two), one
//   broadcast shared load of the weight and ~3 of pointer steps and loop (accumulate_taps: no wrap
//   test); per row, 1/V global load, ring store and global store: ~K (1 + 5/V) + 3: ~73 at K = 31
//   in float32 (V = 4), ~57 in bfloat16 (V = 8), ~10 at K = 3.  Plus the staging of the weights:
//   ~3 per staged value, block_heads * K * (1 + halo / kWeightRows) / (kConvThreads * V) per element.
//
// Weight gradient (conv_stream_grad_weight_kernel): grad_weight[b, t, h, k] = <grad_out[t], x[t + k -
// padding_l]> over the head's channels.  A block takes kGradRows steps and kGradTaps taps of one head
// and walks the head's channels kGradChannels at a time: it stages grad_out of its steps and x of
// the kGradRows + kGradTaps - 1 rows they reach in shared memory (coalesced), then each thread
// accumulates kGradTapsPerThread taps of one step in registers.
//   Bytes per element: read x and grad_out (s each, x halo (kGradTaps - 1) / kGradRows of L2 hits),
//   write K * 4 / head_size (the per-token gradient in float32).
//   Instructions per element: K fused multiply-adds, K shared loads of x, K / kGradTapsPerThread of
//   grad_out, plus the staging (~4 per staged value, 2 + (kGradTaps - 1) / kGradRows staged values
//   per element and tap block): ~2.1 K + 8, ~73 at K = 31.  The shared loads bound it (one warp
//   load per clock and SM against four fused multiply-adds), below copy bandwidth in float32 at
//   K = 31 (measured: benchmarks/README.md, "On an H200").
//
// Packed rows (`spans`: talk_math.h's RowSpans, the row, or DocumentSpans, a token's document): a
// tap of token t that reads outside t's document gets weight zero as the block stages the weights
// (forward and grad_x alike: tap k of token t links t and t + k - padding_l both ways), and its
// weight gradient is written as zero; the rings and inner loops do not change, so for finite inputs
// a document computes exactly what it computes alone.  Each kernel is instantiated once per kind of
// span, and the RowSpans one is the unpacked kernel.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <type_traits>

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

constexpr int kConvThreads = 32;  // channel vectors per block of the forward and grad_x
constexpr int kConvChunk = 128;   // time steps per block of the forward and grad_x
constexpr int kWeightRows = 32;   // time steps of weights staged in shared memory at a time
constexpr int kGradRows = 32;     // time steps per block of the weight gradient
constexpr int kGradTapsPerThread = 8;  // taps one thread of the weight gradient accumulates
constexpr int kGradTapGroups = 4;      // threads per time step of the weight gradient
constexpr int kGradTaps = kGradTapsPerThread * kGradTapGroups;  // taps per block of the weight gradient
constexpr int kGradThreads = kGradRows * kGradTapGroups;
constexpr int kGradChannels = 32;  // channels staged at a time by the weight gradient
constexpr int kGradSkew = 1;       // padding of each staged row: threads of a warp read distinct banks
constexpr int kGradXRows = kGradRows + kGradTaps - 1;  // x rows the block's steps and taps reach

// Sizes shared by the kernels, as 32-bit ints (the host checks that they fit).
struct ConvShape {
  int length, channels, heads, head_size, taps, padding_l;
  int block_heads;  // most heads the channels of one forward block touch
};

// weight[b, t, h, k] at b * batch + t * time + h * head + k * tap (zero strides for LightConv).
struct WeightStrides {
  int batch, time, head, tap;
};

// sum += w * (ring slot) over `count` taps: the ring slot moves by ring_step accumulators and the
// weight by weight_step per tap (no wrap test: callers split the ring's order into two runs).
// Returns the weight of the tap after the last.
template <typename acc_t, int kWidth>
__device__ __forceinline__ const acc_t* accumulate_taps(acc_t (&sum)[kWidth], const acc_t* ring_slot, int ring_step,
                                                        int count, const acc_t* tap_weight, int weight_step) {
  for (int n = 0; n < count; ++n, ring_slot += ring_step, tap_weight += weight_step) {
    acc_t source[kWidth];
    load_shared(ring_slot, source);
    const acc_t weight = *tap_weight;
#pragma unroll
    for (int i = 0; i < kWidth; ++i) sum[i] += weight * source[i];
  }
  return tap_weight;
}

// Grid (channel vectors / kConvThreads, chunks of kConvChunk steps, B); dynamic shared memory: the
// ring, taps * kConvThreads * kWidth accumulators, then the staged weights, (kWeightRows + halo) *
// block_heads * taps accumulators (halo = taps - 1 for grad_x: the tokens its taps read).
// kTranspose false: output[t] = sum_k w[t, k] input[t + k - padding_l] (forward, input x);
// kTranspose true:  output[j] = sum_k w[j + padding_l - k, k] input[j + padding_l - k] (grad_x, input grad_out).
// w[t, k] is zero where tap k of token t reads outside t's span (packed rows).
template <typename scalar_t, typename acc_t, int kWidth, bool kTranspose, typename Spans>
__global__ void __launch_bounds__(kConvThreads)
    conv_stream_kernel(const scalar_t* __restrict__ input, const scalar_t* __restrict__ weight, WeightStrides strides,
                       scalar_t* __restrict__ output, ConvShape shape, Spans spans) {
  extern __shared__ __align__(stream::kSharedAlignment) unsigned char shared_bytes[];
  const int taps = shape.taps;
  acc_t* ring = reinterpret_cast<acc_t*>(shared_bytes) + threadIdx.x * kWidth;  // slot s at s * ring_stride
  constexpr int ring_stride = kConvThreads * kWidth;
  acc_t* staged = reinterpret_cast<acc_t*>(shared_bytes) + taps * ring_stride;  // [step][block head][tap]
  const int halo = kTranspose ? taps - 1 : 0;
  const int block_channel = blockIdx.x * kConvThreads * kWidth;
  const int first_head = block_channel / shape.head_size;
  const int channel = block_channel + threadIdx.x * kWidth;
  const bool active = channel < shape.channels;  // inactive threads still stage weights
  const int head = (active ? channel : block_channel) / shape.head_size;
  const int b = blockIdx.z, first = blockIdx.y * kConvChunk;
  const int end = first + kConvChunk < shape.length ? first + kConvChunk : shape.length;
  const scalar_t* column = input + b * shape.length * shape.channels + (active ? channel : 0);
  // The input row that enters the ring at step t: its newest tap.
  const int lead = kTranspose ? shape.padding_l : taps - 1 - shape.padding_l;

  // Rows first + lead - (taps - 1) .. first + lead - 1 into slots 0 .. taps - 2; zeros outside [0, T).
  int newest = taps - 2;  // slot of the newest row (-1 before any, when taps == 1)
  for (int slot = 0; slot < taps - 1 && active; ++slot) {
    const int row = first + lead - (taps - 1) + slot;
    acc_t values[kWidth];
    if (in_sequence(row, shape.length)) {
      load_pack<acc_t, scalar_t, kWidth>(column + row * shape.channels, values);
    } else {
      fill(values, acc_t(0));
    }
    store_shared(ring + slot * ring_stride, values);
  }

  const int stage_width = shape.block_heads * taps;  // accumulators per staged step
  for (int tile = first; tile < end; tile += kWeightRows) {
    const int rows = end - tile < kWeightRows ? end - tile : kWeightRows;
    const int staged_first = kTranspose ? tile + shape.padding_l - halo : tile;  // token of staged step 0
    __syncthreads();  // every thread has read the previous tile's weights
    // Thread e of a step stages (block head e / taps, tap e % taps) of every step: two divisions a
    // tile, and a step's taps of consecutive heads are consecutive in memory (coalesced loads).
    for (int e = threadIdx.x; e < stage_width; e += kConvThreads) {
      const int k = e % taps, h = first_head + e / taps;
      const scalar_t* source = weight + b * strides.batch + (h < shape.heads ? h : 0) * strides.head + k * strides.tap;
      for (int step = 0; step < rows + halo; ++step) {
        const int token = staged_first + step;
        const bool reads = in_sequence(token, shape.length) && h < shape.heads &&
                           tap_reads_document(spans, b, token, k, shape.padding_l);
        staged[step * stage_width + e] = reads ? static_cast<acc_t>(source[token * strides.time]) : acc_t(0);
      }
    }
    __syncthreads();
    if (!active) continue;
    const acc_t* head_weights = staged + (head - first_head) * taps;  // step s, tap k at s * stage_width + k
    for (int t = tile; t < tile + rows; ++t) {
      newest = newest + 1 == taps ? 0 : newest + 1;
      const int row = t + lead;
      acc_t values[kWidth];
      if (in_sequence(row, shape.length)) {
        load_pack<acc_t, scalar_t, kWidth>(column + row * shape.channels, values);
      } else {
        fill(values, acc_t(0));
      }
      store_shared(ring + newest * ring_stride, values);

      acc_t sum[kWidth];
      fill(sum, acc_t(0));
      // Tap 0's weight: step t's (forward) or token t + padding_l's, staged at step t - tile + halo
      // (grad_x, whose tap k takes token t + padding_l - k's weight: one step back, one tap on).
      const acc_t* tap_weight = head_weights + (t - tile + halo) * stage_width;
      if (kTranspose) {  // tap k reads the newest row - k: slots newest .. 0, then taps - 1 .. newest + 1
        const int weight_step = 1 - stage_width;
        tap_weight = accumulate_taps(sum, ring + newest * ring_stride, -ring_stride, newest + 1, tap_weight, weight_step);
        accumulate_taps(sum, ring + (taps - 1) * ring_stride, -ring_stride, taps - 1 - newest, tap_weight, weight_step);
      } else {  // tap k reads the oldest row + k: slots newest + 1 .. taps - 1, then 0 .. newest
        tap_weight = accumulate_taps(sum, ring + (newest + 1) * ring_stride, ring_stride, taps - 1 - newest, tap_weight, 1);
        accumulate_taps(sum, ring, ring_stride, newest + 1, tap_weight, 1);
      }
      store_pack<acc_t, scalar_t, kWidth>(output + (b * shape.length + t) * shape.channels + channel, sum, acc_t(1));
    }
  }
}

// Grid (T / kGradRows, heads * taps / kGradTaps, B), kGradThreads threads: grad_weight (B, T, H, K)
// in acc_t, [b, t, h, k] = sum over the head's channels c of grad_out[b, t, c] * x[b, t + k - padding_l, c],
// zero where that row is outside t's span (packed rows).
template <typename scalar_t, typename acc_t, typename Spans>
__global__ void __launch_bounds__(kGradThreads)
    conv_stream_grad_weight_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ grad_out,
                                   acc_t* __restrict__ grad_weight, ConvShape shape, Spans spans) {
  __shared__ acc_t grad_rows[kGradRows][kGradChannels + kGradSkew];
  __shared__ acc_t x_rows[kGradXRows][kGradChannels + kGradSkew];
  const int tap_blocks = static_cast<int>(ceil_div(shape.taps, kGradTaps));
  const int head = blockIdx.y / tap_blocks, first_tap = (blockIdx.y % tap_blocks) * kGradTaps;
  const int b = blockIdx.z, first = blockIdx.x * kGradRows;
  const int step = threadIdx.x % kGradRows, group = threadIdx.x / kGradRows;  // a warp: 32 steps, one group
  const int x_first = static_cast<int>(conv_source(first, first_tap, shape.padding_l));  // token of staged x row 0
  const int head_channel = head * shape.head_size;

  acc_t sums[kGradTapsPerThread];
#pragma unroll
  for (int j = 0; j < kGradTapsPerThread; ++j) sums[j] = acc_t(0);
  for (int c0 = 0; c0 < shape.head_size; c0 += kGradChannels) {
    const int width = shape.head_size - c0 < kGradChannels ? shape.head_size - c0 : kGradChannels;
    __syncthreads();  // every thread has read the previous channels
    for (int e = threadIdx.x; e < kGradRows * kGradChannels; e += kGradThreads) {
      const int r = e / kGradChannels, c = e % kGradChannels, token = first + r;
      grad_rows[r][c] = token < shape.length && c < width
                            ? static_cast<acc_t>(grad_out[(b * shape.length + token) * shape.channels + head_channel + c0 + c])
                            : acc_t(0);
    }
    for (int e = threadIdx.x; e < kGradXRows * kGradChannels; e += kGradThreads) {
      const int r = e / kGradChannels, c = e % kGradChannels, token = x_first + r;
      x_rows[r][c] = in_sequence(token, shape.length) && c < width
                         ? static_cast<acc_t>(x[(b * shape.length + token) * shape.channels + head_channel + c0 + c])
                         : acc_t(0);
    }
    __syncthreads();
    for (int c = 0; c < width; ++c) {
      const acc_t grad = grad_rows[step][c];
#pragma unroll
      for (int j = 0; j < kGradTapsPerThread; ++j) sums[j] += grad * x_rows[step + group * kGradTapsPerThread + j][c];
    }
  }
  const int t = first + step;
  if (t >= shape.length) return;
  acc_t* out = grad_weight + ((b * shape.length + t) * shape.heads + head) * shape.taps;
#pragma unroll
  for (int j = 0; j < kGradTapsPerThread; ++j) {
    const int k = first_tap + group * kGradTapsPerThread + j;
    if (k < shape.taps) out[k] = tap_reads_document(spans, b, t, k, shape.padding_l) ? sums[j] : acc_t(0);
  }
}

ConvShape conv_shape(const at::Tensor& x, const at::Tensor& weight, int64_t padding_l, int width) {
  const int64_t heads = weight.size(2), head_size = x.size(2) / heads;
  const int64_t block_heads = std::min<int64_t>(heads, (kConvThreads * width - 1) / head_size + 2);
  return ConvShape{static_cast<int>(x.size(1)),    static_cast<int>(x.size(2)),   static_cast<int>(heads),
                   static_cast<int>(head_size),    static_cast<int>(weight.size(3)), static_cast<int>(padding_l),
                   static_cast<int>(block_heads)};
}

// Dynamic shared memory of conv_stream_kernel: the ring and the staged weights (grad_x's halo).
int64_t conv_shared_bytes(const ConvShape& shape, int width, int64_t acc_size) {
  const int64_t ring = static_cast<int64_t>(shape.taps) * kConvThreads * width;
  const int64_t staged = static_cast<int64_t>(kWeightRows + shape.taps - 1) * shape.block_heads * shape.taps;
  return (ring + staged) * acc_size;
}

// The largest element offset a weight view reaches through its strides.
int64_t weight_extent(const at::Tensor& weight) {
  int64_t extent = 0;
  for (int64_t d = 0; d < weight.dim(); ++d) extent += (weight.size(d) - 1) * weight.stride(d);
  return extent;
}

WeightStrides weight_strides(const at::Tensor& weight) {
  return WeightStrides{static_cast<int>(weight.stride(0)), static_cast<int>(weight.stride(1)),
                       static_cast<int>(weight.stride(2)), static_cast<int>(weight.stride(3))};
}

template <typename scalar_t, typename acc_t, int kWidth, bool kTranspose, typename Spans>
void launch_conv(const at::Tensor& input, const at::Tensor& weight, at::Tensor& output, const ConvShape& shape,
                 const Spans& spans, cudaStream_t stream) {
  const int64_t bytes = conv_shared_bytes(shape, kWidth, sizeof(acc_t));
  const auto kernel = conv_stream_kernel<scalar_t, acc_t, kWidth, kTranspose, Spans>;
  stream::allow_shared_bytes(kernel, bytes);
  const dim3 grid(static_cast<unsigned>(ceil_div(shape.channels / kWidth, kConvThreads)),
                  static_cast<unsigned>(ceil_div(shape.length, kConvChunk)), static_cast<unsigned>(input.size(0)));
  kernel<<<grid, kConvThreads, bytes, stream>>>(input.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(),
                                                weight_strides(weight), output.mutable_data_ptr<scalar_t>(), shape,
                                                spans);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The vector width of conv_stream_kernel for these tensors: full where aligned and the shared
// memory of full width fits, else 1.
int conv_width(const at::Tensor& x, const at::Tensor& weight, int64_t padding_l,
               std::initializer_list<const at::Tensor*> tensors) {
  const int width = stream::vector_width(x.size(2) / weight.size(2), x.element_size(), tensors);
  const int64_t acc_size = at::elementSize(at::toOpMathType(x.scalar_type()));
  const int64_t bytes = conv_shared_bytes(conv_shape(x, weight, padding_l, width), width, acc_size);
  return bytes > stream::shared_budget(x) ? 1 : width;
}

// conv_stream_kernel over input into output, at the width chosen for these tensors, with the
// spans of a packed row's document edges (none: the rows).
template <bool kTranspose>
void run_conv(const at::Tensor& input, const at::Tensor& weight, int64_t padding_l, at::Tensor& output,
              const std::optional<at::Tensor>& document_edges) {
  const int width = conv_width(input, weight, padding_l, {&input, &output});
  const ConvShape shape = conv_shape(input, weight, padding_l, width);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "conv_stream", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_document_spans(document_edges, input, [&](const auto& spans) {
      if (width == full_width<scalar_t>()) {
        launch_conv<scalar_t, acc_t, full_width<scalar_t>(), kTranspose>(input, weight, output, shape, spans, stream);
      } else {
        launch_conv<scalar_t, acc_t, 1, kTranspose>(input, weight, output, shape, spans, stream);
      }
    });
  });
}

}  // namespace

std::string conv_stream_fallback(const at::Tensor& x, const at::Tensor& weight, int64_t padding_l) {
  if (x.numel() == 0) return "no elements";
  const int64_t acc_size = at::elementSize(at::toOpMathType(x.scalar_type()));
  const int64_t bytes = conv_shared_bytes(conv_shape(x, weight, padding_l, 1), 1, acc_size);  // width 1: the least
  const int64_t taps = weight.size(3), tap_blocks = ceil_div(taps, kGradTaps) * weight.size(2);
  if (tap_blocks > stream::kMaxGridYZ) return "taps times heads need " + std::to_string(tap_blocks) + " blocks";
  const int64_t per_token_gradient = x.size(0) * x.size(1) * weight.size(2) * taps;
  const int64_t farthest = x.size(1) + taps + std::max<int64_t>(kConvChunk, kGradXRows);  // rows past T
  return stream::limits_fault(x.size(0), ceil_div(x.size(1), kConvChunk),  // the weight gradient's steps are grid x
                              std::max({x.numel(), per_token_gradient, weight_extent(weight) + 1, farthest}), bytes,
                              stream::shared_budget(x));
}

at::Tensor conv_forward(const at::Tensor& x_in, const at::Tensor& weight, int64_t padding_l,
                        const std::optional<at::Tensor>& document_edges) {
  if (!conv_stream_fallback(x_in, weight, padding_l).empty()) {
    return conv_forward_tiled(x_in, weight, padding_l, document_edges);
  }
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  run_conv<false>(x, weight, padding_l, out, document_edges);
  return out;
}

std::tuple<at::Tensor, at::Tensor> conv_backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                 const at::Tensor& weight, int64_t padding_l, bool sum_weight_gradient,
                                                 const std::optional<at::Tensor>& document_edges) {
  if (!conv_stream_fallback(x_in, weight, padding_l).empty()) {
    return conv_backward_tiled(grad_out_in, x_in, weight, padding_l, sum_weight_gradient, document_edges);
  }
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor x = x_in.contiguous();
  at::Tensor grad_x = at::empty(x.sizes(), x.options());
  run_conv<true>(grad_out, weight, padding_l, grad_x, document_edges);

  const int64_t heads = weight.size(2), taps = weight.size(3);
  at::Tensor grad_weight =
      at::empty({x.size(0), x.size(1), heads, taps}, x.options().dtype(at::toOpMathType(x.scalar_type())));
  const ConvShape shape = conv_shape(x, weight, padding_l, 1);
  const dim3 grid(static_cast<unsigned>(ceil_div(x.size(1), kGradRows)),
                  static_cast<unsigned>(heads * ceil_div(taps, kGradTaps)), static_cast<unsigned>(x.size(0)));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_grad_weight_stream", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_document_spans(document_edges, x, [&](const auto& spans) {
      conv_stream_grad_weight_kernel<scalar_t, acc_t, std::decay_t<decltype(spans)>><<<grid, kGradThreads, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), grad_out.const_data_ptr<scalar_t>(), grad_weight.mutable_data_ptr<acc_t>(), shape,
          spans);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  // The weight's gradient per token; LightConv's is its sum over batch and time.
  return {grad_x, sum_weight_gradient ? grad_weight.sum(at::IntArrayRef{0, 1}) : grad_weight};
}

}  // namespace talk_hf
