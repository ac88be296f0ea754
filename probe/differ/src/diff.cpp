// Aligning two runs step by step, classifying pairs, paired statistics and likely causes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "differ/diff.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace lf = probe::log_format;

bool Comparator::agree(double base, double test) const { return agree(base, test, 0.0); }

bool Comparator::agree(double base, double test, double scale) const {
  if (std::isnan(base) || std::isnan(test)) return std::isnan(base) && std::isnan(test);
  if (exact()) return std::memcmp(&base, &test, sizeof(double)) == 0;
  if (base == test) return true;
  if (!std::isfinite(base) || !std::isfinite(test)) return false;
  const double magnitude = std::isfinite(scale) ? std::max(std::fabs(base), scale) : std::fabs(base);
  return std::fabs(test - base) <= atol + rtol * magnitude;
}

std::string_view class_name(Class c) {
  static constexpr std::array<std::string_view, kClassCount> kNames = {
      "equal", "within_tol", "different", "only_base", "only_test", "none_one_side",
      "unsupported"};
  return kNames[static_cast<std::size_t>(c)];
}

bool is_divergence(Class c) {
  return c == Class::different || c == Class::only_base || c == Class::only_test ||
         c == Class::none_one_side;
}

void SeriesStats::add_pair(std::int64_t step, double base, double test, bool agree) {
  ++paired;
  if (agree)
    ++exact;
  else if (!first_divergent_step)
    first_divergent_step = step;
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

bool Result::any_divergence() const {
  for (const auto& per_kind : counts)
    for (int c = 0; c < kClassCount; ++c)
      if (per_kind[static_cast<std::size_t>(c)] > 0 && is_divergence(static_cast<Class>(c)))
        return true;
  return false;
}

std::int64_t Result::count(Class c) const {
  std::int64_t n = 0;
  for (const auto& per_kind : counts) n += per_kind[static_cast<std::size_t>(c)];
  return n;
}

Result::Verdict Result::verdict() const {
  if (any_divergence()) return Verdict::different;
  if (base_issues.errors > 0 || test_issues.errors > 0) return Verdict::run_errors;
  if (truncated_at) return Verdict::incomplete;
  if (records_compared == count(Class::unsupported)) return Verdict::nothing_compared;
  if (count(Class::within_tol) > 0) return Verdict::within_tolerance;
  return Verdict::equal;
}

std::string_view Result::verdict_name() const {
  switch (verdict()) {
    case Verdict::different: return "different";
    case Verdict::run_errors: return "run_errors";
    case Verdict::incomplete: return "incomplete";
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
    default: return 1;
  }
}

std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>> parse_step_range(
    const std::string& text) {
  auto num = [&](const std::string& s) -> std::optional<std::int64_t> {
    if (s.empty()) return std::nullopt;
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used != s.size() || v < 0) throw InputError("--steps '" + text + "': bad step number");
    return v;
  };
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    auto v = num(text);
    if (!v) throw InputError("--steps is empty");
    return {v, v};
  }
  auto lo = num(text.substr(0, colon)), hi = num(text.substr(colon + 1));
  if (lo && hi && *lo > *hi) throw InputError("--steps '" + text + "': empty range");
  return {lo, hi};
}

std::uint32_t parse_kinds(const std::string& text) {
  try {
    return parse_kind_mask(text);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--kinds '") + text + "': " + e.what());
  }
}

