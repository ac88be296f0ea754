// A record that is one summand of a tensor rather than the tensor or a piece of it: a
// tensor-parallel rank's partial product before the row-parallel reduction, a sequence shard's
// contribution to the gradient of a weight computed on sequence shards (a norm) before the
// tensor-parallel all-reduce. Torch-free:
// the probe writes it, the differ reads it (docs/log-format.md, "Partial records").
#pragma once

#include <cstdint>
#include <string>

namespace probe {

struct Partial {
  std::int64_t index = 0;  // which summand, 0 <= index < count
  std::int64_t count = 0;  // of how many; 0: the record is no partial sum

  bool empty() const { return count == 0; }
  friend bool operator==(const Partial&, const Partial&) = default;

  // Summand `index` of `count`; throws std::invalid_argument (naming `what`) unless
  // 0 <= index < count.
  static Partial of(std::int64_t index, std::int64_t count, const std::string& what = "partial");
};

}  // namespace probe
