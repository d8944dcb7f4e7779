// C++ CPU kernels of talk_conv and dynamic_conv/light_conv, built just in time by
// talk_hf.ops._extension.  The per-element math comes from talk_math.h, shared with the CUDA
// kernels.  Work is cut into tasks of one batch row and a tile of kTile time steps, run in
// parallel with at::parallel_for (OpenMP); every task owns its output rows, so nothing races.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "bindings.h"
#include "tensors.h"

namespace talk_hf {
namespace {

constexpr int64_t kTile = 64;

// Runs body(batch, first, end) for every tile [first, end) of every batch row, in parallel.
template <typename Body>
void for_each_tile(int64_t batch, int64_t length, const Body& body) {
  const int64_t tiles = ceil_div(length, kTile);
  at::parallel_for(0, batch * tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t first = (task % tiles) * kTile;
      body(task / tiles, first, std::min(first + kTile, length));
    }
  });
}

}  // namespace

at::Tensor talk_forward(const at::Tensor& x_in, const at::Tensor& offset_left_in,
                        const std::optional<at::Tensor>& offset_right_in, int64_t max_left, int64_t max_right) {
  const TalkInputs inputs(x_in, offset_left_in, offset_right_in);
  const at::Tensor &x = inputs.x, &offset_left = inputs.offset_left, &offset_right = inputs.offset_right;
  at::Tensor out = at::empty(x.sizes(), x.options());
  const int64_t batch = x.size(0), length = x.size(1), channels = x.size(2), heads = offset_left.size(2);
  const int64_t head_size = channels / heads;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto windows = talk_windows<scalar_t, acc_t>(offset_left, offset_right, max_left, max_right);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    const acc_t normalizer = window_normalizer<acc_t>(max_left, max_right);

    for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
      std::vector<acc_t> prefix;  // (rows + 1, R): prefix[k] = x[lowest] + ... + x[lowest + k - 1]
      for (int64_t h = 0; h < heads; ++h) {
        // Rows [lowest, highest] of the prefix sum cover every edge of the tile's windows.
        int64_t lowest = length, highest = 0;
        for (int64_t t = first; t < end; ++t) {
          const Edge<acc_t> left = windows.left(b, t, h), right = windows.right(b, t, h);
          lowest = std::min({lowest, left.index, right.index});
          highest = std::max({highest, left.index, right.index});
        }
        const int64_t rows = highest - lowest;  // highest <= T, so rows of x stay in [0, T)
        prefix.assign((rows + 1) * head_size, acc_t(0));
        const scalar_t* x_head = x_data + b * length * channels + h * head_size;
        for (int64_t k = 0; k < rows; ++k) {
          const scalar_t* x_row = x_head + (lowest + k) * channels;
          for (int64_t c = 0; c < head_size; ++c) {
            prefix[(k + 1) * head_size + c] = prefix[k * head_size + c] + static_cast<acc_t>(x_row[c]);
          }
        }
        for (int64_t t = first; t < end; ++t) {
          const Edge<acc_t> left = windows.left(b, t, h), right = windows.right(b, t, h);
          const acc_t* prefix_left = prefix.data() + (left.index - lowest) * head_size;
          const acc_t* prefix_right = prefix.data() + (right.index - lowest) * head_size;
          const scalar_t* x_left = x_head + left.index * channels;
          const scalar_t* x_right = right.index < length ? x_head + right.index * channels : nullptr;
          scalar_t* out_row = out_data + (b * length + t) * channels + h * head_size;
          for (int64_t c = 0; c < head_size; ++c) {
            const acc_t to_right =
                integral_to(right, prefix_right[c], x_right ? static_cast<acc_t>(x_right[c]) : acc_t(0));
            const acc_t to_left = integral_to(left, prefix_left[c], static_cast<acc_t>(x_left[c]));
            out_row[c] = static_cast<scalar_t>((to_right - to_left) / normalizer);
          }
        }
      }
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> talk_backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                             const at::Tensor& offset_left_in,
                                                             const std::optional<at::Tensor>& offset_right_in,
                                                             int64_t max_left, int64_t max_right) {
  const at::Tensor grad_out = grad_out_in.contiguous();
  const TalkInputs inputs(x_in, offset_left_in, offset_right_in);
  const at::Tensor &x = inputs.x, &offset_left = inputs.offset_left, &offset_right = inputs.offset_right;
  at::Tensor grad_x, grad_left, grad_right;
  std::tie(grad_x, grad_left, grad_right) = inputs.empty_gradients();
  const int64_t batch = x.size(0), length = x.size(1), channels = x.size(2), heads = offset_left.size(2);
  const int64_t head_size = channels / heads;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto windows = talk_windows<scalar_t, acc_t>(offset_left, offset_right, max_left, max_right);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    const scalar_t* grad_data = grad_out.const_data_ptr<scalar_t>();
    scalar_t* grad_x_data = grad_x.mutable_data_ptr<scalar_t>();
    scalar_t* grad_left_data = grad_left.mutable_data_ptr<scalar_t>();
    scalar_t* grad_right_data = offset_right.defined() ? grad_right.mutable_data_ptr<scalar_t>() : nullptr;
    const acc_t normalizer = window_normalizer<acc_t>(max_left, max_right);

    // How far any window reaches decides which tokens contribute to a tile of grad_x.
    Reach reach{0, 0};
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < length; ++t) {
        for (int64_t h = 0; h < heads; ++h) widen_reach(reach, t, windows.left(b, t, h), windows.right(b, t, h));
      }
    }

    for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
      std::vector<acc_t> difference((end - first + 1) * head_size);
      const int64_t first_contributor = std::max<int64_t>(0, first - reach.after);
      const int64_t last_contributor = std::min(length - 1, end - 1 + reach.before);
      for (int64_t h = 0; h < heads; ++h) {
        const scalar_t* x_head = x_data + b * length * channels + h * head_size;
        const scalar_t* grad_head = grad_data + b * length * channels + h * head_size;
        // grad_x rows [first, end) = cumsum over rows of the contributions of every token;
        // a contribution below the tile lands on its first row, one past it is dropped.
        std::fill(difference.begin(), difference.end(), acc_t(0));
        for (int64_t t = first_contributor; t <= last_contributor; ++t) {
          const Edge<acc_t> left = windows.left(b, t, h), right = windows.right(b, t, h);
          const scalar_t* grad_row = grad_head + t * channels;
          for (int which = 0; which < 4; ++which) {
            const ScatterEntry<acc_t> entry = scatter_entry(left, right, which);
            if (entry.position >= end || entry.weight == acc_t(0)) continue;
            acc_t* target = difference.data() + (std::max(entry.position, first) - first) * head_size;
            for (int64_t c = 0; c < head_size; ++c) target[c] += entry.weight * static_cast<acc_t>(grad_row[c]);
          }
        }
        for (int64_t t = first; t < end; ++t) {
          const acc_t* running = difference.data() + (t - first) * head_size;
          acc_t* next = difference.data() + (t - first + 1) * head_size;
          scalar_t* grad_x_row = grad_x_data + (b * length + t) * channels + h * head_size;
          for (int64_t c = 0; c < head_size; ++c) {
            grad_x_row[c] = static_cast<scalar_t>(running[c] / normalizer);
            next[c] += running[c];
          }
        }
        // Offset gradients of the tile's tokens: factor * <grad_out[t], x[edge]> over the head.
        for (int64_t t = first; t < end; ++t) {
          const Edge<acc_t> left = windows.left(b, t, h), right = windows.right(b, t, h);
          const scalar_t* grad_row = grad_head + t * channels;
          const scalar_t* x_left = x_head + left.index * channels;
          const scalar_t* x_right = right.index < length ? x_head + right.index * channels : nullptr;
          acc_t dot_left = 0, dot_right = 0;
          for (int64_t c = 0; c < head_size; ++c) {
            const acc_t g = static_cast<acc_t>(grad_row[c]);
            dot_left += g * static_cast<acc_t>(x_left[c]);
            if (x_right) dot_right += g * static_cast<acc_t>(x_right[c]);
          }
          const int64_t index = (b * length + t) * heads + h;
          grad_left_data[index] = static_cast<scalar_t>(offset_gradient_factor(left, max_left, normalizer) * dot_left);
          if (grad_right_data) {
            grad_right_data[index] =
                static_cast<scalar_t>(offset_gradient_factor(right, max_right, normalizer) * dot_right);
          }
        }
      }
    });
  });
  return {grad_x, grad_left, grad_right};
}

