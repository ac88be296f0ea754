// Classifying a pair of records, and the figures classification and statistics read.
#pragma once

#include <optional>
#include <string>

#include "differ/options.h"
#include "differ/result.h"

namespace probe::differ {

// Sets p.pair_class, p.rel_diff and p.note for a pair present in both runs.
void classify(Pair& p, const Comparator& cmp);

// The number the paired statistics follow: a scalar's value, a tensor's norm.
std::optional<double> series_value(const Record& r);
// bfloat16, float16, float8 variants: the summation-order rule's looser bound.
bool low_precision(const std::string& dtype);
// |a - b| / max(|a|, |b|); 0 when equal (NaN with NaN), Inf when one is not finite.
double rel_diff(double a, double b);
// The same 64 bits (a figure logged twice alike; -0 and 0 differ, a NaN equals its own bits).
bool same_bits(double a, double b);

}  // namespace probe::differ
