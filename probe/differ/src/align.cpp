// Aligning two runs step by step: records paired by key, each pair classified and counted,
// paired statistics per series, the top differences, and the evidence the causes need.
#include "differ/detail/align.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string_view>
#include <tuple>

#include "differ/detail/judge/causes.h"
#include "differ/detail/pair/classify.h"
#include "differ/detail/judge/constant_factor.h"
#include "differ/detail/merge/covers.h"
#include "differ/detail/pair/op_match.h"
#include "probe/log_format.h"

namespace probe::differ {

void SeriesStats::add_pair(std::int64_t step, double base, double test, bool agree) {
  ++paired;
  if (agree) ++exact;
  else if (!first_divergent_step) first_divergent_step = step;
  const bool same = base == test || (std::isnan(base) && std::isnan(test));
  const double d = same ? 0.0 : test - base;
  final_diff = d;
  final_step = step;
  if (!std::isfinite(d)) {  // NaN or Inf on one side only (or opposite infinities)
    ++nonfinite_mismatch;
    if (!std::isinf(max_abs)) {
      max_abs = std::numeric_limits<double>::infinity();
      max_abs_step = step;
    }
    return;
  }
  ++finite_pairs;
  sum_abs += std::fabs(d);
  sum_sq += d * d;
  if (!max_abs_step || std::fabs(d) > max_abs) {
    max_abs = std::fabs(d);
    max_abs_step = step;
  }
}

double SeriesStats::mae() const {
  return finite_pairs ? sum_abs / static_cast<double>(finite_pairs) : 0.0;
}
double SeriesStats::rmse() const {
  return finite_pairs ? std::sqrt(sum_sq / static_cast<double>(finite_pairs)) : 0.0;
}

namespace {

// Top-N by relative difference: a min-heap on rel_diff.
bool heap_less(const Pair& a, const Pair& b) { return a.rel_diff > b.rel_diff; }

// The merged record goes into the pair's side; the side's previous record goes back to the
// step's records (the step merge fills it next). Swapping keeps both sets of buffers.
void take_side(Side& s, Merged& m) {
  s.present = true;
  swap(s.merged, m);
  s.merged.record.name.clear();  // the pair holds the name
  s.merged.key.clear();
}

// Bug classes that arise in what a module computes, where its op records can name the op. The
// others do not: the weights (init), the update (optimizer), a gradient never computed, a record
// or a reduction missing, the data, the RNG, replicas that disagree.
bool ops_can_locate(const Explanation& why) {
  return why.rule == Rule::unexplained || why.rule == Rule::elements_moved ||
         why.rule == Rule::nonfinite;
}

// A side the step has no record for: a default record, keeping its buffers.
void leave_absent(Side& s) {
  s.present = false;
  Merged& m = s.merged;
  log_format::reset_record(m.record);
  m.raw_name.clear();
  m.ranks.clear();
  m.hash_source = HashSource::spec_v1;
  m.key.clear();
  m.replicas_disagree = false;
  m.value_ranks.clear();
  m.partial = {};
  m.split.size = 0;
}

// Every field of the pair, from the merged record it starts with (a pair of a previous step
// gets reused).
void start_pair(std::int64_t step, Merged& m, Pair& p) {
  p.step = step;
  p.kind = m.record.kind;
  std::swap(p.name, m.record.name);  // the pair's copy is the one reports use
  p.mb = m.record.microbatch;
  p.pair_class = PairClass::equal;
  p.rel_diff = 0;
  p.note.clear();
  std::swap(p.key, m.key);
  p.why = {};
  p.set_aside = false;
  p.covered = false;
}

// "test: 2 summands", "base: summand 0 of 2": a partial side in words.
std::string partial_side_text(const char* run, const PartialSum& s) {
  return std::string(run) + ": " +
         (s.index < 0 ? std::to_string(s.count) + " summands"
                      : "summand " + std::to_string(s.index) + " of " + std::to_string(s.count));
}

// A pair where a side is a partial sum and the other is not the same partial sum (the same
// count of summands, the same summand of one rank's view): nothing to compare it with. Counted
// in `report`, neither compared nor a divergence; the explainer still reads it (a noise root).
bool set_aside_partial(const Pair& p, PartialReport& report) {
  const PartialSum *b = p.base.partial(), *t = p.test.partial();
  if (!b && !t) return false;
  if (b && t && b->count == t->count && b->index == t->index) return false;
  ++report.pairs;
  ++report.by_kind[p.kind];
  if (report.examples.size() < PartialReport::kListed) {
    std::string text = "step " + std::to_string(p.step) +
                       (p.mb ? " mb " + std::to_string(*p.mb) : "") + " " +
                       std::string(kind_name(p.kind)) + " " + p.name + " (";
    if (b) text += partial_side_text("base", *b);
    if (b && t) text += ", ";
    if (t) text += partial_side_text("test", *t);
    report.examples.push_back(text + ")");
  }
  return true;
}

}  // namespace

Aligner::Aligner(const DiffOptions& options, Result& result)
    : options_(options), result_(result), op_analysis_(options.replay_op), explainer_(options) {
  result_.strict = options.strict;
}

bool Aligner::passes(Kind kind, const std::string& name) {
  const DiffOptions& o = options_;
  if (o.kinds_mask && !(*o.kinds_mask & (1u << static_cast<unsigned>(kind)))) return false;
  if (!o.name_filter) return true;
  auto it = name_passes_.find(name);
  if (it == name_passes_.end())
    it = name_passes_.emplace(name, std::regex_search(name, *o.name_filter)).first;
  return it->second;
}

// `hint`: the series of the pair at the same position in the previous step (steps mostly
// repeat), checked before the index is.
std::size_t Aligner::series(const Pair& p, std::size_t hint) {
  if (hint < result_.series.size()) {
    const SeriesKey& k = result_.series[hint].first;
    if (k.kind == p.kind && k.mb == p.mb && k.name == p.name) return hint;
  }
  auto [it, inserted] = series_index_.try_emplace(p.key, result_.series.size());
  if (inserted) {
    result_.series.push_back({SeriesKey{p.kind, p.name, p.mb}, SeriesStats{}});
    seen_.push_back(0);
  }
  return it->second;
}

void Aligner::offer_top(const Pair& p) {
  if (options_.top == 0 || p.rel_diff <= 0) return;
  if (top_.size() < options_.top) {
    top_.push_back(p);
    std::push_heap(top_.begin(), top_.end(), heap_less);
  } else if (p.rel_diff > top_.front().rel_diff) {
    std::pop_heap(top_.begin(), top_.end(), heap_less);
    top_.back() = p;
    std::push_heap(top_.begin(), top_.end(), heap_less);
  }
}

// The step's pairs, into pairs_, in execution order: each base record with its test partner
// (same key), then the test-only records put among them.
void Aligner::pair_up(std::int64_t step, std::vector<Merged>* base, std::vector<Merged>* test) {
  const std::size_t nb = base ? base->size() : 0, nt = test ? test->size() : 0;
  // Each base record's partner first, and only then the records moved into pairs (the
  // partners are found by key).
  partner_.assign(nb, -1);
  test_used_.assign(nt, false);
  pair_of_test_.assign(nt, -1);
  if (test && base) find_partners(*base, *test);
  std::size_t count = 0;
  for (std::size_t i = 0; i < nb; ++i) {
    Merged& m = (*base)[i];
    if (!passes(m.record.kind, m.record.name)) continue;
    Pair& p = next_pair(count);
    start_pair(step, m, p);
    p.order = static_cast<std::int64_t>(2 * (count - 1));
    take_side(p.base, m);
    if (partner_[i] >= 0) {
      take_side(p.test, (*test)[static_cast<std::size_t>(partner_[i])]);
      pair_of_test_[static_cast<std::size_t>(partner_[i])] = static_cast<std::ptrdiff_t>(count - 1);
    } else {
      leave_absent(p.test);
    }
  }
  // Test-only records, in the test run's order. A partial sum is a root of what follows the
  // reduction it feeds (the explainer reads it so): it goes right before the record of its
  // enclosing module in its microbatch (tap layers.2 for layers.2.attention.wo), or where there
  // is none right after the pair of the test record before it; any other test-only record at
  // the end of its phase and microbatch.
  const std::size_t paired = count;
  enclosing_.clear();
  std::ptrdiff_t anchor = -1;  // the pair of the last test record paired with a base one
  for (std::size_t i = 0; i < nt; ++i) {
    if (test_used_[i]) {
      if (pair_of_test_[i] >= 0) anchor = pair_of_test_[i];
      continue;
    }
    Merged& m = (*test)[i];
    if (!passes(m.record.kind, m.record.name)) continue;
    const bool partial = !m.partial.empty();
    std::int64_t order = std::numeric_limits<std::int64_t>::max();
    if (partial) {
      const std::ptrdiff_t module = enclosing_pair(m, paired);
      order = module >= 0 ? 2 * static_cast<std::int64_t>(module) - 1
                          : 2 * static_cast<std::int64_t>(anchor) + 1;
    }
    Pair& p = next_pair(count);
    start_pair(step, m, p);
    p.order = order;
    take_side(p.test, m);
    leave_absent(p.base);
  }
  pairs_.resize(count);
  // Keep execution order: a stable sort on phase, microbatch and place puts test-only records
  // among the base ones (which are in that order already: without test-only records, or with
  // them at the end, nothing moves).
  const auto before = [](const Pair& a, const Pair& b) {
    return std::make_tuple(phase_of(a), a.mb.value_or(-1), a.order) <
           std::make_tuple(phase_of(b), b.mb.value_or(-1), b.order);
  };
  if (!std::is_sorted(pairs_.begin(), pairs_.end(), before))
    std::stable_sort(pairs_.begin(), pairs_.end(), before);
}

// The first of pairs_[0, paired) in m's microbatch and phase named after a module that encloses
// m's name ("layers.2" or "layers.2.attention" for "layers.2.attention.wo"), innermost first;
// -1 where there is none. Indexes the pairs on first use in a step (only runs with partial sums
// of one run only need it).
std::ptrdiff_t Aligner::enclosing_pair(const Merged& m, std::size_t paired) {
  const auto key = [](std::int64_t mb, Phase phase, std::string_view name) {
    return std::to_string(mb) + ' ' + std::to_string(static_cast<int>(phase)) + ' ' +
           std::string(name);
  };
  if (enclosing_.empty())
    for (std::size_t i = paired; i-- > 0;)  // the first pair of a name wins
      enclosing_[key(pairs_[i].mb.value_or(-1), phase_of(pairs_[i]), pairs_[i].name)] = i;
  const std::int64_t mb = m.record.microbatch.value_or(-1);
  const Phase phase = phase_of(m.record);
  std::string_view name = m.record.name;
  for (auto dot = name.rfind('.'); dot != std::string_view::npos; dot = name.rfind('.')) {
    name = name.substr(0, dot);
    if (auto it = enclosing_.find(key(mb, phase, name)); it != enclosing_.end())
      return static_cast<std::ptrdiff_t>(it->second);
  }
  return -1;
}

// partner_[i]: the test record with base record i's key. Runs of the same layout hold their
// records in the same order: the record at the same position is checked first, and only the
// records left unpaired go through an index.
void Aligner::find_partners(const std::vector<Merged>& base, const std::vector<Merged>& test) {
  bool unpaired = false;
  for (std::size_t i = 0; i < base.size(); ++i) {
    if (i < test.size() && base[i].key == test[i].key) {
      partner_[i] = static_cast<std::ptrdiff_t>(i);
      test_used_[i] = true;
    } else {
      unpaired = true;
    }
  }
  if (!unpaired) return;
  test_index_.clear();
  for (std::size_t i = 0; i < test.size(); ++i)
    if (!test_used_[i]) test_index_.emplace(test[i].key, i);
  for (std::size_t i = 0; i < base.size(); ++i) {
    if (partner_[i] >= 0) continue;
    auto it = test_index_.find(base[i].key);
    if (it != test_index_.end()) {
      partner_[i] = static_cast<std::ptrdiff_t>(it->second);
      test_used_[it->second] = true;
    }
  }
  test_index_.clear();  // its keys are about to move
}

// The pair to fill next: a previous step's where there is one.
Pair& Aligner::next_pair(std::size_t& count) {
  if (count == pairs_.size()) pairs_.emplace_back();
  return pairs_[count++];
}

// Paired statistics: one path, the comparator's verdict (a bitwise-equal hash counts as
// agreement even where composed norms differ in the last bit).
std::size_t Aligner::add_to_series(const Pair& p, std::size_t hint, bool both_runs) {
  const std::size_t si = series(p, hint);
  SeriesStats& st = result_.series[si].second;
  const std::uint8_t sides = (p.base.present ? 1 : 0) | (p.test.present ? 2 : 0);
  seen_[si] |= sides;
  if (both_runs) kind_seen_[static_cast<std::size_t>(p.kind)] |= sides;
  std::optional<double> vb, vt;
  // A weights.log record has no norm to follow.
  if (p.base.present && p.base.merged.hash_source != HashSource::torch_hash_alone)
    vb = series_value(p.base.merged.record);
  if (p.test.present && p.test.merged.hash_source != HashSource::torch_hash_alone)
    vt = series_value(p.test.merged.record);
  if (vb) ++st.base_steps;
  if (vt) ++st.test_steps;
  if (vb && vt) {
    const bool agree = p.pair_class == PairClass::equal
                           ? true
                           : options_.cmp.agree(*vb, *vt) && p.pair_class != PairClass::different;
    st.add_pair(p.step, *vb, p.pair_class == PairClass::equal ? *vb : *vt, agree);
  } else if (is_divergence(p.pair_class) && !st.first_divergent_step) {
    st.first_divergent_step = p.step;  // a value on one side only (absent, or `none`)
  }
  return si;
}

void Aligner::compare_step(std::int64_t step, std::vector<Merged>* base, std::vector<Merged>* test,
                           bool same_code) {
  if (base && test) {
    samples_.match(*base, *test);  // first: op records are aligned within their microbatches
    match_ops(*base, *test);
  } else {
    samples_.clear();
  }
  pair_up(step, base, test);
  std::vector<Pair>& pairs = pairs_;
  Pair* first = nullptr;
  pair_series_.resize(pairs.size(), SIZE_MAX);
  covered_.index(pairs);
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    Pair& p = pairs[k];
    if (!p.base.present) p.pair_class = PairClass::only_test;
    else if (!p.test.present) p.pair_class = PairClass::only_base;
    else classify(p, options_.cmp);
    // Records the other run holds nothing like: an op of one run only, records that cover
    // other microbatches than the other run's (checked before their summands: a record of
    // other microbatches compares with nothing, whatever it sums), a partial sum against
    // another record.
    const bool op = set_aside_op(p, result_.ops);
    p.covered = !op && set_aside_covered(p, covered_, result_.covered);
    if (op || p.covered || samples_.set_aside(p, result_.regrouped) ||
        set_aside_partial(p, result_.partial)) {
      p.set_aside = true;
      continue;
    }
    ++result_.counts[static_cast<std::size_t>(p.kind)][static_cast<std::size_t>(p.pair_class)];
    ++result_.records_compared;
    const std::size_t si = add_to_series(p, pair_series_[k], base && test);
    pair_series_[k] = si;
    if (is_divergence(p.pair_class) && !first) first = &p;
    // The norm of RNG state bytes is no size of a difference.
    if ((p.pair_class == PairClass::different || p.pair_class == PairClass::within_tol) &&
        p.kind != Kind::rng)
      offer_top(p);
  }
  // A parameter of one run that the other ties to another (an untied head): its explanation
  // says so.
  if (first && !result_.first_divergence) first->untied = untied_from(pairs, *first);
  const bool first_step_of_both =
      result_.base.first_step == step && result_.test.first_step == step;
  explainer_.explain_step(step, first_step_of_both, pairs, same_code);
  // After the explanations, so that a report drawing every pair (--html's heat map) shows each
  // one's verdict; op records of one run only, partial sums and records covering other
  // microbatches were set aside, not compared.
  if (options_.on_pair)
    for (std::size_t k = 0; k < pairs.size(); ++k)
      if (!pairs[k].set_aside) options_.on_pair(pairs[k], pair_series_[k]);
  result_.summation_order_grads = explainer_.summation_order_grads();
  note_noise_or_bug(step, first_step_of_both, pairs);
  independent_.add_step(pairs, [&](const Pair& p, Independent& entry) {
    describe(step, first_step_of_both, pairs, p, entry);
  });
  note_first_nonfinite(step, pairs);
  op_analysis_.add_step(step, pairs, result_.ops);
  if (first && !result_.first_divergence) {
    result_.first_divergence = *first;
    first_step_one_sided_ = !base || !test;
    for (auto& c : step_causes({step, pairs, *first}, options_))
      result_.causes.push_back(std::move(c));
    // --strict headlines the first divergence: the hint follows it (otherwise it follows the
    // first unexplained divergence, note_noise_or_bug).
    if (options_.strict && (!first->why.bug || ops_can_locate(first->why)))
      op_analysis_.suggest_trace(*first, pairs, options_.kinds_mask, result_.ops);
    // Divergence that starts in the weights or the optimizer, not in what a step computes.
    if (auto c = init_cause(step, first_step_of_both, pairs, *first))
      result_.causes.push_back(std::move(*c));
    if (auto c = optimizer_cause(step, previous_step_, pairs, *first))
      result_.causes.push_back(std::move(*c));
  }
  previous_step_ = digest_step(step, pairs);
}

