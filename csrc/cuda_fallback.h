// Which CUDA kernels implement ops.h's entry points, and the tiled kernels' entry points that the
// streaming ones fall back to.
//
//   talk_forward                 the tiled kernel (talk_conv/talk_conv_cuda.cu), every shape
//   talk_backward                the streaming kernels (talk_conv/talk_conv_cuda_stream.cu)
//   conv_forward, conv_backward  the streaming kernels (dynamic_conv/dynamic_conv_cuda_stream.cu)
//
// (Both kinds were verified on an H200; each entry point runs the faster kind there: see
// benchmarks/README.md.)  Where a shape is outside what the streaming kernels take (the
// *_stream_fallback functions say why: 32-bit indices, the grid, shared memory) they call the tiled
// kernels declared here (talk_conv_cuda.cu, dynamic_conv_cuda.cu) instead, so every input works.
// These take the arguments of ops.h's entry points, a packed row's document edges included, and
// return the same tensors.  Shapes: x, grad_out (B, T, C); offsets (B, T, H); weight (B, T, H, K)
// with any strides.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <tuple>

namespace talk_hf {

// Why talk_conv's streaming backward does not run for these inputs ("" where it does).
std::string talk_stream_fallback(const at::Tensor& x, const at::Tensor& offset_left, int64_t max_left,
                                 int64_t max_right);

std::tuple<at::Tensor, at::Tensor, at::Tensor> talk_backward_tiled(const at::Tensor& grad_out, const at::Tensor& x,
                                                                   const at::Tensor& offset_left,
                                                                   const std::optional<at::Tensor>& offset_right,
                                                                   int64_t max_left, int64_t max_right,
                                                                   const std::optional<at::Tensor>& document_edges);

// Why dynamic_conv's / light_conv's streaming kernels do not run for these inputs ("" where they do).
std::string conv_stream_fallback(const at::Tensor& x, const at::Tensor& weight, int64_t padding_l);

at::Tensor conv_forward_tiled(const at::Tensor& x, const at::Tensor& weight, int64_t padding_l,
                              const std::optional<at::Tensor>& document_edges);

std::tuple<at::Tensor, at::Tensor> conv_backward_tiled(const at::Tensor& grad_out, const at::Tensor& x,
                                                       const at::Tensor& weight, int64_t padding_l,
                                                       bool sum_weight_gradient,
                                                       const std::optional<at::Tensor>& document_edges);

}  // namespace talk_hf
