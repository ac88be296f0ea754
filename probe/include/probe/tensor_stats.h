// tensor_stats(): hash spec v1 and health statistics of an at::Tensor, computed on the
// tensor's own device (docs/hash-spec.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "probe/shard.h"
#include "probe/tensor_stats_record.h"

namespace probe {

namespace detail {
struct StatsBatchAccess;  // tests route CPU tensors through the device buffer (stats_device.h)
}

struct StatsOptions {
  // Also compute at::hash_tensor (what Python tooling such as autoparallel's NumericsLogger
  // prints), into TensorStats::torch_hash.
  bool torch_hash = false;
};

// Blocking: for a device tensor this waits for the device. The probe itself uses a StatsBatch,
// which never syncs the host per tensor.
TensorStats tensor_stats(const at::Tensor& t, const Shard& shard = {},
                         const StatsOptions& options = {});

// The figures of many tensors (and one-element scalar tensors such as a loss), read back
// together. A CPU entry is finished when added. A device entry's kernel writes its figures into
// a row of this batch's buffer on that device, on PyTorch's current stream; resolve() then
// copies each device's new rows to the host at once: one copy (and host sync) per device,
// however many entries. The buffer grows by chunks, so a full one never forces an early copy,
// and clear() keeps the chunks for the next step.
class StatsBatch {
 public:
  explicit StatsBatch(StatsOptions options = {}, std::int64_t rows_per_chunk = 4096);
  ~StatsBatch();
  StatsBatch(StatsBatch&&) noexcept;
  StatsBatch& operator=(StatsBatch&&) noexcept;

  // Both are safe to call from several threads at once (autograd runs hooks on device threads),
  // though not during resolve() or clear(), and return the entry's index.
  std::size_t add(const at::Tensor& t, const Shard& shard = {});
  std::size_t add_scalar(const at::Tensor& value);  // read as float64; must have one element

  // Finishes every entry added so far. Entries may be added after it; the next call reads those.
  void resolve();

  std::size_t size() const;
  bool ready(std::size_t entry) const;
  // The figures (after resolve() for a device entry); movable out, e.g. into a Record. The
  // reference is valid until the next add() or clear().
  TensorStats& stats(std::size_t entry);
  double scalar(std::size_t entry) const;

  // Drops every entry. The device chunks are kept for reuse once resolve() has read them all.
  void clear();

 private:
  struct Impl;
  friend struct detail::StatsBatchAccess;
  std::unique_ptr<Impl> impl_;
};

// torch's dtype name as Python prints it without "torch.": float32, bfloat16, int64, bool ...
std::string dtype_name(c10::ScalarType type);

}  // namespace probe
