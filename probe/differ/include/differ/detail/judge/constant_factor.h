// Two tensors that differ by one constant factor (docs/diff-logs.md, rule `constant_factor`):
// a gradient divided by a degree one run applies and the other does not (a data-parallel or
// expert-parallel size, a count of microbatches), a scale applied twice or not at all. Found from
// the figures a log holds: for test = f x base, norm_t = |f| norm_b, mean_t = f mean_b, and
// min_t, max_t = f min_b, f max_b (swapped where f < 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "differ/result.h"

namespace probe::differ {

// The relative tolerance the figures must agree to, for tensors of `dtype`: 64 roundings of the
// dtype, at least 1e-9. A factor rounds each element once (a power of two not at all); where the
// scaled tensor was also summed in another order (an expert's gradient, its tokens grouped by
// another dispatch, divided by the degree once more) each element moves by that order's
// rounding too: the example's ep-grad-scale gradients have their extremes up to 2.8 roundings
// from f times the other run's (docs/diff-logs.md).
// The figures are fp64 reductions over the elements, whose own rounding stays below 1e-9. For
// bfloat16, float16 and float8 1e-6: one rounding (2^-8 and coarser) is as large as what noise
// moves, so there only factors that scale every element exactly (powers of two) are found.
double constant_factor_tolerance(const std::string& dtype);

// Norm ratios closer to one than this are left to the noise rules: noise grown through a network
// moves figures by such amounts, and may line them up by chance at the tolerance above. A factor
// of -1 is not told apart either: the norm does not see the sign, and a tensor with symmetric
// extremes and a mean near zero (a clipped one) looks like its own negation.
inline constexpr double kConstantFactorNotOne = 1e-2;

// f where the pair's test tensor is f x its base tensor, by every figure, within the tolerance;
// nullopt otherwise, and for pairs that are not two floating-point tensors of one dtype and shape
// with finite figures and nonzero norms, or whose kind is one other rules explain (param, optim:
// an update; rng, input). |f| is never within kConstantFactorNotOne of one.
std::optional<double> constant_factor(const Pair& p);

// "1/3", "2", "0.5", "-1", "0.7071": the factor as k or 1/k where it is one within the
// tolerance (1/k in decimals where k is a power of two up to 16), else to 6 digits.
std::string factor_text(double factor, double tolerance);

// [constant_factor]: the pair's factor in words, with what most likely scaled it.
std::optional<Cause> constant_factor_cause(std::int64_t step, const Pair& p);

}  // namespace probe::differ
