// What bounds the CPU dynamic_conv / light_conv forward at k = 31: a stand-alone micro-benchmark of
// its inner loop on one core, float32, with the model shape of bench_ops.py (C = 512, H = 8, so
// 64-channel heads; one batch row of T tokens).  Each variant computes the same convolution
//
//     out[t, c] = sum_k weight[t, h(c), k] * x[t + k - 15, c]        (interior tokens only)
//
// with the same instruction mix as csrc/dynamic_conv/dynamic_conv_cpu.cpp (per tap: one weight
// broadcast, then eight independent vector multiply-adds over the head's 64 channels), and differs
// only in where its operands come from:
//
//   registers             the multiply-adds on operands already in registers: the core's peak for
//                         this mix, the ceiling of everything below
//   kernel_order          the kernel's order (token by token, every head of a token, then the
//                         next token): a token's window of 31 rows x 2 KiB = 62 KiB does not fit
//                         the 32 KiB L1 data cache, so the rows come from L2
//   kernel_order_rows_l1  the same loop with every row read from 8 rows that stay in L1: what the
//                         kernel would run at if its window fitted L1
//   head_order_packed     head by head inside a 128-token tile, over a contiguous copy of the
//                         head's rows (its window is then 8 KiB of consecutive lines in L1), so
//                         the weights and outputs are read and written with a 1-2 KiB stride
//   two_tokens_per_load   the kernel's order, but each loaded vector of a row feeds the taps of
//                         two consecutive tokens (4 vectors of channels at a time): half the loads
//
// Build and run (AVX2 + FMA host; the README's figures come from this):
//
//     g++ -O3 -march=native -std=c++17 benchmarks/cpu_conv_bound.cpp -o /tmp/cpu_conv_bound
//     /tmp/cpu_conv_bound 16384 65536 > benchmarks/results/cpu_conv_bound.json
//
// Each variant is timed 7 times in turn with the others (this VM's speed drifts by tens of percent
// within minutes); the JSON has every time, the median and GFLOP/s.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace {

typedef float Vector __attribute__((vector_size(32)));
constexpr int64_t kChannels = 512, kHeads = 8, kHeadSize = kChannels / kHeads, kTaps = 31, kLeft = 15;
constexpr int64_t kTile = 128;

Vector load(const float* p) {
  Vector v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void store(float* p, Vector v) { std::memcpy(p, &v, sizeof(v)); }

// 64-byte aligned, as PyTorch's CPU allocator aligns tensors (unaligned rows would split loads).
float* aligned_floats(int64_t count, float scale) {
  float* data = static_cast<float*>(std::aligned_alloc(64, (count * 4 + 63) / 64 * 64));
  for (int64_t i = 0; i < count; ++i) data[i] = scale * static_cast<float>(i % 97);
  return data;
}

struct Inputs {
  int64_t length;
  const float* x;       // (T, C)
  const float* weight;  // (T, H, K)
  float* out;           // (T, C)
  float* packed;        // (kTile + kTaps, kHeadSize) scratch
};

// One token's head: out = sum_k weight_row[k] * rows(k), eight vectors of channels.
template <typename Row>
void head_sum(const float* weight_row, const Row& row, float* out) {
  Vector sums[8] = {};
  for (int64_t k = 0; k < kTaps; ++k) {
    const float w = weight_row[k];
    const float* source = row(k);
    for (int v = 0; v < 8; ++v) sums[v] += w * load(source + 8 * v);
  }
  for (int v = 0; v < 8; ++v) store(out + 8 * v, sums[v]);
}

void registers(const Inputs& in) {
  Vector sums[8] = {};
  const Vector operand = load(in.x);
  for (int64_t i = 0; i < (in.length - kTaps - kLeft) * kHeads * kTaps; ++i) {
    const float w = in.weight[i];
    for (int v = 0; v < 8; ++v) sums[v] += w * operand;
  }
  for (int v = 0; v < 8; ++v) store(in.out + 8 * v, sums[v]);
}

template <bool kRowsInL1>
void kernel_order(const Inputs& in) {
  for (int64_t t = kLeft; t < in.length - kTaps; ++t) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const auto row = [&](int64_t k) {
        const int64_t source = kRowsInL1 ? ((t + k) & 7) : t + k - kLeft;
        return in.x + source * kChannels + h * kHeadSize;
      };
      head_sum(in.weight + (t * kHeads + h) * kTaps, row, in.out + t * kChannels + h * kHeadSize);
    }
  }
}

