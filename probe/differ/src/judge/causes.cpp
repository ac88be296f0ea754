// The likely-cause rules: each looks at the step of the first divergence (or, for absences and
// NaN/Inf, the whole comparison) and returns its cause with the evidence, or nothing.
#include "differ/detail/judge/causes.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <vector>

#include "differ/detail/pair/classify.h"
#include "differ/detail/pair/sample_match.h"
#include "differ/detail/judge/constant_factor.h"
#include "differ/detail/judge/explain.h"
#include "differ/detail/judge/weight_causes.h"
#include "differ/detail/read/names.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace lf = probe::log_format;

namespace {

std::string mb_text(const Pair& p) { return p.mb ? " mb=" + std::to_string(*p.mb) : ""; }

bool both_tensors(const Pair& p) {
  return p.base.present && p.test.present && p.base.merged.record.state == Record::State::tensor &&
         p.test.merged.record.state == Record::State::tensor;
}

bool has_mb_grad(const std::string& name, const std::vector<Pair>& pairs) {
  return std::any_of(pairs.begin(), pairs.end(),
                     [&](const Pair& p) { return p.kind == Kind::mb_grad && p.name == name; });
}

// Every mb_grad of the parameter is bitwise equal or set aside (a partial sum against another
// record, a record covering other microbatches than the other run's), and there is at least one.
// An mb_grad exactly the other run's times the step's loss convention (explain.h): every figure
// in the convention's ratio, equal for what depends on it.
bool convention_scaled(const Pair& p) {
  return p.why.rule == Rule::convention && !p.why.bug && p.why.ceiling == 0;
}

bool mb_grads_equal(const std::string& name, const std::vector<Pair>& pairs) {
  std::int64_t mbs = 0;
  for (const auto& p : pairs) {
    if (p.kind != Kind::mb_grad || p.name != name) continue;
    if (p.pair_class != PairClass::equal && !p.set_aside && !convention_scaled(p)) return false;
    ++mbs;
  }
  return mbs > 0;
}

// The step's loss-convention factor where it scales the parameter's mb_grads, in words ("2",
// "1/4"); "" where none does.
std::string convention_of(const std::string& name, const std::vector<Pair>& pairs) {
  for (const auto& p : pairs) {
    if (p.kind != Kind::mb_grad || p.name != name || !convention_scaled(p)) continue;
    const TensorStats &b = p.base.merged.record.stats, &t = p.test.merged.record.stats;
    return factor_text(t.mean != 0 && b.mean != 0 ? t.mean / b.mean : t.norm / b.norm,
                       constant_factor_tolerance(b.dtype));
  }
  return "";
}

// An mb_grad of the parameter is set aside: a partial sum (sequence parallelism), or a record
// covering other microbatches than the other run's (expert parallelism).
bool mb_grads_set_aside(const std::string& name, const std::vector<Pair>& pairs) {
  return std::any_of(pairs.begin(), pairs.end(), [&](const Pair& p) {
    return p.kind == Kind::mb_grad && p.name == name && p.set_aside;
  });
}

// One run's grad of a parameter that is, bit for bit, one of its own microbatch contributions
// to it, where that run recorded two or more that are not zero: its accumulated gradient holds
// that one alone.
struct LoneContribution {
  bool in_base;
  std::size_t position;  // which contribution it is, in execution order, from 1
  std::size_t count;     // the microbatches that contributed in that run
};

std::optional<LoneContribution> lone_contribution(const Pair& g, const std::vector<Pair>& pairs) {
  for (const bool in_base : {true, false}) {
    const Side& grad = in_base ? g.base : g.test;
    std::size_t count = 0;
    std::optional<std::size_t> match;
    for (const Pair& p : pairs) {
      const Side& side = in_base ? p.base : p.test;
      const Record& r = side.merged.record;
      if (p.kind != Kind::mb_grad || p.name != g.name || !side.present ||
          r.state != Record::State::tensor)
        continue;
      // A contribution of zeros adds nothing: a sum that equals the one other is no loss.
      if (r.stats.unsupported || !(r.stats.norm > 0)) continue;
      ++count;
      if (same_figures(r.stats, grad.merged.record.stats)) match = count;
    }
    if (count >= 2 && match) return LoneContribution{in_base, *match, count};
  }
  return std::nullopt;
}

// An mb_grad of the parameter covers other microbatches than the other run's.
bool mb_grads_covered(const std::string& name, const std::vector<Pair>& pairs) {
  return std::any_of(pairs.begin(), pairs.end(), [&](const Pair& p) {
    return p.kind == Kind::mb_grad && p.name == name && p.covered;
  });
}

// The summation-order bound of grad g from its mb_grads in the step (explain.h).
double sum_order_bound(const Pair& g, const std::vector<Pair>& pairs, const DiffOptions& o) {
  std::int64_t summands = 0;
  double norms = 0, unit = 0;
  for (const auto& p : pairs) {
    if (p.kind != Kind::mb_grad || p.name != g.name || !p.base.present) continue;
    ++summands;
    unit = std::max(unit, coarsest_unit_roundoff(p));
    if (p.base.merged.record.state == Record::State::tensor &&
        std::isfinite(p.base.merged.record.stats.norm))
      norms += p.base.merged.record.stats.norm;
  }
  return summation_order_bound(g, summands, norms, unit, o);
}

std::int64_t nonfinite(const Merged& m) {
  return m.record.state == Record::State::tensor ? m.record.stats.nan + m.record.stats.inf : 0;
}

// What the step's rng and input pairs show.
struct RngAndInputs {
  const Pair* first_rng = nullptr;    // the first rng fingerprint that differs
  const Pair* first_input = nullptr;  // the first input both runs hold that differs
  bool inputs_differ = false;         // an input diverges (also one-sided)
  std::int64_t inputs_compared = 0;   // inputs both runs hold
};

RngAndInputs rng_and_inputs(const std::vector<Pair>& pairs) {
  RngAndInputs e;
  for (const auto& p : pairs) {
    // A fingerprint absent from one run says nothing about the RNG state (names differ).
    if (p.kind == Kind::rng && p.pair_class == PairClass::different && !e.first_rng)
      e.first_rng = &p;
    if (p.kind == Kind::input) {
      e.inputs_compared += p.base.present && p.test.present;
      if (is_divergence(p.pair_class)) e.inputs_differ = true;
      if (p.pair_class == PairClass::different && !e.first_input) e.first_input = &p;
    }
  }
  return e;
}

// "--kinds" text that drops `drop` from the comparison's kinds.
std::string kinds_without(std::uint32_t drop, const DiffOptions& o) {
  // Every kind (--kinds all) is said as no choice: -kind is shorter than the list of the rest.
  const bool chosen = o.kinds_mask && *o.kinds_mask != kAllKinds;
  std::string text;
  for (int k = 0; k < kKindCount; ++k) {
    const std::uint32_t bit = 1u << k;
    const std::string name(kind_name(static_cast<Kind>(k)));
    if (!chosen && (drop & bit)) text += (text.empty() ? "-" : ",-") + name;
    if (chosen && (*o.kinds_mask & bit) && !(drop & bit)) text += (text.empty() ? "" : ",") + name;
  }
  return text;
}

}  // namespace

