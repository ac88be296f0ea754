// tensor_stats(): hash spec v1 and health statistics of an at::Tensor, computed on the
// tensor's own device (docs/hash-spec.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "probe/shard.h"
#include "probe/tensor_stats_record.h"

namespace probe {

struct StatsOptions {
  // Also compute at::hash_tensor (what Python tooling such as autoparallel's NumericsLogger
  // prints), into TensorStats::torch_hash.
  bool torch_hash = false;
};

// Blocking: for a device tensor this waits for the device. The probe itself uses
// tensor_stats_pending(), which never syncs the host per tensor.
TensorStats tensor_stats(const at::Tensor& t, const Shard& shard = {},
                         const StatsOptions& options = {});

// Figures that may still be on the tensor's device: CPU tensors are finished at once, device
// tensors leave a small packed result tensor on the device until resolve_pending().
struct PendingStats {
  TensorStats stats;       // metadata (and, once ready, every figure)
  at::Tensor device_figures;  // packed figures on the device; undefined when ready
  bool torch_hash = false;    // device_figures carry at::hash_tensor's value too
  bool ready() const { return !device_figures.defined(); }
};

PendingStats tensor_stats_pending(const at::Tensor& t, const Shard& shard = {},
                                  const StatsOptions& options = {});

// A one-element tensor whose value is wanted on the host at the same time (a loss, a grad norm):
// read as float64 into *value.
struct PendingScalar {
  at::Tensor tensor;
  double* value = nullptr;
};

// Finishes every pending entry and reads every scalar with one device-to-host copy per device
// (the only host sync), so a step costs one sync however many tensors and scalars it records.
void resolve_pending(const std::vector<PendingStats*>& pending,
                     const std::vector<PendingScalar>& scalars = {});

// torch's dtype name as Python prints it without "torch.": float32, bfloat16, int64, bool ...
std::string dtype_name(c10::ScalarType type);

}  // namespace probe