void head_order_packed(const Inputs& in) {
  for (int64_t first = kLeft; first < in.length - kTaps; first += kTile) {
    const int64_t end = std::min(first + kTile, in.length - kTaps);
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t r = 0; r < end - first + kTaps - 1; ++r) {
        std::memcpy(in.packed + r * kHeadSize, in.x + (first - kLeft + r) * kChannels + h * kHeadSize, kHeadSize * 4);
      }
      for (int64_t t = first; t < end; ++t) {
        const auto row = [&](int64_t k) { return in.packed + (t - first + k) * kHeadSize; };
        head_sum(in.weight + (t * kHeads + h) * kTaps, row, in.out + t * kChannels + h * kHeadSize);
      }
    }
  }
}

void two_tokens_per_load(const Inputs& in) {
  for (int64_t t = kLeft; t + 2 <= in.length - kTaps; t += 2) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const float* first_taps = in.weight + (t * kHeads + h) * kTaps;
      const float* second_taps = first_taps + kHeads * kTaps;
      for (int64_t c = 0; c < kHeadSize; c += 32) {
        Vector first[4] = {}, second[4] = {};
        for (int64_t k = 0; k <= kTaps; ++k) {  // row t + k - 15: tap k of token t, tap k - 1 of token t + 1
          const float* source = in.x + (t + k - kLeft) * kChannels + h * kHeadSize + c;
          Vector rows[4];
          for (int v = 0; v < 4; ++v) rows[v] = load(source + 8 * v);
          if (k < kTaps) {
            for (int v = 0; v < 4; ++v) first[v] += first_taps[k] * rows[v];
          }
          if (k > 0) {
            for (int v = 0; v < 4; ++v) second[v] += second_taps[k - 1] * rows[v];
          }
        }
        for (int v = 0; v < 4; ++v) {
          store(in.out + t * kChannels + h * kHeadSize + c + 8 * v, first[v]);
          store(in.out + (t + 1) * kChannels + h * kHeadSize + c + 8 * v, second[v]);
        }
      }
    }
  }
}

double seconds(const std::function<void(const Inputs&)>& variant, const Inputs& in) {
  const auto start = std::chrono::steady_clock::now();
  variant(in);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The host CPU's model name (/proc/cpuinfo), for the record.
std::string host_cpu() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Times every variant at `length` tokens and prints its JSON object (without a trailing newline).
void measure(int64_t length, int rounds) {
  Inputs in{length, aligned_floats(length * kChannels, 1e-3f), aligned_floats(length * kHeads * kTaps, 1e-2f),
            aligned_floats(length * kChannels, 0.f), aligned_floats((kTile + kTaps) * kHeadSize, 0.f)};
  const std::vector<std::pair<std::string, std::function<void(const Inputs&)>>> variants = {
      {"registers", registers},
      {"kernel_order", kernel_order<false>},
      {"kernel_order_rows_l1", kernel_order<true>},
      {"head_order_packed", head_order_packed},
      {"two_tokens_per_load", two_tokens_per_load},
  };
  std::vector<std::vector<double>> times(variants.size());
  for (auto& [name, variant] : variants) seconds(variant, in);  // warm-up: first touch of every page
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < variants.size(); ++i) times[i].push_back(seconds(variants[i].second, in));
  }
  // Every variant does the multiply-adds of the interior tokens (the 2-token one ends at an even count).
  const double flops = 2.0 * static_cast<double>(length - kTaps - kLeft) * kChannels * kTaps;
  std::printf("    {\"length\": %lld, \"rounds\": %d, \"variants\": {\n", static_cast<long long>(length), rounds);
  for (size_t i = 0; i < variants.size(); ++i) {
    std::vector<double> sorted = times[i];
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    std::printf("      \"%s\": {\"median_ms\": %.3f, \"gflops\": %.1f, \"ms\": [", variants[i].first.c_str(), median * 1e3,
                flops / median / 1e9);
    for (size_t r = 0; r < times[i].size(); ++r) std::printf("%s%.3f", r ? ", " : "", times[i][r] * 1e3);
    std::printf("]}%s\n", i + 1 < variants.size() ? "," : "");
  }
  std::printf("    }}");
  for (float* data : {const_cast<float*>(in.x), const_cast<float*>(in.weight), in.out, in.packed}) std::free(data);
}
}  // namespace

int main(int argc, char** argv) {
  constexpr int kRounds = 7;
  std::vector<int64_t> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
  if (lengths.empty()) lengths = {16384, 65536};
  std::printf("{\n  \"what\": \"k=31 dynamic_conv forward inner loop, one core, float32, C=512, H=8\",\n");
  std::printf("  \"device\": \"%s, one core\",\n", host_cpu().c_str());
  std::printf("  \"compiler\": \"g++ %s\",\n  \"runs\": [\n", __VERSION__);
  for (size_t i = 0; i < lengths.size(); ++i) {
    measure(lengths[i], kRounds);
    std::printf("%s\n", i + 1 < lengths.size() ? "," : "");
  }
  std::printf("  ]\n}\n");
  return 0;
}
