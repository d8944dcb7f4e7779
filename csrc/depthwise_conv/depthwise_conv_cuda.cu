// CUDA kernels of depthwise_conv (one static kernel per channel), built just in time by
// talk_hf.ops._extension:
//   out[b, t, c] = sum_k w[c, k] * u[b, t + k * dilation - left, c],   zero outside [0, T),
// u = x, or its gated form relu(x) * scale[b, t] (talk_math.h's InputGate; each part optional).
//
// Layout: a block of kChannels threads covers kChannels consecutive channels of one batch row
// (threadIdx.x = channel, so a warp reads 32 consecutive elements of a (C,) row: coalesced), and
// each thread walks a tile of time steps in order.  Its channel's K weights sit in shared memory
// (K <= kMaxTaps), in the accumulation type; accumulation is float32 (float64 for float64).
//
// Backward, without atomics or host synchronisation: the gradient for x is the forward kernel
// with the taps reversed; the weight gradient is one partial sum per block (its tile of steps), in
// a (blocks, C, K) tensor that one reduction kernel (at::sum over the blocks) adds up on the same
// stream into the (C, K) gradient, already in the weight's layout (no transposing copy).  The input
// gate is applied to each value as it is read (forward, weight gradient) and its derivative to the
// gradient for x as it is stored.
//
// Packed rows (`spans`: talk_math.h's RowSpans, the row [0, T - 1], or DocumentSpans, a step's
// document): a tap that reads outside its step's span reads zero.  The correlation's tap range per
// step takes the span's bounds where it took 0 and T - 1 (for the gradient for x too: step t's span
// holds j exactly where j's holds t); the weight gradient tests each step's span, in the
// DocumentSpans instantiation only.  The RowSpans instantiation is the unpacked kernel.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "ops.h"
#include "talk_math.h"
#include "tensors.h"