std::optional<Cause> none_gradient_cause(const DivergentStep& s) {
  const Pair& first = s.first;
  if (first.pair_class != PairClass::none_one_side) return std::nullopt;
  std::int64_t none_base = 0, none_test = 0, grads = 0;
  for (const auto& p : s.pairs) {
    if (p.kind != Kind::grad) continue;
    ++grads;
    if (p.pair_class == PairClass::none_one_side)
      (p.base.merged.record.state == Record::State::none ? none_base : none_test)++;
  }
  const bool in_base = first.base.merged.record.state == Record::State::none;
  std::string msg = std::string(kind_name(first.kind)) + " " + first.name + " is none in the " +
                    (in_base ? "base" : "test") +
                    " run: the gradient was never computed, or was read before backward";
  const std::int64_t n = in_base ? none_base : none_test;
  const std::string step = std::to_string(s.step);
  if (grads > 0 && n == grads)
    msg += "; all " + std::to_string(grads) + " grads of step " + step + " are none there";
  else if (n > 1)
    msg += "; " + std::to_string(n) + " of " + std::to_string(grads) + " grads of step " + step +
           " are none there";
  return Cause{Rule::none_gradient, msg};
}

// A one-element input (a number the loop passes to the forward) that differs while every
// other input of its microbatch, its samples among them, is equal: "(base B, test T)".
std::optional<std::string> number_argument(const Pair& first, const std::vector<Pair>& pairs) {
  const TensorStats &b = first.base.merged.record.stats, &t = first.test.merged.record.stats;
  if (b.numel() != 1 || t.numel() != 1 || b.unsupported || t.unsupported) return std::nullopt;
  std::int64_t others = 0;
  for (const auto& p : pairs) {
    if (p.kind != Kind::input || p.mb != first.mb || p.name == first.name) continue;
    if (!(p.base.present && p.test.present) || is_divergence(p.pair_class)) return std::nullopt;
    ++others;
  }
  if (others == 0) return std::nullopt;
  return " (base " + lf::format_double(b.mean) + ", test " + lf::format_double(t.mean) + ")";
}

