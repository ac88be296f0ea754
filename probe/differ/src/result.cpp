// A comparison's outcome: the issue log, the verdict and the exit status it implies.
#include <algorithm>

#include "differ/result.h"

namespace probe::differ {

void IssueLog::add(Issue issue) {
  auto& n = count_by_type[issue.type];
  ++n;
  if (issue.severity == Issue::Severity::error) ++errors;
  if (static_cast<std::size_t>(n) <= kDetailPerType) detail.push_back(std::move(issue));
}

void IssueLog::hint(const std::string& text) {
  if (std::find(hints.begin(), hints.end(), text) == hints.end()) hints.push_back(text);
}

Phase phase_of(const Pair& p) {
  return phase_of(p.base.present ? p.base.merged.record : p.test.merged.record);
}

bool Result::any_divergence() const {
  for (const auto& per_kind : counts)
    for (int c = 0; c < kPairClassCount; ++c)
      if (per_kind[static_cast<std::size_t>(c)] > 0 && is_divergence(static_cast<PairClass>(c)))
        return true;
  return false;
}

std::int64_t Result::count(PairClass c) const {
  std::int64_t n = 0;
  for (const auto& per_kind : counts) n += per_kind[static_cast<std::size_t>(c)];
  return n;
}

void NoiseSummary::add(const Pair& p) {
  if (p.why.bug) {
    ++bug_pairs;
    return;
  }
  for (Figures* f : {&all, &by_kind[p.kind]}) {
    ++f->pairs;
    f->max_rel_diff = std::max(f->max_rel_diff, p.rel_diff);
  }
  ++by_rule[*p.why.rule];
}

Result::Verdict Result::verdict() const {
  const bool diverges = any_divergence();
  if (diverges && (strict || noise.bug_pairs > 0)) return Verdict::different;
  if (base_issues.errors > 0 || test_issues.errors > 0) return Verdict::run_errors;
  if (truncated_at) return Verdict::incomplete;
  if (diverges) return Verdict::noise;
  if (records_compared == count(PairClass::unsupported)) return Verdict::nothing_compared;
  if (count(PairClass::within_tol) > 0) return Verdict::within_tolerance;
  return Verdict::equal;
}

std::string_view Result::verdict_name() const {
  switch (verdict()) {
    case Verdict::different: return "different";
    case Verdict::run_errors: return "run_errors";
    case Verdict::incomplete: return "incomplete";
    case Verdict::noise: return "noise";
    case Verdict::nothing_compared: return "nothing_compared";
    case Verdict::within_tolerance: return "within_tolerance";
    case Verdict::equal: break;
  }
  return "equal";
}

int Result::exit_code() const {
  switch (verdict()) {
    case Verdict::equal:
    case Verdict::within_tolerance: return 0;
    case Verdict::nothing_compared: return 2;
    case Verdict::noise: return 4;
    default: return 1;
  }
}

std::string_view effect_name(Independent::Effect e) {
  switch (e) {
    case Independent::Effect::training: return "training";
    case Independent::Effect::local: return "local";
    case Independent::Effect::unknown: break;
  }
  return "unknown";
}

std::string effect_words(const Independent& d) {
  const std::string steps =
      d.last_step == d.first.step
          ? "at step " + std::to_string(d.first.step)
          : "at steps " + std::to_string(d.first.step) + "-" + std::to_string(d.last_step);
  const std::string held = std::to_string(d.records) + " record" + (d.records == 1 ? "" : "s") +
                           " of " + std::to_string(d.distinct_names) + " name" +
                           (d.distinct_names == 1 ? "" : "s") + " " + steps;
  switch (d.effect) {
    case Independent::Effect::training:
      return "changes training (" + held +
             (d.inherited > 0 ? "; " + std::to_string(d.inherited) +
                                    " gradient, weight or optimizer "
                                    "records inherit it"
                              : "") +
             ")";
    case Independent::Effect::local:
      return "local (" + held +
             "): the gradients or weights compared after it inherit nothing of it";
    case Independent::Effect::unknown: break;
  }
  return "effect unknown (" + held +
         "): no gradient or weight recorded after it tells whether training inherits it";
}

}  // namespace probe::differ
