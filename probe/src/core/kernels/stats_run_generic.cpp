#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/stats_kernel.h"
#include "probe/hash_spec.h"

namespace probe::kernels::generic {
#include "stats_run_impl.inc"
}  // namespace probe::kernels::generic
