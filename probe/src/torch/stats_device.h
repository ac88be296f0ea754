// Private to the LibTorch layer: how tensor_stats() prepares a tensor and computes its figures
// on a device. Tests include it to check the device paths against the CPU kernel on CPU.
#pragma once

#include <ATen/core/Tensor.h>

#include <torch/version.h>

#include <optional>

// LibTorch >= 2.4 is supported; newer features are used where the version has them.
#define NUMPROBE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#include "core/stats_kernel.h"
#include "probe/tensor_stats.h"

namespace probe::detail {

// Slots of the packed int64 figures a device path leaves on the device (doubles bit-cast).
enum PackedSlot : int {
  kHash,
  kSumSquares,
  kSum,
  kMin,
  kMax,
  kNanCount,
  kInfCount,
  kTorchHash,
  kMhash,
  kSumAbs,
  kPackedSlots
};

// A tensor made ready for hashing: conj/neg resolved, complex seen as real. It may still be a
// strided view: each path makes it contiguous only where it cannot read it in place.
struct PreparedTensor {
  at::Tensor data;
  Shard shard;  // the caller's shard, extended by the real/imag dim for complex tensors
  kernels::ElementType type = kernels::ElementType::float32;
};

// Fills `meta` (dtype, shape, shard, or `unsupported`) and returns the prepared tensor, or
// nullopt when the tensor cannot be hashed or is empty (then `meta` is final).
std::optional<PreparedTensor> prepare(const at::Tensor& t, const Shard& shard, TensorStats& meta);

// Writes a tensor's packed figures into `out` ([kPackedSlots] int64, on the tensor's device),
// computed with ATen ops: the device fallback when no fused kernel is registered for the device.
void packed_figures_aten(const PreparedTensor& prepared, bool torch_hash, const at::Tensor& out);

// Writes the packed figures of a tensor without elements into `out` (hash 0, no sums, min +inf
// and max -inf, which unpack_figures turns into NaN, torch hash 0), on the device, no host sync.
// Every device path starts with it for an empty tensor: a kernel over no elements would be
// launched with an empty grid, and ATen's amin/amax and hash_tensor refuse an empty input.
void write_empty_figures(const at::Tensor& out);

// A fused kernel for one device type (the CUDA one registers itself at load time). It writes into
// `out` asynchronously, on the device's current stream.
using PackedFiguresFn = void (*)(const PreparedTensor& prepared, bool torch_hash,
                                 const at::Tensor& out);
void register_device_kernel(c10::DeviceType type, PackedFiguresFn fn);
PackedFiguresFn device_kernel(c10::DeviceType type);

// Sends a CPU tensor (or scalar) down a StatsBatch's device-buffer path, as if it lived on a
// device without a fused kernel, so CPU tests can check that path's bookkeeping.
struct StatsBatchAccess {
  static std::size_t add_through_device_buffer(StatsBatch& batch, const at::Tensor& t,
                                               const Shard& shard = {});
  static std::size_t add_scalar_through_device_buffer(StatsBatch& batch, const at::Tensor& value);
};

// The CPU kernel's element type for a dtype (after complex is viewed as real); nullopt for
// dtypes it cannot read (sub-byte, packed, quantized, complex).
std::optional<kernels::ElementType> element_type(c10::ScalarType type);

// at::hash_tensor's value, read back now (a host sync for a device tensor); 0 for an empty
// tensor, which at::hash_tensor refuses.
std::uint64_t torch_hash_now(const at::Tensor& t);

// Whether at::hash_tensor (LibTorch >= 2.9) has a kernel for the dtype (it lacks float8, complex,
// uint16..64).
bool has_torch_hash_kernel(c10::ScalarType type);

// Turns packed figures (host int64 values) into finished statistics, keeping meta's fields.
void unpack_figures(const std::int64_t* packed, bool torch_hash, TensorStats& stats);

}  // namespace probe::detail