// The samples (`input numprobe.sample*` hashes, numprobe.attach's) each run's step holds, each
// as often as the step's microbatches hold it.
struct StepSamples {
  std::multiset<std::uint64_t> base_rows, test_rows;
  std::set<std::uint64_t> base, test;  // distinct
};

StepSamples step_samples(const std::vector<Pair>& pairs) {
  StepSamples out;
  for (const auto& p : pairs) {
    if (p.kind != Kind::input || !p.name.starts_with(kSampleRecord)) continue;
    if (p.base.present) out.base_rows.insert(p.base.merged.record.stats.hash);
    if (p.test.present) out.test_rows.insert(p.test.merged.record.stats.hash);
  }
  out.base.insert(out.base_rows.begin(), out.base_rows.end());
  out.test.insert(out.test_rows.begin(), out.test_rows.end());
  return out;
}

// One run's step holds a sample more than once and the other run's does not: its ranks' shards
// (or its microbatches) overlap, and the samples they lack the other run trains on.
std::optional<Cause> overlapping_samples_cause(const DivergentStep& s, const StepSamples& samples) {
  const std::size_t base_twice = samples.base_rows.size() - samples.base.size(),
                    test_twice = samples.test_rows.size() - samples.test.size();
  if ((base_twice == 0) == (test_twice == 0)) return std::nullopt;
  const bool in_test = test_twice > 0;
  const auto& mine = in_test ? samples.test : samples.base;
  const auto& other = in_test ? samples.base : samples.test;
  std::vector<std::uint64_t> lacking;
  std::set_difference(other.begin(), other.end(), mine.begin(), mine.end(),
                      std::back_inserter(lacking));
  const std::string run = in_test ? "test" : "base", the_other = in_test ? "base" : "test";
  const auto twice = static_cast<std::int64_t>(in_test ? test_twice : base_twice);
  const auto rows =
      static_cast<std::int64_t>((in_test ? samples.test_rows : samples.base_rows).size());
  return Cause{Rule::data,
               "step " + std::to_string(s.step) + " of the " + run + " run holds " +
                   std::to_string(twice) + " of its " + std::to_string(rows) +
                   " sample rows a second time" +
                   (lacking.empty() ? ""
                                    : " and lacks " + std::to_string(lacking.size()) +
                                          " sample(s) of the " + the_other + " run's step") +
                   ": its ranks' shards (or its microbatches) overlap, so some samples train twice "
                   "and others not at all (ranks that shuffle with generators of their own "
                   "seeds, a sampler without its rank's offset)",
               {{"step", s.step},
                {"run", run},
                {"repeated", twice},
                {"rows", rows},
                {"lacking", static_cast<std::int64_t>(lacking.size())}}};
}

