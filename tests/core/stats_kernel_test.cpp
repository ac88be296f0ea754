#include "../../probe/src/core/stats_kernel.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace k = probe::kernels;

namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

void expect_same_bits(const k::StatsPartial& a, const k::StatsPartial& b, const std::string& what) {
  EXPECT_EQ(a.hash, b.hash) << what;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(a.sum_squares), std::bit_cast<std::uint64_t>(b.sum_squares)) << what;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(a.sum), std::bit_cast<std::uint64_t>(b.sum)) << what;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(a.min), std::bit_cast<std::uint64_t>(b.min)) << what;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(a.max), std::bit_cast<std::uint64_t>(b.max)) << what;
  EXPECT_EQ(a.nan, b.nan) << what;
  EXPECT_EQ(a.inf, b.inf) << what;
}

}  // namespace

// The figures must not depend on which vector ISA the CPU dispatches to: runs compared across
// machines (or a CPU build vs another) see the same bits.
TEST(StatsKernel, EveryIsaBuildGivesTheSameBits) {
  auto kernels = k::runnable_isa_kernels();
  ASSERT_GE(kernels.size(), 1u);
  std::vector<float> values = random_floats(10007, 1);
  values[77] = NAN;
  values[5000] = -INFINITY;
  std::vector<std::uint16_t> halves(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) halves[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(values[i]) >> 16);
  std::vector<double> doubles(values.begin(), values.end());
  for (auto& d : doubles) d *= 1.0 + 1e-9;  // products no longer exact: FMA would round differently
  for (std::int64_t n : {0, 1, 7, 8, 9, 10007}) {
    for (std::uint64_t first : {0ULL, 3ULL, 1ULL << 40}) {
      const auto f32 = kernels[0].run(k::ElementType::float32, values.data(), n, first);
      const auto bf16 = kernels[0].run(k::ElementType::bfloat16, halves.data(), n, first);
      const auto f8 = kernels[0].run(k::ElementType::float8_e4m3fn, halves.data(), n, first);
      const auto f64 = kernels[0].run(k::ElementType::float64, doubles.data(), n, first);
      for (const auto& kernel : kernels) {
        const std::string what = std::string(kernel.isa) + " n=" + std::to_string(n);
        expect_same_bits(kernel.run(k::ElementType::float32, values.data(), n, first), f32, what);
        expect_same_bits(kernel.run(k::ElementType::bfloat16, halves.data(), n, first), bf16, what);
        expect_same_bits(kernel.run(k::ElementType::float8_e4m3fn, halves.data(), n, first), f8, what);
        expect_same_bits(kernel.run(k::ElementType::float64, doubles.data(), n, first), f64, what);
      }
    }
  }
}

TEST(StatsKernel, HashOfEveryIsaEqualsLibxxhashSum) {
  std::vector<float> values = random_floats(1001, 2);
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < values.size(); ++i) expected += XXH3_64bits_withSeed(&values[i], 4, 100 + i);
  for (const auto& kernel : k::runnable_isa_kernels())
    EXPECT_EQ(kernel.run(k::ElementType::float32, values.data(), 1001, 100).hash, expected) << kernel.isa;
}

// The fast path skips NaN/Inf bookkeeping; a run holding them must still count them exactly.
TEST(StatsKernel, NanAndInfInOneChunkAreCountedExactly) {
  std::vector<float> values = random_floats(3 * k::kChunkElements, 3);
  values[k::kChunkElements + 5] = NAN;
  values[k::kChunkElements + 6] = INFINITY;
  k::ContiguousLayout layout(k::ElementType::float32, values.data(), {static_cast<std::int64_t>(values.size())}, {});
  std::vector<k::StatsPartial> chunks;
  for (std::int64_t c = 0; c < layout.chunk_count(); ++c) chunks.push_back(layout.chunk_stats(c));
  EXPECT_EQ(chunks[0].nan + chunks[0].inf + chunks[2].nan + chunks[2].inf, 0);
  EXPECT_EQ(chunks[1].nan, 1);
  EXPECT_EQ(chunks[1].inf, 1);
  const auto stats = k::finish_stats(chunks, layout.numel());
  EXPECT_EQ(stats.max, INFINITY);
  EXPECT_EQ(stats.mean, INFINITY);
  EXPECT_TRUE(std::isnan(stats.norm));
}

// float64 squares can overflow without any NaN or Inf in the data: no element is miscounted.
TEST(StatsKernel, OverflowingSquaresAreNotCountedAsInf) {
  std::vector<double> values(100, 1e200);
  const auto p = k::stats_run(k::ElementType::float64, values.data(), 100, 0);
  EXPECT_EQ(p.inf, 0);
  EXPECT_EQ(p.nan, 0);
  EXPECT_EQ(p.sum_squares, INFINITY);
  EXPECT_EQ(p.max, 1e200);
}