namespace {

bool low_precision(const std::string& dtype) {
  return dtype == "bfloat16" || dtype == "float16" || dtype == "half" ||
         dtype.rfind("float8", 0) == 0;
}

double rel_diff(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (a == b) return 0;
  if (!std::isfinite(a) || !std::isfinite(b)) return std::numeric_limits<double>::infinity();
  double scale = std::max(std::fabs(a), std::fabs(b));
  return scale == 0 ? 0 : std::fabs(a - b) / scale;
}

// The number the paired statistics follow: a scalar's value, a tensor's norm.
std::optional<double> series_value(const Record& r) {
  if (r.state == Record::State::scalar) return r.value;
  if (r.state == Record::State::tensor && !r.stats.unsupported) return r.stats.norm;
  return std::nullopt;
}

// The RMS of a tensor's elements (its norm / sqrt(numel)): the scale of its mean's tolerance.
double element_rms(const TensorStats& s) {
  const auto n = s.numel();
  return n > 0 && std::isfinite(s.norm) ? s.norm / std::sqrt(static_cast<double>(n)) : 0.0;
}

// The figures of a tensor pair the comparator says disagree ("norm, mean"), of those both
// sides carry (a NumericsLogger record has its norm only); empty when all agree.
std::string disagreeing_figures(const TensorStats& s, const TensorStats& t, bool norm_only,
                                const Comparator& cmp) {
  std::string names;
  auto add = [&](std::string_view name) {
    if (!names.empty()) names += ", ";
    names += name;
  };
  if (!cmp.agree(s.norm, t.norm)) add("norm");
  if (norm_only) return names;
  if (!cmp.agree(s.min, t.min)) add("min");
  if (!cmp.agree(s.max, t.max)) add("max");
  if (!cmp.agree(s.mean, t.mean, element_rms(s))) add("mean");
  if (s.nan != t.nan) add("nan count");
  if (s.inf != t.inf) add("inf count");
  return names;
}

void classify(Pair& p, const Comparator& cmp) {
  const Merged& a = p.base.m;
  const Merged& b = p.test.m;
  const Record &x = a.rec, &y = b.rec;
  using S = Record::State;
  if (x.state == S::none || y.state == S::none) {
    p.cls = x.state == y.state ? Class::equal : Class::none_one_side;
    return;
  }
  if (x.state != y.state) {
    p.cls = Class::different;
    p.note = "a scalar in one run, a tensor in the other";
    return;
  }
  if (x.state == S::scalar) {
    p.rel_diff = rel_diff(x.value, y.value);
    const bool bitwise =
        std::memcmp(&x.value, &y.value, sizeof(double)) == 0 || (std::isnan(x.value) && std::isnan(y.value));
    p.cls = bitwise ? Class::equal : cmp.agree(x.value, y.value) ? Class::within_tol : Class::different;
    return;
  }
  const TensorStats &s = x.stats, &t = y.stats;
  if (s.unsupported || t.unsupported) {
    p.cls = Class::unsupported;
    p.note = s.unsupported ? *s.unsupported : *t.unsupported;
    return;
  }
  p.rel_diff = rel_diff(s.norm, t.norm);
  const bool python = a.hash_source == HashSource::torch_only || b.hash_source == HashSource::torch_only;
  if (s.shape != t.shape && !python) {
    p.cls = Class::different;
    p.note = "shapes differ";
    return;
  }
  if (!s.dtype.empty() && !t.dtype.empty() && s.dtype != t.dtype) {
    p.cls = Class::different;
    p.note = "dtypes differ (" + s.dtype + " vs " + t.dtype + ")";
    return;
  }
  std::optional<bool> hashes_equal;
  if (!python)
    hashes_equal = s.hash == t.hash;
  else if (s.torch_hash && t.torch_hash)
    hashes_equal = *s.torch_hash == *t.torch_hash;
  if (hashes_equal == true) {
    p.cls = Class::equal;
    return;
  }
  const std::string disagree = disagreeing_figures(s, t, python, cmp);
  if (!hashes_equal) {
    // No common hash (a Python log against a probe log without torch_hash): the figures can
    // still show a difference, never bitwise equality.
    if (!disagree.empty()) {
      p.cls = Class::different;
      p.note = std::string("no common hash; ") + (cmp.exact() ? "differs in: " : "beyond tolerance: ") + disagree;
    } else if (!cmp.exact()) {
      p.cls = Class::within_tol;
      p.note = "no common hash; the figures are within tolerance";
    } else {
      p.cls = Class::unsupported;
      p.note = "no common hash: the figures agree, bitwise equality cannot be checked (switch on "
               "the probe's torch-compatible hash to compare with Python logs)";
    }
    return;
  }
  if (cmp.exact()) {
    p.cls = Class::different;
    if (p.kind == Kind::rng) return;  // the figures of RNG state bytes add nothing to its hash
    if (!disagree.empty()) p.note = "differs in: hash, " + disagree;
    else p.note = python ? "differs in the hash alone; the norms are equal"
                         : "differs in the hash alone; norm, min, max and mean are bitwise equal";
    return;
  }
  p.cls = disagree.empty() ? Class::within_tol : Class::different;
  if (!disagree.empty()) p.note = "beyond tolerance: " + disagree;
}

std::int64_t nonfinite(const Merged& m) {
  return m.rec.state == Record::State::tensor ? m.rec.stats.nan + m.rec.stats.inf : 0;
}

struct Differ {
  const DiffOptions& o;
  Result& r;
  std::unordered_map<std::string, std::size_t> series_index;
  // Top-N by relative difference: a min-heap on rel_diff.
  std::vector<Pair> heap;
  static bool heap_less(const Pair& a, const Pair& b) { return a.rel_diff > b.rel_diff; }