// One run's step holds some of the other's samples and none of its own: the same data, cut
// into smaller steps (that run's optimizer stepped before the other's step was over).
std::optional<Cause> smaller_steps_cause(const DivergentStep& s, const StepSamples& samples) {
  const auto within = [](const std::set<std::uint64_t>& a, const std::set<std::uint64_t>& b) {
    return !a.empty() && a.size() < b.size() &&
           std::includes(b.begin(), b.end(), a.begin(), a.end());
  };
  const bool test_smaller = within(samples.test, samples.base);
  if (!test_smaller && !within(samples.base, samples.test)) return std::nullopt;
  const std::string small = test_smaller ? "test" : "base", large = test_smaller ? "base" : "test";
  const std::size_t part = (test_smaller ? samples.test : samples.base).size(),
                    whole = (test_smaller ? samples.base : samples.test).size();
  return Cause{Rule::optimizer,
               "step " + std::to_string(s.step) + " of the " + small + " run holds " +
                   std::to_string(part) + " of the " + std::to_string(whole) + " samples of the " +
                   large + " run's step " + std::to_string(s.step) +
                   " and no other: the same data, cut into smaller steps. The " + small +
                   " run's optimizer stepped before the " + large +
                   " run's step was over (an optimizer step inside the accumulation window, or "
                   "a smaller batch?), so its steps update the weights from fewer samples each",
               {{"step", s.step},
                {"run", small},
                {"samples", static_cast<std::int64_t>(part)},
                {"of", static_cast<std::int64_t>(whole)}}};
}

std::optional<Cause> data_cause(const DivergentStep& s) {
  // The run diverges where data enters it: other data (and, with it, usually another seed).
  const RngAndInputs e = rng_and_inputs(s.pairs);
  if (!e.first_input || (s.first.kind != Kind::rng && s.first.kind != Kind::input))
    return std::nullopt;
  const std::string where = "input " + e.first_input->name + mb_text(*e.first_input) +
                            " differs at step " + std::to_string(s.step);
  const StepSamples samples = step_samples(s.pairs);
  if (auto overlap = overlapping_samples_cause(s, samples)) return overlap;
  if (auto smaller = smaller_steps_cause(s, samples)) return smaller;
  if (auto values = number_argument(*e.first_input, s.pairs))
    return Cause{Rule::data, where + *values +
                                 " while every other input of the microbatch, its samples "
                                 "among them, is equal: the runs pass the forward a different "
                                 "number, computed from their layout (a loss normalizer's token "
                                 "count taken over another window or other ranks, a scale)"};
  return Cause{Rule::data, where +
                               ": the runs were fed different data (data seed, sampler or "
                               "shuffling, or how the dataset is split over data-parallel ranks)" +
                               (e.first_rng ? "; the RNG fingerprints differ too: a different seed "
                                              "would explain both"
                                            : "")};
}

std::optional<Cause> rng_cause(const DivergentStep& s) {
  // Inputs equal but RNG fingerprints differ.
  const RngAndInputs e = rng_and_inputs(s.pairs);
  if (!e.first_rng || e.inputs_differ) return std::nullopt;
  const bool inputs = e.inputs_compared > 0;
  return Cause{Rule::rng,
               std::string(inputs ? "inputs are equal but the" : "the") + " RNG fingerprint " +
                   e.first_rng->name + mb_text(*e.first_rng) + " differs at step " +
                   std::to_string(s.step) +
                   (inputs ? "" : " (no input was compared: different inputs are not ruled out)") +
                   ": dropout/RNG state (seed, generator offset, or RNG consumed in a "
                   "different order)"};
}

