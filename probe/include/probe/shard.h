// Where a local tensor sits inside its global tensor: an axis-aligned hyper-rectangle.
// Torch-free: the probe uses it to seed element hashes with global indices, the differ to
// compose shard records back into whole tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace probe {

struct Shard {
  std::vector<std::int64_t> global_shape;  // shape of the whole (unsharded) tensor
  std::vector<std::int64_t> offset;        // start of this shard in each dim

  // An empty Shard means "the local tensor is the whole tensor".
  bool empty() const { return global_shape.empty() && offset.empty(); }

  // Throws std::invalid_argument (naming `what`) unless `local_shape` fits inside
  // global_shape at offset, with matching ranks.
  void check_fits(const std::vector<std::int64_t>& local_shape, const std::string& what) const;

  // A shard of `global_shape` cut along `dim`: rows [begin, begin + extent) of that dim.
  static Shard along(std::vector<std::int64_t> global_shape, int dim, std::int64_t begin);

  // Offsets first: the shards of one tensor share the global shape and differ there (the
  // differ buckets every rank's shard of a record by comparing them pairwise).
  friend bool operator==(const Shard& a, const Shard& b) {
    return same_dims(a.offset, b.offset) && same_dims(a.global_shape, b.global_shape);
  }
  friend void swap(Shard& a, Shard& b) noexcept {
    a.global_shape.swap(b.global_shape);
    a.offset.swap(b.offset);
  }

 private:
  // A loop, not memcmp: dims are a handful of integers, a call costs more than comparing them.
  static bool same_dims(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) return false;
    return true;
  }
};

}  // namespace probe
