// Classifying a pair of records, and the figures classification and statistics read.
#pragma once

#include <optional>
#include <string>

#include "differ/detail/figures.h"
#include "differ/options.h"
#include "differ/result.h"

namespace probe::differ {

// Sets p.pair_class, p.rel_diff and p.note for a pair present in both runs.
void classify(Pair& p, const Comparator& cmp);

// The number the paired statistics follow: a scalar's value, a tensor's norm.
std::optional<double> series_value(const Record& r);

}  // namespace probe::differ
