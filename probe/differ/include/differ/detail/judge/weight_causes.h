// Likely causes that read parameter (`param`) and optimizer (`optim`) records: a divergence
// that starts in the weights rather than in what a step computes from them. One function per
// cause; each returns its cause with the evidence it rests on, or nothing when it does not apply.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

// What a compared step without divergence leaves for the next step's rules to read.
struct StepDigest {
  std::int64_t step = 0;
  std::int64_t grads_compared = 0;    // grad pairs present in both runs
  std::int64_t grads_within_tol = 0;  // of those, not bitwise equal but within --rtol/--atol
  std::int64_t optim_compared = 0;    // optim pairs present in both runs
};
StepDigest digest_step(std::int64_t step, const std::vector<Pair>& pairs);

// [init]: the first divergence is a parameter at the first step both runs recorded, before
// any update: initialization, seed or checkpoint loading differ. `first_step` says whether
// `step` is that step.
std::optional<Cause> init_cause(std::int64_t step, bool first_step, const std::vector<Pair>& pairs,
                                const Pair& first);

// [optimizer]: gradients agree but the update differs. Either the first divergence is a
// parameter at step s+1 while step s (`previous`, the step compared before) had agreeing
// gradients, or it is an optimizer state tensor of step s while step s's gradients agree.
std::optional<Cause> optimizer_cause(std::int64_t step, const std::optional<StepDigest>& previous,
                                     const std::vector<Pair>& pairs, const Pair& first);

// [optimizer]: the weights changed since the step began. The first divergence is a record of a
// microbatch after the first whose recorded dependencies (the step's weights, taken when it
// began) are equal, while the step's update counts (`<param>.step`) say that one run's optimizer
// stepped more times within the step than the other's: from its second microbatch on, that run
// computed from weights its optimizer had already updated.
std::optional<Cause> mid_step_updates_cause(std::int64_t step, const std::vector<Pair>& pairs,
                                            const Pair& first);

// The step's update counts where they differ ("w.step: base 1, test 4"), "" where they agree or
// were not recorded: one run's optimizer stepped more often within the step.
std::string differing_update_counts_text(const std::vector<Pair>& pairs);

// A record of one run only (`first`: a param, mb_grad or grad) whose name the other run's log
// lists as another name of one of its parameters (tied=), or a param of one run only whose
// record holds, bit for bit (hash and every figure, dtype, shape), the values of another
// parameter of the same run that both runs record: that parameter, and which evidence says so.
// Untying a head from its embedding leaves the first (the tied run names the head) and, where
// the head starts as a copy, the second; nothing where neither holds, or where the values are
// one constant (a norm's ones equal every other norm's).
std::optional<Untied> untied_from(const std::vector<Pair>& pairs, const Pair& first);

// Whether two tensors' figures are equal bit for bit: hash and every figure, dtype and shape
// (every figure, not the hash alone, so that a hash collision names nothing); never for a tensor
// without figures. What "holds the values of" means for a copied parameter and for a step's
// gradient that is one microbatch's contribution.
bool same_figures(const TensorStats& a, const TensorStats& b);

}  // namespace probe::differ
