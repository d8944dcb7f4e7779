// The streaming CUDA kernels (talk_conv/talk_conv_cuda_stream.cu,
// dynamic_conv/dynamic_conv_cuda_stream.cu): host entry points.
//
// They take the arguments of the tiled kernels' entry points (ops.h), a packed row's document edges
// (B, T, 2) int32 (talk_hf/ops/documents.py) included, and return the same tensors.
// They run only where $TALK_HF_UNVERIFIED_CUDA names their op (talk_hf/ops/_backend.py) until a
// GPU has verified them.  Where a shape is outside what they support (see the *_stream_fallback
// functions) they call the tiled kernels (talk_conv_cuda.cu, dynamic_conv_cuda.cu) instead, so every input works.
// Shapes: x, grad_out (B, T, C); offsets (B, T, H); weight (B, T, H, K) with any strides.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <tuple>

namespace talk_hf {

// Why talk_conv's streaming kernels do not run for these inputs ("" where they do).
std::string talk_stream_fallback(const at::Tensor& x, const at::Tensor& offset_left, int64_t max_left,
                                 int64_t max_right);

at::Tensor talk_forward_stream(const at::Tensor& x, const at::Tensor& offset_left,
                               const std::optional<at::Tensor>& offset_right, int64_t max_left, int64_t max_right,
                               const std::optional<at::Tensor>& document_edges);

std::tuple<at::Tensor, at::Tensor, at::Tensor> talk_backward_stream(const at::Tensor& grad_out, const at::Tensor& x,
                                                                    const at::Tensor& offset_left,
                                                                    const std::optional<at::Tensor>& offset_right,
                                                                    int64_t max_left, int64_t max_right,
                                                                    const std::optional<at::Tensor>& document_edges);

// Why dynamic_conv's / light_conv's streaming kernels do not run for these inputs ("" where they do).
std::string conv_stream_fallback(const at::Tensor& x, const at::Tensor& weight, int64_t padding_l);

at::Tensor conv_forward_stream(const at::Tensor& x, const at::Tensor& weight, int64_t padding_l,
                               const std::optional<at::Tensor>& document_edges);

std::tuple<at::Tensor, at::Tensor> conv_backward_stream(const at::Tensor& grad_out, const at::Tensor& x,
                                                        const at::Tensor& weight, int64_t padding_l,
                                                        bool sum_weight_gradient,
                                                        const std::optional<at::Tensor>& document_edges);

}  // namespace talk_hf
