// Aligning two runs step by step: pairing records by key, classifying and counting pairs,
// paired statistics per series, the top differences, and what the causes need to know.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "differ/detail/merge/covers.h"
#include "differ/detail/pair/sample_match.h"
#include "differ/detail/judge/op_align.h"
#include "differ/options.h"
#include "differ/result.h"
#include "differ/detail/judge/explain.h"
#include "differ/detail/judge/independent.h"
#include "differ/detail/judge/weight_causes.h"

namespace probe::differ {

class Aligner {
 public:
  Aligner(const DiffOptions& options, Result& result);

  // Compares one step; base or test is null when the step is in one run only.
  // `same_code`: both runs ran the step compiled, or both eager (Run::step_compiled).
  void compare_step(std::int64_t step, std::vector<Merged>* base, std::vector<Merged>* test,
                    bool same_code = true);
  // Fills what is known once every step was read: kinds and names in one run only, the
  // absence and nonfinite causes, the top differences.
  void finish();

 private:
  void pair_up(std::int64_t step, std::vector<Merged>* base, std::vector<Merged>* test);
  std::ptrdiff_t enclosing_pair(const Merged& m, std::size_t paired);
  void find_partners(const std::vector<Merged>& base, const std::vector<Merged>& test);
  Pair& next_pair(std::size_t& count);
  bool passes(Kind kind, const std::string& name);
  std::size_t series(const Pair& p, std::size_t hint);
  std::size_t add_to_series(const Pair& p, std::size_t hint, bool both_runs);  // the series' index
  void offer_top(const Pair& p);
  void note_first_nonfinite(std::int64_t step, const std::vector<Pair>& pairs);
  void note_one_sided_kinds();
  void note_one_sided_names();
  void order_causes();
  void note_noise_or_bug(std::int64_t step, bool first_step, const std::vector<Pair>& pairs);
  Cause headline_cause(std::int64_t step, bool first_step, const std::vector<Pair>& pairs,
                       const Pair& p) const;
  // An independent divergence's cause and trace hint, as the headline's would be.
  void describe(std::int64_t step, bool first_step, const std::vector<Pair>& pairs, const Pair& p,
                Independent& entry) const;
  // The independent divergences, ranked; the first becomes the headline (unless --strict).
  void headline_the_one_that_matters();

  const DiffOptions& options_;
  Result& result_;
  std::unordered_map<std::string, std::size_t> series_index_;
  // The step's pairs (pair_up). Kept across steps with the records they hold, whose buffers
  // go back to the step merge: comparing a step allocates nothing once the first have run.
  std::vector<Pair> pairs_;
  std::vector<std::ptrdiff_t> partner_;  // pair_up's scratch
  std::vector<bool> test_used_;
  // the pair holding each test record paired with a base one
  std::vector<std::ptrdiff_t> pair_of_test_;
  // "mb phase name" -> pair (enclosing_pair)
  std::unordered_map<std::string, std::size_t> enclosing_;
  std::unordered_map<std::string_view, std::size_t> test_index_;
  std::vector<std::size_t> pair_series_;  // the series of each pair position, last step
  std::vector<Pair> top_;           // a min-heap on rel_diff, sorted largest first by finish()
  std::vector<std::uint8_t> seen_;  // per series: bit 0 seen in base, bit 1 in test
  std::array<std::uint8_t, kKindCount> kind_seen_{};  // the same per kind, on steps both runs hold
  bool first_step_one_sided_ = false;                 // the first divergent step is in one run only
  std::unordered_map<std::string, bool> name_passes_;  // --name verdicts (names repeat)
  // NaN/Inf on one side only, first in execution order over the whole comparison: it is
  // often not the first divergence (a reduction order differs at step 0, a NaN comes later).
  std::optional<Cause> first_nonfinite_;
  std::int64_t first_nonfinite_step_ = 0;
  // The step compared before this one: [optimizer] reads its gradients.
  std::optional<StepDigest> previous_step_;
  OpAnalysis op_analysis_;       // op records: root cause, set-aside ops, trace hint
  CoveredMicrobatches covered_;  // the step's records covering several microbatches, per run
  SampleMatch samples_;          // microbatches matched by their samples
  // The trace setting of the first cannot_tell pair ("" where ops cannot locate it), once seen.
  std::optional<std::string> cannot_tell_hint_;
  Explainer explainer_;
  IndependentDivergences independent_;
};

}  // namespace probe::differ
