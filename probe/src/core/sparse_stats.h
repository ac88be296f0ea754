// Hash spec v1 and the statistics of a sparse tensor's dense equivalent, from its stored
// elements only (docs/hash-spec.md, "Sparse tensors"). Torch-free: the LibTorch layer
// coalesces the tensor and hands over its indices and values.
//
// Why it needs no dense copy: an implicit zero adds +0 to every running sum, which leaves the
// sum as it is (the sums start at +0 and so are never -0), so the dense kernel's fixed order
// (chunks, the runs of a chunk, 8 lanes, elements in order) can be replayed over the stored
// elements alone. What zeros do contribute is their hash terms, a function of the element
// size, shape and shard only (zero_chunk_hash), and a 0 to min and max.
#pragma once

#include <cstdint>

#include "stats_kernel.h"

namespace probe::kernels {

// The stored elements of a coalesced sparse tensor. Element j of stored block k is the dense
// equivalent's local row-major element block_index[k] * block_elements + j; block_index
// ascends without repeats (what coalescing gives).
struct SparseElements {
  ElementType type = ElementType::float32;
  const void* values = nullptr;  // nnz * block_elements elements, contiguous
  const std::int64_t* block_index = nullptr;
  std::int64_t nnz = 0;
  std::int64_t block_elements = 1;
};

// The hash terms of chunk `chunk` of an all-zero tensor laid out as `layout` (whose data
// pointer is not read): a chunk-sized zero buffer stands in for the data.
std::uint64_t zero_chunk_hash(const ContiguousLayout& layout, std::int64_t chunk);

// The figures of the dense equivalent of `stored` in `layout` (the dense local shape and
// shard), bitwise those of the CPU kernel on the dense tensor. `zero_hash` is the sum of
// zero_chunk_hash over every chunk. A stored zero of either sign counts as +0, as in the
// dense tensor (to_dense() computes 0 + value). Throws std::invalid_argument for block
// indices that are out of range or not ascending.
TensorStats sparse_stats(const ContiguousLayout& layout, const SparseElements& stored,
                         std::uint64_t zero_hash);

}  // namespace probe::kernels
