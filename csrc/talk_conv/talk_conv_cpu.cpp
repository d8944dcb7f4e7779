// C++ CPU kernels of talk_conv and dynamic_conv/light_conv, built just in time by
// talk_hf.ops._extension.  The per-element math comes from talk_math.h, shared with the CUDA
// kernels.  Work is cut into tasks of one batch row and a tile of kTile time steps, run in
// parallel with at::parallel_for (OpenMP); every task owns its output rows, so nothing races.
//
// Speed (talk_conv and the short convolutions do a few flops per byte, so memory traffic decides):
// every task reads the rows it needs as whole contiguous (C,) rows, not one head at a time; it
// computes each window edge once; and its inner loops run over channels with no branch inside,
// accumulating in vector-register variables (Lanes) where they sum over taps or channels.  The
// build may target the host's vector instructions (see native_cpu in _extension.py).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "bindings.h"
#include "cpu_linear.h"
#include "cpu_vector.h"
#include "tensors.h"

namespace talk_hf {
namespace {

// Time steps per task: long enough that a TaLK tile's halo (the rows its offsets reach beyond the
// tile) is a small part of what it reads, short enough that its buffers stay in a core's L2 cache.
constexpr int64_t kTile = 128;
// How many rows of x a TaLK backward task prefetches ahead of the rows its offsets read next.
constexpr int64_t kEdgeLookahead = 8;
// The most elements of a TaLK forward prefix-sum buffer (1 MiB of float).  Where offsets reach
// far (large offsets), a tile's heads are summed in groups small enough to stay under it.
constexpr int64_t kPrefixElements = 1 << 18;

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

// out[c .. c + kVectors * lanes) = sum over k in [first, end) of tap(k) * row(k)[c ...], summed
// in acc_t, one vector register per kVectors-th of the block: each tap's weight is loaded once per
// block, and the kVectors multiply-add chains are independent, so none waits on the latency of the
// previous addition (with two chains the taps' loop ran at a quarter of the multiply-add rate).
template <int kVectors, typename acc_t, typename scalar_t, typename Tap, typename Row>
inline void weighted_block_sum(scalar_t* out, int64_t c, int64_t first, int64_t end, const Tap& tap, const Row& row) {
  using Vector = typename Lanes<acc_t>::type;
  constexpr int64_t lanes = Lanes<acc_t>::count;
  Vector sums[kVectors] = {};
  for (int64_t k = first; k < end; ++k) {
    const acc_t weight = tap(k);
    const scalar_t* source = row(k) + c;
    for (int v = 0; v < kVectors; ++v) sums[v] += weight * load_lanes<acc_t>(source + v * lanes);
  }
  for (int v = 0; v < kVectors; ++v) store_lanes<acc_t>(out + c + v * lanes, sums[v]);
}

// out[c] = sum over k in [first, end) of tap(k) * row(k)[c], for c < count, summed in acc_t: in
// blocks of eight vector registers of channels (a 64-channel float32 head at once), then of two,
// then one channel at a time.
template <typename acc_t, typename scalar_t, typename Tap, typename Row>
inline void weighted_row_sum(scalar_t* out, int64_t count, int64_t first, int64_t end, const Tap& tap, const Row& row) {
  constexpr int64_t lanes = Lanes<acc_t>::count;
  int64_t c = 0;
  for (; c + 8 * lanes <= count; c += 8 * lanes) weighted_block_sum<8, acc_t>(out, c, first, end, tap, row);
  for (; c + 2 * lanes <= count; c += 2 * lanes) weighted_block_sum<2, acc_t>(out, c, first, end, tap, row);
  for (; c < count; ++c) {
    acc_t sum = 0;
    for (int64_t k = first; k < end; ++k) sum += tap(k) * static_cast<acc_t>(row(k)[c]);
    out[c] = static_cast<scalar_t>(sum);
  }
}

// grad_weight[j, h, k] = <grad_out[j, head h], x[j + k - padding_l, head h]> for the tokens j of a
// tile, handed over token by token as store(j, gradients of the taps), when the taps fill 2 to
// kTapVectors vector registers.  The head's rows that the tile reads are
// first copied channel-major (transposed, (head_size, span), zeros outside the sequence), so for each channel one broadcast of grad_out[j][c] multiplies the
// taps' kTapVectors vectors at once: no horizontal sums, and separate accumulators for even and
// odd channels keep the multiply-add chains independent.
template <int kTapVectors, typename acc_t, typename scalar_t, typename Store>
void tap_gradients(const scalar_t* x_batch, const scalar_t* grad_batch, int64_t length, int64_t channels,
                   int64_t heads, int64_t h, int64_t padding_l, int64_t first, int64_t end,
                   std::vector<acc_t>& transposed, const Store& store) {
  using Vector = typename Lanes<acc_t>::type;
  constexpr int64_t lanes = Lanes<acc_t>::count;
  const int64_t head_size = channels / heads;
  const int64_t span = end - first + kTapVectors * lanes;  // every token loads kTapVectors vectors of taps
  transposed.assign(head_size * span, acc_t(0));
  for (int64_t r = 0; r < span; ++r) {
    const int64_t row = first - padding_l + r;
    if (row < 0 || row >= length) continue;
    const scalar_t* source = x_batch + row * channels + h * head_size;
    for (int64_t c = 0; c < head_size; ++c) transposed[c * span + r] = static_cast<acc_t>(source[c]);
  }
  acc_t sums[kTapVectors * lanes];
  for (int64_t j = first; j < end; ++j) {
    const scalar_t* grad_head = grad_batch + j * channels + h * head_size;
    const acc_t* taps_of_j = transposed.data() + (j - first);  // channel c's taps start at c * span
    Vector even[kTapVectors] = {}, odd[kTapVectors] = {};
    int64_t c = 0;
    for (; c + 2 <= head_size; c += 2) {
      const acc_t g_even = static_cast<acc_t>(grad_head[c]), g_odd = static_cast<acc_t>(grad_head[c + 1]);
      for (int v = 0; v < kTapVectors; ++v) {
        even[v] += g_even * load_lanes<acc_t>(taps_of_j + c * span + v * lanes);
        odd[v] += g_odd * load_lanes<acc_t>(taps_of_j + (c + 1) * span + v * lanes);
      }
    }
    if (c < head_size) {
      const acc_t g_even = static_cast<acc_t>(grad_head[c]);
      for (int v = 0; v < kTapVectors; ++v) even[v] += g_even * load_lanes<acc_t>(taps_of_j + c * span + v * lanes);
    }
    for (int v = 0; v < kTapVectors; ++v) store_lanes<acc_t>(sums + v * lanes, even[v] + odd[v]);
    store(j, sums);
  }
}

// The same for any number of taps: four taps at a time, each a dot product over the head (ending
// in a horizontal sum).
template <typename acc_t, typename scalar_t, typename Store>
void tap_gradients_by_dots(const scalar_t* x_batch, const scalar_t* grad_batch, int64_t length, int64_t channels,
                           int64_t heads, int64_t h, int64_t taps, int64_t padding_l, int64_t first, int64_t end,
                           const scalar_t* zeros, const Store& store) {
  const int64_t head_size = channels / heads;
  std::vector<acc_t> grad_weight_row(taps);
  for (int64_t j = first; j < end; ++j) {
    const int64_t tap_first = std::max<int64_t>(0, padding_l - j);
    const int64_t tap_end = std::min(taps, length + padding_l - j);
    const scalar_t* grad_head = grad_batch + j * channels + h * head_size;
    const auto x_row = [&](int64_t k) {  // x[j + k - padding_l] of head h, zeros outside
      return k >= tap_first && k < tap_end ? x_batch + conv_source(j, k, padding_l) * channels + h * head_size : zeros;
    };
    int64_t k = 0;
    for (; k + 4 <= taps; k += 4) {
      const scalar_t* const rows[4] = {x_row(k), x_row(k + 1), x_row(k + 2), x_row(k + 3)};
      acc_t products[4];
      dots(grad_head, rows, head_size, products);
      std::copy_n(products, 4, grad_weight_row.begin() + k);
    }
    for (; k < taps; ++k) {
      const scalar_t* const rows[1] = {x_row(k)};
      acc_t products[1];
      dots(grad_head, rows, head_size, products);
      grad_weight_row[k] = products[0];
    }
    store(j, grad_weight_row.data());
  }
}

// The largest reach of any token's window (see Reach), over all batch rows, in parallel.
template <typename scalar_t, typename acc_t>
Reach offset_reach(const TalkOffsets<scalar_t, acc_t>& offsets, int64_t batch) {
  const int64_t length = offsets.length, heads = offsets.heads;
  const auto widest = [](const Reach& a, const Reach& b) {
    return Reach{std::max(a.before, b.before), std::max(a.after, b.after)};
  };
  return at::parallel_reduce(0, batch * length, kTile, Reach{0, 0}, [&](int64_t begin, int64_t end, Reach reach) {
    for (int64_t token = begin; token < end; ++token) {
      const int64_t b = token / length, t = token % length;
      for (int64_t h = 0; h < heads; ++h) widen_reach(reach, t, offsets.left(b, t, h), offsets.right(b, t, h));
    }
    return reach;
  }, widest);
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
    const auto offsets = talk_offsets<scalar_t, acc_t>(offset_left, offset_right, max_left, max_right);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    const acc_t inverse_normalizer = acc_t(1) / window_normalizer<acc_t>(max_left, max_right);
    const std::vector<scalar_t> zeros(head_size, scalar_t(0));  // x[T], the row past the end

    for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
      const int64_t tokens = end - first;
      // The tile's window edges, (tokens, H) each, and the rows [lowest[h], highest[h]] they touch.
      std::vector<Edge<acc_t>> lefts(tokens * heads), rights(tokens * heads);
      std::vector<int64_t> lowest(heads, length), highest(heads, 0);
      for (int64_t t = first; t < end; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          const Edge<acc_t> left = offsets.left(b, t, h), right = offsets.right(b, t, h);
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
            const scalar_t* x_right = right.index < length ? x_batch + right.index * channels + h * head_size : zeros.data();
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
    const auto offsets = talk_offsets<scalar_t, acc_t>(offset_left, offset_right, max_left, max_right);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    const scalar_t* grad_data = grad_out.const_data_ptr<scalar_t>();
    scalar_t* grad_x_data = grad_x.mutable_data_ptr<scalar_t>();
    scalar_t* grad_left_data = grad_left.mutable_data_ptr<scalar_t>();
    scalar_t* grad_right_data = offset_right.defined() ? grad_right.mutable_data_ptr<scalar_t>() : nullptr;
    const acc_t normalizer = window_normalizer<acc_t>(max_left, max_right);
    const acc_t inverse_normalizer = acc_t(1) / normalizer;
    const std::vector<scalar_t> zeros(head_size, scalar_t(0));  // x[T], the row past the end
    // How far any window reaches decides which tokens contribute to a tile of grad_x.
    const Reach reach = offset_reach(offsets, batch);

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
        for (int64_t h = 0; h < heads; ++h) {
          const Edge<acc_t> left = offsets.left(b, t, h), right = offsets.right(b, t, h);
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
      const scalar_t* x_batch = x_data + b * length * channels;
      for (int64_t t = first; t < end; ++t) {
        // Taps [tap_first, tap_end) read rows inside the sequence (conv_source in [0, T)).
        const int64_t tap_first = std::max<int64_t>(0, padding_l - t);
        const int64_t tap_end = std::min(taps, length + padding_l - t);
        for (int64_t h = 0; h < heads; ++h) {
          weighted_row_sum<acc_t>(
              out_data + (b * length + t) * channels + h * head_size, head_size, tap_first, tap_end,
              [&](int64_t k) { return static_cast<acc_t>(w(b, t, h, k)); },
              [&](int64_t k) { return x_batch + conv_source(t, k, padding_l) * channels + h * head_size; });
        }
      }
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> conv_backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                 const at::Tensor& weight, int64_t padding_l, bool sum_weight_gradient) {
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor x = x_in.contiguous();
  const int64_t batch = x.size(0), length = x.size(1), channels = x.size(2);
  const int64_t heads = weight.size(2), taps = weight.size(3), head_size = channels / heads;
  const int64_t tiles = ceil_div(length, kTile);
  at::Tensor grad_x = at::empty(x.sizes(), x.options());
  // Per token, or (LightConv) one partial sum per task, (B * tiles, H, K), summed below: no
  // (B, T, H, K) tensor to write and read back.
  const auto accumulation = x.options().dtype(at::toOpMathType(x.scalar_type()));
  at::Tensor grad_weight = sum_weight_gradient ? at::zeros({batch * tiles, heads, taps}, accumulation)
                                               : at::empty({batch, length, heads, taps}, accumulation);

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const StridedWeight<scalar_t> w = strided_weight<scalar_t>(weight);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    const scalar_t* grad_data = grad_out.const_data_ptr<scalar_t>();
    scalar_t* grad_x_data = grad_x.mutable_data_ptr<scalar_t>();
    acc_t* grad_weight_data = grad_weight.mutable_data_ptr<acc_t>();
    const std::vector<scalar_t> zeros(head_size, scalar_t(0));  // the rows outside the sequence
    for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
      const scalar_t* x_batch = x_data + b * length * channels;
      const scalar_t* grad_batch = grad_data + b * length * channels;
      for (int64_t j = first; j < end; ++j) {
        // grad_x[j] gathers tap k of every output t = j - k + padding_l in [0, T) that read x[j].
        const int64_t gather_first = std::max<int64_t>(0, j + padding_l - length + 1);
        const int64_t gather_end = std::min(taps, j + padding_l + 1);
        for (int64_t h = 0; h < heads; ++h) {
          weighted_row_sum<acc_t>(
              grad_x_data + (b * length + j) * channels + h * head_size, head_size, gather_first, gather_end,
              [&](int64_t k) { return static_cast<acc_t>(w(b, j - k + padding_l, h, k)); },
              [&](int64_t k) { return grad_batch + (j - k + padding_l) * channels + h * head_size; });
        }
      }
      // grad_weight[j, h, k] = <grad_out[j], x[j + k - padding_l]> over head h, 0 where that row is outside.
      std::vector<acc_t> transposed;
      for (int64_t h = 0; h < heads; ++h) {
        const auto store = [&](int64_t j, const acc_t* gradients) {
          if (sum_weight_gradient) {
            acc_t* task_sum = grad_weight_data + ((b * tiles + first / kTile) * heads + h) * taps;
            for (int64_t k = 0; k < taps; ++k) task_sum[k] += gradients[k];
          } else {
            std::copy_n(gradients, taps, grad_weight_data + ((b * length + j) * heads + h) * taps);
          }
        };
        const auto in_registers = [&](auto tap_vectors) {
          tap_gradients<decltype(tap_vectors)::value, acc_t>(x_batch, grad_batch, length, channels, heads, h,
                                                              padding_l, first, end, transposed, store);
        };
        // One vector of taps or fewer (k = 3): the transposed copy costs more than the horizontal
        // sums it saves (measured: k = 3 forward+backward 1.5x slower that way).
        switch (ceil_div(taps, Lanes<acc_t>::count)) {
          case 2: in_registers(std::integral_constant<int, 2>{}); break;
          case 3: in_registers(std::integral_constant<int, 3>{}); break;
          case 4: in_registers(std::integral_constant<int, 4>{}); break;
          default:
            tap_gradients_by_dots<acc_t>(x_batch, grad_batch, length, channels, heads, h, taps, padding_l, first,
                                         end, zeros.data(), store);
        }
      }
    });
  });
  return {grad_x, sum_weight_gradient ? grad_weight.sum(0) : grad_weight};
}

}  // namespace talk_hf

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  talk_hf::bind_operators(module);
  module.def("few_rows_linear", &talk_hf::few_rows_linear, "input (..., in) x weight (out, in)^T + bias, for a few input rows");
}
