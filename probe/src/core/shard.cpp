#include "probe/shard.h"

#include <stdexcept>

#include "probe/tensor_stats_record.h"

namespace probe {
namespace {
std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
  return out + "]";
}
}  // namespace

void Shard::check_fits(const std::vector<std::int64_t>& local_shape,
                       const std::string& what) const {
  if (global_shape.size() != offset.size() || global_shape.size() != local_shape.size())
    throw std::invalid_argument(what + ": shard global shape " + dims_text(global_shape) +
                                ", offset " + dims_text(offset) + " and local shape " +
                                dims_text(local_shape) + " differ in rank");
  for (std::size_t d = 0; d < local_shape.size(); ++d) {
    // Written so that no sum can overflow (the differ feeds it untrusted log values).
    if (offset[d] < 0 || local_shape[d] < 0 || offset[d] > global_shape[d] ||
        local_shape[d] > global_shape[d] - offset[d])
      throw std::invalid_argument(what + ": local shape " + dims_text(local_shape) + " at offset " +
                                  dims_text(offset) + " does not fit in global shape " +
                                  dims_text(global_shape));
  }
}

Shard Shard::along(std::vector<std::int64_t> global_shape, int dim, std::int64_t begin) {
  Shard shard;
  shard.offset.assign(global_shape.size(), 0);
  shard.offset.at(static_cast<std::size_t>(dim)) = begin;
  shard.global_shape = std::move(global_shape);
  return shard;
}

std::int64_t TensorStats::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace probe
