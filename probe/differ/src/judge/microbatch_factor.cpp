// The per-microbatch factor of a trainer's loss convention (microbatch_factor.h).
#include "differ/detail/judge/microbatch_factor.h"

#include <cmath>
#include <map>

#include "differ/detail/figures.h"
#include "differ/detail/judge/constant_factor.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace lf = probe::log_format;

namespace {

bool backward_record(const Pair& p) {
  if (!p.mb) return false;
  return p.kind == Kind::output_grad || p.kind == Kind::mb_grad ||
         (p.kind == Kind::op && phase_of(p) == Phase::backward);
}

bool tensors(const Pair& p) {
  return p.base.present && p.test.present && p.base.merged.record.state == Record::State::tensor &&
         p.test.merged.record.state == Record::State::tensor &&
         !p.base.merged.record.stats.unsupported && !p.test.merged.record.stats.unsupported;
}

// The pair's ratio, test over base, where it is one: 1 for an equal pair, the value's ratio for a
// one-element tensor (a loss's gradient: the factor itself), the constant factor of a tensor in
// one ratio by every figure; nullopt for zero tensors (any factor) and any other difference.
std::optional<double> ratio_of(const Pair& p) {
  const TensorStats &b = p.base.merged.record.stats, &t = p.test.merged.record.stats;
  if (p.pair_class == PairClass::equal) return 1.0;
  if (!(b.norm > 0) || !std::isfinite(b.norm) || b.nan > 0 || b.inf > 0) return std::nullopt;
  if (p.pair_class != PairClass::different || b.shape != t.shape || b.dtype != t.dtype)
    return std::nullopt;
  if (b.numel() == 1) {
    if (b.mean == 0 || !std::isfinite(t.mean) || t.mean == 0) return std::nullopt;
    return t.mean / b.mean;
  }
  return constant_factor(p);
}

bool same_factor(double a, double b, double tol) {
  return std::fabs(a - b) <= tol * std::max(std::fabs(a), std::fabs(b));
}

}  // namespace

void MicrobatchFactor::start_step(const std::vector<Pair>& pairs) {
  factor_.reset();
  differing_.clear();
  dtype_.clear();
  // Per microbatch: its output gradients' ratio where one has one, else its first mb_grad's.
  struct Evidence {
    std::optional<double> from_outputs, from_grads;
    bool backward = false;
  };
  std::map<std::int64_t, Evidence> by_mb;
  for (const auto& p : pairs) {
    if (!backward_record(p) || p.set_aside || !tensors(p)) continue;
    Evidence& e = by_mb[*p.mb];
    e.backward = true;
    if (dtype_.empty() || p.kind == Kind::output_grad) dtype_ = p.base.merged.record.stats.dtype;
    if (p.kind == Kind::output_grad && !e.from_outputs) e.from_outputs = ratio_of(p);
    if (p.kind == Kind::mb_grad && !e.from_grads) e.from_grads = ratio_of(p);
  }
  if (by_mb.empty()) return;
  const double tol = constant_factor_tolerance(dtype_);
  std::optional<double> common;
  bool alike = true;
  std::string factors;
  for (const auto& [mb, e] : by_mb) {
    const std::optional<double> f = e.from_outputs ? e.from_outputs : e.from_grads;
    if (!f) return;  // a microbatch differs otherwise: no convention to read
    factors +=
        (factors.empty() ? "mb " : ", mb ") + std::to_string(mb) + " x" + factor_text(*f, tol);
    if (!common) common = f;
    else alike = alike && same_factor(*common, *f, tol);
  }
  if (!alike) {
    differing_ = std::move(factors);
    return;
  }
  if (std::fabs(std::fabs(*common) - 1) <= kConstantFactorNotOne) return;
  factor_ = common;
}

bool MicrobatchFactor::scales(const Pair& p) const {
  return factor_ && tensors(p) && !p.set_aside && (backward_record(p) || loss_scaled(p));
}

bool MicrobatchFactor::loss_scaled(const Pair& p) const {
  if (!factor_ || p.kind != Kind::output || !p.mb || !tensors(p) || p.set_aside) return false;
  if (p.base.merged.record.stats.numel() != 1) return false;
  const auto f = ratio_of(p);
  return f && same_factor(*f, *factor_, constant_factor_tolerance(dtype_));
}

bool MicrobatchFactor::in_differing_step(const Pair& p) const {
  if (differing_.empty() || !backward_record(p) || !tensors(p) || p.set_aside) return false;
  const auto f = ratio_of(p);
  return f && std::fabs(*f - 1) > kConstantFactorNotOne;
}

std::string MicrobatchFactor::differing_words(std::int64_t step) const {
  return "the backward records of step " + std::to_string(step) +
         "'s microbatches are the base run's times factors that differ between microbatches (" +
         differing_ +
         "): no reduction undoes them alike; each microbatch's loss normalized by its own count "
         "(its tokens' mean divided by the accumulation steps instead of the window's tokens), or "
         "a rank's loss not scaled as the others'";
}

Pair MicrobatchFactor::divided(const Pair& p) const {
  Pair q = p;
  const double f = *factor_;
  TensorStats& t = q.test.merged.record.stats;
  const double lo = t.min / f, hi = t.max / f;
  t.min = std::min(lo, hi);
  t.max = std::max(lo, hi);
  t.norm /= std::fabs(f);
  t.mean /= f;
  if (t.l1) *t.l1 /= std::fabs(f);
  q.rel_diff = rel_diff(p.base.merged.record.stats.norm, t.norm);
  return q;
}

std::string MicrobatchFactor::words(std::int64_t step) const {
  const std::string f = factor_text(*factor_, constant_factor_tolerance(dtype_));
  return "every backward record of every microbatch of step " + std::to_string(step) +
         " (and its loss, where the loss is computed scaled) is the base run's times " + f +
         " (test = " + f +
         " x base, read from each microbatch's output gradient): a loss scaled per microbatch by "
         "a factor the step's reduction undoes (multiplied by the number of data-parallel ranks "
         "before DDP averages, divided by another accumulation count), a convention of the "
         "trainer; judged divided by " +
         f + ", the step's gradients compared as they are";
}

}  // namespace probe::differ
