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

std::string changes_text(const std::vector<std::string>& names, const Config& base, const Config& test) {
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

std::optional<Walked> walk(const Config& base, const Config& test, const std::vector<std::string>& changed,
                           const Evaluate& evaluate, const std::function<bool()>& stop, Culprit& c) {
  std::vector<std::string> pending, context;
  for (std::size_t i = 0; i < changed.size(); ++i) {
    if (stop()) return std::nullopt;
    pending.push_back(changed[i]);
    const Config at = with(base, std::vector<std::string>(changed.begin(), changed.begin() + static_cast<long>(i) + 1), test);
    const Against a = evaluate(at);
    c.findings.push_back(changes_text(pending, base, test) + " (" + at.text() + "): " + against_name(a));
    if (a == Against::bug) return Walked{pending, context};
    if (a == Against::failed) continue;  // carried into the next step
    context.insert(context.end(), pending.begin(), pending.end());
    pending.clear();
  }
  return std::nullopt;
}

}  // namespace

const char* against_name(Against a) {
  switch (a) {
    case Against::failed: return "does not run";
    case Against::equal: return "bitwise equal";
    case Against::noise: return "noise";
    case Against::bug: return "unexplained divergence";
  }
  return "?";
}

std::optional<Culprit> find_culprit(const Config& base, const Config& test, const Evaluate& evaluate,
                                    const std::function<bool()>& stop,
                                    const std::function<std::int64_t(const Config&)>& cost) {
  Culprit c;
  // Each configuration asked for once: the walk and the checks after it meet the same ones.
  std::map<std::string, Against> seen;
  const Evaluate once = [&](const Config& cfg) {
    const auto it = seen.find(cfg.text());
    return it != seen.end() ? it->second : seen.emplace(cfg.text(), evaluate(cfg)).first->second;
  };
  const auto changed = changed_degrees(base, test);
  auto w = walk(base, test, changed, once, stop, c);
  if (!w) return std::nullopt;
  // Several changes at once (the configurations between did not run): one alone may do it.
  const Config last_good = with(base, w->context, test);
  if (w->candidates.size() > 1)
    for (const auto& d : w->candidates) {
      if (stop()) return std::nullopt;
      const Config one = with(last_good, {d}, test);
      const Against a = once(one);
      c.findings.push_back(change_text(d, base, test) + " alone (" + one.text() + "): " + against_name(a));
      if (a == Against::bug) {
        w->candidates = {d};
        break;
      }
    }
  // Which earlier changes it needs: each undone in turn, the cheapest configuration first.
  std::vector<std::string> context = w->context, combined;
  if (cost)
    std::stable_sort(context.begin(), context.end(), [&](const std::string& a, const std::string& b) {
      const auto without = [&](const std::string& n) {
        std::vector<std::string> rest;
        for (const auto& x : w->context)
          if (x != n) rest.push_back(x);
        return cost(with(with(base, rest, test), w->candidates, test));
      };
      return without(a) < without(b);
    });
  std::vector<std::string> kept = w->context;
  for (const auto& d : context) {
    if (stop()) return std::nullopt;
    std::vector<std::string> rest;
    for (const auto& x : kept)
      if (x != d) rest.push_back(x);
    const Config trial = with(with(base, rest, test), w->candidates, test);
    const Against a = once(trial);
    c.findings.push_back("without " + change_text(d, base, test) + " (" + trial.text() + "): " + against_name(a));
    if (a == Against::bug) kept = rest;                  // not needed
    else if (a == Against::failed) c.prerequisites.push_back(d);  // needed to run at all
    else combined.push_back(d);                          // needed for the divergence
  }
  c.degrees = combined;
  c.degrees.insert(c.degrees.end(), w->candidates.begin(), w->candidates.end());
  std::vector<std::string> before_changes;
  for (const auto& d : kept)
    if (std::find(combined.begin(), combined.end(), d) == combined.end()) before_changes.push_back(d);
  c.before = with(base, before_changes, test);
  c.after = with(c.before, c.degrees, test);
  return c;
}

}  // namespace probe::bisect
