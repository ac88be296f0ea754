// What a dtype's name, as the logs write it (probe::dtype_name: "float32", "bfloat16",
// "float8_e4m3fn"), says about its rounding: one table for the differ's bounds and the replay's.
#pragma once

#include <string_view>

namespace probe {

// The unit roundoff u of a floating dtype: half the distance from 1 to the next value, 2^-p for
// p significand bits (implicit bit included); 0 for a name of no floating dtype (an integer
// dtype, bool, an empty name). Complex dtypes round as their parts. The float8 variants round
// by their significand alone (e4m3: 3 stored bits, u = 2^-4; e5m2: 2 bits, u = 2^-3), with or
// without `fnuz`.
inline double unit_roundoff(std::string_view dtype) {
  if (dtype == "float64" || dtype == "double" || dtype == "complex128") return 0x1p-53;
  if (dtype == "float32" || dtype == "float" || dtype == "complex64") return 0x1p-24;
  if (dtype == "bfloat16") return 0x1p-8;
  if (dtype == "float16" || dtype == "half" || dtype == "complex32") return 0x1p-11;
  if (dtype.starts_with("float8_e5m2")) return 0x1p-3;
  if (dtype.starts_with("float8_e4m3")) return 0x1p-4;
  return 0;
}

// A floating dtype coarser than float32 (bfloat16, float16, float8): the ones whose rounding
// the figures' float32 defaults do not cover.
inline bool low_precision(std::string_view dtype) {
  return dtype == "bfloat16" || dtype == "float16" || dtype == "half" ||
         dtype.starts_with("float8");
}

}  // namespace probe
