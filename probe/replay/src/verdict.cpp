#include "verdict.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "probe/log_format.h"

namespace probe::replay {
namespace {

using differ::ReplayRunFigures;
using differ::ReplayVerdict;

std::string num(double v) { return log_format::format_double(v); }

std::string dtype_text(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    default: return c10::toString(t);
  }
}

// A short figure for the evidence lines: 3 significant digits.
std::string fig(double v) {
  std::ostringstream s;
  s.precision(3);
  s << v;
  return s.str();
}

std::vector<std::int64_t> unravel(std::int64_t flat, at::IntArrayRef sizes) {
  std::vector<std::int64_t> index(sizes.size());
  for (std::size_t d = sizes.size(); d-- > 0;) {
    index[d] = sizes[d] ? flat % sizes[d] : 0;
    flat = sizes[d] ? flat / sizes[d] : 0;
  }
  return index;
}

std::string index_text(const std::vector<std::int64_t>& index) {
  std::string s = "[";
  for (std::size_t i = 0; i < index.size(); ++i) s += (i ? "," : "") + std::to_string(index[i]);
  return s + "]";
}

// |a - b| per element, 0 where both are the same non-finite value, infinite where only one is.
at::Tensor difference(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor same = (a == b) | (at::isnan(a) & at::isnan(b));
  const at::Tensor d = (a - b).abs();
  return at::where(same, at::zeros_like(d), at::where(at::isnan(d), at::full_like(d, INFINITY), d));
}

// |a - b| against what is allowed, per element: 0 where they are equal, infinite where a
// difference meets no finite allowance.
at::Tensor ratio_of(const at::Tensor& d, const at::Tensor& allowed) {
  const at::Tensor r = d / allowed;
  return at::where(d == 0, at::zeros_like(d),
                   at::where(at::isnan(r), at::full_like(d, INFINITY), r));
}

// The element where `ratio` is largest.
std::int64_t worst(const at::Tensor& ratio) {
  return ratio.reshape({-1}).argmax().item<std::int64_t>();
}

// One step of the dtype's subnormals: a correct result that underflows may be off by it.
double subnormal_step(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Double: return std::numeric_limits<double>::denorm_min();
    case c10::ScalarType::Half: return std::ldexp(1.0, -24);
    case c10::ScalarType::BFloat16: return std::ldexp(1.0, -133);
    default: return std::numeric_limits<float>::denorm_min();
  }
}

double at_flat(const at::Tensor& t, std::int64_t i) { return t.reshape({-1})[i].item<double>(); }

std::string families_text(const std::vector<std::string>& names,
                          const std::vector<Family>& families) {
  if (names.empty()) return "no op of its own (it hands on the value it starts from)";
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i)
    s += (i ? ", " : "") + names[i].substr(names[i].find('/') + 1) + " (" +
         family_name(families[i]) + ")";
  return s;
}

// One run's output against its reference: figures at the element farthest beyond its bound.
ReplayRunFigures measure(const RunReplay& r, const std::vector<std::string>& names, bool& beyond) {
  ReplayRunFigures f;
  const c10::ScalarType dtype = r.recorded.scalar_type();
  f.dtype = dtype_text(dtype);
  for (Family fam : r.families) f.families.push_back(family_name(fam));
  (void)names;
  const double u = unit_roundoff(dtype);
  if (r.reference.numel() == 0) {  // nothing to be off
    beyond = false;
    return f;
  }
  const at::Tensor y = r.recorded.to(at::kDouble);
  const at::Tensor d = difference(y, r.reference);
  const at::Tensor allowed = r.bound * (u > 0 ? u : 0) + (u > 0 ? subnormal_step(dtype) : 0);
  const at::Tensor ratio = ratio_of(d, allowed);
  const std::int64_t i = worst(ratio);
  beyond = at_flat(ratio, i) > 1;
  const double ref = at_flat(r.reference, i);
  const double scale =
      std::max(std::abs(ref), std::numeric_limits<double>::min()) * (u > 0 ? u : 1);
  f.units = at_flat(d, i) / scale;
  f.tolerance = at_flat(allowed, i) / scale;
  f.element = unravel(i, r.reference.sizes());
  f.recorded = at_flat(y, i);
  f.reference = ref;
  f.replays_bitwise = r.replays_bitwise;
  if (r.replays_bitwise && !*r.replays_bitwise)
    f.replay_note = "its replay in the recorded dtypes differs by up to " + fig(r.replay_units) +
                    " rounding units: the op's result depends on more than its inputs (threads, a "
                    "kernel's order)";
  return f;
}

