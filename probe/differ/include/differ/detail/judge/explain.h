// Noise or bug (docs/diff-logs.md, "Noise or bug"): every divergent pair gets one explanation,
// noise (summation order, or inherited from noise within an amplification bound) or a bug
// class (unreduced gradient, none, NaN/Inf, rng, data, init, optimizer, unexplained, ...).
// The rules read what a pair depends on: the step's parameters (or, without param records, the
// steps before), the records of its microbatch that ran before it, a grad's mb_grads, and for
// parameters and optimizer state the previous step's gradients, parameters and state.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "differ/detail/figures.h"
#include "differ/detail/judge/microbatch_factor.h"
#include "differ/detail/judge/one_sided_ops.h"
#include "differ/detail/judge/rounding_floor.h"
#include "differ/options.h"
#include "differ/result.h"

namespace probe::differ {

// What a record depends on, as far as it diverges.
struct Upstream {
  std::int64_t pairs = 0;  // divergent pairs among them
  bool bug = false;        // one of them has a bug-class explanation
  double roots = 0;        // the largest relative difference of the noise they descend from
  // The most any of them may differ by: a noise pair's ceiling (Explanation::ceiling), at least
  // its own relative difference and a rounding. What an update computed from them is held to.
  double largest = 0;
  // Partial sums among them (noise roots where the other run does not sum alike, partial_sum_root),
  // the largest root's size and its words (kept by the Explainer).
  std::int64_t partial_sums = 0;
  double partial_root = 0;
  const std::string* partial_what = nullptr;
  std::vector<std::uint32_t> bug_roots;  // the independent divergences among them (Explanation's)
  void add(const Pair& p);
  void add(const Upstream& u);
};

// The noise root of a pair with a partial sum on either side (docs/diff-logs.md, "Partial
// sums"), 0 for any other pair: the row-parallel reduction adds the n summands in another order
// than one rank's product does, 2 · n · u · c with c = (sum of the summands' norms) / (the
// sum's norm, estimated as that of uncorrelated summands), at least 1; the larger side's.
double partial_sum_root(const Pair& p);

// The summation-order bound of a grad whose mb_grads are known: two runs, each within
// n * u * sum of the summands' norms of the exact sum (u: the unit roundoff of the dtype).
// Without mb_grads (n = 0), or when --sum-order-rtol was given, the fixed option bound.
// The additions round to the coarser of the grad's dtype and summand_unit, the summands' unit
// roundoff (0: not known).
double summation_order_bound(const Pair& grad, std::int64_t summands, double summand_norms,
                             double summand_unit, const DiffOptions& o);
// The unit roundoff of the coarser dtype of the pair's two tensors (0: neither is a tensor).
double coarsest_unit_roundoff(const Pair& p);

// The hash differs while every statistic is bitwise equal (norm, min, max, mean, NaN/Inf counts,
// l1): the elements moved, or values changed by less than the figures resolve (a float32 element
// of 1e-5 moved by one ulp changes a float64 sum of squares below its last bit).
bool figures_hide_the_difference(const Pair& p);
// ... and both runs' order-independent hashes (mhash) agree: the same values in other places (a
// wrong shard offset, a permutation). A fact, not a guess: never noise.
bool elements_moved(const Pair& p);
// ... and either run's log has no mhash (format < 8): moved or changed, nothing tells.
bool cannot_tell_moved(const Pair& p);

class Explainer {
 public:
  explicit Explainer(const DiffOptions& options) : options_(options) {}

  // Sets `why` on every divergent pair of the step (pairs in execution order). `first_step`:
  // the first step both runs recorded (parameters there are the initialization).
  // `same_code`: both runs ran the step's code compiled alike, or both eager.
  void explain_step(std::int64_t step, bool first_step, std::vector<Pair>& pairs,
                    bool same_code = true);

  // The evidence of a bug-class explanation, for the headline: what the pair depends on and
  // how it compares (built once, for the pair that is headlined).
  Cause cause_of(std::int64_t step, const Pair& p) const;

  // Grads explained by summation order with their mb_grads compared, bitwise equal.
  std::int64_t summation_order_grads() const { return summation_order_grads_; }

