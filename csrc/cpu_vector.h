// Vector-register helpers of the C++ CPU kernels (csrc/<op>/<op>_cpu.cpp): GCC/Clang vector
// extensions, lowered to whatever the build targets (AVX, SSE or scalar code).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace talk_hf {

// Lanes<acc_t>::type: one vector register's worth of acc_t (a GCC/Clang vector extension, lowered
// to whatever the target has: AVX, SSE or scalar code).  Accumulators of this type stay in
// registers, where the compiler keeps arrays of acc_t on the stack between the loop's steps.
template <typename acc_t>
struct Lanes {
  typedef acc_t type __attribute__((vector_size(32)));
  static constexpr int64_t count = 32 / sizeof(acc_t);
};

template <typename acc_t, typename scalar_t>
inline typename Lanes<acc_t>::type load_lanes(const scalar_t* source) {
  typename Lanes<acc_t>::type lanes;
  if constexpr (std::is_same_v<acc_t, scalar_t>) {
    std::memcpy(&lanes, source, sizeof(lanes));
  } else {
    for (int64_t i = 0; i < Lanes<acc_t>::count; ++i) lanes[i] = static_cast<acc_t>(source[i]);
  }
  return lanes;
}

template <typename acc_t, typename scalar_t>
inline void store_lanes(scalar_t* target, const typename Lanes<acc_t>::type& lanes) {
  if constexpr (std::is_same_v<acc_t, scalar_t>) {
    std::memcpy(target, &lanes, sizeof(lanes));
  } else {
    for (int64_t i = 0; i < Lanes<acc_t>::count; ++i) target[i] = static_cast<scalar_t>(lanes[i]);
  }
}

// Asks the CPU to bring `count` elements from `row` on into its caches, one request per cache line
// (64 bytes), without waiting for them: for rows a loop will read soon in an order the hardware
// prefetchers cannot follow.
template <typename scalar_t>
inline void prefetch_row(const scalar_t* row, int64_t count) {
  constexpr int64_t per_line = 64 / sizeof(scalar_t);
  for (int64_t c = 0; c < count; c += per_line) __builtin_prefetch(row + c);
}

// out[n] = sum_c a[c] * rows[n][c] over `count` elements, for n < kDots, in acc_t: two vectors of
// partial sums per row, so a loaded vector of `a` feeds kDots independent chains and no chain
// waits on the previous step's addition.
template <int kDots, typename acc_t, typename scalar_t>
inline void dots(const scalar_t* a, const scalar_t* const (&rows)[kDots], int64_t count, acc_t (&out)[kDots]) {
  using Vector = typename Lanes<acc_t>::type;
  constexpr int64_t lanes = Lanes<acc_t>::count;
  Vector low[kDots] = {}, high[kDots] = {};
  int64_t c = 0;
  for (; c + 2 * lanes <= count; c += 2 * lanes) {
    const Vector a_low = load_lanes<acc_t>(a + c), a_high = load_lanes<acc_t>(a + c + lanes);
    for (int n = 0; n < kDots; ++n) {
      low[n] += a_low * load_lanes<acc_t>(rows[n] + c);
      high[n] += a_high * load_lanes<acc_t>(rows[n] + c + lanes);
    }
  }
  if (c + lanes <= count) {
    const Vector a_low = load_lanes<acc_t>(a + c);
    for (int n = 0; n < kDots; ++n) low[n] += a_low * load_lanes<acc_t>(rows[n] + c);
    c += lanes;
  }
  for (int n = 0; n < kDots; ++n) {
    const Vector partial = low[n] + high[n];
    acc_t total = 0;
    for (int64_t i = 0; i < lanes; ++i) total += partial[i];
    for (int64_t rest = c; rest < count; ++rest) total += static_cast<acc_t>(a[rest]) * static_cast<acc_t>(rows[n][rest]);
    out[n] = total;
  }
}

}  // namespace talk_hf
