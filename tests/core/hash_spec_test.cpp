#include "probe/hash_spec.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <unordered_set>

namespace hs = probe::hash_spec;

namespace {

std::uint64_t library_hash(const void* bytes, int size, std::uint64_t seed) {
  return XXH3_64bits_withSeed(bytes, static_cast<std::size_t>(size), seed);
}

}  // namespace

TEST(HashSpec, ElementHashEqualsLibxxhashForEveryElementSize) {
  std::mt19937_64 rng(1234);
  for (int size : {1, 2, 4, 8}) {
    for (int i = 0; i < 200000; ++i) {
      std::uint64_t value = rng();
      // Small seeds (indices of real tensors) and arbitrary 64-bit ones.
      std::uint64_t seed = (i % 2) ? rng() : static_cast<std::uint64_t>(i);
      ASSERT_EQ(hs::element_hash(&value, size, seed), library_hash(&value, size, seed))
          << "size " << size << " value " << value << " seed " << seed;
    }
  }
}

TEST(HashSpec, TypedElementHashesEqualTheByteForm) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 10000; ++i) {
    std::uint64_t v = rng(), seed = rng();
    EXPECT_EQ(hs::element_hash_1(static_cast<std::uint8_t>(v), seed),
              hs::element_hash(&v, 1, seed));
    EXPECT_EQ(hs::element_hash_2(static_cast<std::uint16_t>(v), seed),
              hs::element_hash(&v, 2, seed));
    EXPECT_EQ(hs::element_hash_4(static_cast<std::uint32_t>(v), seed),
              hs::element_hash(&v, 4, seed));
    EXPECT_EQ(hs::element_hash_8(v, seed), hs::element_hash(&v, 8, seed));
  }
}

// For a fixed seed and length <= 8 XXH3 is a bijection: a change to any one element always
// changes the tensor's hash.
TEST(HashSpec, AllBfloat16BitPatternsGiveDistinctElementHashes) {
  for (std::uint64_t seed : {0ULL, 1ULL, 4095ULL, 0xffffffffffffULL}) {
    std::unordered_set<std::uint64_t> seen;
    for (std::uint32_t bits = 0; bits < 65536; ++bits)
      seen.insert(hs::element_hash_2(static_cast<std::uint16_t>(bits), seed));
    EXPECT_EQ(seen.size(), 65536u) << "seed " << seed;
  }
}

TEST(HashSpec, AllBytesGiveDistinctElementHashes) {
  std::unordered_set<std::uint64_t> seen;
  for (std::uint32_t b = 0; b < 256; ++b)
    seen.insert(hs::element_hash_1(static_cast<std::uint8_t>(b), 7));
  EXPECT_EQ(seen.size(), 256u);
}

TEST(HashSpec, SameValueAtDifferentIndicesHashesDifferently) {
  const float one = 1.0f;
  std::uint32_t bits;
  std::memcpy(&bits, &one, 4);
  EXPECT_NE(hs::element_hash_4(bits, 0), hs::element_hash_4(bits, 1));
}

// The tensor hash is a wrapping sum, so any split of the elements into shards (any order of
// a parallel reduction) gives the same result.
TEST(HashSpec, TensorHashIsOrderIndependentAndComposable) {
  std::mt19937_64 rng(5);
  std::vector<std::uint32_t> values(1000);
  for (auto& v : values) v = static_cast<std::uint32_t>(rng());
  std::uint64_t forward = 0, backward = 0, first_half = 0, second_half = 0;
  for (std::size_t i = 0; i < values.size(); ++i) forward += hs::element_hash_4(values[i], i);
  for (std::size_t i = values.size(); i-- > 0;) backward += hs::element_hash_4(values[i], i);
  for (std::size_t i = 0; i < 400; ++i) first_half += hs::element_hash_4(values[i], i);
  for (std::size_t i = 400; i < values.size(); ++i) second_half += hs::element_hash_4(values[i], i);
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(forward, first_half + second_half);
}