// Counts what noise explains, and keeps the first pair with a bug-class explanation and its
// cause: the headline.
void Aligner::note_noise_or_bug(std::int64_t step, bool first_step,
                                const std::vector<Pair>& pairs) {
  for (const auto& p : pairs) {
    if (!is_divergence(p.pair_class) || !p.why.rule) continue;  // set-aside ops have no explanation
    result_.noise.add(p);
    // The first pair the figures cannot decide: where no bug comes, its trace setting is the next
    // step that can tell (the ops where it arises, compared again).
    if (!p.why.bug && p.why.rule == Rule::cannot_tell && !cannot_tell_hint_) {
      OpReport hint;
      op_analysis_.suggest_trace(p, pairs, options_.kinds_mask, hint);
      cannot_tell_hint_ = hint.trace_hint.value_or("");
    }
    if (p.why.bug && !result_.first_unexplained) {
      result_.first_unexplained = p;
      result_.unexplained_cause = headline_cause(step, first_step, pairs, p);
      if (!options_.strict && ops_can_locate(p.why))
        op_analysis_.suggest_trace(p, pairs, options_.kinds_mask, result_.ops);
    }
  }
}

// The bug-class rules that have a likely-cause function give their message and evidence; the
// explainer words the others.
Cause Aligner::headline_cause(std::int64_t step, bool first_step, const std::vector<Pair>& pairs,
                              const Pair& p) const {
  const DivergentStep s{step, pairs, p};
  const Rule rule = *p.why.rule;
  // Equal dependencies are the weights the step began with: the update counts may say they
  // changed within it.
  if (rule == Rule::unexplained)
    if (auto mid = mid_step_updates_cause(step, pairs, p)) return *mid;
  std::optional<Cause> c;
  if (rule == Rule::none_gradient) c = none_gradient_cause(s);
  else if (rule == Rule::data) c = data_cause(s);
  else if (rule == Rule::rng) c = rng_cause(s);
  else if (rule == Rule::unreduced_gradient) c = unreduced_gradient_cause(s);
  else if (rule == Rule::wrong_reduction) c = grad_reduction_cause(s, options_);
  else if (rule == Rule::constant_factor && !p.why.detail.empty())
    c = Cause{rule,
              std::string(kind_name(p.kind)) + " " + p.name +
                  (p.mb ? " mb " + std::to_string(*p.mb) : "") + ": " + p.why.detail,
              {{"step", step}, {"kind", std::string(kind_name(p.kind))}, {"name", p.name}}};
  else if (rule == Rule::constant_factor) c = constant_factor_cause(step, p);
  else if (rule == Rule::init) c = init_cause(step, first_step, pairs, p);
  else if (rule == Rule::optimizer && p.why.roots == 0)
    c = optimizer_cause(step, previous_step_, pairs, p);
  // The data rule's cause may find the same data, cut into steps otherwise: an optimizer cause.
  if (c && (c->rule == rule || (rule == Rule::data && c->rule == Rule::optimizer))) return *c;
  if (rule == Rule::wrong_reduction && samples_.any_aside())
    return Cause{rule,
                 "grad " + p.name + " at step " + std::to_string(step) +
                     " differs by relative norm " + log_format::format_double(p.rel_diff) +
                     ", beyond the summation order of its pieces, while the two runs group the "
                     "step's samples into other microbatches (REGROUPED MICROBATCHES): a loss "
                     "normalized per microbatch (each microbatch's token mean, divided by the "
                     "accumulation count) weighs the samples otherwise when the microbatches hold "
                     "different numbers of tokens; normalized by the step's tokens, the groupings "
                     "agree",
                 {{"step", step}, {"kind", std::string("grad")}, {"name", p.name}}};
  return explainer_.cause_of(step, p);
}

