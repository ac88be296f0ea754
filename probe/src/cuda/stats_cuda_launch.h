// The launcher of the fused statistics kernel for one element type (stats_cuda_kernels.cuh),
// explicitly instantiated per dtype family in stats_cuda_<family>.cu; stats_cuda.cu dispatches.
#pragma once

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

#include "torch/stats_device.h"
#include "stats_tile.h"

namespace probe::detail {

// Writes `prepared`'s packed figures into `packed` ([kPackedSlots] int64 on its device),
// asynchronously on `stream`.
template <kernels::ElementType T>
void launch_stats_kernel(const PreparedTensor& prepared,
                         const kernels::cuda_tile::RunLayout& layout,
                         const kernels::cuda_tile::MemoryLayout& memory, const at::Tensor& packed,
                         cudaStream_t stream);

}  // namespace probe::detail
