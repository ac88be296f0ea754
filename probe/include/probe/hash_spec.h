// Hash spec v1 (docs/hash-spec.md): H(T) = sum_i XXH3_64bits_withSeed(bytes_i, size, seed = g_i)
// mod 2^64, where g_i is element i's row-major index in the global tensor.
//
// This header is the one definition of the per-element hash. It is torch-free and
// `__host__ __device__` so the CPU path, the CUDA kernels and the tests share it. The
// functions below are XXH3's short-input paths (len 1..3 and 4..8, default secret),
// specialised to one element: tests pin them to libxxhash's XXH3_64bits_withSeed bit for bit.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PROBE_HOST_DEVICE __host__ __device__
#else
#define PROBE_HOST_DEVICE
#endif

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "hash spec v1 reads element bytes as stored on a little-endian host");

namespace probe::hash_spec {

inline constexpr int kVersion = 1;

// XXH64 primes used by XXH3's avalanche steps.
inline constexpr std::uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr std::uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
// XXH3's rrmxmx multiplier (the 4..8-byte finaliser).
inline constexpr std::uint64_t kRrmxmxMultiplier = 0x9FB21C651E98DF25ULL;
// readLE32(kSecret) ^ readLE32(kSecret + 4): the 1..3-byte path's bitflip before the seed.
inline constexpr std::uint64_t kBitflip1to3 = 0x396CFEB8ULL ^ 0xBE4BA423ULL;
// readLE64(kSecret + 8) ^ readLE64(kSecret + 16): the 4..8-byte path's bitflip before the seed.
inline constexpr std::uint64_t kBitflip4to8 = 0x1CAD21F72C81017CULL ^ 0xDB979083E96DD4DEULL;

PROBE_HOST_DEVICE inline std::uint64_t rotl64(std::uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

PROBE_HOST_DEVICE inline std::uint32_t swap32(std::uint32_t x) {
  return ((x << 24) & 0xff000000U) | ((x << 8) & 0x00ff0000U) | ((x >> 8) & 0x0000ff00U) |
         ((x >> 24) & 0x000000ffU);
}

PROBE_HOST_DEVICE inline std::uint64_t xxh64_avalanche(std::uint64_t h) {
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  h ^= h >> 32;
  return h;
}

PROBE_HOST_DEVICE inline std::uint64_t rrmxmx(std::uint64_t h, std::uint64_t len) {
  h ^= rotl64(h, 49) ^ rotl64(h, 24);
  h *= kRrmxmxMultiplier;
  h ^= (h >> 35) + len;
  h *= kRrmxmxMultiplier;
  return h ^ (h >> 28);
}

// XXH3_64bits_withSeed over 1 or 2 bytes held little-endian in `v`.
PROBE_HOST_DEVICE inline std::uint64_t hash_1to2(std::uint32_t v, std::uint32_t len,
                                                 std::uint64_t seed) {
  const std::uint32_t c1 = v & 0xff;
  const std::uint32_t c2 = (len == 1) ? c1 : (v >> 8) & 0xff;  // input[len >> 1]
  const std::uint32_t c3 = c2;                                 // input[len - 1]
  const std::uint32_t combined = (c1 << 16) | (c2 << 24) | c3 | (len << 8);
  return xxh64_avalanche(static_cast<std::uint64_t>(combined) ^ (kBitflip1to3 + seed));
}

// XXH3_64bits_withSeed over 4 bytes (`hi == lo == v`) or 8 bytes (`lo`, `hi` halves).
PROBE_HOST_DEVICE inline std::uint64_t hash_4to8(std::uint32_t lo, std::uint32_t hi,
                                                 std::uint64_t len, std::uint64_t seed) {
  seed ^= static_cast<std::uint64_t>(swap32(static_cast<std::uint32_t>(seed))) << 32;
  const std::uint64_t bitflip = kBitflip4to8 - seed;
  const std::uint64_t input64 = hi + (static_cast<std::uint64_t>(lo) << 32);
  return rrmxmx(input64 ^ bitflip, len);
}

PROBE_HOST_DEVICE inline std::uint64_t element_hash_1(std::uint8_t v, std::uint64_t seed) {
  return hash_1to2(v, 1, seed);
}
PROBE_HOST_DEVICE inline std::uint64_t element_hash_2(std::uint16_t v, std::uint64_t seed) {
  return hash_1to2(v, 2, seed);
}
PROBE_HOST_DEVICE inline std::uint64_t element_hash_4(std::uint32_t v, std::uint64_t seed) {
  return hash_4to8(v, v, 4, seed);
}
PROBE_HOST_DEVICE inline std::uint64_t element_hash_8(std::uint64_t v, std::uint64_t seed) {
  return hash_4to8(static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32), 8, seed);
}

// One element of `size` bytes (1, 2, 4 or 8) at `bytes`, hashed with its global index as seed.
PROBE_HOST_DEVICE inline std::uint64_t element_hash(const void* bytes, int size,
                                                    std::uint64_t global_index) {
  const auto* b = static_cast<const std::uint8_t*>(bytes);
  switch (size) {
    case 1: return element_hash_1(b[0], global_index);
    case 2: return element_hash_2(static_cast<std::uint16_t>(b[0] | (b[1] << 8)), global_index);
    case 4: {
      std::uint32_t v = 0;
      for (int k = 3; k >= 0; --k) v = (v << 8) | b[k];
      return element_hash_4(v, global_index);
    }
    default: {
      std::uint64_t v = 0;
      for (int k = 7; k >= 0; --k) v = (v << 8) | b[k];
      return element_hash_8(v, global_index);
    }
  }
}

}  // namespace probe::hash_spec
