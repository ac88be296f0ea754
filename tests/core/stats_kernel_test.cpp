#include "core/stats_kernel.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
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

// Random 2-byte floats of every finite exponent (subnormals and both zeros included) and no
// NaN or Inf: the pattern's exponent field is below all-ones.
std::vector<std::uint16_t> random_finite_halves(std::size_t n, int exponent_bits,
                                                std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int mantissa_bits = 15 - exponent_bits;
  std::uniform_int_distribution<int> exponent(0, (1 << exponent_bits) - 2);
  std::uniform_int_distribution<int> mantissa(0, (1 << mantissa_bits) - 1);
  std::vector<std::uint16_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::uint16_t>(((rng() & 1) << 15) | (exponent(rng) << mantissa_bits) |
                                      (i % 37 == 0 ? 0 : mantissa(rng)));
  return v;
}

// Bitwise equality, but for the sign of a zero min or max: -0 and +0 compare equal, so which one a
// run keeps depends on its lane order, and finish_stats reports both as +0.
void expect_same_bits(const k::StatsPartial& a, const k::StatsPartial& b, const std::string& what) {
  auto bits = [](double x) { return std::bit_cast<std::uint64_t>(x == 0 ? 0.0 : x); };
  EXPECT_EQ(a.hash, b.hash) << what;
  EXPECT_EQ(a.mhash, b.mhash) << what;
  EXPECT_EQ(bits(a.sum_squares), bits(b.sum_squares)) << what;
  EXPECT_EQ(bits(a.sum), bits(b.sum)) << what;
  EXPECT_EQ(bits(a.sum_abs), bits(b.sum_abs)) << what;
  EXPECT_EQ(bits(a.min), bits(b.min)) << what;
  EXPECT_EQ(bits(a.max), bits(b.max)) << what;
  EXPECT_EQ(a.nan, b.nan) << what;
  EXPECT_EQ(a.inf, b.inf) << what;
}

// The sum of XXH3_64bits_withSeed over `n` elements of `size` bytes: hash spec v1 by definition.
std::uint64_t libxxhash_sum(const void* data, std::size_t size, std::int64_t n,
                            std::uint64_t first) {
  std::uint64_t h = 0;
  for (std::int64_t i = 0; i < n; ++i)
    h += XXH3_64bits_withSeed(static_cast<const char*>(data) + i * size, size, first + i);
  return h;
}

// Where the 2-byte hash seed kBitflip1to3 + index crosses 2^32: the vector loop's shortcut
// needs the seed's high half fixed over a run and must fall back around here.
constexpr std::uint64_t kSeedHighHalfChanges = (1ULL << 32) - probe::hash_spec::kBitflip1to3;

}  // namespace

// The figures must not depend on which vector ISA the CPU dispatches to: runs compared across
// machines (or a CPU build vs another) see the same bits. Every length around the vector loops'
// strides, NaN/Inf-free data (the fast path) and data with specials, and index offsets that
// move the hash seeds' high halves.
TEST(StatsKernel, EveryIsaBuildGivesTheSameBits) {
  auto kernels = k::runnable_isa_kernels();
  ASSERT_GE(kernels.size(), 1u);
  constexpr std::size_t kCount = 10007;
  std::vector<float> values = random_floats(kCount, 1);
  for (std::size_t i = 0; i < kCount; i += 101) values[i] = (i / 101) % 2 ? 0.0f : -0.0f;
  std::vector<float> with_specials = values;
  with_specials[77] = NAN;
  with_specials[5000] = -INFINITY;
  std::vector<std::uint16_t> bf16(kCount), bf16_specials(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    bf16[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(values[i]) >> 16);
    bf16_specials[i] =
        static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(with_specials[i]) >> 16);
  }
  const std::vector<std::uint16_t> bf16_wide = random_finite_halves(kCount, 8, 2);
  const std::vector<std::uint16_t> f16 = random_finite_halves(kCount, 5, 3);
  std::vector<std::uint16_t> f16_specials = f16;
  f16_specials[9] = 0x7E00;   // NaN
  f16_specials[10] = 0xFC00;  // -Inf
  std::vector<double> doubles(values.begin(), values.end());
  for (auto& d : doubles) d *= 1.0 + 1e-9;  // products no longer exact: FMA would round differently
  struct Input {
    const char* name;
    k::ElementType type;
    const void* data;
  };
  const Input inputs[] = {
      {"float32", k::ElementType::float32, values.data()},
      {"float32 NaN/Inf", k::ElementType::float32, with_specials.data()},
      {"bfloat16", k::ElementType::bfloat16, bf16.data()},
      {"bfloat16 all exponents", k::ElementType::bfloat16, bf16_wide.data()},
      {"bfloat16 NaN/Inf", k::ElementType::bfloat16, bf16_specials.data()},
      {"float16", k::ElementType::float16, f16.data()},
      {"float16 NaN/Inf", k::ElementType::float16, f16_specials.data()},
      {"int16", k::ElementType::int16, f16.data()},
      {"float8_e4m3fn", k::ElementType::float8_e4m3fn, bf16.data()},
      {"float64", k::ElementType::float64, doubles.data()},
  };
  for (const Input& input : inputs) {
    for (std::int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 10007}) {
      for (std::uint64_t first : {std::uint64_t{0}, std::uint64_t{3}, kSeedHighHalfChanges - 500,
                                  std::uint64_t{1} << 40}) {
        const auto expected = kernels[0].run(input.type, input.data, n, first);
        for (const auto& kernel : kernels) {
          const std::string what = std::string(input.name) + " " + kernel.isa +
                                   " n=" + std::to_string(n) + " first=" + std::to_string(first);
          expect_same_bits(kernel.run(input.type, input.data, n, first), expected, what);
        }
      }
    }
  }
}

