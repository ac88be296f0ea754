// launch_stats_kernel<T> for the float8 types: one file per dtype family (stats_cuda_kernels.cuh).
#include "stats_cuda_kernels.cuh"

namespace probe::detail {
PROBE_INSTANTIATE_STATS_KERNEL(float8_e4m3fn)
PROBE_INSTANTIATE_STATS_KERNEL(float8_e5m2)
PROBE_INSTANTIATE_STATS_KERNEL(float8_e4m3fnuz)
PROBE_INSTANTIATE_STATS_KERNEL(float8_e5m2fnuz)
PROBE_INSTANTIATE_STATS_KERNEL(float8_e8m0fnu)
}  // namespace probe::detail
