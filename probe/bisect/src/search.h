// The bisection over degrees (docs/bisect.md, "How it searches"): from the base configuration
// towards the test one a degree at a time, then the smallest change that brings the unexplained
// divergence in. Knows nothing of runs: `evaluate` runs (or recalls) a configuration and compares
// it with the base.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "configs.h"

namespace probe::bisect {

// A configuration against the base: it did not run (a trainer refusing the combination), or it
// is bitwise equal, noise only, holds differences the figures cannot judge (cannot tell), or has
// an unexplained divergence.
enum class VersusBase { failed, equal, noise, cannot_tell, bug };
const char* versus_base_name(VersusBase a);
// What the search bisects: an unexplained divergence, or a difference that cannot be told (the
// smallest change that brings it in is what a traced re-run and the replay then judge).
inline bool diverges(VersusBase a) { return a == VersusBase::bug || a == VersusBase::cannot_tell; }

using Evaluate = std::function<VersusBase(const Config&)>;

struct Culprit {
  std::vector<std::string> degrees;  // the change(s) that bring the divergence in, together
  Config before, after;              // the smallest pair: `after` is `before` with those changes
  // Changes of the base `before` keeps because without them `after` does not run (sp needs tp).
  std::vector<std::string> prerequisites;
  std::vector<std::string> findings;  // what the walk saw, in words ("dp 4 -> 2: noise")
};

// Nullopt where no configuration on the way diverges (evaluate(test) is not `bug`), or the walk
// was interrupted (`stop` says so). Asks for each configuration once at most; `cost` (a
// configuration's ranks) orders the checks whose order is free, cheapest first.
// `order`: the degrees in the order to change them (default: `test`'s).
std::optional<Culprit> find_culprit(
    const Config& base, const Config& test, const Evaluate& evaluate,
    const std::function<bool()>& stop = [] { return false; },
    const std::function<std::int64_t(const Config&)>& cost = {},
    const std::vector<std::string>& order = {});

}  // namespace probe::bisect
