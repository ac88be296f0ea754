// Two figures compared (the relative difference every rule reads, bitwise sameness) and the
// rounding of a record's dtype. Below every stage of the pipeline (a merge checks a split op's
// views with them too).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "probe/dtype_facts.h"

namespace probe::differ {

// |a - b| / max(|a|, |b|); 0 when equal (NaN with NaN), Inf when one is not finite.
inline double rel_diff(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (a == b) return 0;
  if (!std::isfinite(a) || !std::isfinite(b)) return std::numeric_limits<double>::infinity();
  const double scale = std::max(std::fabs(a), std::fabs(b));
  return scale == 0 ? 0 : std::fabs(a - b) / scale;
}

// The same 64 bits (a figure logged twice alike; -0 and 0 differ, a NaN equals its own bits).
inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The unit roundoff of a record's dtype (probe/dtype_facts.h). A dtype with no floating
// rounding of its own (a scalar's empty name, an integer tensor's) is held to float32's: the
// scalars a run computes, it computes in float32.
inline double unit_roundoff(const std::string& dtype) {
  const double u = probe::unit_roundoff(dtype);
  return u > 0 ? u : 0x1p-24;
}

}  // namespace probe::differ
