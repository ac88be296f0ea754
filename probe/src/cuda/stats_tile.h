// The device-agnostic half of the CUDA statistics kernel (stats_cuda.cu): which elements each
// block and thread reads, in which order a thread folds them, and the fixed trees that combine
// thread and block partials. Torch-free and `__host__ __device__`, so that stats_reference.h can
// replay the kernel's exact reduction order on the CPU, and tests can hold the GPU to it bit
// for bit.
//
// Shape (why): the grid depends only on the element count and type, never on the GPU, so the
// same tensor gives the same figures on any device, any number of times.
//   - A tile is kBlockThreads * kGroupsPerThread groups of kGroupBytes (16 bytes: one 128-bit
//     load per group), i.e. 32 KiB per block whatever the dtype. Block b owns tile b.
//   - Thread t reads groups j * kBlockThreads + t (j = 0..kGroupsPerThread-1) of its tile:
//     consecutive threads read consecutive 16-byte groups (coalesced), and a thread has all its
//     kGroupsPerThread loads in flight before it folds any element.
//   - A thread folds its elements in (group, element) order into one StatsPartial.
//   - A block combines its threads' partials with tree_reduce over the 32 lanes of each warp
//     (shuffles) and then over the warps' results; one block of kMergeThreads combines the
//     block partials (thread t folds partials t, t + kMergeThreads, ... in order, then the same
//     tree). A single-tile tensor skips the second kernel: merging one partial changes nothing.
// No atomics: every floating add happens in an order fixed by the element count alone.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "core/stats_element.h"
#include "core/stats_kernel.h"  // ContiguousLayout

namespace probe::kernels::cuda_tile {

inline constexpr int kBlockThreads = 256;
inline constexpr int kWarpSize = 32;
inline constexpr int kGroupBytes = 16;
inline constexpr int kGroupsPerThread = 8;
inline constexpr int kMergeThreads = 256;
// Outer dims of a shard's run layout the kernel takes as arguments (a shard is an axis-aligned
// box; dims beyond this are left to the ATen fallback).
inline constexpr int kMaxOuterDims = 8;

// A (contiguous) local tensor's elements seen as runs of consecutive global indices: the
// kernel-argument form of ContiguousLayout.
struct RunLayout {
  std::int64_t numel = 0;
  std::int64_t run_length = 0;  // == numel: one run (whole tensor, or a shard along dim 0)
  std::uint64_t base_global_index = 0;
  int outer_dims = 0;
  std::int64_t outer_extent[kMaxOuterDims] = {};
  std::uint64_t outer_global_stride[kMaxOuterDims] = {};

  PROBE_HOST_DEVICE bool single_run() const { return run_length == numel; }

  PROBE_HOST_DEVICE std::uint64_t run_first_global_index(std::int64_t run) const {
    std::uint64_t index = base_global_index;
    for (int d = outer_dims; d-- > 0;) {
      index += static_cast<std::uint64_t>(run % outer_extent[d]) * outer_global_stride[d];
      run /= outer_extent[d];
    }
    return index;
  }
};

// The kernel arguments of a local tensor's ContiguousLayout (host only).
inline RunLayout run_layout_of(const ContiguousLayout& layout) {
  RunLayout r;
  r.numel = layout.numel();
  r.run_length = layout.run_length();
  r.base_global_index = layout.base_global_index();
  const auto& extent = layout.outer_extent();
  if (extent.size() > static_cast<std::size_t>(kMaxOuterDims))
    throw std::invalid_argument(
        "numprobe: shard layout has more outer dims than the CUDA kernel takes");
  r.outer_dims = static_cast<int>(extent.size());
  for (std::size_t d = 0; d < extent.size(); ++d) {
    r.outer_extent[d] = extent[d];
    r.outer_global_stride[d] = layout.outer_global_stride()[d];
  }
  return r;
}

// Where each element of a strided view (a transpose, a sliced or expanded tensor) lives: its
// sizes and element strides. The kernel reads such a view in place, element by element, in the
// same logical order as the contiguous path, so a view's figures are its contiguous copy's bit
// for bit. dims == 0: the tensor is contiguous.
inline constexpr int kMaxStridedDims = 8;
struct MemoryLayout {
  int dims = 0;
  std::int64_t size[kMaxStridedDims] = {};
  std::int64_t stride[kMaxStridedDims] = {};

  PROBE_HOST_DEVICE bool contiguous() const { return dims == 0; }

