// Records that cover several microbatches (docs/log-format.md, "Covered microbatches"): an
// expert's gradient from one backward over the tokens of several microbatches under expert
// parallelism. Two runs that group the microbatches differently hold no like records to
// compare: such pairs are set aside (docs/diff-logs.md, "Covered microbatches").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

// "microbatches 0,2,4,6" for a record covering several, "microbatch 0 alone" for one of its own
// microbatch; "" for a record without one.
std::string covered_text(const std::vector<std::int64_t>& covers, std::optional<std::int64_t> mb);

// The microbatches each run's records of one step cover with records that cover several, per
// kind and name: what a record of the other run alone there lies within.
class CoveredMicrobatches {
 public:
  // Indexes the step's pairs (both sides); cheap when no record covers several microbatches.
  void index(const std::vector<Pair>& pairs);
  // Whether the run other than the side `p` holds covers one of p's microbatches with a record
  // of several, at p's kind and name.
  bool covered_by_other_run(const Pair& p) const;

 private:
  // "kind name" -> the microbatches covered, per run (0 base, 1 test).
  std::unordered_map<std::string, std::vector<std::int64_t>> covered_[2];
};

// A pair whose sides cover different sets of microbatches, where one covers several (or a
// record of one run alone whose microbatch the other run covers within a record of several):
// counted in `report`, neither compared nor a divergence; the explainer still reads it (a grad
// of such mb_grads is judged by the summation bound).
bool set_aside_covered(const Pair& p, const CoveredMicrobatches& covered, CoveredReport& report);

}  // namespace probe::differ