at::Tensor conv_forward(const at::Tensor& x_in, const at::Tensor& weight, int64_t padding_l) {
  const at::Tensor x = x_in.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  const int64_t batch = x.size(0), length = x.size(1), channels = x.size(2);
  const int64_t heads = weight.size(2), taps = weight.size(3), head_size = channels / heads;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const StridedWeight<scalar_t> w = strided_weight<scalar_t>(weight);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
      std::vector<acc_t> sum(head_size);
      for (int64_t t = first; t < end; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          std::fill(sum.begin(), sum.end(), acc_t(0));
          for (int64_t k = 0; k < taps; ++k) {
            const int64_t source = conv_source(t, k, padding_l);
            if (!in_sequence(source, length)) continue;
            const acc_t tap = static_cast<acc_t>(w(b, t, h, k));
            const scalar_t* x_row = x_data + (b * length + source) * channels + h * head_size;
            for (int64_t c = 0; c < head_size; ++c) sum[c] += tap * static_cast<acc_t>(x_row[c]);
          }
          scalar_t* out_row = out_data + (b * length + t) * channels + h * head_size;
          for (int64_t c = 0; c < head_size; ++c) out_row[c] = static_cast<scalar_t>(sum[c]);
        }
      }
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> conv_backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                 const at::Tensor& weight, int64_t padding_l) {
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor x = x_in.contiguous();
  const int64_t batch = x.size(0), length = x.size(1), channels = x.size(2);
  const int64_t heads = weight.size(2), taps = weight.size(3), head_size = channels / heads;
  at::Tensor grad_x = at::empty(x.sizes(), x.options());
  at::Tensor grad_weight = at::empty({batch, length, heads, taps}, x.options().dtype(at::toOpMathType(x.scalar_type())));

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const StridedWeight<scalar_t> w = strided_weight<scalar_t>(weight);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    const scalar_t* grad_data = grad_out.const_data_ptr<scalar_t>();
    scalar_t* grad_x_data = grad_x.mutable_data_ptr<scalar_t>();
    acc_t* grad_weight_data = grad_weight.mutable_data_ptr<acc_t>();
    for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
      std::vector<acc_t> sum(head_size);
      for (int64_t j = first; j < end; ++j) {
        for (int64_t h = 0; h < heads; ++h) {
          // grad_x[j] gathers tap k of every output t = j - k + padding_l that read x[j].
          std::fill(sum.begin(), sum.end(), acc_t(0));
          for (int64_t k = 0; k < taps; ++k) {
            const int64_t t = j - k + padding_l;
            if (!in_sequence(t, length)) continue;
            const acc_t tap = static_cast<acc_t>(w(b, t, h, k));
            const scalar_t* grad_row = grad_data + (b * length + t) * channels + h * head_size;
            for (int64_t c = 0; c < head_size; ++c) sum[c] += tap * static_cast<acc_t>(grad_row[c]);
          }
          scalar_t* grad_x_row = grad_x_data + (b * length + j) * channels + h * head_size;
          for (int64_t c = 0; c < head_size; ++c) grad_x_row[c] = static_cast<scalar_t>(sum[c]);
          // grad_weight[j, h, k] = <grad_out[j], x[j + k - padding_l]> over the head's channels.
          const scalar_t* grad_row = grad_data + (b * length + j) * channels + h * head_size;
          for (int64_t k = 0; k < taps; ++k) {
            const int64_t source = conv_source(j, k, padding_l);
            acc_t dot = 0;
            if (in_sequence(source, length)) {
              const scalar_t* x_row = x_data + (b * length + source) * channels + h * head_size;
              for (int64_t c = 0; c < head_size; ++c) dot += static_cast<acc_t>(grad_row[c]) * static_cast<acc_t>(x_row[c]);
            }
            grad_weight_data[((b * length + j) * heads + h) * taps + k] = dot;
          }
        }
      }
    });
  });
  return {grad_x, grad_weight};
}

}  // namespace talk_hf

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) { talk_hf::bind_operators(module); }
