// launch_stats_kernel<T> for the 4- and 8-byte integer types: one file per dtype family
// (stats_cuda_kernels.cuh).
#include "stats_cuda_kernels.cuh"

namespace probe::detail {
PROBE_INSTANTIATE_STATS_KERNEL(int32)
PROBE_INSTANTIATE_STATS_KERNEL(uint32)
PROBE_INSTANTIATE_STATS_KERNEL(int64)
PROBE_INSTANTIATE_STATS_KERNEL(uint64)
}  // namespace probe::detail