  std::vector<std::uint8_t> seen;  // per series: bit 0 seen in base, bit 1 in test
  std::array<std::uint8_t, kKindCount> kind_seen{};  // the same per kind, on steps both runs hold
  bool first_step_one_sided = false;  // the first divergent step is in one run only
  std::unordered_map<std::string, bool> name_passes;  // --name verdicts (names repeat)

  bool passes(Kind kind, const std::string& name) {
    if (o.kinds_mask && !(*o.kinds_mask & (1u << static_cast<unsigned>(kind)))) return false;
    if (!o.name_filter) return true;
    auto it = name_passes.find(name);
    if (it == name_passes.end())
      it = name_passes.emplace(name, std::regex_search(name, *o.name_filter)).first;
    return it->second;
  }

  std::size_t series(const std::string& key, Kind kind, const std::string& name,
                     std::optional<std::int64_t> mb) {
    auto [it, inserted] = series_index.try_emplace(key, r.series.size());
    if (inserted) {
      r.series.push_back({SeriesKey{kind, name, mb}, SeriesStats{}});
      seen.push_back(0);
    }
    return it->second;
  }

  void offer_top(const Pair& p) {
    if (o.top == 0 || p.rel_diff <= 0) return;
    if (heap.size() < o.top) {
      heap.push_back(p);
      std::push_heap(heap.begin(), heap.end(), heap_less);
    } else if (p.rel_diff > heap.front().rel_diff) {
      std::pop_heap(heap.begin(), heap.end(), heap_less);
      heap.back() = p;
      std::push_heap(heap.begin(), heap.end(), heap_less);
    }
  }

  // NaN/Inf on one side only, first in execution order over the whole comparison: it is
  // often not the first divergence (a reduction order differs at step 0, a NaN comes later).
  std::optional<Cause> first_nonfinite;
  std::int64_t first_nonfinite_step = 0;

  void find_nonfinite(std::int64_t step, const std::vector<Pair>& pairs) {
    if (first_nonfinite) return;
    for (const auto& p : pairs) {
      const std::int64_t nb = p.base.present ? nonfinite(p.base.m) : 0;
      const std::int64_t nt = p.test.present ? nonfinite(p.test.m) : 0;
      if (!p.base.present || !p.test.present || (nb == 0) == (nt == 0)) continue;
      const bool in_test = nt > 0;
      const Record& rec = in_test ? p.test.m.rec : p.base.m.rec;
      first_nonfinite = Cause{
          "nonfinite", "NaN/Inf appears first at " + std::string(kind_name(p.kind)) + " " + p.name +
                           (p.mb ? " mb=" + std::to_string(*p.mb) : "") + " (step " +
                           std::to_string(step) + ", " + (in_test ? "test" : "base") +
                           " run: nan=" + std::to_string(rec.stats.nan) +
                           " inf=" + std::to_string(rec.stats.inf) + ")"};
      first_nonfinite_step = step;
      return;
    }
  }

