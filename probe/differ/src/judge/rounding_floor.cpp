// Gradients at the rounding floor of their backward (rounding_floor.h).
#include "differ/detail/judge/rounding_floor.h"

#include <algorithm>
#include <cmath>

#include "differ/detail/figures.h"

namespace probe::differ {

namespace {

const TensorStats* tensor_of(const Side& s) {
  return s.present && s.merged.record.state == Record::State::tensor &&
                 !s.merged.record.stats.unsupported
             ? &s.merged.record.stats
             : nullptr;
}

double finite_norm(const Side& s) {
  const TensorStats* t = tensor_of(s);
  return t && std::isfinite(t->norm) ? t->norm : 0;
}

}  // namespace

void GradientScales::Largest::add(const Pair& p) {
  const double n = std::max(finite_norm(p.base), finite_norm(p.test));
  if (n > norm) {
    norm = n;
    name = &p.name;
  }
}

void GradientScales::start_step(const std::vector<Pair>& pairs) {
  by_mb_.clear();
  step_grads_ = {};
  for (const auto& p : pairs) {
    if (p.kind == Kind::mb_grad && p.mb) by_mb_[*p.mb].add(p);
    if (p.kind == Kind::grad) step_grads_.add(p);
  }
}

std::optional<RoundingFloor> GradientScales::at_floor(const Pair& p) const {
  const Largest* largest = nullptr;
  if (p.kind == Kind::grad) largest = &step_grads_;
  if (p.kind == Kind::mb_grad && p.mb)
    if (auto it = by_mb_.find(*p.mb); it != by_mb_.end()) largest = &it->second;
  const TensorStats *a = tensor_of(p.base), *b = tensor_of(p.test);
  if (!largest || !largest->name || !a || !b) return std::nullopt;
  if (a->nan + a->inf + b->nan + b->inf > 0) return std::nullopt;
  const double u = std::max(unit_roundoff(a->dtype), unit_roundoff(b->dtype));
  const double floor = u * largest->norm;
  if (!(u > 0) || std::max(a->norm, b->norm) > floor) return std::nullopt;
  return RoundingFloor{floor, u, largest->norm, *largest->name};
}

}  // namespace probe::differ
