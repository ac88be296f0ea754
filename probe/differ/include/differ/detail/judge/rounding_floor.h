// Gradients at the rounding floor of their backward (docs/diff-logs.md, "A gradient at the
// rounding floor"). Where a gradient is zero in exact arithmetic, or its terms cancel (the
// derivative of a normalisation over one element: top-1 routing renormalised over its k, s / s =
// 1; a softmax over one position), what the backward computes is the sum of the roundings of
// intermediates far larger than the result: of the order u times those intermediates, with u
// the unit roundoff of the gradient's dtype. Two runs whose intermediates differ by noise
// compute residues that differ by up to their own size, so no multiple of that noise relative to
// the residue bounds it. The figures do not show the intermediates; the largest gradient the same
// backward computed (of the microbatch for an mb_grad, of the step for a grad) is the evidence
// of their scale. A gradient whose norm is, in both runs, at most u times that largest gradient's
// norm is at the floor: its digits may be roundings alone, and the figures cannot tell its
// difference from a change that small.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

// The floor a gradient record is held to: u times the largest gradient of its backward.
struct RoundingFloor {
  double floor = 0;          // u x the largest norm
  double unit = 0;           // u: the coarser unit roundoff of the record's two tensors
  double largest_norm = 0;   // the largest gradient norm of the microbatch (mb_grad) or step (grad)
  std::string largest_name;  // the record that holds it
};

class GradientScales {
 public:
  // The largest mb_grad norm of each microbatch and the largest grad norm of the step, over
  // both runs.
  void start_step(const std::vector<Pair>& pairs);
  // The floor of an mb_grad or grad pair whose two tensors' norms are both at most it; nullopt
  // for any other pair.
  std::optional<RoundingFloor> at_floor(const Pair& p) const;

 private:
  struct Largest {
    double norm = 0;
    const std::string* name = nullptr;
    void add(const Pair& p);
  };
  std::unordered_map<std::int64_t, Largest> by_mb_;  // mb_grads, per microbatch
  Largest step_grads_;                               // grads
};

}  // namespace probe::differ