  void likely_causes(std::int64_t step, const std::vector<Pair>& pairs, const Pair& first) {
    // Gradients `none` on one side.
    if (first.cls == Class::none_one_side) {
      std::int64_t none_base = 0, none_test = 0, grads = 0;
      for (const auto& p : pairs) {
        if (p.kind != Kind::grad) continue;
        ++grads;
        if (p.cls == Class::none_one_side) (p.base.m.rec.state == Record::State::none ? none_base : none_test)++;
      }
      const bool in_base = first.base.m.rec.state == Record::State::none;
      std::string msg = std::string(kind_name(first.kind)) + " " + first.name + " is none in the " +
                        (in_base ? "base" : "test") +
                        " run: the gradient was never computed, or was read before backward";
      const std::int64_t n = in_base ? none_base : none_test;
      if (grads > 0 && n == grads)
        msg += "; all " + std::to_string(grads) + " grads of step " + std::to_string(step) +
               " are none there";
      else if (n > 1)
        msg += "; " + std::to_string(n) + " of " + std::to_string(grads) + " grads of step " +
               std::to_string(step) + " are none there";
      r.causes.push_back({"none_gradient", msg});
    }
    // Inputs equal but RNG fingerprints differ.
    bool rng_differs = false, inputs_differ = false;
    std::int64_t inputs_compared = 0;
    const Pair* first_rng = nullptr;
    const Pair* first_input = nullptr;  // the first input both runs hold that differs
    for (const auto& p : pairs) {
      // A fingerprint absent from one run says nothing about the RNG state (names differ).
      if (p.kind == Kind::rng && p.cls == Class::different) {
        rng_differs = true;
        if (!first_rng) first_rng = &p;
      }
      if (p.kind == Kind::input) {
        inputs_compared += p.base.present && p.test.present;
        if (is_divergence(p.cls)) inputs_differ = true;
        if (p.cls == Class::different && !first_input) first_input = &p;
      }
    }
    // The run diverges where data enters it: other data (and, with it, usually another seed).
    if (first_input && (first.kind == Kind::rng || first.kind == Kind::input))
      r.causes.push_back(
          {"data", "input " + first_input->name +
                       (first_input->mb ? " mb=" + std::to_string(*first_input->mb) : "") +
                       " differs at step " + std::to_string(step) +
                       ": the runs were fed different data (data seed, sampler or shuffling, or "
                       "how the dataset is split over data-parallel ranks)" +
                       (rng_differs ? "; the RNG fingerprints differ too: a different seed "
                                      "would explain both"
                                    : "")});
    if (rng_differs && !inputs_differ)
      r.causes.push_back(
          {"rng", std::string(inputs_compared > 0 ? "inputs are equal but the" : "the") +
                      " RNG fingerprint " + first_rng->name +
                      (first_rng->mb ? " mb=" + std::to_string(*first_rng->mb) : "") +
                      " differs at step " + std::to_string(step) +
                      (inputs_compared > 0 ? "" : " (no input was compared: different inputs are not ruled out)") +
                      ": dropout/RNG state (seed, generator offset, or RNG consumed in a "
                      "different order)"});
    // A gradient whose replicas disagree while every microbatch contribution is equal: it was
    // not reduced across the replicas.
    bool unreduced = false;
    if (first.kind == Kind::grad && is_divergence(first.cls) &&
        ((first.base.present && first.base.m.replicas_disagree) ||
         (first.test.present && first.test.m.replicas_disagree)) &&
        mb_grads_equal(first.name, pairs)) {
      unreduced = true;
      const bool in_test = first.test.present && first.test.m.replicas_disagree;
      r.causes.push_back(
          {"unreduced_gradient",
           "grad " + first.name + " differs between data-parallel replicas of the " +
               (in_test ? "test" : "base") + " run (ranks " +
               format_ranks(in_test ? first.test.m.ranks : first.base.m.ranks) +
               ") while every mb_grad is bitwise equal: the gradient was not reduced across "
               "data-parallel ranks (a skipped all-reduce, or one over the wrong group)"});
    }
    if (!unreduced && both_tensors(first) && first.kind == Kind::grad &&
        first.cls == Class::different)
      grad_cause(first, pairs);
  }

  double sum_order_bound(const Pair& g) const {
    return low_precision(g.base.m.rec.stats.dtype) ? o.sum_order_rtol_lowp : o.sum_order_rtol;
  }

