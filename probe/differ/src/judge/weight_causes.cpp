// The [init] and [optimizer] causes, and a parameter the other run ties to another
// (weight_causes.h).
#include "differ/detail/judge/weight_causes.h"

#include <algorithm>
#include <string>

#include "differ/detail/judge/explain.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace {

bool both_present(const Pair& p) { return p.base.present && p.test.present; }

// Pairs of `kind` both runs hold, and of those the ones that differ; the first that differs.
struct KindCount {
  std::int64_t compared = 0, differing = 0;
  const Pair* first = nullptr;
};
KindCount count_kind(const std::vector<Pair>& pairs, Kind kind) {
  KindCount c;
  for (const auto& p : pairs) {
    if (p.kind != kind || !both_present(p)) continue;
    ++c.compared;
    if (!is_divergence(p.pair_class)) continue;
    ++c.differing;
    if (!c.first) c.first = &p;
  }
  return c;
}

// "bitwise" or "within tolerance (N not bitwise)": how the gradients agreed.
std::string agreement(std::int64_t within_tol) {
  return within_tol == 0 ? "bitwise"
                         : "within tolerance (" + std::to_string(within_tol) + " not bitwise)";
}

// First divergence: a parameter at step s+1 whose update of step s read agreeing gradients.
std::optional<Cause> update_differs(std::int64_t step, const StepDigest& previous,
                                    const std::vector<Pair>& pairs, const Pair& first) {
  const KindCount params = count_kind(pairs, Kind::param);
  const std::string s = std::to_string(previous.step), next = std::to_string(step);
  std::string msg = "grads of step " + s + " agree " + agreement(previous.grads_within_tol) +
                    " but param " + first.name + " differs at step " + next + " (" +
                    std::to_string(params.differing) + " of " + std::to_string(params.compared) +
                    " parameters differ): the optimizer update of step " + s +
                    " differs (learning rate, weight decay, epsilon, fused/foreach vs per-tensor "
                    "kernels, optimizer state)";
  if (previous.optim_compared > 0)
    msg +=
        "; the optimizer state after that update is bitwise equal (" +
        std::to_string(previous.optim_compared) +
        " optim records): the update's hyperparameters or kernels differ, not the state it keeps";
  else
    msg += "; no optim records of step " + s + " to compare (Probe::watch_optimizer records them)";
  return Cause{Rule::optimizer,
               msg,
               {{"update_step", previous.step},
                {"param_step", step},
                {"first_param", first.name},
                {"params_differing", params.differing},
                {"params_compared", params.compared},
                {"grads_compared", previous.grads_compared},
                {"grads_agree", agreement(previous.grads_within_tol)},
                {"optim_compared", previous.optim_compared}}};
}

// First divergence: an optimizer state tensor of step s while step s's gradients agree.
std::optional<Cause> state_differs(std::int64_t step, const std::vector<Pair>& pairs,
                                   const Pair& first) {
  const StepDigest digest = digest_step(step, pairs);
  const KindCount grads = count_kind(pairs, Kind::grad);
  if (digest.grads_compared == 0 || grads.differing > 0) return std::nullopt;
  const KindCount states = count_kind(pairs, Kind::optim);
  const std::string s = std::to_string(step);
  return Cause{Rule::optimizer,
               "grads of step " + s + " agree " + agreement(digest.grads_within_tol) +
                   " but optimizer state " + first.name + " differs after the update of step " + s +
                   " (" + std::to_string(states.differing) + " of " +
                   std::to_string(states.compared) +
                   " optim records differ): the optimizer's state update differs (betas, amsgrad, "
                   "momentum, the step count, or state loaded differently)",
               {{"update_step", step},
                {"first_state", first.name},
                {"first_param", parameter_of_state(first.name)},
                {"states_differing", states.differing},
                {"states_compared", states.compared},
                {"grads_compared", digest.grads_compared},
                {"grads_agree", agreement(digest.grads_within_tol)}}};
}

}  // namespace

StepDigest digest_step(std::int64_t step, const std::vector<Pair>& pairs) {
  StepDigest d;
  d.step = step;
  for (const auto& p : pairs) {
    if (!both_present(p)) continue;
    if (p.kind == Kind::grad) {
      ++d.grads_compared;
      d.grads_within_tol += p.pair_class == PairClass::within_tol;
    }
    d.optim_compared += p.kind == Kind::optim;
  }
  return d;
}

std::optional<Cause> init_cause(std::int64_t step, bool first_step, const std::vector<Pair>& pairs,
                                const Pair& first) {
  if (!first_step || first.kind != Kind::param || first.pair_class != PairClass::different)
    return std::nullopt;
  const KindCount params = count_kind(pairs, Kind::param);
  const std::string s = std::to_string(step);
  return Cause{
      Rule::init,
      "param " + first.name + " differs at step " + s +
          ", the first recorded step, before any update (" + std::to_string(params.differing) +
          " of " + std::to_string(params.compared) +
          " parameters differ): initialization, its seed, or checkpoint loading differ" +
          (step > 0 ? " (the runs start at step " + s + ": a checkpoint loaded differently?)" : ""),
      {{"step", step},
       {"first_param", first.name},
       {"params_differing", params.differing},
       {"params_compared", params.compared}}};
}