std::optional<Cause> unreduced_gradient_cause(const DivergentStep& s) {
  // A gradient whose replicas disagree while every microbatch contribution is equal: it was
  // not reduced across the replicas.
  const Pair& first = s.first;
  const bool base_disagrees = first.base.present && first.base.merged.replicas_disagree;
  const bool test_disagrees = first.test.present && first.test.merged.replicas_disagree;
  if (first.kind != Kind::grad || !is_divergence(first.pair_class) ||
      !(base_disagrees || test_disagrees) || !mb_grads_equal(first.name, s.pairs))
    return std::nullopt;
  // "<which> replicas of the <run> run (ranks ...)": the run whose replicas disagree.
  const auto replicas = [&](const char* which) {
    return std::string(which) + "replicas of the " + (test_disagrees ? "test" : "base") +
           " run (ranks " +
           format_ranks(test_disagrees ? first.test.merged.ranks : first.base.merged.ranks) + ")";
  };
  std::string message = "grad " + first.name + " differs between ";
  if (mb_grads_covered(first.name, s.pairs))
    message +=
        replicas("") +
        " while its mb_grads cover several microbatches each (an expert's gradient from one "
        "expert-parallel dispatch) and every compared one is bitwise equal: the gradient was not "
        "all-reduced over the data-parallel replicas of its expert-parallel group";
  else if (mb_grads_set_aside(first.name, s.pairs))
    message += replicas("") +
               " while its mb_grads are partial sums (each rank's sequence shard) and every "
               "compared one is bitwise equal: the gradient was not all-reduced over the "
               "tensor-parallel group (each rank keeps its own shard's part), or not over the "
               "data-parallel one";
  else
    message += replicas("data-parallel ") +
               " while every mb_grad is bitwise equal: the gradient was not reduced across "
               "data-parallel ranks (a skipped all-reduce, or one over the wrong group)";
  return Cause{Rule::unreduced_gradient, message};
}

// The first divergence is a grad that differs (and no unreduced_gradient). Its mb_grads tell a
// reduction that only summed in another order from one that got the sum wrong.
std::optional<Cause> grad_reduction_cause(const DivergentStep& s, const DiffOptions& o) {
  const Pair& g = s.first;
  if (!both_tensors(g) || g.kind != Kind::grad || g.pair_class != PairClass::different)
    return std::nullopt;
  // A NaN/Inf makes any norm difference meaningless: the nonfinite rule names it. Elements
  // that moved without changing a figure are no reduction order either.
  if (!std::isfinite(g.base.merged.record.stats.norm) ||
      !std::isfinite(g.test.merged.record.stats.norm) || elements_moved(g))
    return std::nullopt;
  // Within one run, the step's gradient must be the sum of the microbatch contributions that
  // run recorded (each before accumulation); one of them alone, bit for bit, means the others
  // were zeroed or dropped between the backwards and the optimizer's step.
  if (const auto lone = lone_contribution(g, s.pairs)) {
    const std::string run = lone->in_base ? "base" : "test";
    return Cause{Rule::wrong_reduction,
                 "grad " + g.name + " at step " + std::to_string(s.step) + " of the " + run +
                     " run is, bit for bit, the contribution of one microbatch alone (number " +
                     std::to_string(lone->position) + " of the " + std::to_string(lone->count) +
                     " whose contributions to it that run recorded, mb_grad, in execution "
                     "order): the others were zeroed or dropped before the optimizer stepped (a "
                     "zero_grad inside the accumulation window?)",
                 {{"step", s.step},
                  {"name", g.name},
                  {"run", run},
                  {"contribution", static_cast<std::int64_t>(lone->position)},
                  {"microbatches", static_cast<std::int64_t>(lone->count)}}};
  }
  // Its mb_grads are set aside (partial sums, records covering other microbatches): not
  // compared, nothing to tell the two apart by (the explanation judges it, explain.h).
  if (mb_grads_set_aside(g.name, s.pairs)) return std::nullopt;
  // The explainer found what the figures cannot decide (every grad of the step scaled by one
  // factor: a clipping coefficient, explain.h) and says why in its explanation.
  if (g.why.rule == Rule::cannot_tell) return std::nullopt;
  const double bound = sum_order_bound(g, s.pairs, o);
  const std::string rel = lf::format_double(g.rel_diff);
  if (mb_grads_equal(g.name, s.pairs)) {
    if (g.rel_diff <= bound)
      return Cause{Rule::summation_order,
                   "every mb_grad of " + g.name +
                       " is bitwise equal but its grad differs by "
                       "relative norm " +
                       rel +
                       ": summation order (the reduction order of a collective: all-reduce vs "
                       "reduce-scatter, bucket layout)"};
    const std::string convention = convention_of(g.name, s.pairs);
    return Cause{
        Rule::wrong_reduction,
        "every mb_grad of " + g.name +
            (convention.empty() ? " is bitwise equal"
                                : " is the base run's times " + convention +
                                      " bit for bit, the step's loss convention (each "
                                      "microbatch's loss scaled by a factor the step's "
                                      "reduction is to undo),") +
            " but its grad differs by relative norm " + rel +
            ", far beyond summation-order size (at most " + lf::format_double(bound) +
            "): the reduction or accumulation of this gradient is wrong (skipped, partial, "
            "over the wrong group, or wrongly scaled)"};
  }
  // contributions differ
  if (g.rel_diff > bound || has_mb_grad(g.name, s.pairs)) return std::nullopt;
  // No mb_grad to rule a different contribution out: say what is likely, and why only that.
  const std::uint32_t mb_grad = 1u << static_cast<unsigned>(Kind::mb_grad);
  const bool one_run = o.kinds_not_recorded & mb_grad;
  const bool filtered = o.kinds_mask && !(*o.kinds_mask & mb_grad);
  return Cause{Rule::summation_order,
               "grad " + g.name + " differs by relative norm " + rel +
                   ", summation-order size: summation order likely, but mb_grad not compared (" +
                   (one_run    ? "one run recorded none"
                    : filtered ? "--kinds leaves it out"
                               : "none recorded") +
                   "), so a different gradient contribution is not ruled out"};
}

