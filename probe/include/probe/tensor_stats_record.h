// The figures the probe computes for one tensor (torch-free, so the log format and the differ
// share them). tensor_stats() (probe/tensor_stats.h) fills this from an at::Tensor.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "probe/shard.h"

namespace probe {

struct TensorStats {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  std::uint64_t hash = 0;  // hash spec v1 (docs/hash-spec.md)
  double norm = 0;         // L2 norm accumulated in fp64; NaN if any element is NaN
  double min = kNaN;       // over non-NaN elements; NaN when there are none
  double max = kNaN;
  double mean = kNaN;      // over non-NaN elements
  std::int64_t nan = 0;    // NaN count
  std::int64_t inf = 0;    // +-Inf count
  std::string dtype;       // torch's name: float32, bfloat16, int64, bool, complex64 ...
  std::vector<std::int64_t> shape;  // local shape (a sparse tensor's dense shape)
  // A sparse tensor's stored elements after coalescing (torch's _nnz(): index entries).
  std::optional<std::int64_t> nnz;
  Shard shard;                      // empty: the tensor is whole
  // Set when the tensor cannot be hashed (quantized, sub-byte, nested): the reason.
  std::optional<std::string> unsupported;
  // at::hash_tensor's value (XOR of the elements' bits), when the compatibility hash is on.
  std::optional<std::uint64_t> torch_hash;

  std::int64_t numel() const;
  bool supported() const { return !unsupported.has_value(); }
};

}  // namespace probe
