// Per-element math of the operators, shared by the C++ CPU kernels (csrc/<op>/<op>_cpu.cpp) and
// the CUDA kernels (csrc/<op>/<op>_cuda*.cu): every function here is `__host__ __device__` under
// nvcc and a plain inline function under a C++ compiler, so the CPU tests exercise the arithmetic
// the GPU runs.
//
// Notation (talk_conv, as talk_hf/ops/talk_conv/__init__.py states it): a token's window is [u_a, u_b)
// in token units with
//   u_a = clamp(t - offset_left * max_left, 0, T - 1)
//   u_b = clamp(t + offset_right * max_right, 0, T - 1) + 1          (u_b = t + 1 when causal)
// and out[t] = (F(u_b) - F(u_a)) / K, K = max_left + max_right + 1, where
//   F(u) = P[floor u] + frac(u) * x[floor u],   P[i] = x[0] + ... + x[i - 1],   x[T] = 0,
// is the integral of the step signal x[floor(.)] from 0 to u.  Kernels evaluate P only as a local
// prefix sum over the rows a tile of tokens reaches (never one global prefix sum).
//
// In a packed row (talk_hf/ops/documents.py) the clamp is into the token's document [start, end]
// instead of [0, T - 1]: a Span, read per token by RowSpans (no packing) or DocumentSpans.
//
// Offsets are not checked by the kernels (no host synchronisation): any value is safe.  Edges are
// clamped into the span and a NaN edge becomes its first token, so no index ever leaves [0, T]; a negative
// offset gives the signed integral F(u_b) - F(u_a) of a reversed window.  The PyTorch path
// rejects negative and NaN offsets instead.  Edge positions are computed relative to t (see
// shifted_edge), which is more precise than the PyTorch path's t - offset * max_left at long T.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TALK_HD __host__ __device__ __forceinline__
#else
#define TALK_HD inline
#endif

namespace talk_hf {

// One end of a window: u = index + frac with 0 <= frac < 1.  `free` is false where the edge was
// clamped (or is fixed, as the causal right edge): no gradient flows to its offset there.
template <typename acc_t>
struct Edge {
  int64_t index;
  acc_t frac;
  bool free;
};

// The tokens [first, last] a token's window may cover: its row [0, T - 1], or in a packed row its
// document (first <= t <= last).
struct Span {
  int64_t first, last;
};

// The span of every token of a row: [0, T - 1], the row's constant edges, so a kernel instantiated
// with RowSpans compiles to its unpacked form, with no per-token edge loads (`packed` is false).
struct RowSpans {
  static constexpr bool packed = false;
  int64_t length;

  TALK_HD Span operator()(int64_t, int64_t) const { return Span{0, length - 1}; }
};

// The span of token (b, t) in a packed row: its document, [edges[b, t, 0], edges[b, t, 1]], from the
// contiguous (B, T, 2) int32 edges that talk_hf/ops/documents.py derives from position_ids.
struct DocumentSpans {
  static constexpr bool packed = true;
  const int32_t* edges;
  int64_t length;

