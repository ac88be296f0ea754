// Hash spec v1 alone, in the statistics kernel's loop shape: the baseline of
// scripts/sass_report.sh. Never launched; compiled for sm_90 and disassembled only.
//
// Each kernel does what tile_stats_kernel<T, true>'s full-tile path does (stats_cuda_kernels.cuh)
// minus the statistics: kGroupsPerThread 128-bit loads per thread, then every element's
// hash_spec term (the project's own element_hash<T> from stats_tile.h, not a copy) summed into
// one 64-bit word. The report divides the real kernel's instructions per element by these.
#include <cstdint>

#include "cuda/stats_tile.h"

namespace {

namespace tile = probe::kernels::cuda_tile;
using probe::kernels::ElementType;

// As stats_cuda_kernels.cuh's unpack (private to that torch-including header): element v of a
// 16-byte group, with constant shifts so the group stays in registers.
template <class B>
__device__ __forceinline__ B unpack(const uint4& g, int v) {
  const unsigned word[4] = {g.x, g.y, g.z, g.w};
  if constexpr (sizeof(B) == 8) {
    return static_cast<B>(word[2 * v]) | (static_cast<B>(word[2 * v + 1]) << 32);
  } else {
    constexpr int kPerWord = 4 / sizeof(B);
    return static_cast<B>(word[v / kPerWord] >> (8 * sizeof(B) * (v % kPerWord)));
  }
}

}  // namespace

// The same guard as the real kernel's full-tile path, so the loop is one basic block there too.
template <ElementType T>
__global__ void __launch_bounds__(tile::kBlockThreads)
    hash_only_tile(const tile::Bits<T>* __restrict__ data, std::int64_t numel, std::uint64_t base,
                   unsigned long long* __restrict__ out) {
  using B = tile::Bits<T>;
  constexpr int kGroup = tile::kGroupElements<T>;
  const std::int64_t tile_index = blockIdx.x;
  const int t = threadIdx.x;
  std::uint64_t hash = 0;
  if (tile::group_first<T>(tile_index + 1, 0, 0) <= numel) {
    uint4 group[tile::kGroupsPerThread];
#pragma unroll
    for (int j = 0; j < tile::kGroupsPerThread; ++j)
      group[j] =
          __ldg(reinterpret_cast<const uint4*>(data + tile::group_first<T>(tile_index, t, j)));
#pragma unroll
    for (int j = 0; j < tile::kGroupsPerThread; ++j) {
      const std::uint64_t g =
          base + static_cast<std::uint64_t>(tile::group_first<T>(tile_index, t, j));
#pragma unroll
      for (int v = 0; v < kGroup; ++v) hash += tile::element_hash<T>(unpack<B>(group[j], v), g + v);
    }
  }
  out[tile_index * tile::kBlockThreads + t] = hash;
}

// One element size each: the hash depends only on the size (1, 2, 4, 8 bytes).
#define HASH_ONLY_TILE(name)                                  \
  template __global__ void hash_only_tile<ElementType::name>( \
      const tile::Bits<ElementType::name>*, std::int64_t, std::uint64_t, unsigned long long*);
HASH_ONLY_TILE(uint8)
HASH_ONLY_TILE(bfloat16)
HASH_ONLY_TILE(float32)
HASH_ONLY_TILE(float64)
