// A linear layer for a few input rows: each weight row is read from memory once, in memory order,
// kWeightGroup rows at a time, and dotted with every input row while it is in the L1 cache.
//
// Why: a batch-1 decoding step multiplies one row by every weight matrix of the model, so its
// time is the time to stream the weights from memory.  MKL's one-row product (what F.linear runs)
// streams most (out, 512) float32 weights at 60-70% of the speed of a plain sequential read on
// the AMD EPYC we measured (benchmarks/bench_linear.py).  One weight row at a time is one stream of
// loads, which a core of the Intel Xeon we measured serves slower than MKL reads once the weights are
// out of the cache; kWeightGroup rows read side by side keep several streams in flight.  Threads
// split the output features into contiguous blocks.
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
// Weight rows read side by side: independent load streams and sums.  8 read (out, 512) and (512, 2,048)
// float32 weights out of the cache 1.3-2.0x as fast as 1 row at a time on the Intel Xeon (AVX-512),
// ahead of 4 (1.1-1.7x) and 2, with -march=native and with an AVX2 build alike.
constexpr int kWeightGroup = 8;

// out_row[o + n] = bias[o + n] + dot(weight row o + n, input_row), for the kRows weight rows from o.
template <int kRows, typename scalar_t, typename acc_t>
inline void dot_weight_rows(const scalar_t* weight, const scalar_t* input_row, int64_t in_features, int64_t o,
                            const scalar_t* bias, scalar_t* out_row) {
  const scalar_t* weight_rows[kRows];
  for (int n = 0; n < kRows; ++n) weight_rows[n] = weight + (o + n) * in_features;
  acc_t sums[kRows];
  dots(input_row, weight_rows, in_features, sums);
  for (int n = 0; n < kRows; ++n) {
    out_row[o + n] = static_cast<scalar_t>(sums[n] + (bias ? static_cast<acc_t>(bias[o + n]) : acc_t(0)));
  }
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
      int64_t o = begin;
      for (; o + kWeightGroup <= end; o += kWeightGroup) {
        for (int64_t r = 0; r < rows; ++r) {
          dot_weight_rows<kWeightGroup, scalar_t, acc_t>(weight_data, input_data + r * in_features, in_features, o,
                                                         bias_data, out_data + r * features);
        }
      }
      for (; o < end; ++o) {
        for (int64_t r = 0; r < rows; ++r) {
          dot_weight_rows<1, scalar_t, acc_t>(weight_data, input_data + r * in_features, in_features, o, bias_data,
                                              out_data + r * features);
        }
      }
    });
  });
  return out;
}

}  // namespace talk_hf