std::vector<Cause> step_causes(const DivergentStep& s, const DiffOptions& o) {
  std::vector<Cause> causes;
  for (auto rule : {none_gradient_cause, data_cause, rng_cause})
    if (auto c = rule(s)) causes.push_back(std::move(*c));
  if (auto c = unreduced_gradient_cause(s)) {
    causes.push_back(std::move(*c));
    return causes;
  }
  if (auto c = constant_factor_cause(s.step, s.first)) causes.push_back(std::move(*c));
  if (auto g = grad_reduction_cause(s, o)) causes.push_back(std::move(*g));
  return causes;
}

std::optional<Cause> nonfinite_cause(std::int64_t step, const std::vector<Pair>& pairs) {
  for (const auto& p : pairs) {
    if (p.set_aside) continue;  // not compared (a partial sum, a record of other microbatches)
    const std::int64_t nb = p.base.present ? nonfinite(p.base.merged) : 0;
    const std::int64_t nt = p.test.present ? nonfinite(p.test.merged) : 0;
    if (!p.base.present || !p.test.present || (nb == 0) == (nt == 0)) continue;
    const bool in_test = nt > 0;
    const Record& rec = in_test ? p.test.merged.record : p.base.merged.record;
    return Cause{Rule::nonfinite, "NaN/Inf appears first at " + std::string(kind_name(p.kind)) +
                                      " " + p.name + mb_text(p) + " (step " + std::to_string(step) +
                                      ", " + (in_test ? "test" : "base") +
                                      " run: nan=" + std::to_string(rec.stats.nan) +
                                      " inf=" + std::to_string(rec.stats.inf) + ")"};
  }
  return std::nullopt;
}

