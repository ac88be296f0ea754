// CPU reference of the CUDA statistics kernel: replays stats_cuda.cu's tiles, threads, groups
// and combining trees (stats_tile.h) one after another on the host. It is slow and exists to be
// compared with: against tensor_stats()'s CPU kernel on any machine (same hash, min, max and
// counts; sums within the reduction-order bound of docs/cuda.md), and against the GPU bit for
// bit for every figure.
#pragma once

#include <vector>

#include "core/stats_kernel.h"
#include "stats_tile.h"

namespace probe::kernels::cuda_tile {

// A block's combine as the GPU does it: a shuffle-down tree over each warp's lanes, then the
// same tree over the warp results.
template <int kThreads>
StatsPartial block_reduce(StatsPartial* thread) {
  constexpr int kWarps = kThreads / kWarpSize;
  StatsPartial warp[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    tree_reduce(thread + w * kWarpSize, kWarpSize);
    warp[w] = thread[w * kWarpSize];
  }
  tree_reduce(warp, kWarps);
  return warp[0];
}

template <ElementType T, bool kSingleRun>
StatsPartial reference_tile(const RunLayout& layout, const Bits<T>* data,
                            const MemoryLayout& memory, std::int64_t tile,
                            const double* float8_table) {
  StatsPartial thread[kBlockThreads];
  for (int t = 0; t < kBlockThreads; ++t)
    for (int j = 0; j < kGroupsPerThread; ++j) {
      const std::int64_t first = group_first<T>(tile, t, j);
      if (first >= layout.numel) break;
      const auto count = static_cast<int>(
          layout.numel - first < kGroupElements<T> ? layout.numel - first : kGroupElements<T>);
      Bits<T> values[kGroupElements<T>];
      if (memory.contiguous())
        for (int v = 0; v < count; ++v) values[v] = data[first + v];
      else load_strided(values, data, memory, first, count);
      fold_group<T, kSingleRun>(thread[t], values, count, first, layout, float8_table);
    }
  return block_reduce<kBlockThreads>(thread);
}

template <ElementType T>
StatsPartial reference_partial_typed(const RunLayout& layout, const void* data,
                                     const MemoryLayout& memory) {
  double float8_table[256] = {};
  if (is_float8(T))
    for (int b = 0; b < 256; ++b) float8_table[b] = float8_to_double(std::uint8_t(b), T);
  const auto* bits = static_cast<const Bits<T>*>(data);
  const std::int64_t tiles = tile_count<T>(layout.numel);
  std::vector<StatsPartial> blocks(static_cast<std::size_t>(tiles));
  for (std::int64_t b = 0; b < tiles; ++b)
    blocks[static_cast<std::size_t>(b)] =
        layout.single_run() ? reference_tile<T, true>(layout, bits, memory, b, float8_table)
                            : reference_tile<T, false>(layout, bits, memory, b, float8_table);
  if (tiles == 0) return {};
  if (tiles == 1) return blocks[0];
  StatsPartial thread[kMergeThreads];
  for (int t = 0; t < kMergeThreads; ++t)
    for (std::int64_t i = t; i < tiles; i += kMergeThreads)
      thread[t].merge(blocks[static_cast<std::size_t>(i)]);
  return block_reduce<kMergeThreads>(thread);
}

// The figures the CUDA kernel computes for `layout` over host memory `data` (a strided view
// when `memory` says so).
inline StatsPartial reference_partial(ElementType type, const RunLayout& layout, const void* data,
                                      const MemoryLayout& memory = {}) {
  switch (type) {
    // One case per element type; the list is laid out by hand.
    // clang-format off
#define PROBE_REFERENCE_CASE(name) \
  case ElementType::name: return reference_partial_typed<ElementType::name>(layout, data, memory);
    PROBE_REFERENCE_CASE(float32) PROBE_REFERENCE_CASE(float64) PROBE_REFERENCE_CASE(float16)
    PROBE_REFERENCE_CASE(bfloat16) PROBE_REFERENCE_CASE(float8_e4m3fn)
    PROBE_REFERENCE_CASE(float8_e5m2) PROBE_REFERENCE_CASE(float8_e4m3fnuz)
    PROBE_REFERENCE_CASE(float8_e5m2fnuz) PROBE_REFERENCE_CASE(float8_e8m0fnu)
    PROBE_REFERENCE_CASE(int8) PROBE_REFERENCE_CASE(uint8) PROBE_REFERENCE_CASE(int16)
    PROBE_REFERENCE_CASE(uint16) PROBE_REFERENCE_CASE(int32) PROBE_REFERENCE_CASE(uint32)
    PROBE_REFERENCE_CASE(int64) PROBE_REFERENCE_CASE(uint64) PROBE_REFERENCE_CASE(boolean)
#undef PROBE_REFERENCE_CASE
    // clang-format on
  }
  return {};
}

}  // namespace probe::kernels::cuda_tile
