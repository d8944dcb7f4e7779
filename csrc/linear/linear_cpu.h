// The CPU build's linear layer for a few input rows (decoding), beside the four operators of ops.h.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace talk_hf {

// out (..., out_features) = input (..., in_features) @ weight (out_features, in_features)^T + bias,
// for few rows R = input.numel() / in_features (one decoding step: R = batch x beams).  weight
// must be contiguous; input, weight and bias (out_features,) share one floating dtype.  Checked
// by talk_hf.ops.linear.
at::Tensor few_rows_linear(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias);

}  // namespace talk_hf
