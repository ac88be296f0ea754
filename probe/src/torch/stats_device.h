// Private to the LibTorch layer: how tensor_stats() prepares a tensor and computes its figures
// on a device. Tests include it to check the device paths against the CPU kernel on CPU.
#pragma once

#include <ATen/core/Tensor.h>

#include <torch/version.h>

#include <optional>

// LibTorch >= 2.4 is supported; newer features are used where the version has them.
#define NUMPROBE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#include "../core/stats_kernel.h"
#include "probe/tensor_stats.h"

namespace probe::detail {

// Slots of the packed int64 figures a device path leaves on the device (doubles bit-cast).
enum PackedSlot : int {
  kHash, kSumSquares, kSum, kMin, kMax, kNanCount, kInfCount, kTorchHash, kPackedSlots
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

// Packed figures ([kPackedSlots] int64, on the tensor's device) computed with ATen ops: the
// device fallback when no fused kernel is registered for the device type.
at::Tensor packed_figures_aten(const PreparedTensor& prepared, bool torch_hash);

// A fused kernel for one device type (the CUDA one registers itself at load time).
using PackedFiguresFn = at::Tensor (*)(const PreparedTensor& prepared, bool torch_hash);
void register_device_kernel(c10::DeviceType type, PackedFiguresFn fn);
PackedFiguresFn device_kernel(c10::DeviceType type);

// Whether at::hash_tensor (LibTorch >= 2.9) has a kernel for the dtype (it lacks float8, complex,
// uint16..64).
bool has_torch_hash_kernel(c10::ScalarType type);

// Turns packed figures (host int64 values) into finished statistics, keeping meta's fields.
void unpack_figures(const std::int64_t* packed, bool torch_hash, TensorStats& stats);

}  // namespace probe::detail