void Aligner::describe(std::int64_t step, bool first_step, const std::vector<Pair>& pairs,
                       const Pair& p, Independent& entry) const {
  entry.cause = headline_cause(step, first_step, pairs, p);
  if (!ops_can_locate(p.why)) return;
  OpReport hint;
  op_analysis_.suggest_trace(p, pairs, options_.kinds_mask, hint);
  entry.trace_hint = hint.trace_hint;
}

// The first unexplained divergence in execution order may change nothing that training keeps (a
// loss computed another way, one rounding apart, while every gradient is bitwise equal): the
// headline is the first that changes training, the others are listed below it.
void Aligner::headline_the_one_that_matters() {
  result_.independent = independent_.ranked();
  if (options_.strict || result_.independent.empty()) return;
  const Independent& top = result_.independent.front();
  if (result_.first_unexplained && result_.first_unexplained->step == top.first.step &&
      result_.first_unexplained->key == top.first.key)
    return;
  result_.first_unexplained = top.first;
  result_.unexplained_cause = top.cause;
  result_.ops.trace_hint = top.trace_hint;
}

void Aligner::note_first_nonfinite(std::int64_t step, const std::vector<Pair>& pairs) {
  if (first_nonfinite_) return;
  first_nonfinite_ = nonfinite_cause(step, pairs);
  if (first_nonfinite_) first_nonfinite_step_ = step;
}