  // Storage offset, in elements, of the element with logical row-major index `i`.
  PROBE_HOST_DEVICE std::int64_t offset(std::int64_t i) const {
    std::int64_t off = 0;
    for (int d = dims; d-- > 0;) {
      off += (i % size[d]) * stride[d];
      i /= size[d];
    }
    return off;
  }
};

// Loads elements first .. first + count - 1 of a strided view: one full index computation,
// then steps along the innermost dim until it wraps.
template <class B>
PROBE_HOST_DEVICE inline void load_strided(B* values, const B* data, const MemoryLayout& memory,
                                           std::int64_t first, int count) {
  const std::int64_t inner_size = memory.size[memory.dims - 1];
  const std::int64_t inner_stride = memory.stride[memory.dims - 1];
  std::int64_t inner = first % inner_size, off = memory.offset(first);
  for (int v = 0; v < count; ++v) {
    values[v] = data[off];
    if (++inner < inner_size) {
      off += inner_stride;
    } else {
      inner = 0;
      off = memory.offset(first + v + 1);
    }
  }
}

// Storage word of each element type.
template <ElementType T>
struct BitsOf {
  using type = std::uint8_t;
};
template <>
struct BitsOf<ElementType::float32> {
  using type = std::uint32_t;
};
template <>
struct BitsOf<ElementType::int32> {
  using type = std::uint32_t;
};
template <>
struct BitsOf<ElementType::uint32> {
  using type = std::uint32_t;
};
template <>
struct BitsOf<ElementType::float64> {
  using type = std::uint64_t;
};
template <>
struct BitsOf<ElementType::int64> {
  using type = std::uint64_t;
};
template <>
struct BitsOf<ElementType::uint64> {
  using type = std::uint64_t;
};
template <>
struct BitsOf<ElementType::float16> {
  using type = std::uint16_t;
};
template <>
struct BitsOf<ElementType::bfloat16> {
  using type = std::uint16_t;
};
template <>
struct BitsOf<ElementType::int16> {
  using type = std::uint16_t;
};
template <>
struct BitsOf<ElementType::uint16> {
  using type = std::uint16_t;
};
template <ElementType T>
using Bits = typename BitsOf<T>::type;

template <ElementType T>
inline constexpr int kGroupElements = kGroupBytes / int(sizeof(Bits<T>));
template <ElementType T>
inline constexpr std::int64_t kTileElements =
    std::int64_t{kBlockThreads} * kGroupsPerThread * kGroupElements<T>;

template <ElementType T>
PROBE_HOST_DEVICE inline std::int64_t tile_count(std::int64_t numel) {
  return (numel + kTileElements<T> - 1) / kTileElements<T>;
}

// The element's value; float8 types read `float8_table` (256 values of float8_to_double).
template <ElementType T>
PROBE_HOST_DEVICE inline double element_value(Bits<T> b, const double* float8_table) {
  if constexpr (T == ElementType::float32) return bits_to_float(b);
  else if constexpr (T == ElementType::float64) return bits_to_double(b);
  else if constexpr (T == ElementType::float16) return half_to_float(b);
  else if constexpr (T == ElementType::bfloat16) return bfloat16_to_float(b);
  else if constexpr (T == ElementType::int8) return static_cast<std::int8_t>(b);
  else if constexpr (T == ElementType::int16) return static_cast<std::int16_t>(b);
  else if constexpr (T == ElementType::int32) return static_cast<std::int32_t>(b);
  else if constexpr (T == ElementType::int64)
    return static_cast<double>(static_cast<std::int64_t>(b));
  else if constexpr (T == ElementType::uint64) return static_cast<double>(b);
  else if constexpr (T == ElementType::uint8 || T == ElementType::boolean ||
                     T == ElementType::uint16 || T == ElementType::uint32)
    return b;
  else return float8_table[b];
}

template <ElementType T>
PROBE_HOST_DEVICE inline std::uint64_t element_hash(Bits<T> b, std::uint64_t global_index) {
  if constexpr (sizeof(Bits<T>) == 1) return hash_spec::element_hash_1(b, global_index);
  else if constexpr (sizeof(Bits<T>) == 2) return hash_spec::element_hash_2(b, global_index);
  else if constexpr (sizeof(Bits<T>) == 4) return hash_spec::element_hash_4(b, global_index);
  else return hash_spec::element_hash_8(b, global_index);
}

// Folds `count` (<= kGroupElements) consecutive local elements starting at local index `first`
// into `p`, in order. kSingleRun: global index = base + local index, no division.
template <ElementType T, bool kSingleRun>
PROBE_HOST_DEVICE inline void fold_group(StatsPartial& p, const Bits<T>* values, int count,
                                         std::int64_t first, const RunLayout& layout,
                                         const double* float8_table) {
  if constexpr (kSingleRun) {
    const std::uint64_t g = layout.base_global_index + static_cast<std::uint64_t>(first);
    for (int v = 0; v < count; ++v)
      p.add_positional(element_value<T>(values[v], float8_table),
                       element_hash<T>(values[v], g + v));
  } else {
    std::int64_t run = first / layout.run_length, pos = first % layout.run_length;
    std::uint64_t g = layout.run_first_global_index(run) + static_cast<std::uint64_t>(pos);
    for (int v = 0; v < count; ++v) {
      p.add_positional(element_value<T>(values[v], float8_table), element_hash<T>(values[v], g));
      ++g;
      if (++pos == layout.run_length) {
        pos = 0;
        g = layout.run_first_global_index(++run);
      }
    }
  }
}

// Local index of the first element of thread `thread`'s group `j` in tile `tile`.
template <ElementType T>
PROBE_HOST_DEVICE inline std::int64_t group_first(std::int64_t tile, int thread, int j) {
  return tile * kTileElements<T> + (std::int64_t{j} * kBlockThreads + thread) * kGroupElements<T>;
}

// The fixed combining tree over `n` (a power of two) partials, leaving the result in v[0]:
// at each step, v[l] absorbs v[l + half]. Warp shuffles (shfl_down by 16, 8, 4, 2, 1) realise
// exactly this on the GPU.
PROBE_HOST_DEVICE inline void tree_reduce(StatsPartial* v, int n) {
  for (int half = n / 2; half > 0; half /= 2)
    for (int l = 0; l < half; ++l) v[l].merge(v[l + half]);
}

}  // namespace probe::kernels::cuda_tile