  TALK_HD Span operator()(int64_t b, int64_t t) const {
    const int32_t* edge = edges + 2 * (b * length + t);
    return Span{edge[0], edge[1]};
  }
};

// The edge at position t + shift, clamped into the span of t.  The shift (a few tokens: offset
// times max offset) is split into whole and fractional parts before t is added, so the fraction
// keeps acc_t's precision at any T (t - shift in float32 would keep only 7 fractional bits at
// t = 70,000).  torch.clamp passes gradients at the bounds themselves, so `free` includes them.  A
// NaN shift gives the span's first token; infinite shifts clamp like large ones.
template <typename acc_t>
TALK_HD Edge<acc_t> shifted_edge(int64_t t, acc_t shift, Span span) {
  if (!(shift == shift)) return Edge<acc_t>{span.first, acc_t(0), false};
  const acc_t limit = static_cast<acc_t>(2 * (span.last - span.first + 1));  // past either end: clamps the same way
  shift = shift < -limit ? -limit : (shift > limit ? limit : shift);
  const acc_t whole = std::floor(shift);
  const int64_t index = t + static_cast<int64_t>(whole);
  const acc_t frac = shift - whole;
  if (index < span.first) return Edge<acc_t>{span.first, acc_t(0), false};
  if (index > span.last || (index == span.last && frac > acc_t(0))) return Edge<acc_t>{span.last, acc_t(0), false};
  return Edge<acc_t>{index, frac, true};
}

// u_a of token t: clamp(t - offset * max_left, span.first, span.last).
template <typename acc_t>
TALK_HD Edge<acc_t> left_edge(int64_t t, Span span, acc_t offset, int64_t max_left) {
  return shifted_edge<acc_t>(t, -(offset * static_cast<acc_t>(max_left)), span);
}

// u_b of token t: clamp(t + offset * max_right, span.first, span.last) + 1.
template <typename acc_t>
TALK_HD Edge<acc_t> right_edge(int64_t t, Span span, acc_t offset, int64_t max_right) {
  Edge<acc_t> edge = shifted_edge<acc_t>(t, offset * static_cast<acc_t>(max_right), span);
  edge.index += 1;
  return edge;
}

// u_b of token t in the causal form: exactly t + 1, no offset.
template <typename acc_t>
TALK_HD Edge<acc_t> causal_right_edge(int64_t t) {
  return Edge<acc_t>{t + 1, acc_t(0), false};
}

// F(u) from the prefix sum at floor(u) and the token x[floor(u)] (0 when floor(u) == T).
template <typename acc_t>
TALK_HD acc_t integral_to(const Edge<acc_t>& edge, acc_t prefix_at_index, acc_t x_at_index) {
  return prefix_at_index + edge.frac * x_at_index;
}

// The normaliser K = max_left + max_right + 1 (the constant maximum window).
template <typename acc_t>
TALK_HD acc_t window_normalizer(int64_t max_left, int64_t max_right) {
  return static_cast<acc_t>(max_left + max_right + 1);
}

// d out[t] / d offset = max_offset * x[edge.index] / K; this is the factor in front of x.
template <typename acc_t>
TALK_HD acc_t offset_gradient_factor(const Edge<acc_t>& edge, int64_t max_offset, acc_t normalizer) {
  return edge.free ? static_cast<acc_t>(max_offset) / normalizer : acc_t(0);
}

// The gradient of out[t] with respect to x, as a difference array: out[t] = sum_j w_j x[j] with
// w = cumsum(D) and D holding `weight` at `position` for the four entries below.  The step
// signal's integral over [u_a, u_b) puts 1 - frac and frac on the two cells at each edge.
template <typename acc_t>
struct ScatterEntry {
  int64_t position;
  acc_t weight;
};

template <typename acc_t>
TALK_HD ScatterEntry<acc_t> scatter_entry(const Edge<acc_t>& left, const Edge<acc_t>& right, int which) {
  switch (which) {
    case 0: return ScatterEntry<acc_t>{left.index, acc_t(1) - left.frac};
    case 1: return ScatterEntry<acc_t>{left.index + 1, left.frac};
    case 2: return ScatterEntry<acc_t>{right.index, right.frac - acc_t(1)};
    default: return ScatterEntry<acc_t>{right.index + 1, -right.frac};
  }
}

// Reads the window edges of token (b, t) of head h from contiguous (B, T, H) offsets, clamped into
// the token's span.
template <typename scalar_t, typename acc_t>
struct TalkOffsets {
  const scalar_t* offset_left;
  const scalar_t* offset_right;  // nullptr in the causal form
  int64_t length, heads, max_left, max_right;

