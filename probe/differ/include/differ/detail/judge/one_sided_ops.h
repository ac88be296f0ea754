// Ops of one run only on a value's path (docs/diff-logs.md, "An op of one run only"): where one
// run feeds an op's output on as it is and the other passes it through an op of its own first,
// that op changed the value, or it only copied or rounded it. The rules of noise say nothing
// about it: noise upstream (a fused kernel's rounding) would otherwise explain, within the
// network's amplification bound, what the extra op did.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

struct OneSidedChange {
  std::string op;        // the op of one run only ("model/aten::mul#0")
  std::string run;       // the run that executes it: "base" or "test"
  std::string producer;  // the op both runs execute whose output it takes
  double change = 0;     // its output against the other run's value: a relative norm difference
  double bound = 0;      // what a copy or a rounding of the producer's noise may differ by
};

// One step's op records, read in execution order.
class OneSidedOps {
 public:
  // Indexes the step's ops of one run only (a run's one-sided records are listed after the
  // other run's, not where they ran: all of them count from the start).
  void start_step(const std::vector<Pair>& pairs);
  // An op record of both runs, once explained: what it outputs may feed an op of one run only.
  void note_paired(const Pair& p);
  // Where `p`'s value (a tap's or output's own, a differing input of an op) is in one run the
  // output of an op of that run only, taking the output of a noted op whose other run's output
  // is `p`'s value there, and that op moved it by more than a rounding and the producer's noise
  // explain: what it changed. Checked only while the producer's difference is noise (or none).
  std::optional<OneSidedChange> change(const Pair& p) const;

 private:
  using ByHash = std::unordered_map<std::uint64_t, const Pair*>;
  // `own`: the value's hash in the run that may run the extra op (`in_test`), `other`: the other's.
  std::optional<OneSidedChange> through(std::uint64_t own, std::uint64_t other, bool in_test) const;
  // per run (0 base, 1 test): an output hash, the op of that run only that made it
  ByHash one_sided_[2];
  ByHash paired_[2];  // per run: an output hash, the op of both runs that made it
};

}  // namespace probe::differ
