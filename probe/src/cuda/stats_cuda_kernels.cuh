// The fused statistics kernels of stats_cuda.cu and their launcher, compiled once per dtype
// family (stats_cuda_<family>.cu instantiate launch_stats_kernel<T>): nvcc then builds the families
// in parallel instead of one file holding every unrolled instantiation (over 3 minutes on its own).
// Included only by those files.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>

#include "torch/stats_device.h"
#include "stats_cuda_launch.h"
#include "stats_tile.h"

namespace probe::detail {
namespace {

using kernels::ElementType;
using kernels::StatsPartial;
namespace tile = kernels::cuda_tile;

constexpr int kWarps = tile::kBlockThreads / tile::kWarpSize;
static_assert(tile::kMergeThreads == tile::kBlockThreads, "one block_reduce serves both kernels");

__device__ StatsPartial shfl_down(const StatsPartial& p, int delta) {
  constexpr unsigned kAll = 0xffffffffU;
  StatsPartial q;
  q.hash = __shfl_down_sync(kAll, static_cast<unsigned long long>(p.hash), delta);
  q.sum_squares = __shfl_down_sync(kAll, p.sum_squares, delta);
  q.sum = __shfl_down_sync(kAll, p.sum, delta);
  q.min = __shfl_down_sync(kAll, p.min, delta);
  q.max = __shfl_down_sync(kAll, p.max, delta);
  q.nan = __shfl_down_sync(kAll, static_cast<long long>(p.nan), delta);
  q.inf = __shfl_down_sync(kAll, static_cast<long long>(p.inf), delta);
  return q;
}

// tile::tree_reduce over the warp's 32 lanes: lane l absorbs lane l + half, half = 16 .. 1.
__device__ StatsPartial warp_reduce(StatsPartial p) {
  for (int half = tile::kWarpSize / 2; half > 0; half /= 2) {
    const StatsPartial other = shfl_down(p, half);
    p.merge(other);
  }
  return p;
}

// Warp trees, then the same tree over the warps' results. Valid in thread 0.
__device__ StatsPartial block_reduce(StatsPartial p) {
  // Raw storage: a __shared__ variable may not have a constructor.
  __shared__ alignas(StatsPartial) unsigned char storage[kWarps * sizeof(StatsPartial)];
  auto* warp_result = reinterpret_cast<StatsPartial*>(storage);
  const int lane = threadIdx.x % tile::kWarpSize, warp = threadIdx.x / tile::kWarpSize;
  p = warp_reduce(p);
  if (lane == 0) warp_result[warp] = p;
  __syncthreads();
  if (warp == 0) {
    p = lane < kWarps ? warp_result[lane] : StatsPartial{};
    for (int half = kWarps / 2; half > 0; half /= 2) {
      const StatsPartial other = shfl_down(p, half);
      p.merge(other);
    }
  }
  return p;
}

// Element v of a 16-byte group held in registers (little-endian, as in memory).
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

__device__ void write_packed(const StatsPartial& p, std::int64_t* packed) {
  packed[kHash] = static_cast<std::int64_t>(p.hash);
  packed[kSumSquares] = __double_as_longlong(p.sum_squares);
  packed[kSum] = __double_as_longlong(p.sum);
  packed[kMin] = __double_as_longlong(p.min);
  packed[kMax] = __double_as_longlong(p.max);
  packed[kNanCount] = p.nan;
  packed[kInfCount] = p.inf;
  packed[kTorchHash] = 0;
  // Not computed here (StatsPartial::add_positional): a NaN sum of magnitudes says so.
  packed[kMhash] = 0;
  packed[kSumAbs] = __double_as_longlong(__longlong_as_double(0x7ff8000000000000LL));
}

// One block per tile. Writes the block's partial to partials[blockIdx.x], or, when the tensor
// is a single tile (partials == nullptr), the finished packed figures.
template <ElementType T, bool kSingleRun>
__global__ void __launch_bounds__(tile::kBlockThreads)
    tile_stats_kernel(const tile::Bits<T>* __restrict__ data, tile::RunLayout layout,
                      tile::MemoryLayout memory, StatsPartial* __restrict__ partials,
                      std::int64_t* __restrict__ packed) {
  using B = tile::Bits<T>;
  constexpr int kGroup = tile::kGroupElements<T>;
  __shared__ double float8_table[kernels::is_float8(T) ? 256 : 1];
  if constexpr (kernels::is_float8(T)) {
    float8_table[threadIdx.x] =
        kernels::float8_to_double(static_cast<std::uint8_t>(threadIdx.x), T);
    __syncthreads();
  }
  const std::int64_t tile_index = blockIdx.x;
  const int t = threadIdx.x;
  StatsPartial p;
  const std::int64_t tile_end = tile::group_first<T>(tile_index + 1, 0, 0);
  const bool aligned = (reinterpret_cast<std::uintptr_t>(data) % tile::kGroupBytes) == 0;
  if (tile_end <= layout.numel && aligned && memory.contiguous()) {
    // Full tile: every load is a whole 16-byte group; issue them all before folding.
    uint4 group[tile::kGroupsPerThread];
#pragma unroll
    for (int j = 0; j < tile::kGroupsPerThread; ++j)
      group[j] =
          __ldg(reinterpret_cast<const uint4*>(data + tile::group_first<T>(tile_index, t, j)));
#pragma unroll
    for (int j = 0; j < tile::kGroupsPerThread; ++j) {
      B values[kGroup];  // unpacked with constant shifts, so it stays in registers
#pragma unroll
      for (int v = 0; v < kGroup; ++v) values[v] = unpack<B>(group[j], v);
      tile::fold_group<T, kSingleRun>(p, values, kGroup, tile::group_first<T>(tile_index, t, j),
                                      layout, float8_table);
    }
  } else {
    // Last (partial) tile, storage not 16-byte aligned, or a strided view read in place:
    // element loads, same order.
    for (int j = 0; j < tile::kGroupsPerThread; ++j) {
      const std::int64_t first = tile::group_first<T>(tile_index, t, j);
      if (first >= layout.numel) break;
      const int count =
          static_cast<int>(layout.numel - first < kGroup ? layout.numel - first : kGroup);
      B values[kGroup];
      if (memory.contiguous())
        for (int v = 0; v < count; ++v) values[v] = data[first + v];
      else tile::load_strided(values, data, memory, first, count);
      tile::fold_group<T, kSingleRun>(p, values, count, first, layout, float8_table);
    }
  }
  p = block_reduce(p);
  if (t == 0) {
    if (partials == nullptr) write_packed(p, packed);
    else partials[tile_index] = p;
  }
}

// One block: thread t folds partials t, t + kMergeThreads, ... in order, then block_reduce.
__global__ void __launch_bounds__(tile::kMergeThreads)
    merge_partials_kernel(const StatsPartial* __restrict__ partials, std::int64_t count,
                          std::int64_t* __restrict__ packed) {
  StatsPartial p;
  for (std::int64_t i = threadIdx.x; i < count; i += tile::kMergeThreads) p.merge(partials[i]);
  p = block_reduce(p);
  if (threadIdx.x == 0) write_packed(p, packed);
}

}  // namespace

template <kernels::ElementType T>
void launch_stats_kernel(const PreparedTensor& prepared, const tile::RunLayout& layout,
                         const tile::MemoryLayout& memory, const at::Tensor& packed,
                         cudaStream_t stream) {
  const auto* data = static_cast<const tile::Bits<T>*>(prepared.data.const_data_ptr());
  const std::int64_t tiles = tile::tile_count<T>(layout.numel);
  TORCH_CHECK(tiles <= std::int64_t{0x7fffffff}, "numprobe: tensor too large for the CUDA kernel");
  at::Tensor scratch;
  StatsPartial* partials = nullptr;
  if (tiles > 1) {
    scratch = at::empty({tiles * static_cast<std::int64_t>(sizeof(StatsPartial))},
                        prepared.data.options().dtype(at::kByte));
    partials = reinterpret_cast<StatsPartial*>(scratch.mutable_data_ptr());
  }
  auto* out = packed.mutable_data_ptr<std::int64_t>();
  const dim3 grid(static_cast<unsigned>(tiles));
  if (layout.single_run())
    tile_stats_kernel<T, true>
        <<<grid, tile::kBlockThreads, 0, stream>>>(data, layout, memory, partials, out);
  else
    tile_stats_kernel<T, false>
        <<<grid, tile::kBlockThreads, 0, stream>>>(data, layout, memory, partials, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (tiles > 1) {
    merge_partials_kernel<<<1, tile::kMergeThreads, 0, stream>>>(partials, tiles, out);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  // `scratch` goes back to the caching allocator, which orders its reuse after this stream's
  // pending work: no sync needed.
}

}  // namespace probe::detail

#define PROBE_INSTANTIATE_STATS_KERNEL(name)                       \
  template void launch_stats_kernel<kernels::ElementType::name>(   \
      const PreparedTensor&, const kernels::cuda_tile::RunLayout&, \
      const kernels::cuda_tile::MemoryLayout&, const at::Tensor&, cudaStream_t);