  static bool both_tensors(const Pair& p) {
    return p.base.present && p.test.present && p.base.m.rec.state == Record::State::tensor &&
           p.test.m.rec.state == Record::State::tensor;
  }

  // The first divergence is a grad that differs (and no unreduced_gradient). Its mb_grads
  // tell a reduction that only summed in another order from one that got the sum wrong.
  void grad_cause(const Pair& g, const std::vector<Pair>& pairs) {
    // A NaN/Inf makes any norm difference meaningless: the nonfinite rule names it.
    if (!std::isfinite(g.base.m.rec.stats.norm) || !std::isfinite(g.test.m.rec.stats.norm)) return;
    const double bound = sum_order_bound(g);
    const std::string rel = lf::format_double(g.rel_diff);
    if (mb_grads_equal(g.name, pairs)) {
      if (g.rel_diff <= bound)
        r.causes.push_back(
            {"summation_order",
             "every mb_grad of " + g.name + " is bitwise equal but its grad differs by "
             "relative norm " + rel +
             ": summation order (the reduction order of a collective: all-reduce vs "
             "reduce-scatter, bucket layout)"});
      else
        r.causes.push_back(
            {"wrong_reduction",
             "every mb_grad of " + g.name + " is bitwise equal but its grad differs by "
             "relative norm " + rel + ", far beyond summation-order size (at most " +
             lf::format_double(bound) +
             "): the reduction or accumulation of this gradient is wrong (skipped, partial, "
             "over the wrong group, or wrongly scaled)"});
      return;
    }
    if (g.rel_diff > bound || has_mb_grad(g.name, pairs)) return;  // contributions differ
    // No mb_grad to rule a different contribution out: say what is likely, and why only that.
    const bool filtered =
        o.kinds_mask && !(*o.kinds_mask & (1u << static_cast<unsigned>(Kind::mb_grad)));
    r.causes.push_back(
        {"summation_order",
         "grad " + g.name + " differs by relative norm " + rel +
             ", summation-order size: summation order likely, but mb_grad not compared (" +
             (filtered ? "--kinds leaves it out" : "none recorded") +
             "), so a different gradient contribution is not ruled out"});
  }

  static bool has_mb_grad(const std::string& name, const std::vector<Pair>& pairs) {
    return std::any_of(pairs.begin(), pairs.end(),
                       [&](const Pair& p) { return p.kind == Kind::mb_grad && p.name == name; });
  }

  static bool mb_grads_equal(const std::string& name, const std::vector<Pair>& pairs) {
    std::int64_t mbs = 0;
    for (const auto& p : pairs) {
      if (p.kind != Kind::mb_grad || p.name != name) continue;
      if (p.cls != Class::equal) return false;
      ++mbs;
    }
    return mbs > 0;
  }

  bool sum_order_like(const Pair& g, const std::vector<Pair>& pairs) const {
    return g.kind == Kind::grad && g.cls == Class::different && both_tensors(g) &&
           mb_grads_equal(g.name, pairs) && g.rel_diff <= sum_order_bound(g);
  }