 private:
  struct MbGrads {
    std::int64_t count = 0;     // mb_grad pairs
    std::int64_t summands = 0;  // the grad's summands: each pair's partial sum counts its count
    double norms = 0;           // the summands' norms
    double unit = 0;            // the coarsest unit roundoff of the summands' dtypes
    // A pair is set aside: a partial sum (sequence parallelism), or records covering other
    // microbatches than the other run's (expert parallelism).
    bool set_aside = false;
    // Pairs set aside for their covered microbatches, per run (0 base, 1 test): the pieces that
    // run's records sum (a record's microbatches times its summands) and their norms.
    std::int64_t covered_pieces[2] = {0, 0};
    double covered_norms[2] = {0, 0};
    Upstream diverging;
  };
  void index_mb_grads(const std::vector<Pair>& pairs);
  static void add_covered_pieces(const Pair& p, MbGrads& mb);
  Explanation explain(const Pair& p, std::int64_t step, bool first_step);
  // A backward record of a step whose microbatches the trainer's loss convention scales
  // (MicrobatchFactor): judged divided by the factor; its relative difference becomes that of the
  // divided record.
  Explanation explain_scaled(Pair& p, std::int64_t step, bool first_step);
  // The rules that read what the pair depends on, by its kind.
  Explanation explain_by_dependencies(const Pair& p, std::int64_t step, bool first_step);
  // A pair whose elements moved (elements_moved()): a bug unless noise in what it depends on
  // may have traded equal values between places.
  Explanation explain_moved(const Pair& p, std::int64_t step, bool first_step);
  Explanation explain_param(const Pair& p, std::int64_t step, bool first_step) const;
  Explanation explain_grad(const Pair& p);
  // The summation-order bound of a grad from its mb_grads (the fixed option bound without).
  double grad_bound(const Pair& p) const;
  // Every grad of the step is the base run's times one factor (gradient clipping by a total
  // norm computed in another order): sets step_grad_scale_.
  void find_step_grad_scale(const std::vector<Pair>& pairs);
  bool scaled_alike(const Pair& p, double f) const;
  // `otherwise`, unless the grad is the step's common factor times the base run's.
  Explanation unless_scaled(const Pair& p, Explanation otherwise) const;
  Explanation explain_optim(const Pair& p) const;
  Explanation from_upstream(const Pair& p, const Upstream& up, Explanation none_upstream) const;
  // The bound of inherited noise grown as this comparison's earlier steps measured, and the
  // cannot_tell of a pair beyond the network's bound but within it.
  double measured_bound(double roots) const;
  Explanation beyond_the_network_bound(const Pair& p, double bound, double roots) const;
  // `amplification`: what the update may multiply its inputs' relative differences by, at least
  // --update-amplification.
  Explanation from_update(const Pair& p, const Upstream& up, double amplification = 0) const;
  Upstream carried() const;  // what the step's computation starts from
  // What a record depends on, as explain_by_dependencies reads it, for numbering the bugs.
  Upstream dependencies(const Pair& p, std::int64_t step, bool first_step) const;
  // A bug's independent divergences: its own number, or those of a bug it depends on.
  void number_roots(Pair& p, std::int64_t step, bool first_step);
  void note_divergence(const Pair& p);
  void note_square_amplification(const Pair& grad);
  // RNG pairs of microbatches whose other records are equal or noise: rng_unused, not a bug.
  void settle_rng(std::vector<Pair>& pairs) const;
  void carry_to_next_step(std::int64_t step, const std::vector<Pair>& pairs);
  // A pair with a partial sum: a noise root of what comes after it in its microbatch (and in
  // the step).
  void note_partial_root(const Pair& p);
  const std::string* partial_words(const Pair& p);

  const DiffOptions& options_;
  // This step, built while its pairs are explained in execution order.
  Upstream step_params_;          // diverging param records of the step
  bool step_has_params_ = false;  // the step holds param records at all
  // Both runs hold every record of the step alike (the same ranks, the same partial sums): the
  // same kernels ran on the same pieces, so a record whose inputs are equal rounds alike.
  bool layouts_alike_ = true;  // the same ranks hold the same pieces of every record
  bool same_code_ = true;      // and both runs ran the step compiled, or both eager
  OneSidedOps one_sided_ops_;  // the step's ops of one run only, and the op outputs seen so far
  GradientScales gradient_scales_;      // the largest gradient of each microbatch and of the step
  MicrobatchFactor microbatch_factor_;  // the step's loss convention, if any
  std::unordered_map<std::int64_t, Upstream> by_mb_;   // per microbatch, its records so far
  Upstream step_so_far_;                               // every record of the step so far
  std::unordered_map<std::string, MbGrads> mb_grads_;  // per parameter, when a grad differs
  std::unordered_map<std::string, Upstream> this_step_by_param_;  // grad/param divergence
  // Per parameter, what squaring its gradient element-wise may multiply the gradient's relative
  // difference by (explain_optim).
  std::unordered_map<std::string, double> square_amplification_;
  double step_grad_scale_ = 1;        // the factor every grad of the step differs by (1: none)
  double step_grad_scale_bound_ = 0;  // how far a total norm's rounding may move it from 1
  // The steps before.
  std::int64_t previous_step_ = -1;  // the last step explained (-1: none)
  std::unordered_map<std::string, Upstream> previous_by_param_;  // its grad/param/optim divergence
  Upstream earlier_;                                             // every divergence before
  // The largest amplification of inherited noise (its difference over its roots) measured on
  // the steps before, and on this step so far (carried at the step's end).
  double measured_amplification_ = 0;
  double step_amplification_ = 0;
  std::int64_t summation_order_grads_ = 0;
  std::uint32_t roots_numbered_ = 0;  // independent divergences numbered so far (bug_roots)
  // The words of each partial sum noted as a root, once per text (a key's every step shares
  // them): Upstream points at them, over steps (a node-based set keeps them in place).
  std::unordered_set<std::string> partial_words_;
};

// A number one run's optimizer holds and the other's lacks (a setting one release added): no
// state either run's update computes, and what it does shows in the weights it updates.
bool one_sided_setting(const Pair& p);

// Adds `from`'s roots to `into`: ascending, each once, the earliest Explanation::kRootsKept.
void merge_roots(std::vector<std::uint32_t>& into, const std::vector<std::uint32_t>& from);

// An optimizer record that holds a number on both sides (`<param>.lr`, `<param>.step`): a
// setting of the update, not a tensor of state.
bool is_setting(const Pair& p);

// The parameter an optimizer state record belongs to: "<param>.<state>" without ".<state>".
std::string parameter_of_state(const std::string& name);

}  // namespace probe::differ
