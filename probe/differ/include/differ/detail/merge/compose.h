// Shards and replicas: one logical record out of what several ranks logged for one key.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "probe/record.h"

namespace probe::differ {

// Composes shard records of one tensor (distinct offsets, same global shape) into the whole:
// hashes add mod 2^64, norms combine as sqrt(sum of squares), min/max/nan/inf exactly, mean
// weighted by non-NaN counts, torch_hash XORs. Returns an error message instead when the
// shards do not tile the global tensor exactly once.
struct ComposeError {
  std::string error;  // empty: composed
  bool gap = false;   // the error is a gap: shards missing, none overlapping
};
struct ComposeResult : ComposeError {
  std::optional<TensorStats> stats;
};
ComposeResult compose_shards(const std::vector<const TensorStats*>& shards);
// The same into `out`, which holds default figures (log_format::reset_record) and keeps its
// buffers; `out` is unspecified when an error is returned.
ComposeError compose_shards_into(const std::vector<const TensorStats*>& shards, TensorStats& out);

// Bitwise agreement of two records of the same key (the replica check).
bool same_record(const Record& a, const Record& b);

// Why ranks that logged the same key with different values most likely did, by kind.
std::string replica_mismatch_hint(Kind kind);

}  // namespace probe::differ
