// The constant_factor rule: two tensors whose every figure is in one ratio (constant_factor.h).
#include "differ/detail/judge/constant_factor.h"

#include <cmath>
#include <cstdio>

#include "differ/detail/pair/classify.h"
#include "differ/detail/figures.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace lf = probe::log_format;

namespace {

bool real_floating(const std::string& dtype) {
  return dtype.rfind("float", 0) == 0 || dtype == "bfloat16" || dtype == "half" ||
         dtype == "double";
}

// Kinds a computation produces, where a wrong scale shows; the others have rules of their own.
bool scalable_kind(Kind kind) {
  return kind == Kind::output || kind == Kind::tap || kind == Kind::output_grad ||
         kind == Kind::mb_grad || kind == Kind::grad || kind == Kind::op;
}

bool gradient_kind(Kind kind) {
  return kind == Kind::grad || kind == Kind::mb_grad || kind == Kind::output_grad;
}

bool finite_figures(const TensorStats& s) {
  return s.nan == 0 && s.inf == 0 && std::isfinite(s.norm) && std::isfinite(s.min) &&
         std::isfinite(s.max) && std::isfinite(s.mean);
}

bool near(double value, double expected, double slack) {
  return std::fabs(value - expected) <= slack;
}

// Whether every figure of `t` is `f` times `b`'s. Each element of f x b rounds by at most
// tol |f x| <= tol |f| (the largest magnitude): min and max are held to that; the mean of those
// roundings is at most tol |f| times the elements' mean magnitude <= their RMS (norm/sqrt(numel)):
// the mean, a cancelling sum, is held to that rather than to its own size.
bool scales(const TensorStats& b, const TensorStats& t, double f, double tol) {
  const double magnitude = std::fabs(f) * std::max(std::fabs(b.min), std::fabs(b.max));
  const double rms = b.norm / std::sqrt(static_cast<double>(b.numel()));
  const double lo = f > 0 ? b.min : b.max, hi = f > 0 ? b.max : b.min;
  return near(t.min, f * lo, tol * magnitude) && near(t.max, f * hi, tol * magnitude) &&
         near(t.mean, f * b.mean, tol * std::fabs(f) * std::max(std::fabs(b.mean), rms));
}

bool is_power_of_two(std::int64_t k) { return k > 0 && (k & (k - 1)) == 0; }

std::string six_digits(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The integer k >= 2 that `v` is within `tol` (relative) of, or 0.
std::int64_t near_integer(double v, double tol) {
  const double k = std::round(v);
  return k >= 2 && k <= 1e6 && std::fabs(v - k) <= tol * k ? static_cast<std::int64_t>(k) : 0;
}

// What most likely scaled it, in words.
std::string likely_scale(Kind kind, double f, double tol) {
  const std::string sign = f < 0 ? " and its sign flipped" : "";
  if (!gradient_kind(kind))
    return "a tensor scaled by a wrong factor (a normalization, a scale or a degree applied twice "
           "or not at all" +
           sign + ")";
  const double a = std::fabs(f);
  if (const std::int64_t k = near_integer(1 / a, tol))
    return "a gradient scaled by the wrong degree (divided by " + std::to_string(k) + " more" +
           sign + ")";
  if (const std::int64_t k = near_integer(a, tol))
    return "a gradient scaled by the wrong degree (divided by " + std::to_string(k) + " less" +
           sign + ")";
  return "a gradient scaled by a wrong factor (a loss scale, a normalization or a degree applied "
         "another way" +
         sign + ")";
}

}  // namespace

double constant_factor_tolerance(const std::string& dtype) {
  if (low_precision(dtype)) return 1e-6;
  return std::max(64 * unit_roundoff(dtype), 1e-9);
}

std::optional<double> constant_factor(const Pair& p) {
  if (p.pair_class != PairClass::different || !scalable_kind(p.kind) || !p.base.present ||
      !p.test.present)
    return std::nullopt;
  const Merged &mb = p.base.merged, &mt = p.test.merged;
  // A NumericsLogger record holds a norm alone: no figures to hold the ratio to.
  if (mb.record.state != Record::State::tensor || mt.record.state != Record::State::tensor ||
      mb.hash_source != HashSource::spec_v1 || mt.hash_source != HashSource::spec_v1)
    return std::nullopt;
  const TensorStats &b = mb.record.stats, &t = mt.record.stats;
  if (b.unsupported || t.unsupported || b.dtype != t.dtype || b.shape != t.shape ||
      !real_floating(b.dtype) || !finite_figures(b) || !finite_figures(t) || !(b.norm > 0) ||
      !(t.norm > 0))
    return std::nullopt;
  // One element, or all alike (a loss, a filled tensor): min, max and mean are that value, so any
  // two such tensors are in one ratio and the figures cannot tell a factor from another value.
  if (b.min == b.max || t.min == t.max) return std::nullopt;
  // The norm does not see a sign: the ratio of norms itself must be away from one (a tensor with
  // symmetric extremes and a mean near zero, a clipped one, looks like its own negation).
  const double ratio = t.norm / b.norm;
  if (std::fabs(ratio - 1) <= kConstantFactorNotOne) return std::nullopt;
  const double tol = constant_factor_tolerance(b.dtype);
  for (double f : {ratio, -ratio})
    if (scales(b, t, f, tol)) return f;
  return std::nullopt;
}

std::string factor_text(double factor, double tolerance) {
  const std::string sign = factor < 0 ? "-" : "";
  const double a = std::fabs(factor);
  if (const std::int64_t k = near_integer(a, tolerance)) return sign + std::to_string(k);
  if (const std::int64_t k = near_integer(1 / a, tolerance))
    return sign + (is_power_of_two(k) && k <= 16 ? lf::format_double(1.0 / static_cast<double>(k))
                                                 : "1/" + std::to_string(k));
  if (std::fabs(a - 1) <= tolerance) return sign + "1";
  return six_digits(factor);
}

std::optional<Cause> constant_factor_cause(std::int64_t step, const Pair& p) {
  const auto f = constant_factor(p);
  if (!f) return std::nullopt;
  const double tol = constant_factor_tolerance(p.base.merged.record.stats.dtype);
  const std::string ratio =
      lf::format_double(p.test.merged.record.stats.norm / p.base.merged.record.stats.norm);
  const std::string factor = factor_text(*f, tol);
  const std::string what =
      std::string(kind_name(p.kind)) + " " + p.name + (p.mb ? " mb " + std::to_string(*p.mb) : "");
  std::vector<Evidence> ev = {
      {"step", step}, {"kind", std::string(kind_name(p.kind))}, {"name", p.name}};
  if (p.mb) ev.push_back({"mb", *p.mb});
  ev.push_back({"factor", factor});
  ev.push_back({"norm_ratio", ratio});
  ev.push_back({"tolerance", lf::format_double(tol)});
  return Cause{Rule::constant_factor,
               what + " at step " + std::to_string(step) + ": the two " +
                   (gradient_kind(p.kind) ? "gradients" : "tensors") +
                   " differ by one constant factor: test = " + factor + " x base (norm ratio " +
                   ratio + ", " + (*f < 0 ? "min and max swapped, mean" : "min/max/mean") +
                   " in the same ratio): " + likely_scale(p.kind, *f, tol),
               std::move(ev)};
}

}  // namespace probe::differ