namespace talk_hf {
namespace {

constexpr int kChannels = 64;      // threads (channels) per block
constexpr int kMaxTaps = 63;       // the op's largest kernel (talk_hf.ops.depthwise_conv.MAX_KERNEL_SIZE)
constexpr int kTile = 64;          // time steps a thread of the correlation kernel walks
constexpr int kWeightTile = 256;   // time steps a thread of the weight-gradient kernel sums over

struct Geometry {
  int64_t length, channels;
  int taps;
  int64_t dilation, left;
};

// The weights of the block's channels into shared memory as (K, kChannels) acc_t, taps reversed
// with `reversed`; zero for channels past C.
template <typename scalar_t, typename acc_t>
__device__ void load_weights(acc_t (&shared)[kMaxTaps][kChannels], const scalar_t* __restrict__ weight,
                             const Geometry& g, int64_t channel, bool reversed) {
  for (int k = 0; k < g.taps; ++k) {
    const int tap = reversed ? g.taps - 1 - k : k;
    shared[k][threadIdx.x] = channel < g.channels ? static_cast<acc_t>(weight[channel * g.taps + tap]) : acc_t(0);
  }
  __syncthreads();
}

// out[b, t, c] = sum_k w_k * in[b, t + k * dilation - left, c] over the taps reading inside the span
// of t: the forward (kForward: `in` read through the gate) and, with reversed taps, the gradient for x
// (stored through the gate's derivative at x's own row).  Rows are numbered b * T + t.
template <typename Gate, bool kForward, typename scalar_t, typename acc_t, typename Spans>
__global__ void correlate_kernel(const scalar_t* __restrict__ in, const scalar_t* __restrict__ weight,
                                 scalar_t* __restrict__ out, const scalar_t* __restrict__ x,
                                 const acc_t* __restrict__ scale, Geometry g, Spans spans, bool reversed) {
  __shared__ acc_t taps[kMaxTaps][kChannels];
  const int64_t channel = static_cast<int64_t>(blockIdx.y) * kChannels + threadIdx.x;
  load_weights(taps, weight, g, channel, reversed);
  if (channel >= g.channels) return;
  const int64_t row_base = static_cast<int64_t>(blockIdx.z) * g.length;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t end = first + kTile < g.length ? first + kTile : g.length;
  for (int64_t t = first; t < end; ++t) {
    // Taps [tap_first, tap_end) read rows inside the span of t ([0, T - 1] unpacked).
    const Span span = spans(blockIdx.z, t);
    const int64_t before = span.first + g.left - t, inside = span.last + 1 + g.left - t;
    const int tap_first = before <= 0 ? 0 : static_cast<int>(ceil_div(before, g.dilation));
    const int64_t last = ceil_div(inside, g.dilation);
    const int tap_end = last < g.taps ? static_cast<int>(last) : g.taps;
    acc_t sum = 0;
    for (int k = tap_first; k < tap_end; ++k) {
      const int64_t row = row_base + t + static_cast<int64_t>(k) * g.dilation - g.left;
      acc_t value = static_cast<acc_t>(in[row * g.channels + channel]);
      if constexpr (kForward) value = Gate::apply(value, scale, row);
      sum += taps[k][threadIdx.x] * value;
    }
    const int64_t index = (row_base + t) * g.channels + channel;
    if constexpr (!kForward && Gate::gates) sum = Gate::backward(sum, static_cast<acc_t>(x[index]), scale, row_base + t);
    out[index] = static_cast<scalar_t>(sum);
  }
}

// partial[block, c, k] = sum over the block's steps t of grad[b, t, c] * u[b, t + k * dilation - left, c]
// (rows inside the span of t only), u the gated x.
template <typename Gate, typename scalar_t, typename acc_t, typename Spans>
__global__ void weight_gradient_kernel(const scalar_t* __restrict__ grad, const scalar_t* __restrict__ x,
                                       const acc_t* __restrict__ scale, acc_t* __restrict__ partial, Geometry g,
                                       Spans spans) {
  const int64_t channel = static_cast<int64_t>(blockIdx.y) * kChannels + threadIdx.x;
  if (channel >= g.channels) return;
  const int64_t row_base = static_cast<int64_t>(blockIdx.z) * g.length;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWeightTile;
  const int64_t end = first + kWeightTile < g.length ? first + kWeightTile : g.length;
  acc_t* target = partial + (static_cast<int64_t>(blockIdx.z) * gridDim.x + blockIdx.x) * g.taps * g.channels;
  for (int k = 0; k < g.taps; ++k) {
    const int64_t shift = static_cast<int64_t>(k) * g.dilation - g.left;  // tap k of step t reads t + shift
    const int64_t t_first = first > -shift ? first : -shift;
    const int64_t t_end = end < g.length - shift ? end : g.length - shift;
    acc_t sum = 0;
    for (int64_t t = t_first; t < t_end; ++t) {
      if (Spans::packed) {  // a constant: the unpacked kernel compiles no test
        const Span span = spans(blockIdx.z, t);
        if (t + shift < span.first || t + shift > span.last) continue;
      }
      const int64_t row = row_base + t + shift;
      sum += static_cast<acc_t>(grad[(row_base + t) * g.channels + channel]) *
             Gate::apply(static_cast<acc_t>(x[row * g.channels + channel]), scale, row);
    }
    target[channel * g.taps + k] = sum;
  }
}

dim3 grid_of(int64_t batch, const Geometry& g, int64_t tile) {
  TORCH_CHECK(batch <= 65535, "the CUDA depthwise_conv kernels take at most 65535 batch rows, got ", batch);
  return dim3(static_cast<unsigned>(ceil_div(g.length, tile)), static_cast<unsigned>(ceil_div(g.channels, kChannels)),
              static_cast<unsigned>(batch));
}

Geometry geometry_of(const at::Tensor& x, const at::Tensor& weight, int64_t dilation, int64_t left) {
  TORCH_CHECK(weight.size(1) <= kMaxTaps, "depthwise_conv takes at most ", kMaxTaps, " taps, got ", weight.size(1));
  return {x.size(1), x.size(2), static_cast<int>(weight.size(1)), dilation, left};
}

// Launches the correlation kernel: out = in correlated with the weight (reversed taps with
// `reversed`), taps stopped at a packed row's document edges; the forward (kForward) gates `in`,
// the gradient for x gates its output by x.
template <bool kForward>
void correlate(const at::Tensor& in, const at::Tensor& weight, const at::Tensor& out, const at::Tensor& x,
               const at::Tensor& scale, bool relu, const std::optional<at::Tensor>& document_edges, const Geometry& g,
               bool reversed) {
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "depthwise_correlate_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t* scale_data = optional_data<acc_t>(scale);
    with_input_gate(relu, scale_data, [&](auto gate) {
      with_document_spans(document_edges, x, [&](const auto& spans) {
        correlate_kernel<decltype(gate), kForward, scalar_t, acc_t>
            <<<grid_of(in.size(0), g, kTile), kChannels, 0, stream>>>(
                in.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(),
                x.const_data_ptr<scalar_t>(), scale_data, g, spans, reversed);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  });
}

}  // namespace

at::Tensor depthwise_forward(const at::Tensor& x_in, const at::Tensor& weight_in, int64_t dilation, int64_t left,
                             const std::optional<at::Tensor>& input_scale, bool relu,
                             const std::optional<at::Tensor>& document_edges) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const at::Tensor scale = gate_scale(input_scale, x);
  correlate<true>(x, weight, out, x, scale, relu, document_edges, geometry_of(x, weight, dilation, left), false);
  return out;
}

std::tuple<at::Tensor, at::Tensor> depthwise_backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                      const at::Tensor& weight_in, int64_t dilation, int64_t left,
                                                      const std::optional<at::Tensor>& input_scale, bool relu,
                                                      const std::optional<at::Tensor>& document_edges) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor grad_out = grad_out_in.contiguous(), x = x_in.contiguous(), weight = weight_in.contiguous();
  const auto accumulation = x.options().dtype(at::toOpMathType(x.scalar_type()));
  at::Tensor grad_x = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return {grad_x, at::zeros(weight.sizes(), accumulation)};
  const Geometry g = geometry_of(x, weight, dilation, left);
  const at::Tensor scale = gate_scale(input_scale, x);
  // grad_u[j] = sum_k w[k] grad[j - k * dilation + left]: the forward of grad with the taps
  // reversed, reading (K - 1) * dilation - left steps back; then through the gate's derivative.
  Geometry reversed = g;
  reversed.left = static_cast<int64_t>(g.taps - 1) * g.dilation - g.left;
  correlate<false>(grad_out, weight, grad_x, x, scale, relu, document_edges, reversed, true);
  const dim3 grid = grid_of(x.size(0), g, kWeightTile);
  at::Tensor partials = at::empty({static_cast<int64_t>(grid.z) * grid.x, g.channels, g.taps}, accumulation);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "depthwise_weight_gradient_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t* scale_data = optional_data<acc_t>(scale);
    with_input_gate(relu, scale_data, [&](auto gate) {
      with_document_spans(document_edges, x, [&](const auto& spans) {
        weight_gradient_kernel<decltype(gate), scalar_t, acc_t><<<grid, kChannels, 0, stream>>>(
            grad_out.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(), scale_data,
            partials.mutable_data_ptr<acc_t>(), g, spans);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  });
  return {grad_x, partials.sum(0)};
}

}  // namespace talk_hf