  void compare_step(std::int64_t step, std::vector<Merged>* base, std::vector<Merged>* test) {
    std::vector<Pair> pairs;
    pairs.reserve((base ? base->size() : 0) + (test ? test->size() : 0));
    // Index the test step by key, find each base record's partner, and only then move the
    // records into pairs (the index points into the test records' keys).
    std::vector<std::ptrdiff_t> partner(base ? base->size() : 0, -1);
    std::vector<bool> test_used(test ? test->size() : 0, false);
    if (test && base) {
      std::unordered_map<std::string_view, std::size_t> test_index;
      test_index.reserve(test->size() * 2);
      for (std::size_t i = 0; i < test->size(); ++i) test_index.emplace((*test)[i].key, i);
      for (std::size_t i = 0; i < base->size(); ++i) {
        auto it = test_index.find((*base)[i].key);
        if (it != test_index.end()) {
          partner[i] = static_cast<std::ptrdiff_t>(it->second);
          test_used[it->second] = true;
        }
      }
    }
    auto make_side = [](Merged& m) {
      Side s;
      s.present = true;
      s.m = std::move(m);
      return s;
    };
    auto start_pair = [&](Merged& m) {
      Pair p;
      p.step = step;
      p.kind = m.rec.kind;
      p.name = std::move(m.rec.name);  // the pair's copy is the one reports use
      p.mb = m.rec.microbatch;
      p.key = std::move(m.key);
      return p;
    };
    if (base) {
      for (std::size_t i = 0; i < base->size(); ++i) {
        Merged& m = (*base)[i];
        if (!passes(m.rec.kind, m.rec.name)) continue;
        Pair p = start_pair(m);
        p.base = make_side(m);
        if (partner[i] >= 0) p.test = make_side((*test)[static_cast<std::size_t>(partner[i])]);
        pairs.push_back(std::move(p));
      }
    }
    if (test) {  // test-only records
      for (std::size_t i = 0; i < test->size(); ++i) {
        if (test_used[i]) continue;
        Merged& m = (*test)[i];
        if (!passes(m.rec.kind, m.rec.name)) continue;
        Pair p = start_pair(m);
        p.test = make_side(m);
        pairs.push_back(std::move(p));
      }
      // Keep execution order: a stable sort on phase then microbatch puts test-only records
      // among the base ones.
      std::stable_sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) {
        return std::make_pair(phase_of(a.kind), a.mb.value_or(-1)) <
               std::make_pair(phase_of(b.kind), b.mb.value_or(-1));
      });
    }

    const Pair* first = nullptr;
    for (auto& p : pairs) {
      if (!p.base.present)
        p.cls = Class::only_test;
      else if (!p.test.present)
        p.cls = Class::only_base;
      else
        classify(p, o.cmp);
      ++r.counts[static_cast<std::size_t>(p.kind)][static_cast<std::size_t>(p.cls)];
      ++r.records_compared;
      // Paired statistics: one path, the comparator's verdict (a bitwise-equal hash counts
      // as agreement even where composed norms differ in the last bit).
      const std::size_t si = series(p.key, p.kind, p.name, p.mb);
      SeriesStats& st = r.series[si].second;
      seen[si] |= (p.base.present ? 1 : 0) | (p.test.present ? 2 : 0);
      if (base && test)
        kind_seen[static_cast<std::size_t>(p.kind)] |= (p.base.present ? 1 : 0) | (p.test.present ? 2 : 0);
      std::optional<double> vb, vt;
      if (p.base.present) vb = series_value(p.base.m.rec);
      if (p.test.present) vt = series_value(p.test.m.rec);
      if (vb) ++st.base_steps;
      if (vt) ++st.test_steps;
      if (vb && vt) {
        const bool agree = p.cls == Class::equal ? true : o.cmp.agree(*vb, *vt) && p.cls != Class::different;
        st.add_pair(step, *vb, p.cls == Class::equal ? *vb : *vt, agree);
      } else if (is_divergence(p.cls) && !st.first_divergent_step) {
        st.first_divergent_step = step;  // a value on one side only (absent, or `none`)
      }
      if (o.on_pair) o.on_pair(p, si);
      if (is_divergence(p.cls) && !first) first = &p;
      // The norm of RNG state bytes is no size of a difference.
      if ((p.cls == Class::different || p.cls == Class::within_tol) && p.kind != Kind::rng) offer_top(p);
    }
    for (const auto& p : pairs)
      if (sum_order_like(p, pairs)) ++r.summation_order_grads;
    find_nonfinite(step, pairs);
    if (first && !r.first_divergence) {
      r.first_divergence = *first;
      first_step_one_sided = !base || !test;
      likely_causes(step, pairs, *first);
    }
  }
};

void note_step(RunInfo& info, std::int64_t step) {
  ++info.steps;
  if (!info.first_step) info.first_step = step;
  info.last_step = step;
}

// "--kinds" text that drops `drop` from the comparison's kinds.
std::string kinds_without(std::uint32_t drop, const DiffOptions& o) {
  std::string text;
  for (int k = 0; k < kKindCount; ++k) {
    const std::uint32_t bit = 1u << k;
    const std::string name(kind_name(static_cast<Kind>(k)));
    if (!o.kinds_mask && (drop & bit)) text += (text.empty() ? "-" : ",-") + name;
    if (o.kinds_mask && (*o.kinds_mask & bit) && !(drop & bit)) text += (text.empty() ? "" : ",") + name;
  }
  return text;
}

