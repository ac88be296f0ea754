// Independent divergences: each bug-class root and whether training inherits it (independent.h).
#include "differ/detail/judge/independent.h"

#include <algorithm>

#include "differ/detail/judge/explain.h"

namespace probe::differ {
namespace {

// What training consists of: gradients, weights and optimizer state. A root of these kinds, or
// one that any of them inherits, changes training.
bool is_training_state(const Pair& p) {
  const Kind k = p.kind;
  return (k == Kind::grad || k == Kind::mb_grad || k == Kind::param || k == Kind::optim) &&
         !one_sided_setting(p);
}

bool compared(const Pair& p) { return p.base.present && p.test.present && !p.set_aside; }

bool is_bug(const Pair& p) {
  return is_divergence(p.pair_class) && !p.set_aside && p.why.bug && !p.why.bug_roots.empty();
}

}  // namespace

void IndependentDivergences::add_step(const std::vector<Pair>& pairs, const Describe& describe) {
  // The weights this step starts from were updated by the step before's gradients: what they
  // inherit of its roots is known now (a root there that none of them inherits is local).
  const bool weights = std::any_of(pairs.begin(), pairs.end(), [](const Pair& p) {
    return p.kind == Kind::param && compared(p);
  });
  if (weights)
    for (std::size_t g : pending_) --groups_[g].unverified;
  pending_.clear();
  last_gradient_ = 0;
  std::map<std::int64_t, std::uint32_t> data;  // microbatch -> its first data root
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const Pair& p = pairs[k];
    if ((p.kind == Kind::grad || p.kind == Kind::mb_grad) && compared(p)) last_gradient_ = k + 1;
    // A generator or an input that differs (or that one run alone records: a microbatch of one
    // run only): the microbatch's other data, and what it computes, belong to it.
    if ((p.kind == Kind::rng || p.kind == Kind::input) && p.mb && is_bug(p) && p.why.root)
      data.emplace(*p.mb, p.why.bug_roots.front());
  }
  // Roots first: an optimizer record is explained after the step's other records, and may
  // descend from a root that comes later in execution order.
  for (std::size_t k = 0; k < pairs.size(); ++k)
    if (is_bug(pairs[k]) && pairs[k].why.root) add_root(pairs[k], k, data, describe);
  for (const Pair& p : pairs)
    if (is_bug(p) && !p.why.root && is_training_state(p)) add_inherited(p);
}

void IndependentDivergences::add_root(const Pair& p, std::size_t index,
                                      const std::map<std::int64_t, std::uint32_t>& data,
                                      const Describe& describe) {
  const std::uint32_t root = p.why.bug_roots.front();
  if (p.mb)
    if (auto it = data.find(*p.mb);
        it != data.end() && it->second != root && group_of(it->second) >= 0) {
      const auto g = static_cast<std::size_t>(group_of(it->second));
      set_group(root, g);
      if (is_training_state(p)) groups_[g].training = true;
      return;
    }
  const std::size_t g = group_for(p, describe);
  set_group(root, g);
  Group& group = groups_[g];
  ++group.entry.records;
  group.entry.last_step = p.step;
  if (group.names.insert(p.name).second) {
    ++group.entry.distinct_names;
    if (group.entry.names.size() < Independent::kNames) group.entry.names.push_back(p.name);
  }
  if (is_training_state(p)) {
    group.training = true;
    return;
  }
  // A gradient compared after it in its step tells whether it reaches training; else the
  // weights the next step starts from do.
  ++group.unverified;
  if (index < last_gradient_) --group.unverified;
  else pending_.push_back(g);
}

std::size_t IndependentDivergences::group_for(const Pair& p, const Describe& describe) {
  const auto [it, added] = by_rule_kind_.emplace(std::pair{*p.why.rule, p.kind}, groups_.size());
  if (!added) return it->second;
  Group& g = groups_.emplace_back();
  g.entry.rule = *p.why.rule;
  g.entry.kind = p.kind;
  g.entry.first = p;
  describe(p, g.entry);
  return it->second;
}

void IndependentDivergences::add_inherited(const Pair& p) {
  std::vector<std::size_t> reached;
  for (std::uint32_t root : p.why.bug_roots)
    if (const auto g = group_of(root); g >= 0) reached.push_back(static_cast<std::size_t>(g));
  std::sort(reached.begin(), reached.end());
  reached.erase(std::unique(reached.begin(), reached.end()), reached.end());
  for (std::size_t g : reached) {
    groups_[g].training = true;
    ++groups_[g].entry.inherited;
  }
}

void IndependentDivergences::set_group(std::uint32_t root, std::size_t group) {
  if (root >= root_group_.size()) root_group_.resize(root + 1, -1);
  root_group_[root] = static_cast<std::ptrdiff_t>(group);
}

std::ptrdiff_t IndependentDivergences::group_of(std::uint32_t root) const {
  return root < root_group_.size() ? root_group_[root] : -1;
}

std::vector<Independent> IndependentDivergences::ranked() {
  std::vector<Independent> out;
  out.reserve(groups_.size());
  for (Group& g : groups_) {
    g.entry.effect = g.training         ? Independent::Effect::training
                     : g.unverified > 0 ? Independent::Effect::unknown
                                        : Independent::Effect::local;
    out.push_back(std::move(g.entry));
  }
  // Groups were made in execution order: a stable sort keeps it within each effect.
  std::stable_sort(out.begin(), out.end(),
                   [](const Independent& a, const Independent& b) { return a.effect < b.effect; });
  groups_.clear();
  return out;
}

}  // namespace probe::differ
