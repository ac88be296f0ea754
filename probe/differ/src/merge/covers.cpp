// Records covering several microbatches: their words, the microbatches each run covers with
// them, and the pairs set aside because the runs group the microbatches differently.
#include "differ/detail/merge/covers.h"

#include <algorithm>

namespace probe::differ {
namespace {

std::string join(const std::vector<std::int64_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

std::string series_key(const Pair& p) { return std::string(kind_name(p.kind)) + " " + p.name; }

// A side that holds its microbatches within a record of several: one that covers several, or,
// absent, one the other run's microbatch lies within (set_aside_covered only asks where it does).
bool covering(const Side& s) { return !s.present || !s.merged.record.covers.empty(); }

// "test covers microbatches 0,2,4,6 (one expert-parallel dispatch)", "base microbatch 0 alone",
// "test covers it within a record of several microbatches".
std::string side_words(const char* run, const Side& s, const Pair& p) {
  const std::string name(run);
  if (!s.present) return name + " covers it within a record of several microbatches";
  if (s.merged.record.covers.empty()) return name + " " + covered_text({}, p.mb);
  return name + " covers " + covered_text(s.merged.record.covers, p.mb) +
         " (one expert-parallel dispatch)";
}

std::string example(const Pair& p) {
  const bool base_first = covering(p.base) || !covering(p.test);
  const std::string base = side_words("base", p.base, p), test = side_words("test", p.test, p);
  return "step " + std::to_string(p.step) + " " + std::string(kind_name(p.kind)) + " " + p.name +
         (p.mb ? " mb " + std::to_string(*p.mb) : "") + ": " +
         (base_first ? base + ", " + test : test + ", " + base);
}

}  // namespace

std::string covered_text(const std::vector<std::int64_t>& covers, std::optional<std::int64_t> mb) {
  if (!covers.empty()) return "microbatches " + join(covers);
  return mb ? "microbatch " + std::to_string(*mb) + " alone" : "";
}

void CoveredMicrobatches::index(const std::vector<Pair>& pairs) {
  for (auto& run : covered_) run.clear();
  for (const auto& p : pairs) {
    for (int run = 0; run < 2; ++run) {
      const Side& s = run == 0 ? p.base : p.test;
      if (!s.present || s.merged.record.covers.empty()) continue;
      auto& ids = covered_[run][series_key(p)];
      ids.insert(ids.end(), s.merged.record.covers.begin(), s.merged.record.covers.end());
    }
  }
  for (auto& run : covered_)
    for (auto& [key, ids] : run) {
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
}

bool CoveredMicrobatches::covered_by_other_run(const Pair& p) const {
  const int other = p.base.present ? 1 : 0;
  if (covered_[other].empty()) return false;
  const auto it = covered_[other].find(series_key(p));
  if (it == covered_[other].end()) return false;
  const Record& r = (p.base.present ? p.base : p.test).merged.record;
  const auto covered = [&](std::int64_t mb) {
    return std::binary_search(it->second.begin(), it->second.end(), mb);
  };
  if (!r.covers.empty()) return std::any_of(r.covers.begin(), r.covers.end(), covered);
  return r.microbatch && covered(*r.microbatch);
}

bool set_aside_covered(const Pair& p, const CoveredMicrobatches& covered, CoveredReport& report) {
  if (p.base.present && p.test.present) {
    // Both cover their own microbatch alone, or the same several: compared as usual.
    if (p.base.merged.record.covers == p.test.merged.record.covers) return false;
  } else if (!covered.covered_by_other_run(p)) {
    return false;  // nothing like it in the other run: a record of one run only
  }
  ++report.pairs;
  ++report.by_kind[p.kind];
  if (report.examples.size() < CoveredReport::kListed) report.examples.push_back(example(p));
  return true;
}

}  // namespace probe::differ