void Aligner::finish() {
  headline_the_one_that_matters();
  if (!result_.ops.trace_hint && !result_.first_unexplained && cannot_tell_hint_ &&
      !cannot_tell_hint_->empty())
    result_.ops.trace_hint = cannot_tell_hint_;
  note_one_sided_kinds();
  note_one_sided_names();
  order_causes();
  op_analysis_.add_causes(result_.ops, result_.causes);  // the op's root cause goes first
  std::sort(top_.begin(), top_.end(), heap_less);
  result_.top = std::move(top_);
}

// Kinds one run never recorded on the steps both hold: not names to align (--map).
void Aligner::note_one_sided_kinds() {
  for (int k = 0; k < kKindCount; ++k) {
    const auto bits = kind_seen_[static_cast<std::size_t>(k)];
    if (bits == 1) result_.kinds_only_base.push_back(static_cast<Kind>(k));
    if (bits == 2) result_.kinds_only_test.push_back(static_cast<Kind>(k));
  }
}

// Names (per kind, any microbatch) seen in one run only.
void Aligner::note_one_sided_names() {
  Result& r = result_;
  std::map<std::pair<int, std::string>, std::uint8_t> names;
  for (std::size_t i = 0; i < r.series.size(); ++i)
    names[{static_cast<int>(r.series[i].first.kind), r.series[i].first.name}] |= seen_[i];
  auto listed = [](const std::vector<Kind>& kinds, int k) {
    return std::find(kinds.begin(), kinds.end(), static_cast<Kind>(k)) != kinds.end();
  };
  for (const auto& [n, bits] : names) {
    const std::string text = std::string(kind_name(static_cast<Kind>(n.first))) + " " + n.second;
    if (bits == 1 && !listed(r.kinds_only_base, n.first)) r.names_only_base.push_back(text);
    if (bits == 2 && !listed(r.kinds_only_test, n.first)) r.names_only_test.push_back(text);
  }
}

// The causes known once every step was read go around the step's: an absence first, a
// one-sided NaN/Inf before them when it is at (or before) the first divergent step, after
// them when it comes later.
void Aligner::order_causes() {
  Result& r = result_;
  if (r.first_divergence)
    if (auto c = absence_cause(r, options_, first_step_one_sided_,
                               seen_[series_index_.at(r.first_divergence->key)] != 3))
      r.causes.insert(r.causes.begin(), *c);
  if (first_nonfinite_) {
    if (r.first_divergence && first_nonfinite_step_ <= r.first_divergence->step)
      r.causes.insert(r.causes.begin(), *first_nonfinite_);
    else r.causes.push_back(*first_nonfinite_);
  }
}

}  // namespace probe::differ
