// Tiled CUDA kernels of dynamic_conv/light_conv, built just in time by talk_hf.ops._extension: the
// streaming kernels' fallback for the shapes they do not take (dynamic_conv_cuda_stream.cu,
// cuda_fallback.h).  The per-element math comes from talk_math.h, shared with the C++ CPU kernels
// that the CPU test suite runs; the block layout from cuda_tiles.h.
//
// Forward and grad_x: one thread per channel and time step sums the taps; the weight gradient is
// one warp per (b, t, h) dot product.
//
// Packed rows: a tap of token t reads zero outside t's span (`spans`, talk_math.h: RowSpans, the row
// [0, T - 1], or DocumentSpans, t's document) where it read zero outside [0, T); for grad_x too,
// since the token t - k + padding_l lies in the span of t exactly where t lies in its.  Each kernel
// is instantiated once per kind of span, the RowSpans one the unpacked kernel.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda_fallback.h"
#include "cuda_tiles.h"
#include "ops.h"
#include "tensors.h"

namespace talk_hf {
namespace {

using namespace tiled;

// DynamicConv forward (transpose = false): out[t] = sum_k w[t, k] * x[t + k - padding_l];
// grad_x (transpose = true): grad_x[j] = sum_k w[j - k + padding_l, k] * grad_out[j - k + padding_l];
// the terms whose token t + k - padding_l (j - k + padding_l) lies outside the span of t (of j) are zero.
template <typename scalar_t, typename acc_t, bool transpose, typename Spans>
__global__ void __launch_bounds__(kChannels* kRows)
    conv_kernel(StridedWeight<scalar_t> weight, Spans spans, Layout layout, int64_t taps, int64_t padding_l,
                const scalar_t* __restrict__ input, scalar_t* __restrict__ output) {
  const TileCoordinates tile(layout, kTile);
  if (!tile.active) return;
  for (int64_t t = tile.first + threadIdx.y; t < tile.end; t += kRows) {
    const Span span = spans(tile.b, t);
    acc_t sum = 0;
    for (int64_t k = 0; k < taps; ++k) {
      const int64_t other = transpose ? t - k + padding_l : conv_source(t, k, padding_l);
      if (other < span.first || other > span.last) continue;
      const acc_t tap = static_cast<acc_t>(weight(tile.b, transpose ? other : t, tile.head, k));
      sum += tap * static_cast<acc_t>(input[tile.offset(other, layout)]);
    }
    output[tile.offset(t, layout)] = static_cast<scalar_t>(sum);
  }
}

// One warp per (b, t, h): grad_weight[b, t, h, k] = <grad_out[t], x[t + k - padding_l]> over the head,
// zero where that row is outside the span of t.
template <typename scalar_t, typename acc_t, typename Spans>
__global__ void conv_grad_weight_kernel(Spans spans, Layout layout, int64_t heads, int64_t taps, int64_t padding_l,
                                        int64_t count, const scalar_t* __restrict__ x,
                                        const scalar_t* __restrict__ grad_out, acc_t* __restrict__ grad_weight) {
  const int64_t index = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (index >= count) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t h = index % heads, t = (index / heads) % layout.length, b = index / (heads * layout.length);
  const scalar_t* grad_row = grad_out + (b * layout.length + t) * layout.channels + h * layout.head_size;
  const Span span = spans(b, t);
  for (int64_t k = 0; k < taps; ++k) {
    const int64_t source = conv_source(t, k, padding_l);
    acc_t dot = 0;
    if (source >= span.first && source <= span.last) {
      const scalar_t* x_row = x + (b * layout.length + source) * layout.channels + h * layout.head_size;
      for (int64_t c = lane; c < layout.head_size; c += kWarpSize) dot += static_cast<acc_t>(grad_row[c]) * static_cast<acc_t>(x_row[c]);
    }
    dot = warp_sum(dot);
    if (lane == 0) grad_weight[index * taps + k] = dot;
  }
}

}  // namespace

at::Tensor conv_forward_tiled(const at::Tensor& x_in, const at::Tensor& weight, int64_t padding_l,
                              const std::optional<at::Tensor>& document_edges) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const Layout layout = layout_of(x, weight.size(2));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_forward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_document_spans(document_edges, x, [&](const auto& spans) {
      conv_kernel<scalar_t, acc_t, false><<<tile_grid(x.size(0), layout, kTile), dim3(kChannels, kRows), 0, stream>>>(
          strided_weight<scalar_t>(weight), spans, layout, weight.size(3), padding_l, x.const_data_ptr<scalar_t>(),
          out.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> conv_backward_tiled(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                       const at::Tensor& weight, int64_t padding_l,
                                                       bool sum_weight_gradient,
                                                       const std::optional<at::Tensor>& document_edges) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor x = x_in.contiguous();
  const int64_t heads = weight.size(2), taps = weight.size(3);
  at::Tensor grad_x = at::empty(x.sizes(), x.options());
  at::Tensor grad_weight =
      at::empty({x.size(0), x.size(1), heads, taps}, x.options().dtype(at::toOpMathType(x.scalar_type())));
  // The weight's gradient per token; LightConv's is its sum over batch and time.
  const auto weight_gradient = [&]() { return sum_weight_gradient ? grad_weight.sum(at::IntArrayRef{0, 1}) : grad_weight; };
  if (x.numel() == 0) {  // C == 0: the weight still has its shape
    grad_weight.zero_();
    return {grad_x, weight_gradient()};
  }
  const Layout layout = layout_of(x, heads);
  const int64_t pairs = x.size(0) * x.size(1) * heads;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    with_document_spans(document_edges, x, [&](const auto& spans) {
      conv_kernel<scalar_t, acc_t, true><<<tile_grid(x.size(0), layout, kTile), dim3(kChannels, kRows), 0, stream>>>(
          strided_weight<scalar_t>(weight), spans, layout, taps, padding_l, grad_out.const_data_ptr<scalar_t>(),
          grad_x.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      conv_grad_weight_kernel<scalar_t, acc_t><<<warp_blocks(pairs), kWarpSize * kWarpsPerBlock, 0, stream>>>(
          spans, layout, heads, taps, padding_l, pairs, x.const_data_ptr<scalar_t>(),
          grad_out.const_data_ptr<scalar_t>(), grad_weight.mutable_data_ptr<acc_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {grad_x, weight_gradient()};
}

}  // namespace talk_hf
