// Op records (kind `op`) in a comparison: set aside the ops one run only executed, find the root
// cause op and the first inherited one, and suggest an op trace where there is none
// (docs/diff-logs.md, "Op traces").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

// An op record in one run only (a collective, a re-layout, a different op sequence): listed in
// `report`, and neither counted nor a divergence.
bool set_aside_op(const Pair& p, OpReport& report);

class OpAnalysis {
 public:
  // `replay_op`: the op record whose replay region is wanted instead of the root cause's.
  explicit OpAnalysis(std::string replay_op = {}) : replay_op_(std::move(replay_op)) {}
  // One step's pairs, classified, in execution order. Looks for the root cause in the first
  // step whose op records differ, and notes its replay region (or replay_op's).
  void add_step(std::int64_t step, const std::vector<Pair>& pairs, OpReport& report);
  // The headline's divergence (the first unexplained one; the first of any kind with --strict)
  // was just found at this step: with no op record where it lies, the setting that would
  // record them. Not for a record one run lacks, nor when `kinds` (--kinds)
  // leaves op records out.
  void suggest_trace(const Pair& first, const std::vector<Pair>& pairs,
                     std::optional<std::uint32_t> kinds, OpReport& report) const;
  // Root cause and inherited op as likely causes, first in the list (the hint is printed on
  // its own: OP TRACE, JSON op_trace.trace_hint).
  void add_causes(const OpReport& report, std::vector<Cause>& causes) const;

 private:
  void note_replay_op(std::int64_t step, const std::vector<Pair>& pairs, OpReport& report) const;
  std::string replay_op_;
  bool done_ = false;
};

// The scope regex a re-run should trace for a divergence in record `name` of kind `kind`
// ("" for every scope); nullopt where an op trace cannot help (rng).
std::optional<std::string> scope_regex_for(Kind kind, const std::string& name);

}  // namespace probe::differ
