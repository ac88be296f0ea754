// launch_stats_kernel<T> for the 1- and 2-byte integer types and bool: one file per dtype family
// (stats_cuda_kernels.cuh).
#include "stats_cuda_kernels.cuh"

namespace probe::detail {
PROBE_INSTANTIATE_STATS_KERNEL(int8)
PROBE_INSTANTIATE_STATS_KERNEL(uint8)
PROBE_INSTANTIATE_STATS_KERNEL(int16)
PROBE_INSTANTIATE_STATS_KERNEL(uint16)
PROBE_INSTANTIATE_STATS_KERNEL(boolean)
}  // namespace probe::detail
