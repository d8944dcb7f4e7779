// Host-side helpers that turn ATen tensors into the raw views the kernels of talk_math.h read.
#pragma once

#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <optional>
#include <tuple>

#include "talk_math.h"

namespace talk_hf {

// The optional tensor made contiguous, or an undefined tensor when absent.
inline at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() ? tensor->contiguous() : at::Tensor();
}

// The data pointer of a tensor that may be undefined (then nullptr).
template <typename scalar_t>
const scalar_t* optional_data(const at::Tensor& tensor) {
  return tensor.defined() ? tensor.const_data_ptr<scalar_t>() : nullptr;
}

// depthwise_conv's input-gate scale (B, T) as contiguous accumulation-dtype values on x's device,
// or an undefined tensor when absent.
inline at::Tensor gate_scale(const std::optional<at::Tensor>& input_scale, const at::Tensor& x) {
  if (!input_scale.has_value()) return at::Tensor();
  return input_scale->to(x.device(), at::toOpMathType(x.scalar_type())).contiguous();
}

// Calls body(InputGate<relu, scale != nullptr>{}): one instantiation of a kernel per input gate.
template <typename acc_t, typename Body>
void with_input_gate(bool relu, const acc_t* scale, const Body& body) {
  if (relu) {
    scale ? body(InputGate<true, true>{}) : body(InputGate<true, false>{});
  } else {
    scale ? body(InputGate<false, true>{}) : body(InputGate<false, false>{});
  }
}

// Calls body(RowSpans{T}) without document edges, else body(DocumentSpans{...}) over the (B, T, 2)
// int32 edges of a packed row (talk_hf/ops/documents.py): one instantiation of a kernel per form,
// the first the kernel as it runs without packing.  The edges' values are not checked (the Python
// op derives them: start <= t <= end, all in [0, T)); their type and shape are.
template <typename Body>
void with_document_spans(const std::optional<at::Tensor>& document_edges, const at::Tensor& x, const Body& body) {
  const int64_t length = x.size(1);
  if (!document_edges.has_value()) return body(RowSpans{length});
  TORCH_CHECK(document_edges->scalar_type() == at::kInt && document_edges->dim() == 3 &&
                  document_edges->size(0) == x.size(0) && document_edges->size(1) == length &&
                  document_edges->size(2) == 2,
              "document_edges must be an int32 tensor of shape (B, T, 2) = (", x.size(0), ", ", length, ", 2), got ",
              document_edges->scalar_type(), " of shape ", document_edges->sizes());
  TORCH_CHECK(document_edges->device() == x.device(), "document_edges is on ", document_edges->device(),
              " but x is on ", x.device());
  const at::Tensor edges = document_edges->contiguous();
  body(DocumentSpans{edges.const_data_ptr<int32_t>(), length});
}

// The inputs of talk_conv made contiguous; offset_right is undefined in the causal form.
struct TalkInputs {
  at::Tensor x, offset_left, offset_right;

  TalkInputs(const at::Tensor& x_in, const at::Tensor& offset_left_in, const std::optional<at::Tensor>& offset_right_in)
      : x(x_in.contiguous()),
        offset_left(offset_left_in.contiguous()),
        offset_right(contiguous_or_undefined(offset_right_in)) {}

  // Uninitialised gradients for x, offset_left and offset_right (0 elements in the causal form).
  std::tuple<at::Tensor, at::Tensor, at::Tensor> empty_gradients() const {
    return {at::empty(x.sizes(), x.options()), at::empty(offset_left.sizes(), offset_left.options()),
            offset_right.defined() ? at::empty(offset_right.sizes(), offset_right.options()) : at::empty({0}, x.options())};
  }
};

// The window-edge reader of contiguous (B, T, H) offsets; offset_right may be undefined (causal).
template <typename scalar_t, typename acc_t>
TalkOffsets<scalar_t, acc_t> talk_offsets(const at::Tensor& offset_left, const at::Tensor& offset_right,
                                          int64_t max_left, int64_t max_right) {
  return {offset_left.const_data_ptr<scalar_t>(), optional_data<scalar_t>(offset_right), offset_left.size(1),
          offset_left.size(2), max_left, max_right};
}

// A (B, T, H, K) weight read through its strides.
template <typename scalar_t>
StridedWeight<scalar_t> strided_weight(const at::Tensor& weight) {
  return {weight.const_data_ptr<scalar_t>(), weight.stride(0), weight.stride(1), weight.stride(2), weight.stride(3)};
}

}  // namespace talk_hf
