// Private to the LibTorch layer: the figures of a sparse tensor as its dense equivalent
// (docs/hash-spec.md, "Sparse tensors"), computed from its stored elements without a dense copy.
#pragma once

#include <ATen/core/Tensor.h>

#include "probe/tensor_stats.h"

namespace probe::detail {

// COO, or a compressed layout (CSR, CSC, BSR, BSC), which is read through its COO form.
bool is_sparse(const at::Tensor& t);

// Fills `stats` (dtype, the dense shape, nnz, shard and the figures, or `unsupported`) for a
// sparse tensor. A device tensor costs a host sync: coalescing it already needs one (its nnz is
// data-dependent), and its indices and values are then read on the host. Throws
// std::invalid_argument for a shard that does not fit.
void sparse_figures(const at::Tensor& t, const Shard& shard, bool torch_hash, TensorStats& stats);

}  // namespace probe::detail