// Why the first divergence is a record one run lacks: a step that run does not hold, a kind it
// never recorded, or a name it does not use. Known once every step was read.
std::optional<Cause> absence_cause(const Result& r, const DiffOptions& o, bool step_one_sided,
                                   bool series_one_sided) {
  const Pair& p = *r.first_divergence;
  if (p.cls != Class::only_base && p.cls != Class::only_test) return std::nullopt;
  const bool in_base = p.cls == Class::only_base;
  const std::string has = in_base ? "base" : "test", lacks = in_base ? "test" : "base";
  const RunInfo& lacking = in_base ? r.test : r.base;
  const std::string step = std::to_string(p.step);
  if (step_one_sided) {
    if (!lacking.last_step) return std::nullopt;
    const std::string lo = o.step_min ? std::to_string(*o.step_min) : "";
    const std::string hi = o.step_max ? std::to_string(*o.step_max) : "";
    if (p.step > *lacking.last_step)
      return Cause{"step_range", "the " + has + " run goes on to step " + step + ", the " + lacks +
                                     " run ends at step " + std::to_string(*lacking.last_step) +
                                     ": compare --steps " + lo + ":" +
                                     std::to_string(*lacking.last_step)};
    if (p.step < *lacking.first_step)
      return Cause{"step_range", "the " + has + " run starts at step " + step + ", the " + lacks +
                                     " run at step " + std::to_string(*lacking.first_step) +
                                     ": compare --steps " + std::to_string(*lacking.first_step) +
                                     ":" + hi};
    return Cause{"step_range", "step " + step + " is in the " + has +
                                   " run only: the runs log different steps (PROBE_EVERY?)"};
  }
  if (lacking.ranks_found < lacking.world_size)
    return Cause{"missing_record",
                 "the " + lacks + " run holds the logs of " + std::to_string(lacking.ranks_found) +
                     " of its " + std::to_string(lacking.world_size) +
                     " ranks: the records of the missing ones are absent (missing_rank in RUN "
                     "ISSUES)"};
  const auto& kinds = in_base ? r.kinds_only_base : r.kinds_only_test;
  if (std::find(kinds.begin(), kinds.end(), p.kind) != kinds.end()) {
    std::uint32_t drop = 0;
    std::string names;
    for (Kind k : kinds) {
      drop |= 1u << static_cast<unsigned>(k);
      names += (names.empty() ? "" : ", ") + std::string(kind_name(k));
    }
    return Cause{"kind_not_recorded", "the " + lacks + " run recorded no " + names +
                                          " at all (PROBE_KINDS?); --kinds " +
                                          kinds_without(drop, o) + " compares the rest"};
  }
  const std::string what = std::string(kind_name(p.kind)) + " " + p.name;
  const auto& names = in_base ? r.names_only_base : r.names_only_test;
  if (std::find(names.begin(), names.end(), what) != names.end())
    return Cause{"names_differ",
                 what + " is in the " + has + " run only, at every step: the runs name it "
                 "differently (a pipeline stage numbering its layers from 0?) or the " + lacks +
                 " run does not record it; --map REGEX=REPLACEMENT aligns renamed records (see "
                 "NAMES IN ONE RUN ONLY)"};
  const std::string record = what + (p.mb ? " mb=" + std::to_string(*p.mb) : "");
  if (series_one_sided)
    return Cause{"missing_record", record + " is in the " + has + " run only, at every step"};
  return Cause{"missing_record", record + " is missing from the " + lacks + " run at step " +
                                     step + " (other steps have it)"};
}

RunInfo info_of(const Run& run) {
  RunInfo i;
  i.path = run.path().string();
  i.setup = run.setup();
  i.torch_version = run.torch_version();
  i.world_size = run.world_size();
  i.ranks_found = run.ranks_found();
  i.python = run.python();
  return i;
}

}  // namespace

