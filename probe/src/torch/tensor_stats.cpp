#include "probe/tensor_stats.h"

#include <ATen/Parallel.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/view_as_real.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <bit>
#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "stats_device.h"

#if NUMPROBE_TORCH_AT_LEAST(2, 9)
#include <ATen/ops/hash_tensor.h>
#endif

namespace probe {
namespace {

using kernels::ElementType;

std::optional<ElementType> element_type(c10::ScalarType type) {
  using S = c10::ScalarType;
  switch (type) {
    case S::Float: return ElementType::float32;
    case S::Double: return ElementType::float64;
    case S::Half: return ElementType::float16;
    case S::BFloat16: return ElementType::bfloat16;
    case S::Float8_e4m3fn: return ElementType::float8_e4m3fn;
    case S::Float8_e5m2: return ElementType::float8_e5m2;
    case S::Float8_e4m3fnuz: return ElementType::float8_e4m3fnuz;
    case S::Float8_e5m2fnuz: return ElementType::float8_e5m2fnuz;
#if NUMPROBE_TORCH_AT_LEAST(2, 7)
    case S::Float8_e8m0fnu: return ElementType::float8_e8m0fnu;
#endif
    case S::Char: return ElementType::int8;
    case S::Byte: return ElementType::uint8;
    case S::Short: return ElementType::int16;
    case S::UInt16: return ElementType::uint16;
    case S::Int: return ElementType::int32;
    case S::UInt32: return ElementType::uint32;
    case S::Long: return ElementType::int64;
    case S::UInt64: return ElementType::uint64;
    case S::Bool: return ElementType::boolean;
    default: return std::nullopt;
  }
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<c10::DeviceType, detail::PackedFiguresFn>& registry() {
  static std::map<c10::DeviceType, detail::PackedFiguresFn> r;
  return r;
}

std::uint64_t torch_hash_now(const at::Tensor& t) {
#if NUMPROBE_TORCH_AT_LEAST(2, 9)
  return static_cast<std::uint64_t>(at::hash_tensor(t).view(at::kLong).item<std::int64_t>());
#else
  (void)t;  // has_torch_hash_kernel() is false for every dtype before 2.9
  return 0;
#endif
}

}  // namespace

std::string dtype_name(c10::ScalarType type) {
  using S = c10::ScalarType;
  switch (type) {
    case S::Float: return "float32";
    case S::Double: return "float64";
    case S::Half: return "float16";
    case S::BFloat16: return "bfloat16";
    case S::ComplexHalf: return "complex32";
    case S::ComplexFloat: return "complex64";
    case S::ComplexDouble: return "complex128";
    case S::Char: return "int8";
    case S::Byte: return "uint8";
    case S::Short: return "int16";
    case S::Int: return "int32";
    case S::Long: return "int64";
    case S::UInt16: return "uint16";
    case S::UInt32: return "uint32";
    case S::UInt64: return "uint64";
    case S::Bool: return "bool";
    case S::Float8_e4m3fn: return "float8_e4m3fn";
    case S::Float8_e5m2: return "float8_e5m2";
    case S::Float8_e4m3fnuz: return "float8_e4m3fnuz";
    case S::Float8_e5m2fnuz: return "float8_e5m2fnuz";
#if NUMPROBE_TORCH_AT_LEAST(2, 7)
    case S::Float8_e8m0fnu: return "float8_e8m0fnu";
#endif
    default: {
      std::string name = c10::toString(type);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return name;
    }
  }
}

namespace detail {

bool has_torch_hash_kernel(c10::ScalarType type) {
  using S = c10::ScalarType;
  if (!NUMPROBE_TORCH_AT_LEAST(2, 9)) return false;
  switch (type) {
    case S::Float: case S::Double: case S::Half: case S::BFloat16: case S::Bool:
    case S::Char: case S::Byte: case S::Short: case S::Int: case S::Long:
      return true;
    default:
      return false;
  }
}

void register_device_kernel(c10::DeviceType type, PackedFiguresFn fn) {
  std::lock_guard lock(registry_mutex());
  registry()[type] = fn;
}

PackedFiguresFn device_kernel(c10::DeviceType type) {
  std::lock_guard lock(registry_mutex());
  auto it = registry().find(type);
  return it == registry().end() ? nullptr : it->second;
}

std::optional<PreparedTensor> prepare(const at::Tensor& t, const Shard& shard, TensorStats& meta) {
  TORCH_CHECK(t.defined(), "numprobe: tensor_stats() of an undefined tensor");
  meta.dtype = dtype_name(t.scalar_type());
  meta.shard = shard;
  if (t.is_nested()) {
    meta.unsupported = "nested tensor";
    return std::nullopt;
  }
  if (t.layout() != c10::kStrided) {
    std::ostringstream layout;
    layout << t.layout();
    meta.unsupported = "layout " + layout.str();
    return std::nullopt;
  }
  meta.shape = t.sizes().vec();
  if (t.is_quantized()) {
    meta.unsupported = "quantized dtype";
    return std::nullopt;
  }
  if (t.is_meta()) {
    meta.unsupported = "meta tensor (no data)";
    return std::nullopt;
  }
  if (!shard.empty()) shard.check_fits(meta.shape, "numprobe shard of a " + meta.dtype + " tensor");
  at::Tensor data = t.resolve_conj().resolve_neg();
  PreparedTensor prepared;
  prepared.shard = shard;
  if (data.is_complex()) {
    data = at::view_as_real(data);
    if (!shard.empty()) {
      prepared.shard.global_shape.push_back(2);
      prepared.shard.offset.push_back(0);
    }
  }
  auto type = element_type(data.scalar_type());
  if (!type) {
    meta.unsupported = "dtype " + meta.dtype + " (sub-byte or packed)";
    return std::nullopt;
  }
  if (t.numel() == 0) return std::nullopt;  // meta already holds an empty tensor's figures
  prepared.type = *type;
  prepared.data = data;  // each path copies a strided view only if it cannot read it in place
  return prepared;
}

void unpack_figures(const std::int64_t* packed, bool torch_hash, TensorStats& stats) {
  kernels::StatsPartial p;
  p.hash = static_cast<std::uint64_t>(packed[kHash]);
  p.sum_squares = std::bit_cast<double>(packed[kSumSquares]);
  p.sum = std::bit_cast<double>(packed[kSum]);
  p.min = std::bit_cast<double>(packed[kMin]);
  p.max = std::bit_cast<double>(packed[kMax]);
  p.nan = packed[kNanCount];
  p.inf = packed[kInfCount];
  TensorStats figures = kernels::finish_stats({p}, stats.numel());
  stats.hash = figures.hash;
  stats.norm = figures.norm;
  stats.min = figures.min;
  stats.max = figures.max;
  stats.mean = figures.mean;
  stats.nan = figures.nan;
  stats.inf = figures.inf;
  if (torch_hash) stats.torch_hash = static_cast<std::uint64_t>(packed[kTorchHash]);
}

}  // namespace detail

namespace {

void cpu_figures(const detail::PreparedTensor& prepared, TensorStats& stats) {
  const at::Tensor data = prepared.data.contiguous();  // no copy when already contiguous
  kernels::ContiguousLayout layout(prepared.type, data.const_data_ptr(), data.sizes().vec(),
                                   prepared.shard);
  std::vector<kernels::StatsPartial> chunks(static_cast<std::size_t>(layout.chunk_count()));
  at::parallel_for(0, layout.chunk_count(), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) chunks[static_cast<std::size_t>(c)] = layout.chunk_stats(c);
  });
  TensorStats figures = kernels::finish_stats(chunks, layout.numel());
  figures.dtype = std::move(stats.dtype);
  figures.shape = std::move(stats.shape);
  figures.shard = std::move(stats.shard);
  figures.torch_hash = stats.torch_hash;
  stats = std::move(figures);
}

}  // namespace

