// The likely-cause rules (docs/diff-logs.md, "Likely causes"): one function per rule, each
// returning its cause with the evidence that made it fire, or nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "differ/options.h"
#include "differ/result.h"

namespace probe::differ {

// The step of the first divergence as the step rules see it.
struct DivergentStep {
  std::int64_t step;
  const std::vector<Pair>& pairs;  // every pair of the step, execution order
  const Pair& first;               // the first divergent pair
};

// [none_gradient]: the first divergence is a gradient `none` on one side.
std::optional<Cause> none_gradient_cause(const DivergentStep& s);
// [data]: an input differs at the first divergent rng/input step.
std::optional<Cause> data_cause(const DivergentStep& s);
// [rng]: RNG fingerprints differ while inputs do not.
std::optional<Cause> rng_cause(const DivergentStep& s);
// [unreduced_gradient]: a grad's replicas disagree while every mb_grad is equal.
std::optional<Cause> unreduced_gradient_cause(const DivergentStep& s);
// [summation_order] / [wrong_reduction]: a differing grad, judged by its mb_grads and the size
// of its norm's difference.
std::optional<Cause> grad_reduction_cause(const DivergentStep& s, const DiffOptions& o);
// [constant_factor]: constant_factor.h.
// Every step rule, in report order.
std::vector<Cause> step_causes(const DivergentStep& s, const DiffOptions& o);

// [nonfinite]: NaN/Inf on one side only, the first such pair of a step.
std::optional<Cause> nonfinite_cause(std::int64_t step, const std::vector<Pair>& pairs);

// [step_range], [missing_record], [kind_not_recorded], [names_differ]: why the first
// divergence is a record one run lacks. Known once every step was read.
std::optional<Cause> absence_cause(const Result& r, const DiffOptions& o, bool step_one_sided,
                                   bool series_one_sided);

}  // namespace probe::differ
