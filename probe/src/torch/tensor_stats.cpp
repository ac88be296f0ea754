#include "probe/tensor_stats.h"

#include <ATen/Parallel.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/view_as_real.h>
#include <c10/core/Event.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "stats_device.h"
#include "stats_sparse.h"

#if NUMPROBE_TORCH_AT_LEAST(2, 9)
#include <ATen/ops/hash_tensor.h>
#endif

namespace probe {
namespace detail {

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

// An empty tensor's is 0, the XOR reduction's identity: at::hash_tensor itself refuses a tensor
// without elements ("Expected reduction dim to be specified for input.numel() == 0").
std::uint64_t torch_hash_now(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
#if NUMPROBE_TORCH_AT_LEAST(2, 9)
  return static_cast<std::uint64_t>(at::hash_tensor(t).view(at::kLong).item<std::int64_t>());
#else
  (void)t;  // has_torch_hash_kernel() is false for every dtype before 2.9
  return 0;
#endif
}

}  // namespace detail

namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<c10::DeviceType, detail::PackedFiguresFn>& registry() {
  static std::map<c10::DeviceType, detail::PackedFiguresFn> r;
  return r;
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
    case S::Float:
    case S::Double:
    case S::Half:
    case S::BFloat16:
    case S::Bool:
    case S::Char:
    case S::Byte:
    case S::Short:
    case S::Int:
    case S::Long: return true;
    default: return false;
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
  meta.shape = t.sizes().vec();  // every layout's, sparse ones included
  if (t.layout() != c10::kStrided) {
    std::ostringstream layout;
    layout << t.layout();
    meta.unsupported = "layout " + layout.str();
    return std::nullopt;
  }
  if (t.is_quantized()) {
    meta.unsupported = "quantized dtype";
    return std::nullopt;
  }
  if (t.is_meta()) {
    meta.unsupported = "meta tensor (no data)";
    return std::nullopt;
  }
  // A tensor subclass Python dispatches (a DTensor, a FakeTensor) holds no data of its own, and
  // its ops would run Python code: its local tensor is what to record.
  if (t.key_set().has(c10::DispatchKey::Python)) {
    meta.unsupported = "tensor subclass without data of its own (record its local tensor)";
    return std::nullopt;
  }
  // a backend that keeps its data elsewhere (lazy, XLA, functorch wrappers)
  if (!t.has_storage()) {
    meta.unsupported = "tensor without storage";
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
  if (t.numel() == 0) {  // meta holds an empty tensor's figures: those of no element
    meta.l1 = 0;
    meta.mhash = 0;
    return std::nullopt;
  }
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
  p.mhash = static_cast<std::uint64_t>(packed[kMhash]);
  p.sum_abs = std::bit_cast<double>(packed[kSumAbs]);
  kernels::copy_figures(kernels::finish_stats({p}, stats.numel()), stats);
  if (std::isnan(p.sum_abs)) {  // a device kernel without the order-independent figures (CUDA)
    stats.l1.reset();
    stats.mhash.reset();
  }
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
    for (std::int64_t c = begin; c < end; ++c)
      chunks[static_cast<std::size_t>(c)] = layout.chunk_stats(c);
  });
  TensorStats figures = kernels::finish_stats(chunks, layout.numel());
  figures.dtype = std::move(stats.dtype);
  figures.shape = std::move(stats.shape);
  figures.shard = std::move(stats.shard);
  figures.torch_hash = stats.torch_hash;
  stats = std::move(figures);
}

}  // namespace

