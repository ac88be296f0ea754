// The AVX-512 statistics kernel of one source tree on one thread: bytes per second for float32,
// bfloat16, float16 and float64 over 16 MiB in the chunks tensor_stats cuts (64 Ki elements).
// Not built by CMake: scripts/bench_stats_ab.sh compiles it once against the kernel sources of
// an earlier commit and once against this tree's, so the two kernels run on the same machine in
// the same session (each binary defines stats_run from its own tree, and its own StatsPartial).
//
//   stats_kernel_ab ROUNDS   prints "dtype bytes_per_second" per dtype, the best of ROUNDS passes
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <immintrin.h>

#include "core/stats_kernel.h"

namespace probe::kernels::avx512 {
StatsPartial stats_run(ElementType type, const void* data, std::int64_t count, std::uint64_t first);
}  // namespace probe::kernels::avx512

namespace {

using probe::kernels::ElementType;

constexpr std::int64_t kBytes = std::int64_t{16} << 20;

struct Case {
  const char* name;
  ElementType type;
  int size;
  std::vector<unsigned char> bytes;
};

// Standard normal values, stored in each dtype (bfloat16 and float16 rounded to nearest even
// from float32, as a cast would).
std::vector<Case> make_cases() {
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(kBytes / 2);
  for (float& v : values) v = normal(rng);
  auto to_bfloat16 = [](std::uint32_t bits) {  // round to nearest even (no NaN here)
    return static_cast<std::uint16_t>((bits + 0x7fffU + ((bits >> 16) & 1)) >> 16);
  };
  std::vector<Case> cases;
  cases.push_back({"float32", ElementType::float32, 4, std::vector<unsigned char>(kBytes)});
  std::memcpy(cases.back().bytes.data(), values.data(), kBytes);
  cases.push_back({"bfloat16", ElementType::bfloat16, 2, std::vector<unsigned char>(kBytes)});
  cases.push_back({"float16", ElementType::float16, 2, std::vector<unsigned char>(kBytes)});
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    const std::uint16_t bf16 = to_bfloat16(bits);
    std::memcpy(cases[1].bytes.data() + 2 * i, &bf16, 2);
    const std::uint16_t f16 = _cvtss_sh(values[i], _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(cases[2].bytes.data() + 2 * i, &f16, 2);
  }
  cases.push_back({"float64", ElementType::float64, 8, std::vector<unsigned char>(kBytes)});
  auto* doubles = reinterpret_cast<double*>(cases.back().bytes.data());
  for (std::int64_t i = 0; i < kBytes / 8; ++i) doubles[i] = normal(rng);
  return cases;
}

double seconds_per_pass(const Case& c) {
  const std::int64_t n = kBytes / c.size, chunk = probe::kernels::kChunkElements;
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t sink = 0;
  for (std::int64_t first = 0; first < n; first += chunk) {
    const auto partial = probe::kernels::avx512::stats_run(c.type, c.bytes.data() + first * c.size,
                                                           std::min(chunk, n - first),
                                                           static_cast<std::uint64_t>(first));
    sink += partial.hash + static_cast<std::uint64_t>(partial.sum_squares);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (sink == 42) std::puts("");  // keeps the passes
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10;
  if (rounds < 1) {
    std::fprintf(stderr, "stats_kernel_ab: ROUNDS must be a positive integer, got '%s'\n", argv[1]);
    return 2;
  }
  for (const Case& c : make_cases()) {
    double best = seconds_per_pass(c);
    for (int r = 1; r < rounds; ++r) best = std::min(best, seconds_per_pass(c));
    std::printf("%s %.6e\n", c.name, static_cast<double>(kBytes) / best);
  }
  return 0;
}