std::optional<Cause> optimizer_cause(std::int64_t step, const std::optional<StepDigest>& previous,
                                     const std::vector<Pair>& pairs, const Pair& first) {
  if (first.pair_class != PairClass::different) return std::nullopt;
  // A number of the update (`.lr`, `.step`) rather than a state tensor: the explainer's own words.
  if (first.kind == Kind::optim && is_setting(first)) return std::nullopt;
  if (first.kind == Kind::optim) return state_differs(step, pairs, first);
  // The update between two recorded steps: only when nothing ran unrecorded in between.
  if (first.kind == Kind::param && previous && previous->step == step - 1 &&
      previous->grads_compared > 0)
    return update_differs(step, *previous, pairs, first);
  return std::nullopt;
}

namespace {

bool one_sided(const Pair& p) {
  return p.pair_class == PairClass::only_base || p.pair_class == PairClass::only_test;
}

// The parameter whose record in the run that lacks `first` lists first's name among its other
// names (tied=).
std::optional<std::string> named_tied(const std::vector<Pair>& pairs, const Pair& first) {
  const bool in_base = first.pair_class == PairClass::only_base;
  for (const auto& p : pairs) {
    const Side& other = in_base ? p.test : p.base;
    if (p.kind != Kind::param || !other.present) continue;
    const auto& tied = other.merged.record.tied;
    if (std::binary_search(tied.begin(), tied.end(), first.name)) return p.name;
  }
  return std::nullopt;
}

// A parameter both runs record whose values first's record holds bit for bit.
std::optional<std::string> copied(const std::vector<Pair>& pairs, const Pair& first) {
  const bool in_base = first.pair_class == PairClass::only_base;
  const Record& r = (in_base ? first.base : first.test).merged.record;
  // A constant tensor (a norm's ones, a bias's zeros) equals every other of its shape and
  // value: equal figures are evidence of a copy only where the values vary.
  if (first.kind != Kind::param || r.state != Record::State::tensor || r.stats.unsupported ||
      !(r.stats.min < r.stats.max))
    return std::nullopt;
  for (const auto& p : pairs) {
    if (p.kind != Kind::param || !p.base.present || !p.test.present || p.name == first.name)
      continue;
    if (same_figures((in_base ? p.base : p.test).merged.record.stats, r.stats)) return p.name;
  }
  return std::nullopt;
}

}  // namespace

bool same_figures(const TensorStats& a, const TensorStats& b) {
  return !a.unsupported && !b.unsupported && a.hash == b.hash && a.dtype == b.dtype &&
         a.shape == b.shape && a.norm == b.norm && a.min == b.min && a.max == b.max &&
         a.mean == b.mean;
}

std::optional<Untied> untied_from(const std::vector<Pair>& pairs, const Pair& first) {
  if (!one_sided(first) ||
      (first.kind != Kind::param && first.kind != Kind::mb_grad && first.kind != Kind::grad))
    return std::nullopt;
  const auto named = named_tied(pairs, first);
  const auto copy = copied(pairs, first);
  if (named) return Untied{*named, true, copy == named};
  if (copy) return Untied{*copy, false, true};
  return std::nullopt;
}

namespace {

// The update counts of a step that differ: a parameter's `<param>.step`, a number in both runs.
struct UpdateCounts {
  const Pair* pair = nullptr;  // the first that differs
  double base = 0, test = 0;
};

UpdateCounts differing_update_counts(const std::vector<Pair>& pairs) {
  for (const auto& p : pairs) {
    if (p.kind != Kind::optim || !p.name.ends_with(".step") || p.pair_class != PairClass::different)
      continue;
    const Record &b = p.base.merged.record, &t = p.test.merged.record;
    if (b.state != Record::State::scalar || t.state != Record::State::scalar) continue;
    return {&p, b.value, t.value};
  }
  return {};
}

}  // namespace

std::string differing_update_counts_text(const std::vector<Pair>& pairs) {
  const UpdateCounts counts = differing_update_counts(pairs);
  if (!counts.pair) return "";
  return counts.pair->name + ": base " + log_format::format_double(counts.base) + ", test " +
         log_format::format_double(counts.test);
}

std::optional<Cause> mid_step_updates_cause(std::int64_t step, const std::vector<Pair>& pairs,
                                            const Pair& first) {
  const Phase phase = phase_of(first);
  if (!first.mb || *first.mb == 0 || (phase != Phase::forward && phase != Phase::backward))
    return std::nullopt;
  const UpdateCounts counts = differing_update_counts(pairs);
  if (!counts.pair) return std::nullopt;
  // The counts after the step: the run whose count grew by more stepped more often within it.
  const bool in_test = counts.test > counts.base;
  const std::string run = in_test ? "test" : "base", other = in_test ? "base" : "test";
  const std::string s = std::to_string(step);
  return Cause{Rule::optimizer,
               std::string(kind_name(first.kind)) + " " + first.name + " mb " +
                   std::to_string(*first.mb) + " differs at step " + s +
                   " while the step's weights, taken when it began, are equal, and the " + run +
                   " run's optimizer stepped more often within step " + s + " than the " + other +
                   " run's (" + counts.pair->name + ": base " +
                   log_format::format_double(counts.base) + ", test " +
                   log_format::format_double(counts.test) + "): from microbatch " +
                   std::to_string(*first.mb) + " on, the " + run +
                   " run computed from weights its optimizer had already updated (an optimizer "
                   "step inside the accumulation window)",
               {{"step", step},
                {"kind", std::string(kind_name(first.kind))},
                {"name", first.name},
                {"mb", *first.mb},
                {"update_count", counts.pair->name},
                {"base", log_format::format_double(counts.base)},
                {"test", log_format::format_double(counts.test)}}};
}

}  // namespace probe::differ