struct StatsBatch::Impl {
  struct Entry {
    TensorStats stats;
    double scalar = 0;
    bool is_scalar = false;
    bool torch_hash = false;            // the row carries at::hash_tensor's value too
    std::optional<c10::Device> device;  // set while the figures wait in that device's buffer
    std::int64_t row = 0;               // their row there
  };
  // A chunk of a device buffer, and the streams whose kernels write it: the one it was
  // allocated on first, then any other the allocator was told about (record_stream), so that it
  // is not handed out again while their kernels may still write it.
  struct Chunk {
    at::Tensor rows;
    std::vector<c10::Stream> streams;
  };
  // Rows of kPackedSlots int64 on one device, in chunks of rows_per_chunk.
  struct DeviceBuffer {
    c10::Device device;
    std::vector<Chunk> chunks;
    std::int64_t used = 0;  // rows handed out
    std::int64_t read = 0;  // rows resolve() has copied back
    // Streams that wrote rows [read, used): resolve() orders its copy after each of them.
    std::vector<c10::Stream> writers;
  };

  StatsOptions options;
  std::int64_t rows_per_chunk;
  mutable std::mutex mutex;
  std::vector<Entry> entries;
  std::vector<DeviceBuffer> buffers;

  std::size_t push(Entry entry) {
    std::lock_guard lock(mutex);
    entries.push_back(std::move(entry));
    return entries.size() - 1;
  }

  // The next free row on `device`, growing its buffer by a chunk when full, for a write on
  // `stream` (the device's current stream, where the caller launches the write).
  std::pair<at::Tensor, std::int64_t> reserve_row(c10::Device device, const c10::Stream& stream) {
    std::lock_guard lock(mutex);
    auto it = std::find_if(buffers.begin(), buffers.end(),
                           [&](const DeviceBuffer& b) { return b.device == device; });
    if (it == buffers.end()) it = buffers.insert(buffers.end(), DeviceBuffer{device, {}, 0, 0, {}});
    DeviceBuffer& buffer = *it;
    if (buffer.used == static_cast<std::int64_t>(buffer.chunks.size()) * rows_per_chunk)
      buffer.chunks.push_back({at::empty({rows_per_chunk, detail::kPackedSlots},
                                         at::TensorOptions().dtype(at::kLong).device(device)),
                               {stream}});
    const std::int64_t row = buffer.used++;
    Chunk& chunk = buffer.chunks[static_cast<std::size_t>(row / rows_per_chunk)];
    // Usually one stream writes everything: these checks then find it first.
    if (std::find(chunk.streams.begin(), chunk.streams.end(), stream) == chunk.streams.end()) {
      c10::impl::VirtualGuardImpl(device.type())
          .recordDataPtrOnStream(chunk.rows.storage().data_ptr(), stream);
      chunk.streams.push_back(stream);
    }
    if (std::find(buffer.writers.begin(), buffer.writers.end(), stream) == buffer.writers.end())
      buffer.writers.push_back(stream);
    return {chunk.rows.select(0, row % rows_per_chunk), row};
  }

  // The device reads `t` later, on `stream`: tell the allocator, so that memory the caller frees
  // right after add() is not reused by another stream before that read (a no-op when `t` was
  // allocated on `stream`, the usual case).
  static void read_later_on(const at::Tensor& t, const c10::Stream& stream) {
    if (t.has_storage())
      c10::impl::VirtualGuardImpl(t.device().type())
          .recordDataPtrOnStream(t.storage().data_ptr(), stream);
  }

  static c10::Stream current_stream(c10::Device device) {
    return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
  }

  // The entry is pushed only once its kernel is launched: a failed launch leaves an unread row,
  // never an entry waiting for figures nobody writes.
  std::size_t add_on_device(Entry entry, const at::Tensor& t,
                            const detail::PreparedTensor& prepared,
                            detail::PackedFiguresFn kernel) {
    entry.torch_hash = options.torch_hash && detail::has_torch_hash_kernel(t.scalar_type());
    const c10::Device device = prepared.data.device();
    const c10::Stream stream = current_stream(device);
    auto [out, row] = reserve_row(device, stream);
    kernel(prepared, entry.torch_hash, out);
    read_later_on(t, stream);
    if (!prepared.data.is_same(t)) read_later_on(prepared.data, stream);
    entry.device = device;
    entry.row = row;
    return push(std::move(entry));
  }

