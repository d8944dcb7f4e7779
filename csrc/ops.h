// The entry points every compiled backend (csrc/<op>/<op>_cpu.cpp, <op>_cuda.cu) implements.
// Shapes: x, grad_out, out (B, T, C); offsets (B, T, H); weight (B, T, H, K) with any strides
// (LightConv passes its (H, K) kernel expanded with zero batch and time strides).
// document_edges: absent, or in a packed row the (B, T, 2) int32 first and last token of each token's
// document (talk_hf/ops/documents.py): windows and taps stop at the document's edges, as they stop at
// the row's without it.  Every kernel declared here, CPU and CUDA, takes them.
// Inputs are checked by talk_hf.ops._validation and talk_hf.ops.documents before they get here.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace talk_hf {

// TaLK forward: (B, T, C) output of x's dtype.  offset_right is empty for the causal form.
at::Tensor talk_forward(const at::Tensor& x, const at::Tensor& offset_left,
                        const std::optional<at::Tensor>& offset_right, int64_t max_left, int64_t max_right,
                        const std::optional<at::Tensor>& document_edges);

// TaLK backward: gradients for x (B, T, C), offset_left (B, T, H) and offset_right (B, T, H;
// an empty tensor in the causal form), each of its input's dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> talk_backward(const at::Tensor& grad_out, const at::Tensor& x,
                                                             const at::Tensor& offset_left,
                                                             const std::optional<at::Tensor>& offset_right,
                                                             int64_t max_left, int64_t max_right,
                                                             const std::optional<at::Tensor>& document_edges);

// DynamicConv forward: out[b, t, c] = sum_k weight[b, t, h(c), k] * x[b, t + k - padding_l, c].
at::Tensor conv_forward(const at::Tensor& x, const at::Tensor& weight, int64_t padding_l,
                        const std::optional<at::Tensor>& document_edges);

// DynamicConv/LightConv backward: the gradient for x (x's dtype) and for the weight, in the
// accumulation dtype (float32, float64 for float64): per token, (B, T, H, K), or with
// sum_weight_gradient (LightConv: one kernel shared by every token) summed over batch and time,
// (H, K), rounded to the weight's dtype by the caller.
std::tuple<at::Tensor, at::Tensor> conv_backward(const at::Tensor& grad_out, const at::Tensor& x,
                                                 const at::Tensor& weight, int64_t padding_l, bool sum_weight_gradient,
                                                 const std::optional<at::Tensor>& document_edges);

// Depthwise convolution (depthwise_conv/depthwise_conv_cpu.cpp, depthwise_conv_cuda.cu), weight (C, K) static per channel:
// out[b, t, c] = sum_k weight[c, k] * u[b, t + k * dilation - left, c], zero outside [0, T), of
// the gated input u = relu(x) (with `relu`) times input_scale[b, t] (when given: (B, T), SliceNet's
// padding mask), or u = x.
at::Tensor depthwise_forward(const at::Tensor& x, const at::Tensor& weight, int64_t dilation, int64_t left,
                             const std::optional<at::Tensor>& input_scale, bool relu,
                             const std::optional<at::Tensor>& document_edges);

// Its backward: the gradient for x (x's dtype, through the gate) and for the weight, (C, K) summed
// over batch and time in the accumulation dtype (float32, float64 for float64), rounded to the
// weight's dtype by the caller.
std::tuple<at::Tensor, at::Tensor> depthwise_backward(const at::Tensor& grad_out, const at::Tensor& x,
                                                      const at::Tensor& weight, int64_t dilation, int64_t left,
                                                      const std::optional<at::Tensor>& input_scale, bool relu,
                                                      const std::optional<at::Tensor>& document_edges);

}  // namespace talk_hf
