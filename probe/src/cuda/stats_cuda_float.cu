// launch_stats_kernel<T> for float32, float64, float16 and bfloat16: one file per dtype family
// (stats_cuda_kernels.cuh).
#include "stats_cuda_kernels.cuh"

namespace probe::detail {
PROBE_INSTANTIATE_STATS_KERNEL(float32)
PROBE_INSTANTIATE_STATS_KERNEL(float64)
PROBE_INSTANTIATE_STATS_KERNEL(float16)
PROBE_INSTANTIATE_STATS_KERNEL(bfloat16)
}  // namespace probe::detail