// Run by ctest with PROBE_STATS_ISA set (tests/CMakeLists.txt; skipped without it): the
// dispatcher takes the build named there when this CPU runs it, and the best one otherwise.
TEST(StatsKernel, DispatchTakesTheBuildProbeStatsIsaNames) {
  const char* wanted = std::getenv("PROBE_STATS_ISA");
  if (!wanted) GTEST_SKIP() << "PROBE_STATS_ISA is not set (the ctest entries set it)";
  const auto kernels = k::runnable_isa_kernels();
  const bool runnable =
      std::any_of(kernels.begin(), kernels.end(),
                  [&](const k::IsaKernel& kernel) { return std::strcmp(kernel.isa, wanted) == 0; });
  EXPECT_STREQ(k::stats_kernel_isa(), runnable ? wanted : kernels.back().isa);
  // Whichever build runs, the figures are the same bits as the best build's.
  const auto data = random_floats(60'001, 7);
  const auto chosen =
      k::stats_run(k::ElementType::float32, data.data(), static_cast<std::int64_t>(data.size()), 0);
  const auto best = kernels.back().run(k::ElementType::float32, data.data(),
                                       static_cast<std::int64_t>(data.size()), 0);
  EXPECT_EQ(chosen.hash, best.hash);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(chosen.sum), std::bit_cast<std::uint64_t>(best.sum));
  EXPECT_EQ(std::bit_cast<std::uint64_t>(chosen.sum_squares),
            std::bit_cast<std::uint64_t>(best.sum_squares));
}

TEST(StatsKernel, HashOfEveryIsaEqualsLibxxhashSum) {
  const std::vector<float> values = random_floats(1001, 2);
  const std::vector<std::uint16_t> halves = random_finite_halves(1001, 5, 4);
  for (const auto& kernel : k::runnable_isa_kernels()) {
    for (std::uint64_t first :
         {std::uint64_t{100}, kSeedHighHalfChanges - 500, std::uint64_t{1} << 40}) {
      EXPECT_EQ(kernel.run(k::ElementType::float32, values.data(), 1001, first).hash,
                libxxhash_sum(values.data(), 4, 1001, first))
          << kernel.isa << " first=" << first;
      for (auto type : {k::ElementType::float16, k::ElementType::bfloat16})
        EXPECT_EQ(kernel.run(type, halves.data(), 1001, first).hash,
                  libxxhash_sum(halves.data(), 2, 1001, first))
            << kernel.isa << " first=" << first;
    }
  }
}

// A zero min or max comes out as +0 whatever mix of -0 and +0 the tensor holds.
TEST(StatsKernel, ZeroExtremesAreReportedAsPositiveZero) {
  std::vector<float> values(100, 0.0f);
  for (std::size_t i = 0; i < values.size(); i += 3) values[i] = -0.0f;
  k::ContiguousLayout layout(k::ElementType::float32, values.data(), {100}, {});
  const auto stats = k::finish_stats({layout.chunk_stats(0)}, layout.numel());
  EXPECT_EQ(std::bit_cast<std::uint64_t>(stats.min), 0u);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(stats.max), 0u);
}

// The fast path skips NaN/Inf bookkeeping; a run holding them must still count them exactly.
TEST(StatsKernel, NanAndInfInOneChunkAreCountedExactly) {
  std::vector<float> values = random_floats(3 * k::kChunkElements, 3);
  values[k::kChunkElements + 5] = NAN;
  values[k::kChunkElements + 6] = INFINITY;
  k::ContiguousLayout layout(k::ElementType::float32, values.data(),
                             {static_cast<std::int64_t>(values.size())}, {});
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
