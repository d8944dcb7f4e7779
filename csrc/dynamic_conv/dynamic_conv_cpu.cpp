// C++ CPU kernels of dynamic_conv/light_conv, built just in time by talk_hf.ops._extension.  The
// per-element math comes from talk_math.h, shared with the CUDA kernels; the work split (tasks of
// one batch row and a tile of kTile time steps) from cpu_tiles.h.
//
// Speed (the short convolutions do a few flops per byte, so memory traffic decides): every task
// reads the rows it needs as whole contiguous (C,) rows, not one head at a time, and its inner
// loops run over channels with no branch inside, accumulating in vector-register variables (Lanes)
// where they sum over taps or channels.  The build may target the host's vector instructions (see
// native_cpu in talk_hf/ops/_build/build_folder.py).
//
// Packed rows: a tap that reads outside its token's span (Spans: RowSpans, the whole row, or
// DocumentSpans, the token's document) reads zero.  The tap ranges are worked out per token, so the
// inner loops do not change; each kernel is instantiated once per kind of span, and the RowSpans one
// is the unpacked kernel.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "cpu_tiles.h"
#include "cpu_vector.h"
#include "tensors.h"

namespace talk_hf {
namespace {

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

}  // namespace

at::Tensor conv_forward(const at::Tensor& x_in, const at::Tensor& weight, int64_t padding_l,
                        const std::optional<at::Tensor>& document_edges) {
  const at::Tensor x = x_in.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  const int64_t batch = x.size(0), length = x.size(1), channels = x.size(2);
  const int64_t heads = weight.size(2), taps = weight.size(3), head_size = channels / heads;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "conv_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const StridedWeight<scalar_t> w = strided_weight<scalar_t>(weight);
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    with_document_spans(document_edges, x, [&](const auto& spans) {
      for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
        const scalar_t* x_batch = x_data + b * length * channels;
        for (int64_t t = first; t < end; ++t) {
          const TapRange inside = taps_inside(spans(b, t), t, taps, padding_l);
          for (int64_t h = 0; h < heads; ++h) {
            weighted_row_sum<acc_t>(
                out_data + (b * length + t) * channels + h * head_size, head_size, inside.first, inside.end,
                [&](int64_t k) { return static_cast<acc_t>(w(b, t, h, k)); },
                [&](int64_t k) { return x_batch + conv_source(t, k, padding_l) * channels + h * head_size; });
          }
        }
      });
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> conv_backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                 const at::Tensor& weight, int64_t padding_l, bool sum_weight_gradient,
                                                 const std::optional<at::Tensor>& document_edges) {
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
    with_document_spans(document_edges, x, [&](const auto& spans) {
      for_each_tile(batch, length, [&](int64_t b, int64_t first, int64_t end) {
        const scalar_t* x_batch = x_data + b * length * channels;
        const scalar_t* grad_batch = grad_data + b * length * channels;
        for (int64_t j = first; j < end; ++j) {
          // grad_x[j] gathers tap k of every output t = j - k + padding_l that read x[j]: the outputs in
          // the span of j (t's span holds j exactly where j's holds t).
          const Span span = spans(b, j);
          const int64_t gather_first = std::max<int64_t>(0, j + padding_l - span.last);
          const int64_t gather_end = std::min(taps, j + padding_l - span.first + 1);
          for (int64_t h = 0; h < heads; ++h) {
            weighted_row_sum<acc_t>(
                grad_x_data + (b * length + j) * channels + h * head_size, head_size, gather_first, gather_end,
                [&](int64_t k) { return static_cast<acc_t>(w(b, j - k + padding_l, h, k)); },
                [&](int64_t k) { return grad_batch + (j - k + padding_l) * channels + h * head_size; });
          }
        }
        // grad_weight[j, h, k] = <grad_out[j], x[j + k - padding_l]> over head h, 0 where that row is
        // outside the sequence (the functions below read zeros there) or, packed, outside the span of j
        // (`store` drops those taps' gradients).
        std::vector<acc_t> transposed;
        for (int64_t h = 0; h < heads; ++h) {
          const auto store = [&](int64_t j, const acc_t* gradients) {
            using Spans = std::decay_t<decltype(spans)>;
            const TapRange inside = Spans::packed ? taps_inside(spans(b, j), j, taps, padding_l) : TapRange{0, taps};
            if (sum_weight_gradient) {
              acc_t* task_sum = grad_weight_data + ((b * tiles + first / kTile) * heads + h) * taps;
              for (int64_t k = inside.first; k < inside.end; ++k) task_sum[k] += gradients[k];
            } else {
              acc_t* token_gradient = grad_weight_data + ((b * length + j) * heads + h) * taps;
              std::fill(token_gradient, token_gradient + inside.first, acc_t(0));
              std::copy(gradients + inside.first, gradients + inside.end, token_gradient + inside.first);
              std::fill(token_gradient + inside.end, token_gradient + taps, acc_t(0));
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
  });
  return {grad_x, sum_weight_gradient ? grad_weight.sum(0) : grad_weight};
}

}  // namespace talk_hf
