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

  friend bool operator==(const Shard&, const Shard&) = default;
  friend void swap(Shard& a, Shard& b) noexcept {
    a.global_shape.swap(b.global_shape);
    a.offset.swap(b.offset);
  }
};

}  // namespace probe
