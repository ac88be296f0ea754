#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() through to masked builtins, which
// -Wmaybe-uninitialized reports inside the header (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <type_traits>

#include "core/stats_kernel.h"
#include "probe/hash_spec.h"

namespace probe::kernels::avx512 {
#include "stats_run_impl.inc"
}  // namespace probe::kernels::avx512
