#include "stats_sparse.h"

#include <ATen/Parallel.h>
#include <ATen/ops/view_as_real.h>

#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/sparse_stats.h"
#include "stats_device.h"

namespace probe::detail {
namespace {

using kernels::ElementType;

// The unsigned type of each element size: zeros hash alike whatever the dtype, and integers
// decode fastest.
ElementType zeros_type(int element_size) {
  switch (element_size) {
    case 1: return ElementType::uint8;
    case 2: return ElementType::uint16;
    case 4: return ElementType::uint32;
    default: return ElementType::uint64;
  }
}

// The hash terms of an all-zero tensor of this element size, shape and shard: one pass of
// hashing over the dense size (no memory beyond one chunk), remembered per key, since a sparse
// gradient has the same shape every step.
std::uint64_t zero_hash(int element_size, const std::vector<std::int64_t>& shape,
                        const Shard& shard) {
  std::vector<std::int64_t> key{element_size, static_cast<std::int64_t>(shape.size())};
  key.insert(key.end(), shape.begin(), shape.end());
  key.insert(key.end(), shard.global_shape.begin(), shard.global_shape.end());
  key.insert(key.end(), shard.offset.begin(), shard.offset.end());
  static std::mutex mutex;
  static std::map<std::vector<std::int64_t>, std::uint64_t> known;
  {
    std::lock_guard lock(mutex);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  const kernels::ContiguousLayout layout(zeros_type(element_size), nullptr, shape, shard);
  std::vector<std::uint64_t> chunks(static_cast<std::size_t>(layout.chunk_count()));
  at::parallel_for(0, layout.chunk_count(), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c)
      chunks[static_cast<std::size_t>(c)] = kernels::zero_chunk_hash(layout, c);
  });
  std::uint64_t hash = 0;
  for (auto h : chunks) hash += h;
  std::lock_guard lock(mutex);
  if (known.size() >= 256) known.clear();  // bounded: shapes that keep changing are not kept
  known.emplace(std::move(key), hash);
  return hash;
}

// Row-major index over the sparse dims of each stored element of a coalesced COO tensor
// (ascending, as coalescing sorts them).
std::vector<std::int64_t> block_indices(const at::Tensor& indices_cpu, at::IntArrayRef sizes) {
  const at::Tensor indices = indices_cpu.contiguous();
  const std::int64_t dims = indices.size(0), nnz = indices.size(1);
  const std::int64_t* data = indices.const_data_ptr<std::int64_t>();
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(nnz), 0);
  for (std::int64_t d = 0; d < dims; ++d)
    for (std::int64_t k = 0; k < nnz; ++k) {
      auto& b = blocks[static_cast<std::size_t>(k)];
      b = b * sizes[static_cast<std::size_t>(d)] + data[d * nnz + k];
    }
  return blocks;
}

std::string layout_name(c10::Layout layout) {
  std::ostringstream out;
  out << layout;
  return out.str();
}

}  // namespace

bool is_sparse(const at::Tensor& t) {
  switch (t.layout()) {
    case c10::kSparse:
    case c10::kSparseCsr:
    case c10::kSparseCsc:
    case c10::kSparseBsr:
    case c10::kSparseBsc: return true;
    default: return false;
  }
}

void sparse_figures(const at::Tensor& t, const Shard& shard, bool torch_hash, TensorStats& stats) {
  stats.dtype = dtype_name(t.scalar_type());
  stats.shape = t.sizes().vec();
  stats.shard = shard;
  if (t.is_meta()) {
    stats.unsupported = "meta tensor (no data)";
    return;
  }
  if (!shard.empty())
    shard.check_fits(stats.shape, "numprobe shard of a sparse " + stats.dtype + " tensor");
  at::Tensor coo;
  try {
    coo = (t.layout() == c10::kSparse ? t : t.to_sparse()).coalesce();  // sums duplicates
  } catch (const c10::Error&) {
    stats.unsupported = "layout " + layout_name(t.layout()) + " (no coalesced COO form)";
    return;
  }
  stats.nnz = coo._nnz();
  const at::Tensor values_cpu = coo._values().to(at::kCPU);  // the one copy to the host
  at::Tensor values = values_cpu;
  std::vector<std::int64_t> shape = stats.shape;
  Shard dense_shard = shard;
  if (values.is_complex()) {  // as its real view, like a dense complex tensor
    values = at::view_as_real(values.resolve_conj());
    shape.push_back(2);
    if (!dense_shard.empty()) {
      dense_shard.global_shape.push_back(2);
      dense_shard.offset.push_back(0);
    }
  }
  const auto type = element_type(values.scalar_type());
  if (!type) {
    stats.unsupported = "dtype " + stats.dtype + " (sub-byte or packed)";
    return;
  }
  values = values.contiguous();
  std::int64_t block_elements = 1;
  for (std::int64_t d = 1; d < values.dim(); ++d) block_elements *= values.size(d);
  const std::vector<std::int64_t> blocks = block_indices(coo._indices().to(at::kCPU), stats.shape);
  const kernels::ContiguousLayout layout(*type, nullptr, shape, dense_shard);
  kernels::SparseElements stored;
  stored.type = *type;
  stored.values = values.const_data_ptr();
  stored.block_index = blocks.data();
  stored.nnz = stats.nnz.value();
  stored.block_elements = block_elements;
  kernels::copy_figures(
      kernels::sparse_stats(layout, stored,
                            zero_hash(kernels::element_size(*type), shape, dense_shard)),
      stats);
  if (torch_hash && has_torch_hash_kernel(t.scalar_type())) {
    // XOR of the stored values' bits: the implicit zeros add 0 bits, and so does a stored -0,
    // which is +0 in the dense tensor.
    at::Tensor v = values_cpu;
    if (at::isFloatingType(v.scalar_type())) v = v.masked_fill(v.eq(0), 0);
    stats.torch_hash = torch_hash_now(v);
  }
}

}  // namespace probe::detail
