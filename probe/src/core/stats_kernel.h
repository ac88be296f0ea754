// The CPU kernel behind tensor_stats(): hash spec v1 and the health statistics of a tensor in
// one read, over raw memory (torch-free; the LibTorch layer maps an at::Tensor onto it).
//
// Determinism: the tensor is cut into fixed chunks of kChunkElements local elements; each chunk
// is reduced with a fixed lane layout, and chunk partials are merged in chunk order. The
// figures therefore do not depend on the thread count or on scheduling.
#pragma once

#include <cstdint>
#include <vector>

#include "probe/shard.h"
#include "stats_element.h"
#include "probe/tensor_stats_record.h"

namespace probe::kernels {

int element_size(ElementType type);

// `count` elements stored contiguously at `data`, with global indices first_index, +1, ...
StatsPartial stats_run(ElementType type, const void* data, std::int64_t count,
                       std::uint64_t first_index);

inline constexpr std::int64_t kChunkElements = std::int64_t{1} << 16;

// A contiguous local tensor inside its global tensor, seen as runs of elements whose global
// indices are consecutive: trailing dims that the shard spans fully join one run.
class ContiguousLayout {
 public:
  // `shard` empty: the tensor is whole. Throws std::invalid_argument if the shard doesn't fit.
  ContiguousLayout(ElementType type, const void* data, std::vector<std::int64_t> local_shape,
                   const Shard& shard);

  std::int64_t numel() const { return numel_; }
  std::int64_t chunk_count() const { return (numel_ + kChunkElements - 1) / kChunkElements; }
  // Figures of local elements [chunk * kChunkElements, ...) in a fixed order.
  StatsPartial chunk_stats(std::int64_t chunk) const;
  // The same over the chunk's elements read from `chunk_data` (its first element) instead.
  StatsPartial chunk_stats(std::int64_t chunk, const void* chunk_data) const;
  // Where chunk_stats puts local element `local` (row-major): the first local element of its
  // stats_run call (where the chunk or its run begins, whichever is later), and its global index.
  std::int64_t segment_first(std::int64_t local) const;
  std::uint64_t global_index(std::int64_t local) const;

  // The run structure, for kernels that walk the same layout (the CUDA one): local element i
  // has global index run_first_global_index(i / run_length) + i % run_length.
  std::int64_t run_length() const { return run_length_; }
  std::uint64_t base_global_index() const { return base_global_index_; }
  const std::vector<std::int64_t>& outer_extent() const { return outer_extent_; }
  const std::vector<std::uint64_t>& outer_global_stride() const { return outer_global_stride_; }

 private:
  std::uint64_t run_first_global_index(std::int64_t run) const;

  ElementType type_;
  const unsigned char* data_;
  int element_size_;
  std::int64_t numel_ = 1;
  std::int64_t run_length_ = 1;
  std::uint64_t base_global_index_ = 0;
  std::vector<std::int64_t> outer_extent_;  // local extents of the dims outside a run
  std::vector<std::uint64_t> outer_global_stride_;
};

// Merges chunk partials in order and finishes the figures (norm, mean, NaN min/max when empty).
TensorStats finish_stats(const std::vector<StatsPartial>& chunks, std::int64_t numel);

// The element figures (hash, norm, min, max, mean, NaN and Inf counts, l1, mhash) of `figures` into
// `stats`, whose description (dtype, shape, shard, nnz, torch_hash) stays.
inline void copy_figures(const TensorStats& figures, TensorStats& stats) {
  stats.hash = figures.hash;
  stats.norm = figures.norm;
  stats.min = figures.min;
  stats.max = figures.max;
  stats.mean = figures.mean;
  stats.nan = figures.nan;
  stats.inf = figures.inf;
  stats.l1 = figures.l1;
  stats.mhash = figures.mhash;
}

// Which vector ISA stats_run dispatched to on this CPU ("avx512", "avx2" or "generic").
const char* stats_kernel_isa();

// The ISA builds this CPU can run, each callable directly (for the tests that check that every
// build gives the same bits).
struct IsaKernel {
  const char* isa;
  StatsPartial (*run)(ElementType, const void*, std::int64_t, std::uint64_t);
};
std::vector<IsaKernel> runnable_isa_kernels();

}  // namespace probe::kernels