PendingStats tensor_stats_pending(const at::Tensor& t, const Shard& shard,
                                  const StatsOptions& options) {
  PendingStats pending;
  auto prepared = detail::prepare(t, shard, pending.stats);
  if (!prepared) {
    if (options.torch_hash && pending.stats.supported() && t.numel() == 0 &&
        detail::has_torch_hash_kernel(t.scalar_type()))
      pending.stats.torch_hash = torch_hash_now(t);
    return pending;
  }
  if (prepared->data.is_cpu()) {
    if (options.torch_hash && detail::has_torch_hash_kernel(t.scalar_type()))
      pending.stats.torch_hash = torch_hash_now(t);
    cpu_figures(*prepared, pending.stats);
    return pending;
  }
  auto kernel = detail::device_kernel(prepared->data.device().type());
  // Checked up front: a device launch cannot report a missing kernel without a sync.
  pending.torch_hash = options.torch_hash && detail::has_torch_hash_kernel(t.scalar_type());
  pending.device_figures = kernel ? kernel(*prepared, pending.torch_hash)
                                  : detail::packed_figures_aten(*prepared, pending.torch_hash);
  return pending;
}

void resolve_pending(const std::vector<PendingStats*>& pending,
                     const std::vector<PendingScalar>& scalars) {
  // Per device: every packed figure row (kPackedSlots int64) and every scalar (its float64 bits
  // as one int64), concatenated on the device and copied back at once.
  struct DeviceBatch {
    c10::Device device;
    std::vector<PendingStats*> stats;
    std::vector<const PendingScalar*> scalars;
    std::vector<at::Tensor> parts;
  };
  std::vector<DeviceBatch> batches;
  auto batch_for = [&](c10::Device device) -> DeviceBatch& {
    auto it = std::find_if(batches.begin(), batches.end(),
                           [&](const DeviceBatch& b) { return b.device == device; });
    if (it == batches.end()) it = batches.insert(batches.end(), DeviceBatch{device, {}, {}, {}});
    return *it;
  };
  for (auto* p : pending) {
    if (p->ready()) continue;
    DeviceBatch& batch = batch_for(p->device_figures.device());
    batch.stats.push_back(p);
    batch.parts.push_back(p->device_figures.reshape({-1}));
  }
  for (const auto& s : scalars) {
    TORCH_CHECK(s.tensor.numel() == 1, "numprobe: a pending scalar has ", s.tensor.numel(), " elements");
    DeviceBatch& batch = batch_for(s.tensor.device());
    batch.scalars.push_back(&s);
    batch.parts.push_back(s.tensor.detach().reshape({1}).to(at::kDouble).view(at::kLong));
  }
  for (auto& batch : batches) {
    at::Tensor host = at::cat(batch.parts).to(at::kCPU).contiguous();  // the one copy (and sync)
    const std::int64_t* words = host.const_data_ptr<std::int64_t>();
    for (auto* p : batch.stats) {
      detail::unpack_figures(words, p->torch_hash, p->stats);
      p->device_figures = at::Tensor();
      words += detail::kPackedSlots;
    }
    for (const auto* s : batch.scalars) *s->value = std::bit_cast<double>(*words++);
  }
}

TensorStats tensor_stats(const at::Tensor& t, const Shard& shard, const StatsOptions& options) {
  PendingStats pending = tensor_stats_pending(t, shard, options);
  resolve_pending({&pending});
  return std::move(pending.stats);
}

}  // namespace probe
