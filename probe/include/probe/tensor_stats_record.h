// The figures the probe computes for one tensor (torch-free, so the log format and the differ
// share them). tensor_stats() (probe/tensor_stats.h) fills this from an at::Tensor.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "probe/partial.h"
#include "probe/shard.h"

namespace probe {

struct TensorStats {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  std::uint64_t hash = 0;  // hash spec v1 (docs/hash-spec.md)
  double norm = 0;         // L2 norm accumulated in fp64; NaN if any element is NaN
  double min = kNaN;       // over non-NaN elements; NaN when there are none
  double max = kNaN;
  double mean = kNaN;    // over non-NaN elements
  std::int64_t nan = 0;  // NaN count
  std::int64_t inf = 0;  // +-Inf count
  // Format 8's evidence for sound rules (docs/hash-spec.md, "Order-independent figures"); absent
  // in older logs and in logs of other tools.
  std::optional<double> l1;            // sum of |x| over non-NaN elements, fp64
  std::optional<std::uint64_t> mhash;  // sum of value_term(bits) mod 2^64: the values, not places
  std::string dtype;                // torch's name: float32, bfloat16, int64, bool, complex64 ...
  std::vector<std::int64_t> shape;  // local shape (a sparse tensor's dense shape)
  // A sparse tensor's stored elements after coalescing (torch's _nnz(): index entries).
  std::optional<std::int64_t> nnz;
  Shard shard;      // empty: the tensor is whole
  Partial partial;  // empty: no summand of a partial sum (probe/partial.h)
  // Set when the tensor cannot be hashed (quantized, sub-byte, nested): the reason.
  std::optional<std::string> unsupported;
  // at::hash_tensor's value (XOR of the elements' bits), when the compatibility hash is on.
  std::optional<std::uint64_t> torch_hash;

  std::int64_t numel() const;
  bool supported() const { return !unsupported.has_value(); }

  // Member by member, every field (a new field goes here too): std::swap's three moves of
  // every string and vector cost several times more, and the differ swaps records between
  // reused buffers once per record.
  friend void swap(TensorStats& a, TensorStats& b) noexcept {
    using std::swap;
    swap(a.hash, b.hash);
    swap(a.norm, b.norm);
    swap(a.min, b.min);
    swap(a.max, b.max);
    swap(a.mean, b.mean);
    swap(a.nan, b.nan);
    swap(a.inf, b.inf);
    swap(a.l1, b.l1);
    swap(a.mhash, b.mhash);
    a.dtype.swap(b.dtype);
    a.shape.swap(b.shape);
    swap(a.nnz, b.nnz);
    swap(a.shard, b.shard);
    swap(a.partial, b.partial);
    swap(a.unsupported, b.unsupported);
    swap(a.torch_hash, b.torch_hash);
  }
};

}  // namespace probe
