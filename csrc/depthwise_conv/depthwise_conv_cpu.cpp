// C++ CPU kernels of depthwise_conv (one static kernel per channel), built just in time by
// talk_hf.ops._extension with the other CPU kernels (cpu_bindings.cpp holds the module's bindings):
//   out[b, t, c] = sum_k w[c, k] * u[b, t + k * dilation - left, c],   zero outside [0, T),
// u = x, or its gated form relu(x) * scale[b, t] (each part optional).
//
// Layout and speed: x is (B, T, C) contiguous, so the C channels of a time step are one
// contiguous row and every inner loop runs over channels in vector registers (Lanes), with no
// branch inside: the taps that read inside the sequence are worked out once per step.  The weight
// is transposed to (K, C) in the accumulation type, so tap k's weights for a block of channels are
// one vector load.  Work is cut into tasks of one batch row and a tile of time steps, and each task
// runs through the channels in blocks of up to eight vector registers (64 float32 channels), all
// the tile's steps for one block before the next, so the rows a block's taps read stay in L1.
//
// An optional input gate (talk_math.h's InputGate: SliceNet's ReLU and padding mask) is applied to
// each row as it is read, so the gated input is never written out; the backward recomputes it from
// x, and multiplies the gradient for x by the gate's derivative as it stores it.
//
// Packed rows: a tap that reads outside its step's span (talk_math.h's Spans: RowSpans, the whole
// row, or DocumentSpans, the step's document) reads zero.  Each kernel is instantiated once per kind
// of span, and the RowSpans one is the unpacked kernel: the forward's tap ranges take the span's
// bounds where they took 0 and T - 1, and the weight gradient's per-step test of the span is
// compiled in for DocumentSpans only.
//
// The backward has no atomics and no per-token weight gradients: the gradient for x is the
// forward with the taps reversed, and each thread sums the weight gradient of its own contiguous
// run of tasks into a private (K, C) buffer; the buffers are added at the end (in a fixed order
// for a given thread count).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <type_traits>

#include "cpu_vector.h"
#include "ops.h"
#include "talk_math.h"
#include "tensors.h"

namespace talk_hf {
namespace {

// Time steps per task, at least: long enough that the halo of rows a tile reads beyond its own
// (the kernel's reach) is a small part of what it reads.
constexpr int64_t kMinTile = 128;

// kCount packs of channels: vector registers of Lanes<acc_t> (kVector) or single acc_t values
// (the channels left over after the last whole vector).
template <typename acc_t, int kCount, bool kVector>
struct ChannelBlock {
  using Pack = std::conditional_t<kVector, typename Lanes<acc_t>::type, acc_t>;
  static constexpr int count = kCount;
  static constexpr int64_t width = kVector ? Lanes<acc_t>::count : 1;

  template <typename scalar_t>
  static Pack load(const scalar_t* source) {
    if constexpr (kVector) {
      return load_lanes<acc_t>(source);
    } else {
      return static_cast<acc_t>(*source);
    }
  }
  template <typename scalar_t>
  static void store(scalar_t* target, const Pack& pack) {
    if constexpr (kVector) {
      store_lanes<acc_t>(target, pack);
    } else {
      *target = static_cast<scalar_t>(pack);
    }
  }
};

// Calls body(block, c) for consecutive blocks of channels covering [0, channels): blocks of eight
// vector registers, then of two, then one, then single channels.
template <typename acc_t, typename Body>
inline void for_channel_blocks(int64_t channels, const Body& body) {
  constexpr int64_t lanes = Lanes<acc_t>::count;
  int64_t c = 0;
  for (; c + 8 * lanes <= channels; c += 8 * lanes) body(ChannelBlock<acc_t, 8, true>{}, c);
  for (; c + 2 * lanes <= channels; c += 2 * lanes) body(ChannelBlock<acc_t, 2, true>{}, c);
  for (; c + lanes <= channels; c += lanes) body(ChannelBlock<acc_t, 1, true>{}, c);
  for (; c < channels; ++c) body(ChannelBlock<acc_t, 1, false>{}, c);
}

// The smallest k >= 0 with k * step >= n (step > 0).
inline int64_t first_multiple_reaching(int64_t n, int64_t step) { return n <= 0 ? 0 : ceil_div(n, step); }

// One call's geometry: (B, T, C) tensors, K taps `dilation` apart, tap 0 reading `left` steps back.
struct Geometry {
  int64_t batch, length, channels, taps, dilation, left;

  int64_t tile() const { return std::max(kMinTile, 2 * (taps - 1) * dilation); }
  int64_t tasks() const { return batch * ceil_div(length, tile()); }