Result diff_runs(Run& base, Run& test, const DiffOptions& options) {
  if (!base.python() && !test.python()) {
    // Log format versions may differ: every version the reader accepts holds the same records.
    if (base.hash_spec_version() != test.hash_spec_version())
      throw InputError("the runs use different hash spec versions (" +
                       base.header_file().string() + ":1: " +
                       std::to_string(base.hash_spec_version()) + ", " +
                       test.header_file().string() + ":1: " +
                       std::to_string(test.hash_spec_version()) +
                       "): their hashes cannot be compared");
  }
  Result r;
  r.base = info_of(base);
  r.test = info_of(test);
  r.filtered = options.kinds_mask || options.step_min || options.step_max || options.name_filter;
  Differ d{options, r, {}, {}, {}, {}, false, {}, {}, 0};
  std::vector<Merged> a, b;
  std::int64_t sa = 0, sb = 0;
  for (;;) {
    auto pa = base.peek_step(), pb = test.peek_step();
    if (!pa && !pb) break;
    const std::int64_t step = !pa ? *pb : !pb ? *pa : std::min(*pa, *pb);
    const bool has_a = pa && *pa == step, has_b = pb && *pb == step;
    if (has_a) base.next_step(sa, a);
    if (has_b) test.next_step(sb, b);
    // Every step is read (the header counts what each run holds); only those in --steps and
    // before a killed rank's first incomplete step are compared.
    if (has_a) note_step(r.base, step);
    if (has_b) note_step(r.test, step);
    if ((options.step_min && step < *options.step_min) ||
        (options.step_max && step > *options.step_max))
      continue;
    std::optional<std::int64_t> limit;
    for (const Run* run : {&base, &test})
      if (run->incomplete_from() && (!limit || *run->incomplete_from() < *limit))
        limit = run->incomplete_from();
    if (limit && step >= *limit) {
      r.truncated_at = *limit;
      continue;
    }
    if (has_a && has_b) ++r.paired_steps;
    d.compare_step(step, has_a ? &a : nullptr, has_b ? &b : nullptr);
  }
  // Kinds one run never recorded on the steps both hold: not names to align (--map).
  for (int k = 0; k < kKindCount; ++k) {
    const auto bits = d.kind_seen[static_cast<std::size_t>(k)];
    if (bits == 1) r.kinds_only_base.push_back(static_cast<Kind>(k));
    if (bits == 2) r.kinds_only_test.push_back(static_cast<Kind>(k));
  }
  // Names (per kind, any microbatch) seen in one run only.
  std::map<std::pair<int, std::string>, std::uint8_t> names;
  for (std::size_t i = 0; i < r.series.size(); ++i)
    names[{static_cast<int>(r.series[i].first.kind), r.series[i].first.name}] |= d.seen[i];
  auto listed = [](const std::vector<Kind>& kinds, int k) {
    return std::find(kinds.begin(), kinds.end(), static_cast<Kind>(k)) != kinds.end();
  };
  for (const auto& [n, bits] : names) {
    const std::string text = std::string(kind_name(static_cast<Kind>(n.first))) + " " + n.second;
    if (bits == 1 && !listed(r.kinds_only_base, n.first)) r.names_only_base.push_back(text);
    if (bits == 2 && !listed(r.kinds_only_test, n.first)) r.names_only_test.push_back(text);
  }
  if (r.first_divergence)
    if (auto c = absence_cause(r, options, d.first_step_one_sided,
                               d.seen[d.series_index.at(r.first_divergence->key)] != 3))
      r.causes.insert(r.causes.begin(), *c);
  // A one-sided NaN/Inf is a cause wherever it first appears: before the other causes when it
  // is at (or before) the first divergent step, after them when it comes later.
  if (d.first_nonfinite) {
    if (r.first_divergence && d.first_nonfinite_step <= r.first_divergence->step)
      r.causes.insert(r.causes.begin(), *d.first_nonfinite);
    else
      r.causes.push_back(*d.first_nonfinite);
  }
  r.base.records = base.records_read();
  r.test.records = test.records_read();
  r.base_issues = base.issues();
  r.test_issues = test.issues();
  std::sort(d.heap.begin(), d.heap.end(), Differ::heap_less);
  r.top = std::move(d.heap);
  return r;
}

}  // namespace probe::differ
