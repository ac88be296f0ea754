// The CUDA fast path of tensor_stats(): hash spec v1 and every statistic (sum of squares and
// sum in fp64, min, max, NaN and Inf counts) in one read of the tensor, left on the device as
// the packed int64 figures stats_device.h describes, in the caller's row of a StatsBatch's
// device buffer. Nothing here waits for the device: both kernels go onto PyTorch's current
// stream, scratch comes from the caching allocator, and the probe copies a step's rows to the
// host once, at end_step() (StatsBatch::resolve).
//
// Why this shape (details in stats_tile.h and docs/cuda.md):
//   - the per-element hash and value decoding are the shared __host__ __device__ definitions
//     (hash_spec.h, stats_element.h) the CPU kernel uses, so the hash is the CPU's bit for bit;
//   - each 256-thread block reads one 32 KiB tile with 128-bit loads, eight in flight per
//     thread, which is what a memory-bound reduction needs to approach copy bandwidth;
//   - the grid is a function of the element count only and partials combine in fixed trees
//     (no atomics), so figures are bitwise reproducible and equal stats_reference.h's replay
//     of the same order on the CPU;
//   - float8 values come from a 256-entry table in shared memory (computed per block from the
//     format definition): a __constant__ table would serialise on divergent addresses.
// The kernels: stats_cuda_kernels.cuh, compiled per dtype family (stats_cuda_<family>.cu); this
// file prepares the arguments and dispatches on the dtype.
// CPU reference: stats_reference.h; tests: tests/core/cuda_reference_test.cpp (CPU) and
// tests/cuda/stats_cuda_test.cpp (GPU); benchmark: probe/bench/cuda/stats_cuda_bench.cpp.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/hash_tensor.h>
#include <c10/cuda/CUDAGuard.h>

#include "core/stats_kernel.h"
#include "torch/stats_device.h"
#include "stats_cuda_launch.h"
#include "stats_tile.h"

namespace probe::detail {
namespace {

using kernels::ElementType;
namespace tile = kernels::cuda_tile;

// A view the kernel reads in place; a view of more dims than it takes is copied first.
tile::MemoryLayout memory_layout_of(const at::Tensor& data) {
  tile::MemoryLayout memory;
  if (data.is_contiguous() || data.dim() > tile::kMaxStridedDims) return memory;
  memory.dims = static_cast<int>(data.dim());
  for (int d = 0; d < memory.dims; ++d) {
    memory.size[d] = data.size(d);
    memory.stride[d] = data.stride(d);
  }
  return memory;
}

void packed_figures_cuda(const PreparedTensor& view, bool torch_hash, const at::Tensor& packed) {
  TORCH_INTERNAL_ASSERT(packed.device() == view.data.device() && packed.is_contiguous() &&
                        packed.numel() == kPackedSlots && packed.scalar_type() == at::kLong);
  const c10::cuda::CUDAGuard guard(view.data.device());
  if (view.data.numel() == 0) return write_empty_figures(packed);  // no grid of zero blocks
  PreparedTensor prepared = view;
  tile::MemoryLayout memory = memory_layout_of(prepared.data);
  if (memory.contiguous()) prepared.data = prepared.data.contiguous();  // a no-op unless > 8 dims
  kernels::ContiguousLayout contiguous(prepared.type, prepared.data.const_data_ptr(),
                                       prepared.data.sizes().vec(), prepared.shard);
  if (contiguous.outer_extent().size() > static_cast<std::size_t>(tile::kMaxOuterDims))
    return packed_figures_aten(prepared, torch_hash, packed);
  const tile::RunLayout layout = tile::run_layout_of(contiguous);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  switch (prepared.type) {
    // One case per element type; the list is laid out by hand.
    // clang-format off
#define PROBE_LAUNCH_CASE(name) \
  case ElementType::name: launch_stats_kernel<ElementType::name>(prepared, layout, memory, packed, stream); break;
    PROBE_LAUNCH_CASE(float32) PROBE_LAUNCH_CASE(float64) PROBE_LAUNCH_CASE(float16)
    PROBE_LAUNCH_CASE(bfloat16) PROBE_LAUNCH_CASE(float8_e4m3fn) PROBE_LAUNCH_CASE(float8_e5m2)
    PROBE_LAUNCH_CASE(float8_e4m3fnuz) PROBE_LAUNCH_CASE(float8_e5m2fnuz)
    PROBE_LAUNCH_CASE(float8_e8m0fnu) PROBE_LAUNCH_CASE(int8) PROBE_LAUNCH_CASE(uint8)
    PROBE_LAUNCH_CASE(int16) PROBE_LAUNCH_CASE(uint16) PROBE_LAUNCH_CASE(int32)
    PROBE_LAUNCH_CASE(uint32) PROBE_LAUNCH_CASE(int64) PROBE_LAUNCH_CASE(uint64)
    PROBE_LAUNCH_CASE(boolean)
#undef PROBE_LAUNCH_CASE
    // clang-format on
  }
  if (torch_hash)
    packed.select(0, kTorchHash).copy_(at::hash_tensor(prepared.data).view(at::kLong));
}

// Registered when libnumprobe loads; StatsBatch::add() dispatches CUDA tensors here.
const bool registered = [] {
  register_device_kernel(c10::DeviceType::CUDA, packed_figures_cuda);
  return true;
}();

}  // namespace
}  // namespace probe::detail
