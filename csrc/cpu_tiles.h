// Work split of the C++ CPU kernels of talk_conv and dynamic_conv/light_conv: tasks of one batch
// row and a tile of kTile time steps, run in parallel with at::parallel_for (OpenMP); every task
// owns its output rows, so nothing races.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "talk_math.h"

namespace talk_hf {

// Time steps per task: long enough that a TaLK tile's halo (the rows its offsets reach beyond the
// tile) is a small part of what it reads, short enough that its buffers stay in a core's L2 cache.
constexpr int64_t kTile = 128;

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

}  // namespace talk_hf
