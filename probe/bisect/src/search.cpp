#include "search.h"

#include <algorithm>
#include <map>

namespace probe::bisect {
namespace {

std::vector<std::string> changed_degrees(const Config& base, const Config& test) {
  std::vector<std::string> names;
  for (const auto& [n, v] : test.degrees)
    if (base.get(n) != v) names.push_back(n);
  return names;
}

Config with(Config c, const std::vector<std::string>& names, const Config& from) {
  for (const auto& n : names) c.set(n, from.get(n));
  return c;
}

std::string changes_text(const std::vector<std::string>& names, const Config& base,
                         const Config& test) {
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i)
    s += (i ? (i + 1 == names.size() ? " and " : ", ") : "") + change_text(names[i], base, test);
  return s;
}

// The path: the base with the first i changed degrees set to the test's. Returns the changes
// that bring the divergence in (several where the configurations between failed to run) and the
// changes before them.
struct Walked {
  std::vector<std::string> candidates, context;
};

std::optional<Walked> walk(const Config& base, const Config& test,
                           const std::vector<std::string>& changed, const Evaluate& evaluate,
                           const std::function<bool()>& stop, Culprit& c) {
  std::vector<std::string> pending, context;
  for (std::size_t i = 0; i < changed.size(); ++i) {
    if (stop()) return std::nullopt;
    pending.push_back(changed[i]);
    const Config at = with(
        base, std::vector<std::string>(changed.begin(), changed.begin() + static_cast<long>(i) + 1),
        test);
    const VersusBase a = evaluate(at);
    c.findings.push_back(changes_text(pending, base, test) + " (" + at.text() +
                         "): " + versus_base_name(a));
    if (diverges(a)) return Walked{pending, context};
    if (a == VersusBase::failed) continue;  // carried into the next step
    context.insert(context.end(), pending.begin(), pending.end());
    pending.clear();
  }
  return std::nullopt;
}

}  // namespace

const char* versus_base_name(VersusBase a) {
  switch (a) {
    case VersusBase::failed: return "does not run";
    case VersusBase::equal: return "bitwise equal";
    case VersusBase::noise: return "noise";
    case VersusBase::cannot_tell: return "cannot tell";
    case VersusBase::bug: return "unexplained divergence";
  }
  return "?";
}

namespace {

std::vector<std::string> without(const std::vector<std::string>& all, const std::string& one) {
  std::vector<std::string> rest;
  for (const auto& x : all)
    if (x != one) rest.push_back(x);
  return rest;
}

// Several changes came in at once (the configurations between did not run): one alone may do it;
// else each is undone in turn: one the others do not run without is a prerequisite, one whose
// undoing keeps the divergence is not needed.
void narrow_candidates(const Config& base, const Config& test, const Evaluate& once,
                       const std::function<bool()>& stop, Walked& w,
                       std::vector<std::string>& prerequisites, Culprit& c) {
  if (w.candidates.size() < 2) return;
  const Config last_good = with(base, w.context, test);
  for (const auto& d : w.candidates) {
    if (stop()) return;
    const Config one = with(last_good, {d}, test);
    const VersusBase a = once(one);
    c.findings.push_back(change_text(d, base, test) + " alone (" + one.text() +
                         "): " + versus_base_name(a));
    if (diverges(a)) {
      w.candidates = {d};
      return;
    }
  }
  for (const auto& d : std::vector<std::string>(w.candidates)) {
    if (stop() || w.candidates.size() < 2) return;
    const auto rest = without(w.candidates, d);
    const Config trial = with(last_good, rest, test);
    const VersusBase a = once(trial);
    c.findings.push_back("without " + change_text(d, base, test) + " (" + trial.text() +
                         "): " + versus_base_name(a));
    if (diverges(a)) {
      w.candidates = rest;
    } else if (a == VersusBase::failed) {
      w.candidates = rest;
      prerequisites.push_back(d);
    }
  }
}

}  // namespace

std::optional<Culprit> find_culprit(const Config& base, const Config& test,
                                    const Evaluate& evaluate, const std::function<bool()>& stop,
                                    const std::function<std::int64_t(const Config&)>& cost,
                                    const std::vector<std::string>& order) {
  Culprit c;
  // Each configuration asked for once: the walk and the checks after it meet the same ones.
  std::map<std::string, VersusBase> seen;
  const Evaluate once = [&](const Config& cfg) {
    const auto it = seen.find(cfg.text());
    return it != seen.end() ? it->second : seen.emplace(cfg.text(), evaluate(cfg)).first->second;
  };
  std::vector<std::string> changed;
  for (const auto& n : order.empty() ? changed_degrees(base, test) : order)
    if (base.get(n) != test.get(n)) changed.push_back(n);
  auto w = walk(base, test, changed, once, stop, c);
  if (!w) return std::nullopt;
  std::vector<std::string> prerequisites;
  narrow_candidates(base, test, once, stop, *w, prerequisites, c);
  // Which earlier changes it needs: each undone in turn, the cheapest configuration first.
  std::vector<std::string> context = w->context;
  const auto trial_of = [&](const std::vector<std::string>& kept) {
    auto changes = kept;
    changes.insert(changes.end(), prerequisites.begin(), prerequisites.end());
    return with(with(base, changes, test), w->candidates, test);
  };
  if (cost)
    std::stable_sort(
        context.begin(), context.end(), [&](const std::string& a, const std::string& b) {
          return cost(trial_of(without(w->context, a))) < cost(trial_of(without(w->context, b)));
        });
  std::vector<std::string> kept = w->context, combined;
  for (const auto& d : context) {
    if (stop()) return std::nullopt;
    const auto rest = without(kept, d);
    const Config trial = trial_of(rest);
    const VersusBase a = once(trial);
    c.findings.push_back("without " + change_text(d, base, test) + " (" + trial.text() +
                         "): " + versus_base_name(a));
    if (diverges(a)) kept = rest;                                  // not needed
    else if (a == VersusBase::failed) prerequisites.push_back(d);  // needed to run at all
    else combined.push_back(d);                                    // needed for the divergence
  }
  c.degrees = combined;
  c.degrees.insert(c.degrees.end(), w->candidates.begin(), w->candidates.end());
  std::vector<std::string> before_changes = prerequisites;
  for (const auto& d : kept)
    if (std::find(combined.begin(), combined.end(), d) == combined.end() &&
        std::find(prerequisites.begin(), prerequisites.end(), d) == prerequisites.end())
      before_changes.push_back(d);
  c.prerequisites = prerequisites;
  c.before = with(base, before_changes, test);
  c.after = with(c.before, c.degrees, test);
  // The configuration it acts on must not diverge already (undoing changes that were "not
  // needed" one at a time says nothing of them together): where it does, the divergence is
  // between the base and it.
  if (stop()) return std::nullopt;
  const VersusBase at_before = c.before == base ? VersusBase::equal : once(c.before);
  if (diverges(at_before)) {
    c.findings.push_back("the configuration it acts on (" + c.before.text() +
                         ") diverges already: bisecting to it");
    auto inner = find_culprit(base, c.before, once, stop, cost, order);
    if (inner)
      inner->findings.insert(inner->findings.begin(), c.findings.begin(), c.findings.end());
    return inner;
  }
  return c;
}

}  // namespace probe::bisect
