// An independent oracle for the statistics kernels: a naive loop written from
// docs/hash-spec.md alone (decode each element; its term XXH3_64bits_withSeed(bytes, seed =
// global index) from libxxhash; element k of every group of 8 into lane k, each lane an IEEE
// double summed in element order; lanes merged in order; 64 Ki-element chunks merged in order).
// It shares no code with the kernel. Every instruction-set build this CPU runs must give its
// bits exactly; the builds it cannot run are named as not compared (not a gtest skip: the builds
// it can run were compared, and ctest must count the test as run).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/stats_kernel.h"

namespace k = probe::kernels;

namespace {

constexpr std::int64_t kChunk = 65536;  // docs/hash-spec.md: chunks of 65,536 elements
constexpr int kLanes = 8;

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// A small IEEE-style float: 1 sign bit, e exponent bits (bias 2^(e-1) - 1), m mantissa bits.
// `ieee_specials`: all-ones exponent is Inf/NaN (binary16, e5m2); otherwise only all-ones
// exponent and mantissa is NaN and there is no Inf (e4m3fn).
double small_float(std::uint32_t bits, int e, int m, bool ieee_specials) {
  const bool negative = (bits >> (e + m)) & 1;
  const int exponent = static_cast<int>((bits >> m) & ((1u << e) - 1));
  const std::uint32_t mantissa = bits & ((1u << m) - 1);
  const int bias = (1 << (e - 1)) - 1, max_exponent = (1 << e) - 1;
  double v;
  if (ieee_specials && exponent == max_exponent) v = mantissa == 0 ? INFINITY : NAN;
  else if (!ieee_specials && exponent == max_exponent && mantissa == (1u << m) - 1) v = NAN;
  else if (exponent == 0) v = std::ldexp(static_cast<double>(mantissa), 1 - bias - m);
  else v = std::ldexp(static_cast<double>((1u << m) | mantissa), exponent - bias - m);
  return negative ? -v : v;
}

struct Type {
  k::ElementType type;
  const char* name;
  int size;
};

const Type kTypes[] = {
    {k::ElementType::float32, "float32", 4},
    {k::ElementType::float64, "float64", 8},
    {k::ElementType::bfloat16, "bfloat16", 2},
    {k::ElementType::float16, "float16", 2},
    {k::ElementType::float8_e5m2, "float8_e5m2", 1},
    {k::ElementType::float8_e4m3fn, "float8_e4m3fn", 1},
    {k::ElementType::int8, "int8", 1},
    {k::ElementType::uint8, "uint8", 1},
    {k::ElementType::int16, "int16", 2},
    {k::ElementType::int32, "int32", 4},
    {k::ElementType::int64, "int64", 8},
};

double decode(k::ElementType type, const unsigned char* p) {
  using T = k::ElementType;
  switch (type) {
    case T::float32: return std::bit_cast<float>(load<std::uint32_t>(p));
    case T::float64: return std::bit_cast<double>(load<std::uint64_t>(p));
    case T::bfloat16: return std::bit_cast<float>(std::uint32_t{load<std::uint16_t>(p)} << 16);
    case T::float16: return small_float(load<std::uint16_t>(p), 5, 10, true);
    case T::float8_e5m2: return small_float(*p, 5, 2, true);
    case T::float8_e4m3fn: return small_float(*p, 4, 3, false);
    case T::int8: return static_cast<std::int8_t>(*p);
    case T::uint8: return *p;
    case T::int16: return load<std::int16_t>(p);
    case T::int32: return load<std::int32_t>(p);
    case T::int64: return static_cast<double>(load<std::int64_t>(p));
    default: throw std::invalid_argument("no oracle decoder for this type");
  }
}

struct Figures {
  std::uint64_t hash = 0, mhash = 0;
  double sum_squares = 0, sum = 0, sum_abs = 0, min = INFINITY, max = -INFINITY;
  std::int64_t nan = 0, inf = 0;
};

// docs/hash-spec.md, "Order-independent figures": an element's term of mhash, from its bits.
std::uint64_t order_free_term(const unsigned char* p, int size) {
  std::uint64_t z = 0;
  for (int b = size - 1; b >= 0; --b) z = (z << 8) | p[b];  // little-endian, zero-extended
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// docs/hash-spec.md, "Statistics computed in the same pass": sums over non-NaN values for the
// mean, min/max over non-NaN values, squares of every value (a NaN makes the norm NaN).
void add(Figures& f, double x, std::uint64_t term, std::uint64_t order_free) {
  f.hash += term;
  f.mhash += order_free;
  f.sum_squares += x * x;
  if (!std::isnan(x)) {
    f.sum += x;
    f.sum_abs += std::fabs(x);
    f.min = std::fmin(f.min, x);
    f.max = std::fmax(f.max, x);
  }
  f.nan += std::isnan(x);
  f.inf += std::isinf(x);
}

void merge(Figures& into, const Figures& f) {
  into.hash += f.hash;
  into.mhash += f.mhash;
  into.sum_squares += f.sum_squares;
  into.sum += f.sum;
  into.sum_abs += f.sum_abs;
  into.min = std::fmin(into.min, f.min);
  into.max = std::fmax(into.max, f.max);
  into.nan += f.nan;
  into.inf += f.inf;
}

// One chunk: `count` elements with global indices first, first + 1, ...
Figures oracle_chunk(const Type& t, const unsigned char* data, std::int64_t count,
                     std::uint64_t first) {
  std::array<Figures, kLanes> lanes{};
  for (std::int64_t i = 0; i < count; ++i) {
    const unsigned char* p = data + i * t.size;
    add(lanes[static_cast<std::size_t>(i % kLanes)], decode(t.type, p),
        XXH3_64bits_withSeed(p, static_cast<std::size_t>(t.size),
                             first + static_cast<std::uint64_t>(i)),
        order_free_term(p, t.size));
  }
  Figures chunk;
  for (const auto& lane : lanes) merge(chunk, lane);
  return chunk;
}

// The whole tensor: chunks merged in order.
Figures oracle(const Type& t, const std::vector<unsigned char>& bytes, std::uint64_t first) {
  const std::int64_t n = static_cast<std::int64_t>(bytes.size()) / t.size;
  Figures all;
  for (std::int64_t c = 0; c * kChunk < n; ++c)
    merge(all, oracle_chunk(t, bytes.data() + c * kChunk * t.size, std::min(kChunk, n - c * kChunk),
                            first + static_cast<std::uint64_t>(c * kChunk)));
  return all;
}

// Random bits (every pattern: NaN, Inf, subnormals, both zeros), and runs of plain values so
// that sums are not all NaN.
std::vector<unsigned char> random_bytes(const Type& t, std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(static_cast<std::size_t>(n * t.size));
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  if (t.type == k::ElementType::float32 || t.type == k::ElementType::float64 ||
      t.type == k::ElementType::bfloat16 || t.type == k::ElementType::float16) {
    // Clear the top exponent bit of most elements: finite, so the lane sums stay informative.
    for (std::int64_t i = 0; i < n; ++i)
      if (i % 997 != 0) v[static_cast<std::size_t>((i + 1) * t.size - 1)] &= 0xbf;
  }
  return v;
}

// Bits to compare: a zero's sign and a NaN's payload are not figures the spec defines (which
// zero an extreme keeps, and which NaN a sum propagates, depend on the order of operations).
std::uint64_t bits(double x) {
  if (std::isnan(x)) return 0x7ff8000000000000ULL;
  return std::bit_cast<std::uint64_t>(x == 0 ? 0.0 : x);
}

void expect_same(const Figures& o, const k::StatsPartial& p, const std::string& what) {
  EXPECT_EQ(o.hash, p.hash) << what;
  EXPECT_EQ(o.mhash, p.mhash) << what;
  EXPECT_EQ(bits(o.sum_squares), bits(p.sum_squares)) << what;
  EXPECT_EQ(bits(o.sum), bits(p.sum)) << what;
  EXPECT_EQ(bits(o.sum_abs), bits(p.sum_abs)) << what;
  EXPECT_EQ(bits(o.min), bits(p.min)) << what;
  EXPECT_EQ(bits(o.max), bits(p.max)) << what;
  EXPECT_EQ(o.nan, p.nan) << what;
  EXPECT_EQ(o.inf, p.inf) << what;
}

// Sizes: several chunks and a tail that is no multiple of 8; first indices: 0, and one where a
// 2-byte element's seed crosses 2^32 inside the tensor.
constexpr std::int64_t kCount = 2 * kChunk + 1237;
const std::uint64_t kFirsts[] = {0, (std::uint64_t{1} << 32) - 70000};

}  // namespace

TEST(StatsOracle, EveryRunnableIsaBuildMatchesTheNaiveLoopBitForBit) {
  const auto kernels = k::runnable_isa_kernels();
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    const bool runnable = std::any_of(kernels.begin(), kernels.end(), [&](const k::IsaKernel& kk) {
      return std::string(kk.isa) == isa;
    });
    if (!runnable)
      std::printf("not compared: %s build (not built for, or not run by, this CPU)\n", isa);
  }
  for (const auto& kernel : kernels) {
    for (const Type& t : kTypes) {
      for (std::uint64_t first : kFirsts) {
        const auto bytes = random_bytes(t, kCount, first + static_cast<std::uint64_t>(t.size));
        for (std::int64_t c = 0; c * kChunk < kCount; ++c) {
          const std::int64_t count = std::min(kChunk, kCount - c * kChunk);
          const std::uint64_t chunk_first = first + static_cast<std::uint64_t>(c * kChunk);
          const unsigned char* data = bytes.data() + c * kChunk * t.size;
          expect_same(oracle_chunk(t, data, count, chunk_first),
                      kernel.run(t.type, data, count, chunk_first),
                      std::string(kernel.isa) + " " + t.name + " chunk " + std::to_string(c) +
                          " first " + std::to_string(chunk_first));
        }
      }
    }
  }
}

TEST(StatsOracle, WholeTensorFiguresMatchTheNaiveLoop) {
  for (const Type& t : kTypes) {
    const auto bytes = random_bytes(t, kCount, 7);
    const Figures o = oracle(t, bytes, 0);
    const k::ContiguousLayout layout(t.type, bytes.data(), {kCount}, {});
    std::vector<k::StatsPartial> chunks;
    for (std::int64_t c = 0; c < layout.chunk_count(); ++c) chunks.push_back(layout.chunk_stats(c));
    const probe::TensorStats s = k::finish_stats(chunks, kCount);
    EXPECT_EQ(s.hash, o.hash) << t.name;
    EXPECT_EQ(bits(s.norm), bits(o.nan > 0 ? NAN : std::sqrt(o.sum_squares))) << t.name;
    EXPECT_EQ(bits(s.mean), bits(o.sum / static_cast<double>(kCount - o.nan))) << t.name;
    EXPECT_EQ(bits(s.min), bits(o.min)) << t.name;
    EXPECT_EQ(bits(s.max), bits(o.max)) << t.name;
    EXPECT_EQ(s.nan, o.nan) << t.name;
    EXPECT_EQ(s.inf, o.inf) << t.name;
  }
}