namespace {

// [step_range]: the first divergence is on a step one run does not hold.
std::optional<Cause> step_range_cause(const Pair& p, const RunInfo& lacking, const DiffOptions& o,
                                      const std::string& has, const std::string& lacks) {
  if (!lacking.last_step) return std::nullopt;
  const std::string step = std::to_string(p.step);
  const std::string lo = o.step_min ? std::to_string(*o.step_min) : "";
  const std::string hi = o.step_max ? std::to_string(*o.step_max) : "";
  if (p.step > *lacking.last_step)
    return Cause{Rule::step_range, "the " + has + " run goes on to step " + step + ", the " +
                                       lacks + " run ends at step " +
                                       std::to_string(*lacking.last_step) + ": compare --steps " +
                                       lo + ":" + std::to_string(*lacking.last_step)};
  if (p.step < *lacking.first_step)
    return Cause{Rule::step_range, "the " + has + " run starts at step " + step + ", the " + lacks +
                                       " run at step " + std::to_string(*lacking.first_step) +
                                       ": compare --steps " + std::to_string(*lacking.first_step) +
                                       ":" + hi};
  return Cause{Rule::step_range, "step " + step + " is in the " + has +
                                     " run only: the runs log different steps (PROBE_EVERY?)"};
}

// [kind_not_recorded]: the lacking run recorded none of the first divergence's kind.
std::optional<Cause> kind_not_recorded_cause(const Pair& p, const std::vector<Kind>& kinds,
                                             const DiffOptions& o, const std::string& lacks) {
  if (std::find(kinds.begin(), kinds.end(), p.kind) == kinds.end()) return std::nullopt;
  std::uint32_t drop = 0;
  std::string names;
  for (Kind k : kinds) {
    drop |= 1u << static_cast<unsigned>(k);
    names += (names.empty() ? "" : ", ") + std::string(kind_name(k));
  }
  return Cause{Rule::kind_not_recorded, "the " + lacks + " run recorded no " + names +
                                            " at all (PROBE_KINDS?); --kinds " +
                                            kinds_without(drop, o) + " compares the rest"};
}

// [untied]: the first divergence is a parameter the other run holds as one with another.
Cause untied_cause(const Pair& p, const std::string& what, const std::string& has,
                   const std::string& lacks) {
  const Untied& u = *p.untied;
  const std::string copy =
      "at step " + std::to_string(p.step) + " it holds bit for bit the values of param " + u.param;
  std::string message =
      what + " is in the " + has + " run only, where " + p.name + " is a parameter of its own; " +
      (u.named ? "the " + lacks + " run's log lists " + p.name + " as another name of param " +
                     u.param + " (tied=)" + (u.copy ? ", and " + copy : "")
               : copy + ", which both runs record") +
      ": the " + has + " run holds as two parameters what the " + lacks +
      " run holds as one (tied weights untied in the " + has +
      " run: a head no longer tied to its embedding?)";
  std::vector<Evidence> evidence{{"param", p.name}, {"tied_to", u.param}, {"run", has}};
  if (u.copy) evidence.push_back({"copy_of", u.param});
  return Cause{Rule::untied, std::move(message), std::move(evidence)};
}

}  // namespace

std::optional<Cause> absence_cause(const Result& r, const DiffOptions& o, bool step_one_sided,
                                   bool series_one_sided) {
  const Pair& p = *r.first_divergence;
  if (p.pair_class != PairClass::only_base && p.pair_class != PairClass::only_test)
    return std::nullopt;
  const bool in_base = p.pair_class == PairClass::only_base;
  const std::string has = in_base ? "base" : "test", lacks = in_base ? "test" : "base";
  const RunInfo& lacking = in_base ? r.test : r.base;
  if (step_one_sided) return step_range_cause(p, lacking, o, has, lacks);
  if (lacking.ranks_found < lacking.world_size)
    return Cause{Rule::missing_record,
                 "the " + lacks + " run holds the logs of " + std::to_string(lacking.ranks_found) +
                     " of its " + std::to_string(lacking.world_size) +
                     " ranks: the records of the missing ones are absent (missing_rank in RUN "
                     "ISSUES)"};
  if (auto c =
          kind_not_recorded_cause(p, in_base ? r.kinds_only_base : r.kinds_only_test, o, lacks))
    return c;
  const std::string what = std::string(kind_name(p.kind)) + " " + p.name;
  const auto& names = in_base ? r.names_only_base : r.names_only_test;
  if (p.untied) return untied_cause(p, what, has, lacks);
  if (std::find(names.begin(), names.end(), what) != names.end())
    return Cause{Rule::names_differ,
                 what + " is in the " + has +
                     " run only, at every step: the runs name it "
                     "differently (a pipeline stage numbering its layers from 0?) or the " +
                     lacks +
                     " run does not record it; --map REGEX=REPLACEMENT aligns renamed records (see "
                     "NAMES IN ONE RUN ONLY)"};
  const std::string record = what + mb_text(p);
  if (series_one_sided)
    return Cause{Rule::missing_record, record + " is in the " + has + " run only, at every step"};
  return Cause{Rule::missing_record, record + " is missing from the " + lacks + " run at step " +
                                         std::to_string(p.step) + " (other steps have it)"};
}

}  // namespace probe::differ