  TALK_HD Edge<acc_t> left(int64_t b, int64_t t, int64_t h, Span span) const {
    return left_edge<acc_t>(t, span, static_cast<acc_t>(offset_left[(b * length + t) * heads + h]), max_left);
  }
  TALK_HD Edge<acc_t> right(int64_t b, int64_t t, int64_t h, Span span) const {
    if (offset_right == nullptr) return causal_right_edge<acc_t>(t);
    return right_edge<acc_t>(t, span, static_cast<acc_t>(offset_right[(b * length + t) * heads + h]), max_right);
  }
};

// How far a token's window reaches, for the backward pass: the contributors to a target row j
// are the tokens t with j - reach.after <= t <= j + reach.before.
struct Reach {
  int64_t before;  // max over tokens of t - (lowest scatter position)
  int64_t after;   // max over tokens of (highest scatter position) - t
};

template <typename acc_t>
TALK_HD void widen_reach(Reach& reach, int64_t t, const Edge<acc_t>& left, const Edge<acc_t>& right) {
  const int64_t lowest = left.index < right.index ? left.index : right.index;
  const int64_t highest = (left.index > right.index ? left.index : right.index) + 1;
  if (t - lowest > reach.before) reach.before = t - lowest;
  if (highest - t > reach.after) reach.after = highest - t;
}

TALK_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// depthwise_conv's input gate (SliceNet's ConvStep: ReLU, then the padding mask), each part chosen
// at compile time: it convolves u = relu(x) * scale[row] instead of x, scale[row] the mask (0 or 1)
// of the row's (b, t).  V is a value or a vector of values (GCC vector extension) of one row.
// `v < 0 ? 0 : v` keeps a NaN, as torch.relu does.
template <bool kRelu, bool kScale>
struct InputGate {
  static constexpr bool gates = kRelu || kScale;

  template <typename V, typename acc_t>
  TALK_HD static V apply(V v, const acc_t* scale, int64_t row) {
    if constexpr (kRelu) v = v < V{} ? V{} : v;
    if constexpr (kScale) v = v * scale[row];
    return v;
  }

  // The gradient for x of row `row` from the gradient `grad` for its gated value u: zero where the
  // ReLU cut (x <= 0, as torch.relu's backward), times the row's scale.
  template <typename V, typename acc_t>
  TALK_HD static V backward(V grad, V x, const acc_t* scale, int64_t row) {
    if constexpr (kRelu) grad = x > V{} ? grad : V{};
    if constexpr (kScale) grad = grad * scale[row];
    return grad;
  }
};

// DynamicConv/LightConv: tap k of output t reads x[t + k - padding_l], zero outside [0, T) (in a
// packed row: outside the span of t).
TALK_HD int64_t conv_source(int64_t t, int64_t tap, int64_t padding_l) { return t + tap - padding_l; }

TALK_HD bool in_sequence(int64_t index, int64_t length) { return index >= 0 && index < length; }

// The taps [first, end) of output t that read inside its span (conv_source in [span.first, span.last]).
struct TapRange {
  int64_t first, end;
};

TALK_HD TapRange taps_inside(Span span, int64_t t, int64_t taps, int64_t padding_l) {
  const int64_t first = span.first + padding_l - t, end = span.last + 1 + padding_l - t;
  return TapRange{first > 0 ? first : 0, end < taps ? end : taps};
}

// Whether tap k of token (b, t) reads inside t's document (conv_source in its span) in a packed row;
// always true for RowSpans, whose kernels zero the rows outside [0, T) themselves.
template <typename Spans>
TALK_HD bool tap_reads_document(const Spans& spans, int64_t b, int64_t t, int64_t tap, int64_t padding_l) {
  if (!Spans::packed) return true;  // a constant: the unpacked kernels compile no test
  const Span span = spans(b, t);
  const int64_t source = conv_source(t, tap, padding_l);
  return source >= span.first && source <= span.last;
}

// Reads weight[b, t, h, k] through its strides (zero batch and time strides for LightConv).
template <typename scalar_t>
struct StridedWeight {
  const scalar_t* data;
  int64_t stride_b, stride_t, stride_h, stride_k;

  TALK_HD scalar_t operator()(int64_t b, int64_t t, int64_t h, int64_t k) const {
    return data[b * stride_b + t * stride_t + h * stride_h + k * stride_k];
  }
};

}  // namespace talk_hf
