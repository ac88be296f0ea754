// Microbatches matched by the samples they hold (docs/diff-logs.md, "Microbatches matched by their
// samples"). A probe attached to a trainer as it ships (numprobe.attach) records every sample of a
// microbatch as `input numprobe.sample` (the hash of one row of its inputs) and numbers its
// microbatches by the order it saw them, not by ids that mean the same data in every layout. Two
// runs that hold the same samples in the same order in a microbatch hold the same microbatch: the
// test run's is renamed to the base run's id. Microbatches the runs fill otherwise (gradient
// accumulation 1 x 8 against 4 x 2, a sampler that interleaves another way) whose samples, taken
// together, are the same on both sides, hold no like records: their records are set aside and
// the step's records (grads, weights, optimizer state) judge the step. Samples that differ leave
// the microbatches as they are: their inputs differ, the `data` rule says so.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

// The name the probe records each sample under (numbered `#1`, `#2`, ... within a microbatch).
inline constexpr std::string_view kSampleRecord = "numprobe.sample";

class SampleMatch {
 public:
  // Renames the test run's microbatches of the step to the base run's ids of the same samples,
  // and notes the microbatches whose samples the runs group otherwise. Records without samples
  // (either run) are left as they are.
  void match(std::vector<Merged>& base, std::vector<Merged>& test);
  // A step one run lacks: nothing to match, nothing set aside.
  void clear();

  // Whether the pair is a record of a microbatch the runs fill with other groups of the same
  // samples: counted in `report`, neither compared nor a divergence.
  bool set_aside(const Pair& p, SetAsideReport& report) const;
  // Whether the step holds microbatches the runs group otherwise.
  bool any_aside() const { return !aside_[0].empty() || !aside_[1].empty(); }

 private:
  std::unordered_set<std::int64_t> aside_[2];  // microbatch ids, per run, after renaming
  std::unordered_map<std::int64_t, std::string> words_[2];  // each one's group in words
};

}  // namespace probe::differ