std::string run_line(const char* run, const ReplayRunFigures& f, bool beyond) {
  std::string s =
      std::string(run) + ": " + (beyond ? "off its float64 reference by " : "within tolerance: ") +
      fig(f.units) + " rounding units of " + f.dtype + " (tolerance " + fig(f.tolerance) + ") at " +
      index_text(f.element) + ": recorded " + num(f.recorded) + ", reference " + num(f.reference);
  if (f.replays_bitwise)
    s += *f.replays_bitwise ? "; replays bitwise in its recorded dtypes" : "; " + f.replay_note;
  return s;
}

}  // namespace

void judge(const RunRegion& base, const RunRegion& test, ReplayVerdict& v) {
  try {
    judge_replays(replay_run(base), replay_run(test), v);
  } catch (const std::exception& e) {  // NotReplayable, or an op the measure cannot take
    v.verdict = "not replayable";
    v.reason = e.what();
    v.evidence.clear();
    v.base.reset();
    v.test.reset();
    v.references_rel_diff.reset();
    v.references_bound.reset();
  }
}

void judge_replays(const RunReplay& b, const RunReplay& t, ReplayVerdict& v) {
  v.evidence.push_back("base ops: " + families_text(v.base_ops, b.families));
  v.evidence.push_back("test ops: " + families_text(v.test_ops, t.families));
  if (!b.reference.sizes().equals(t.reference.sizes())) {
    v.verdict = "different math";
    v.reason = "the runs hand on tensors of other shapes (" +
               index_text(b.reference.sizes().vec()) + " and " +
               index_text(t.reference.sizes().vec()) + ") from the same inputs";
    return;
  }
  if (b.reference.numel() == 0) {
    v.verdict = "noise";
    v.evidence.push_back("the region hands on an empty tensor: nothing to differ");
    return;
  }
  // The references: one function or two.
  const double u64 = unit_roundoff(at::kDouble);
  const at::Tensor d = difference(b.reference, t.reference);
  const at::Tensor allowed =
      kReferenceMargin * u64 * (b.bound + t.bound) + std::numeric_limits<double>::denorm_min();
  const at::Tensor scale = at::maximum(b.reference.abs(), t.reference.abs())
                               .clamp_min(std::numeric_limits<double>::min());
  const at::Tensor ratio = ratio_of(d, allowed);
  const std::int64_t i = worst(ratio);
  v.references_rel_diff = at_flat(d, i) / at_flat(scale, i);
  v.references_bound = at_flat(allowed, i) / at_flat(scale, i);
  const bool same_function = at_flat(ratio, i) <= 1;
  bool base_beyond = false, test_beyond = false;
  v.base = measure(b, v.base_ops, base_beyond);
  v.test = measure(t, v.test_ops, test_beyond);
  if (!same_function) {
    v.verdict = "different math";
    v.evidence.insert(
        v.evidence.begin(),
        "the float64 references differ by " + fig(*v.references_rel_diff) + " relative at " +
            index_text(unravel(i, d.sizes())) + " (base " + num(at_flat(b.reference, i)) +
            ", test " + num(at_flat(t.reference, i)) + "), beyond the " + fig(*v.references_bound) +
            " float64 rounding allows: the runs compute different functions of the same inputs");
  } else {
    v.verdict = base_beyond && test_beyond ? "precision: both"
                : base_beyond              ? "precision: base"
                : test_beyond              ? "precision: test"
                                           : "noise";
    v.evidence.insert(v.evidence.begin(),
                      "the float64 references agree (largest difference " +
                          fig(*v.references_rel_diff) + " relative, float64 rounding allows " +
                          fig(*v.references_bound) + "): the runs compute the same function");
  }
  v.evidence.push_back(run_line("base", *v.base, base_beyond));
  v.evidence.push_back(run_line("test", *v.test, test_beyond));
}

}  // namespace probe::replay
