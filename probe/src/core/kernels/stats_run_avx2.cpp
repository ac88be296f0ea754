#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../stats_kernel.h"
#include "probe/hash_spec.h"

namespace probe::kernels::avx2 {
#include "stats_run_impl.inc"
}  // namespace probe::kernels::avx2
