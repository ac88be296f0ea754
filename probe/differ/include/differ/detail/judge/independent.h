// Independent divergences (result.h's Independent, docs/diff-logs.md): the bug-class roots the
// explainer numbered (Explanation::bug_roots), grouped by rule and kind, with what training
// inherits of each, ranked so that the headline is the one that matters.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

class IndependentDivergences {
 public:
  // Fills a new entry's cause and trace hint from its first record (with the step's context).
  using Describe = std::function<void(const Pair& first, Independent& entry)>;

  // The step's pairs, in execution order, once every one is explained.
  void add_step(const std::vector<Pair>& pairs, const Describe& describe);
  // Training first, then unknown, then local; within each, in execution order.
  std::vector<Independent> ranked();

 private:
  struct Group {
    Independent entry;
    bool training = false;
    std::int64_t unverified = 0;  // roots nothing compared after them tells about
    std::unordered_set<std::string> names;
  };
  // A root of a microbatch whose data differs (its generator, an input) belongs to the entry of
  // the first of them.
  void add_root(const Pair& p, std::size_t index, const std::map<std::int64_t, std::uint32_t>& data,
                const Describe& describe);
  void add_inherited(const Pair& p);
  std::size_t group_for(const Pair& p, const Describe& describe);
  void set_group(std::uint32_t root, std::size_t group);
  std::ptrdiff_t group_of(std::uint32_t root) const;

  std::map<std::pair<Rule, Kind>, std::size_t> by_rule_kind_;
  std::vector<std::ptrdiff_t> root_group_;  // by root number; -1: none (an unused generator)
  std::vector<Group> groups_;
  // Roots of the step before with no gradient compared after them: told by the next weights.
  std::vector<std::size_t> pending_;
  std::size_t last_gradient_ = 0;  // 1 + the index of the step's last gradient compared (0: none)
};

}  // namespace probe::differ