  std::size_t add_scalar_on_device(const at::Tensor& value) {
    const c10::Stream stream = current_stream(value.device());
    auto [out, row] = reserve_row(value.device(), stream);
    out.narrow(0, 0, 1).view(at::kDouble).copy_(value.detach().reshape({1}));  // converts to fp64
    read_later_on(value, stream);
    Entry entry;
    entry.is_scalar = true;
    entry.device = value.device();
    entry.row = row;
    return push(std::move(entry));
  }

  Entry& entry(std::size_t index) {
    TORCH_CHECK(index < entries.size(), "numprobe: StatsBatch has no entry ", index, " (it has ",
                entries.size(), ")");
    return entries[index];
  }
};

StatsBatch::StatsBatch(StatsOptions options, std::int64_t rows_per_chunk)
    : impl_(std::make_unique<Impl>()) {
  TORCH_CHECK(rows_per_chunk >= 1, "numprobe: StatsBatch rows_per_chunk must be at least 1");
  impl_->options = options;
  impl_->rows_per_chunk = rows_per_chunk;
}
StatsBatch::~StatsBatch() = default;
StatsBatch::StatsBatch(StatsBatch&&) noexcept = default;
StatsBatch& StatsBatch::operator=(StatsBatch&&) noexcept = default;

std::size_t StatsBatch::add(const at::Tensor& t, const Shard& shard) {
  Impl::Entry entry;
  if (t.defined() && detail::is_sparse(t)) {  // finished now, from its stored elements
    detail::sparse_figures(t, shard, impl_->options.torch_hash, entry.stats);
    return impl_->push(std::move(entry));
  }
  auto prepared = detail::prepare(t, shard, entry.stats);
  if (prepared && !prepared->data.is_cpu()) {
    auto kernel = detail::device_kernel(prepared->data.device().type());
    return impl_->add_on_device(std::move(entry), t, *prepared,
                                kernel ? kernel : detail::packed_figures_aten);
  }
  // On the CPU, or nothing to read (then the figures are an empty tensor's, or `unsupported`).
  if (impl_->options.torch_hash && entry.stats.supported() &&
      detail::has_torch_hash_kernel(t.scalar_type()))
    // no read of a device tensor: it is empty here
    entry.stats.torch_hash = detail::torch_hash_now(t);
  if (prepared) cpu_figures(*prepared, entry.stats);
  return impl_->push(std::move(entry));
}

std::size_t StatsBatch::add_scalar(const at::Tensor& value) {
  TORCH_CHECK(value.defined(), "numprobe: a scalar tensor is undefined");
  TORCH_CHECK(value.numel() == 1, "numprobe: a scalar tensor has ", value.numel(),
              " elements, not 1");
  if (!value.is_cpu()) return impl_->add_scalar_on_device(value);
  Impl::Entry entry;
  entry.is_scalar = true;
  entry.scalar = value.item<double>();  // no sync on the CPU
  return impl_->push(std::move(entry));
}

