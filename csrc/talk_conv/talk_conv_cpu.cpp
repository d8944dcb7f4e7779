// C++ CPU kernels of talk_conv, built just in time by talk_hf.ops._extension.  The per-element
// math comes from talk_math.h, shared with the CUDA kernels; the work split (tasks of one batch row
// and a tile of kTile time steps) from cpu_tiles.h.
//
// Packed rows: every window edge is clamped into its token's span (Spans: RowSpans, the whole row,
// or DocumentSpans, the token's document); each kernel is instantiated once per kind of span, and
// the RowSpans one is the unpacked kernel.  Nothing else changes: the prefix sums and the backward's
// difference array only ever cover the rows the (clamped) edges reach.
//
// Speed (talk_conv does a few flops per byte, so memory traffic decides): every task reads the
// rows it needs as whole contiguous (C,) rows, not one head at a time; it computes each window edge
// once; and its inner loops run over channels with no branch inside.  The build may target the
// host's vector instructions (see native_cpu in talk_hf/ops/_build/build_folder.py).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "cpu_tiles.h"
#include "cpu_vector.h"
#include "tensors.h"

namespace talk_hf {
namespace {

// How many rows of x a TaLK backward task prefetches ahead of the rows its offsets read next.
constexpr int64_t kEdgeLookahead = 8;
// The most elements of a TaLK forward prefix-sum buffer (1 MiB of float).  Where offsets reach
// far (large offsets), a tile's heads are summed in groups small enough to stay under it.
constexpr int64_t kPrefixElements = 1 << 18;

// The largest reach of any token's window (see Reach), over all batch rows, in parallel.
template <typename scalar_t, typename acc_t, typename Spans>
Reach offset_reach(const TalkOffsets<scalar_t, acc_t>& offsets, const Spans& spans, int64_t batch) {
  const int64_t length = offsets.length, heads = offsets.heads;
  const auto widest = [](const Reach& a, const Reach& b) {
    return Reach{std::max(a.before, b.before), std::max(a.after, b.after)};
  };
  return at::parallel_reduce(0, batch * length, kTile, Reach{0, 0}, [&](int64_t begin, int64_t end, Reach reach) {
    for (int64_t token = begin; token < end; ++token) {
      const int64_t b = token / length, t = token % length;
      const Span span = spans(b, t);
      for (int64_t h = 0; h < heads; ++h) {
        widen_reach(reach, t, offsets.left(b, t, h, span), offsets.right(b, t, h, span));
      }
    }
    return reach;
  }, widest);
}

}  // namespace

at::Tensor talk_forward(const at::Tensor& x_in, const at::Tensor& offset_left_in,
                        const std::optional<at::Tensor>& offset_right_in, int64_t max_left, int64_t max_right,
                        const std::optional<at::Tensor>& document_edges) {
  const TalkInputs inputs(x_in, offset_left_in, offset_right_in);
  const at::Tensor &x = inputs.x, &offset_left = inputs.offset_left, &offset_right = inputs.offset_right;
  at::Tensor out = at::empty(x.sizes(), x.options());
  const int64_t batch = x.size(0), length = x.size(1), channels = x.size(2), heads = offset_left.size(2);
  const int64_t head_size = channels / heads;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto offsets = talk_offsets<scalar_t, acc_t>(offset_left, offset_right, max_left, max_right);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    const acc_t inverse_normalizer = acc_t(1) / window_normalizer<acc_t>(max_left, max_right);
    const std::vector<scalar_t> zeros(head_size, scalar_t(0));  // x[T], the row past the end

    with_document_spans(document_edges, x, [&](const auto& spans) {
      for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
        const int64_t tokens = end - first;
        // The tile's window edges, (tokens, H) each, and the rows [lowest[h], highest[h]] they touch.
        std::vector<Edge<acc_t>> lefts(tokens * heads), rights(tokens * heads);
        std::vector<int64_t> lowest(heads, length), highest(heads, 0);
        for (int64_t t = first; t < end; ++t) {
          const Span span = spans(b, t);
          for (int64_t h = 0; h < heads; ++h) {
            const Edge<acc_t> left = offsets.left(b, t, h, span), right = offsets.right(b, t, h, span);
            lefts[(t - first) * heads + h] = left;
            rights[(t - first) * heads + h] = right;
            lowest[h] = std::min({lowest[h], left.index, right.index});
            highest[h] = std::max({highest[h], left.index, right.index});
          }
        }
        const scalar_t* x_batch = x_data + b * length * channels;
        std::vector<acc_t> prefix;  // (rows + 1, group channels): prefix[k] = x[low] + ... + x[low + k - 1]
        for (int64_t group_first = 0, group_end; group_first < heads; group_first = group_end) {
          // Heads [group_first, group_end) share one prefix sum over rows [low, high].
          int64_t low = lowest[group_first], high = highest[group_first];
          for (group_end = group_first + 1; group_end < heads; ++group_end) {
            const int64_t wider_low = std::min(low, lowest[group_end]), wider_high = std::max(high, highest[group_end]);
            if ((wider_high - wider_low + 1) * (group_end + 1 - group_first) * head_size > kPrefixElements) break;
            low = wider_low;
            high = wider_high;
          }
          const int64_t rows = high - low;  // high <= T, so rows of x stay in [0, T)
          const int64_t group_channels = (group_end - group_first) * head_size;
          prefix.resize((rows + 1) * group_channels);
          std::fill_n(prefix.begin(), group_channels, acc_t(0));
          for (int64_t k = 0; k < rows; ++k) {
            const scalar_t* x_row = x_batch + (low + k) * channels + group_first * head_size;
            const acc_t* before = prefix.data() + k * group_channels;
            acc_t* after = prefix.data() + (k + 1) * group_channels;
            for (int64_t c = 0; c < group_channels; ++c) after[c] = before[c] + static_cast<acc_t>(x_row[c]);
          }
          for (int64_t t = first; t < end; ++t) {
            for (int64_t h = group_first; h < group_end; ++h) {
              const Edge<acc_t> left = lefts[(t - first) * heads + h], right = rights[(t - first) * heads + h];
              const int64_t channel = (h - group_first) * head_size;
              const acc_t* prefix_left = prefix.data() + (left.index - low) * group_channels + channel;
              const acc_t* prefix_right = prefix.data() + (right.index - low) * group_channels + channel;
              const scalar_t* x_left = x_batch + left.index * channels + h * head_size;
              const scalar_t* x_right =
                  right.index < length ? x_batch + right.index * channels + h * head_size : zeros.data();
              scalar_t* out_row = out_data + (b * length + t) * channels + h * head_size;
              for (int64_t c = 0; c < head_size; ++c) {
                const acc_t to_right = integral_to(right, prefix_right[c], static_cast<acc_t>(x_right[c]));
                const acc_t to_left = integral_to(left, prefix_left[c], static_cast<acc_t>(x_left[c]));
                out_row[c] = static_cast<scalar_t>((to_right - to_left) * inverse_normalizer);
              }
            }
          }
        }
    });
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> talk_backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                             const at::Tensor& offset_left_in,
                                                             const std::optional<at::Tensor>& offset_right_in,
                                                             int64_t max_left, int64_t max_right,
                                                             const std::optional<at::Tensor>& document_edges) {
  const at::Tensor grad_out = grad_out_in.contiguous();
  const TalkInputs inputs(x_in, offset_left_in, offset_right_in);
  const at::Tensor &x = inputs.x, &offset_left = inputs.offset_left, &offset_right = inputs.offset_right;
  at::Tensor grad_x, grad_left, grad_right;
  std::tie(grad_x, grad_left, grad_right) = inputs.empty_gradients();
  const int64_t batch = x.size(0), length = x.size(1), channels = x.size(2), heads = offset_left.size(2);
  const int64_t head_size = channels / heads;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto offsets = talk_offsets<scalar_t, acc_t>(offset_left, offset_right, max_left, max_right);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    const scalar_t* grad_data = grad_out.const_data_ptr<scalar_t>();
    scalar_t* grad_x_data = grad_x.mutable_data_ptr<scalar_t>();
    scalar_t* grad_left_data = grad_left.mutable_data_ptr<scalar_t>();
    scalar_t* grad_right_data = offset_right.defined() ? grad_right.mutable_data_ptr<scalar_t>() : nullptr;
    const acc_t normalizer = window_normalizer<acc_t>(max_left, max_right);
    const acc_t inverse_normalizer = acc_t(1) / normalizer;
    const std::vector<scalar_t> zeros(head_size, scalar_t(0));  // x[T], the row past the end
    with_document_spans(document_edges, x, [&](const auto& spans) {
      // How far any window reaches decides which tokens contribute to a tile of grad_x.
      const Reach reach = offset_reach(offsets, spans, batch);

      for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
        // grad_x rows [first, end) = cumsum over rows of the contributions of every token (all heads
        // side by side, (rows + 1, C)); a contribution below the tile lands on its first row, one
        // past it is dropped.
        std::vector<acc_t> difference((end - first + 1) * channels, acc_t(0));
        const scalar_t* x_batch = x_data + b * length * channels;
        const int64_t first_contributor = std::max<int64_t>(0, first - reach.after);
        const int64_t last_contributor = std::min(length - 1, end - 1 + reach.before);
        // The offset gradients below read x at the window edges of the tile's tokens, head by head
        // in no order a hardware prefetcher follows: x is prefetched row by row instead, kEdgeLookahead
        // rows past the farthest right edge of the token at hand (the rows from the farthest left edge
        // on stay in the cache meanwhile), and the rows of the tile's first offsets at its start.
        const int64_t prefetch_ahead = reach.after + kEdgeLookahead;
        for (int64_t row = std::max<int64_t>(0, first - reach.before); row < std::min(length, first + prefetch_ahead); ++row) {
          prefetch_row(x_batch + row * channels, channels);
        }
        for (int64_t t = first_contributor; t <= last_contributor; ++t) {
          const scalar_t* grad_row = grad_data + (b * length + t) * channels;
          const bool in_tile = t >= first && t < end;
          if (in_tile && t + prefetch_ahead < length) prefetch_row(x_batch + (t + prefetch_ahead) * channels, channels);
          const Span span = spans(b, t);
          for (int64_t h = 0; h < heads; ++h) {
            const Edge<acc_t> left = offsets.left(b, t, h, span), right = offsets.right(b, t, h, span);
            const scalar_t* grad_head = grad_row + h * head_size;
            for (int which = 0; which < 4; ++which) {
              const ScatterEntry<acc_t> entry = scatter_entry(left, right, which);
              if (entry.position >= end || entry.weight == acc_t(0)) continue;
              acc_t* target = difference.data() + (std::max(entry.position, first) - first) * channels + h * head_size;
              for (int64_t c = 0; c < head_size; ++c) target[c] += entry.weight * static_cast<acc_t>(grad_head[c]);
            }
            if (!in_tile) continue;
            // The offset gradients of the tile's tokens: factor * <grad_out[t], x[edge]> over the head.
            const int64_t index = (b * length + t) * heads + h;
            const scalar_t* const edge_rows[2] = {
                x_batch + left.index * channels + h * head_size,
                right.index < length ? x_batch + right.index * channels + h * head_size : zeros.data()};
            acc_t products[2];
            dots(grad_head, edge_rows, head_size, products);
            grad_left_data[index] = static_cast<scalar_t>(offset_gradient_factor(left, max_left, normalizer) * products[0]);
            if (grad_right_data) {
              grad_right_data[index] =
                  static_cast<scalar_t>(offset_gradient_factor(right, max_right, normalizer) * products[1]);
            }
          }
        }
        for (int64_t t = first; t < end; ++t) {
          const acc_t* running = difference.data() + (t - first) * channels;
          acc_t* next = difference.data() + (t - first + 1) * channels;
          scalar_t* grad_x_row = grad_x_data + (b * length + t) * channels;
          for (int64_t c = 0; c < channels; ++c) {
            grad_x_row[c] = static_cast<scalar_t>(running[c] * inverse_normalizer);
            next[c] += running[c];
          }
        }
    });
    });
  });
  return {grad_x, grad_left, grad_right};
}

}  // namespace talk_hf