  // The taps [first, end) of step t that read rows inside its span ([0, T - 1] unpacked).  Steps
  // whose every tap is inside (unpacked: all but the first `left` and the last (K - 1) * dilation -
  // left) skip the divisions, which cost more than a short kernel's multiply-adds.
  void taps_of_step(int64_t t, Span span, int64_t& first, int64_t& end) const {
    if (t - left >= span.first && t + (taps - 1) * dilation - left <= span.last) {
      first = 0;
      end = taps;
      return;
    }
    first = first_multiple_reaching(span.first + left - t, dilation);
    end = std::min(taps, first_multiple_reaching(span.last + 1 + left - t, dilation));
  }

  // The batch row and the steps [first, end) of a task.
  void task(int64_t index, int64_t& b, int64_t& first, int64_t& end) const {
    const int64_t tiles = ceil_div(length, tile());
    b = index / tiles;
    first = (index % tiles) * tile();
    end = std::min(first + tile(), length);
  }
};

// out[b, t] = sum_k w_rows[k] * in[b, t + k * dilation - left] over the rows in the span of t, for the
// steps [first, end) of batch row b, w_rows (K, C) in acc_t: the forward, and with reversed taps the
// gradient for x (whose outputs in the span of t are those whose taps read t).  The forward
// reads the rows through the input gate (`Gate::apply`); the gradient for x leaves through its
// backward (`Gate::backward`, which reads x at the output's own row).  Rows are numbered b * T + t.
template <typename Gate, bool kForward, typename acc_t, typename scalar_t, typename Spans>
void correlate_tile(const Geometry& g, const Spans& spans, const scalar_t* in, const acc_t* w_rows, scalar_t* out,
                    const scalar_t* x, const acc_t* scale, int64_t b, int64_t first, int64_t end) {
  const int64_t channels = g.channels, row_base = b * g.length;
  const scalar_t* in_batch = in + row_base * channels;
  scalar_t* out_batch = out + row_base * channels;
  for_channel_blocks<acc_t>(channels, [&](auto block, int64_t c) {
    using Block = decltype(block);
    for (int64_t t = first; t < end; ++t) {
      int64_t tap_first, tap_end;
      g.taps_of_step(t, spans(b, t), tap_first, tap_end);
      typename Block::Pack sums[Block::count] = {};
      for (int64_t k = tap_first; k < tap_end; ++k) {
        const int64_t source_t = t + k * g.dilation - g.left;
        const scalar_t* source = in_batch + source_t * channels + c;
        const acc_t* weight = w_rows + k * channels + c;
        for (int v = 0; v < Block::count; ++v) {
          auto value = Block::load(source + v * Block::width);
          if constexpr (kForward) value = Gate::apply(value, scale, row_base + source_t);
          sums[v] += Block::load(weight + v * Block::width) * value;
        }
      }
      const int64_t offset = t * channels + c;
      for (int v = 0; v < Block::count; ++v) {
        if constexpr (!kForward && Gate::gates) {
          const auto x_value = Block::load(x + row_base * channels + offset + v * Block::width);
          sums[v] = Gate::backward(sums[v], x_value, scale, row_base + t);
        }
        Block::store(out_batch + offset + v * Block::width, sums[v]);
      }
    }
  });
}

// partial[k] += sum over the steps t in [first, end) of grad[b, t] * u[b, t + k * dilation - left]
// (rows inside the span of t only), u the gated x, partial (K, C) in acc_t.
template <typename Gate, typename acc_t, typename scalar_t, typename Spans>
void weight_gradient_tile(const Geometry& g, const Spans& spans, const scalar_t* grad, const scalar_t* x,
                          const acc_t* scale, acc_t* partial, int64_t b, int64_t first, int64_t end) {
  const int64_t channels = g.channels, row_base = b * g.length;
  const scalar_t* grad_batch = grad + row_base * channels;
  const scalar_t* x_batch = x + row_base * channels;
  for_channel_blocks<acc_t>(channels, [&](auto block, int64_t c) {
    using Block = decltype(block);
    for (int64_t k = 0; k < g.taps; ++k) {
      const int64_t shift = k * g.dilation - g.left;  // tap k of step t reads row t + shift
      const int64_t t_first = std::max(first, -shift), t_end = std::min(end, g.length - shift);
      if (t_first >= t_end) continue;
      typename Block::Pack sums[Block::count] = {};
      for (int64_t t = t_first; t < t_end; ++t) {
        if constexpr (Spans::packed) {
          const Span span = spans(b, t);
          if (t + shift < span.first || t + shift > span.last) continue;
        }
        const scalar_t* grad_row = grad_batch + t * channels + c;
        const scalar_t* x_row = x_batch + (t + shift) * channels + c;
        for (int v = 0; v < Block::count; ++v) {
          const auto u = Gate::apply(Block::load(x_row + v * Block::width), scale, row_base + t + shift);
          sums[v] += Block::load(grad_row + v * Block::width) * u;
        }
      }
      acc_t* target = partial + k * channels + c;
      for (int v = 0; v < Block::count; ++v) {
        Block::store(target + v * Block::width, Block::load(target + v * Block::width) + sums[v]);
      }
    }
  });
}

Geometry geometry_of(const at::Tensor& x, const at::Tensor& weight, int64_t dilation, int64_t left) {
  return {x.size(0), x.size(1), x.size(2), weight.size(1), dilation, left};
}

// The weight as (K, C) rows in the accumulation dtype, its taps reversed with `reversed`.
at::Tensor weight_rows(const at::Tensor& weight, bool reversed) {
  const at::Tensor rows = weight.to(at::toOpMathType(weight.scalar_type())).t();
  return (reversed ? rows.flip(0) : rows).contiguous();
}

}  // namespace

at::Tensor depthwise_forward(const at::Tensor& x_in, const at::Tensor& weight, int64_t dilation, int64_t left,
                             const std::optional<at::Tensor>& input_scale, bool relu,
                             const std::optional<at::Tensor>& document_edges) {
  const at::Tensor x = x_in.contiguous();
  const Geometry g = geometry_of(x, weight, dilation, left);
  const at::Tensor w_rows = weight_rows(weight, false), scale = gate_scale(input_scale, x);
  at::Tensor out = at::empty(x.sizes(), x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "depthwise_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    const acc_t* w_data = w_rows.const_data_ptr<acc_t>();
    const acc_t* scale_data = optional_data<acc_t>(scale);
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    with_input_gate(relu, scale_data, [&](auto gate) {
      using Gate = decltype(gate);
      with_document_spans(document_edges, x, [&](const auto& spans) {
        at::parallel_for(0, g.tasks(), 1, [&](int64_t begin, int64_t end) {
          for (int64_t task = begin; task < end; ++task) {
            int64_t b, first, last;
            g.task(task, b, first, last);
            correlate_tile<Gate, true>(g, spans, x_data, w_data, out_data, x_data, scale_data, b, first, last);
          }
        });
      });
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> depthwise_backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                      const at::Tensor& weight, int64_t dilation, int64_t left,
                                                      const std::optional<at::Tensor>& input_scale, bool relu,
                                                      const std::optional<at::Tensor>& document_edges) {
  const at::Tensor grad_out = grad_out_in.contiguous();
  const at::Tensor x = x_in.contiguous();
  const Geometry g = geometry_of(x, weight, dilation, left);
  // grad_u[j] = sum_k w[k] grad[j - k * dilation + left]: the forward of grad with the taps
  // reversed, reading (K - 1) * dilation - left steps back; then through the gate's backward.
  Geometry reversed = g;
  reversed.left = (g.taps - 1) * dilation - left;
  const at::Tensor w_rows = weight_rows(weight, true), scale = gate_scale(input_scale, x);
  at::Tensor grad_x = at::empty(x.sizes(), x.options());
  // One private weight-gradient buffer per run of tasks (one run per thread).
  const int64_t tasks = g.tasks();
  const int64_t runs = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), tasks));
  at::Tensor partials = at::zeros({runs, g.taps, g.channels}, w_rows.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "depthwise_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* x_data = x.const_data_ptr<scalar_t>();
    const scalar_t* grad_data = grad_out.const_data_ptr<scalar_t>();
    const acc_t* w_data = w_rows.const_data_ptr<acc_t>();
    const acc_t* scale_data = optional_data<acc_t>(scale);
    scalar_t* grad_x_data = grad_x.mutable_data_ptr<scalar_t>();
    acc_t* partial_data = partials.mutable_data_ptr<acc_t>();
    with_input_gate(relu, scale_data, [&](auto gate) {
      using Gate = decltype(gate);
      with_document_spans(document_edges, x, [&](const auto& spans) {
        at::parallel_for(0, runs, 1, [&](int64_t run_begin, int64_t run_end) {
          for (int64_t run = run_begin; run < run_end; ++run) {
            acc_t* partial = partial_data + run * g.taps * g.channels;
            for (int64_t task = run * tasks / runs; task < (run + 1) * tasks / runs; ++task) {
              int64_t b, first, last;
              g.task(task, b, first, last);
              correlate_tile<Gate, false>(reversed, spans, grad_data, w_data, grad_x_data, x_data, scale_data, b,
                                          first, last);
              weight_gradient_tile<Gate>(g, spans, grad_data, x_data, scale_data, partial, b, first, last);
            }
          }
        });
      });
    });
  });
  return {grad_x, partials.sum(0).t().contiguous()};
}

}  // namespace talk_hf