void StatsBatch::resolve() {
  std::lock_guard lock(impl_->mutex);
  const std::int64_t rows_per_chunk = impl_->rows_per_chunk;
  for (auto& buffer : impl_->buffers) {
    if (buffer.read == buffer.used) continue;
    std::vector<at::Tensor> parts;  // rows [read, used), chunk by chunk
    for (std::int64_t row = buffer.read; row < buffer.used;) {
      const std::int64_t offset = row % rows_per_chunk;
      const std::int64_t count = std::min(rows_per_chunk - offset, buffer.used - row);
      parts.push_back(buffer.chunks[static_cast<std::size_t>(row / rows_per_chunk)].rows.narrow(
          0, offset, count));
      row += count;
    }
    // Rows written on other streams (autograd's, a side stream of the trainer's): the copy below
    // runs on the current stream, so make it wait for them, on the device, not the host.
    const c10::Stream current = Impl::current_stream(buffer.device);
    for (const c10::Stream& writer : buffer.writers) {
      if (writer == current) continue;
      c10::Event written(buffer.device.type());
      written.record(writer);
      written.block(current);
    }
    buffer.writers.clear();
    // The one copy (and sync) for this device.
    const at::Tensor host =
        (parts.size() == 1 ? parts[0] : at::cat(parts)).to(at::kCPU).contiguous();
    const std::int64_t* words = host.const_data_ptr<std::int64_t>();
    for (auto& entry : impl_->entries) {
      if (entry.device != buffer.device || entry.row < buffer.read) continue;
      const std::int64_t* row = words + (entry.row - buffer.read) * detail::kPackedSlots;
      if (entry.is_scalar) entry.scalar = std::bit_cast<double>(row[0]);
      else detail::unpack_figures(row, entry.torch_hash, entry.stats);
      entry.device.reset();
    }
    buffer.read = buffer.used;
  }
}

std::size_t StatsBatch::size() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->entries.size();
}

bool StatsBatch::ready(std::size_t entry) const {
  std::lock_guard lock(impl_->mutex);
  return !impl_->entry(entry).device.has_value();
}

TensorStats& StatsBatch::stats(std::size_t index) {
  std::lock_guard lock(impl_->mutex);
  Impl::Entry& entry = impl_->entry(index);
  TORCH_CHECK(!entry.is_scalar, "numprobe: StatsBatch entry ", index, " is a scalar, not a tensor");
  TORCH_CHECK(!entry.device, "numprobe: StatsBatch entry ", index, " is still on ",
              entry.device->str(), ": call resolve() first");
  return entry.stats;
}

double StatsBatch::scalar(std::size_t index) const {
  std::lock_guard lock(impl_->mutex);
  const Impl::Entry& entry = impl_->entry(index);
  TORCH_CHECK(entry.is_scalar, "numprobe: StatsBatch entry ", index, " is a tensor, not a scalar");
  TORCH_CHECK(!entry.device, "numprobe: StatsBatch entry ", index, " is still on ",
              entry.device->str(), ": call resolve() first");
  return entry.scalar;
}

void StatsBatch::clear() {
  std::lock_guard lock(impl_->mutex);
  impl_->entries.clear();
  // A chunk with unread rows may still be written by a kernel in flight: give it back to the
  // allocator (which orders its reuse after the stream's work) instead of reusing it here.
  auto& buffers = impl_->buffers;
  buffers.erase(std::remove_if(buffers.begin(), buffers.end(),
                               [](const Impl::DeviceBuffer& b) { return b.read != b.used; }),
                buffers.end());
  for (auto& buffer : buffers) buffer.used = buffer.read = 0;
}

namespace detail {

std::size_t StatsBatchAccess::add_through_device_buffer(StatsBatch& batch, const at::Tensor& t,
                                                        const Shard& shard) {
  StatsBatch::Impl::Entry entry;
  auto prepared = prepare(t, shard, entry.stats);
  if (!prepared && entry.stats.supported()) {  // empty: the device path writes its figures
    prepared.emplace();
    prepared->data = t;
    prepared->shard = shard;
  }
  TORCH_CHECK(prepared, "numprobe: add_through_device_buffer needs a tensor that can be hashed");
  return batch.impl_->add_on_device(std::move(entry), t, *prepared, packed_figures_aten);
}

std::size_t StatsBatchAccess::add_scalar_through_device_buffer(StatsBatch& batch,
                                                               const at::Tensor& value) {
  return batch.impl_->add_scalar_on_device(value);
}

}  // namespace detail

TensorStats tensor_stats(const at::Tensor& t, const Shard& shard, const StatsOptions& options) {
  StatsBatch batch(options, /*rows_per_chunk=*/1);
  const std::size_t entry = batch.add(t, shard);
  batch.resolve();
  return std::move(batch.stats(entry));
}

}  // namespace probe
