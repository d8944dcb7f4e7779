// A linear layer for a few input rows: each weight row is read once, in memory order, and dotted
// with every input row while it is in the L1 cache.
//
// Why: a batch-1 decoding step multiplies one row by every weight matrix of the model, so its
// time is the time to stream the weights from memory.  MKL's one-row product (what F.linear runs)
// streams most (out, 512) float32 weights at 60-70% of the speed of a plain sequential read on
// the AMD EPYC we measured (benchmarks/bench_linear.py); reading the rows one after the other in
// memory order gets close to it.  Threads split the output features into contiguous blocks.
#include "linear/linear_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <vector>

#include "cpu_vector.h"

namespace talk_hf {
namespace {

// The least weight bytes a thread's task reads: enough to amortise starting it.
constexpr int64_t kTaskBytes = 64 * 1024;
// Input rows dotted with one weight row at a time (the rest in smaller groups).
constexpr int kRowGroup = 4;

// out[r * features + o] = bias_o + dot(weight_row, input row r), for the kRows rows r from `first`.
template <int kRows, typename scalar_t, typename acc_t>
inline void dot_rows(const scalar_t* weight_row, const scalar_t* input, int64_t in_features, int64_t first,
                     acc_t bias_o, scalar_t* out, int64_t features, int64_t o) {
  const scalar_t* rows[kRows];
  for (int n = 0; n < kRows; ++n) rows[n] = input + (first + n) * in_features;
  acc_t sums[kRows];
  dots(weight_row, rows, in_features, sums);
  for (int n = 0; n < kRows; ++n) out[(first + n) * features + o] = static_cast<scalar_t>(sums[n] + bias_o);
}

}  // namespace

at::Tensor few_rows_linear(const at::Tensor& input_in, const at::Tensor& weight, const std::optional<at::Tensor>& bias_in) {
  TORCH_CHECK(input_in.dim() >= 1 && weight.dim() == 2 && input_in.size(-1) == weight.size(1),
              "few_rows_linear: expected input (..., in) and weight (out, in), got ", input_in.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(weight.is_contiguous(), "few_rows_linear: the weight must be contiguous");
  const at::Tensor input = input_in.contiguous();
  const at::Tensor bias = bias_in.has_value() ? bias_in->contiguous() : at::Tensor();
  const int64_t in_features = weight.size(1), features = weight.size(0);
  const int64_t rows = in_features == 0 ? 0 : input.numel() / in_features;
  std::vector<int64_t> out_sizes(input.sizes().begin(), input.sizes().end());
  out_sizes.back() = features;
  at::Tensor out = at::empty(out_sizes, input.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, input.scalar_type(), "few_rows_linear", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* input_data = input.const_data_ptr<scalar_t>();
    const scalar_t* weight_data = weight.const_data_ptr<scalar_t>();
    const scalar_t* bias_data = bias.defined() ? bias.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    const int64_t features_per_task = std::max<int64_t>(1, kTaskBytes / std::max<int64_t>(1, weight.nbytes() / features));
    at::parallel_for(0, features, features_per_task, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const scalar_t* weight_row = weight_data + o * in_features;
        const acc_t bias_o = bias_data ? static_cast<acc_t>(bias_data[o]) : acc_t(0);
        int64_t first = 0;
        for (; first + kRowGroup <= rows; first += kRowGroup) {
          dot_rows<kRowGroup>(weight_row, input_data, in_features, first, bias_o, out_data, features, o);
        }
        for (; first < rows; ++first) {
          dot_rows<1>(weight_row, input_data, in_features, first, bias_o, out_data, features, o);
        }
      }
    });
  });
  return out;
}

}  // namespace talk_hf
