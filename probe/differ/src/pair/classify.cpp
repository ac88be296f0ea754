// Classifying a pair of records: the comparator, the classes, and the figures a pair is judged
// by (hash, norm, min, max, mean, NaN/Inf counts).
#include "differ/detail/pair/classify.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace probe::differ {

bool Comparator::agree(double base, double test) const { return agree(base, test, 0.0); }

bool Comparator::agree(double base, double test, double scale) const {
  if (std::isnan(base) || std::isnan(test)) return std::isnan(base) && std::isnan(test);
  if (exact()) return same_bits(base, test);
  if (base == test) return true;
  if (!std::isfinite(base) || !std::isfinite(test)) return false;
  const double magnitude =
      std::isfinite(scale) ? std::max(std::fabs(base), scale) : std::fabs(base);
  return std::fabs(test - base) <= atol + rtol * magnitude;
}

std::string_view pair_class_name(PairClass c) {
  static constexpr std::array<std::string_view, kPairClassCount> kNames = {
      "equal", "within_tol", "different", "only_base", "only_test", "none_one_side", "unsupported"};
  return kNames[static_cast<std::size_t>(c)];
}

bool is_divergence(PairClass c) {
  return c == PairClass::different || c == PairClass::only_base || c == PairClass::only_test ||
         c == PairClass::none_one_side;
}

std::optional<double> series_value(const Record& r) {
  if (r.state == Record::State::scalar) return r.value;
  if (r.state == Record::State::tensor && !r.stats.unsupported) return r.stats.norm;
  return std::nullopt;
}

namespace {

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

// Pairs with no common hash (a Python log against a probe log without torch_hash): the
// figures can still show a difference, never bitwise equality.
void classify_without_common_hash(Pair& p, const std::string& disagree, const Comparator& cmp) {
  if (!disagree.empty()) {
    p.pair_class = PairClass::different;
    p.note = std::string("no common hash; ") +
             (cmp.exact() ? "differs in: " : "beyond tolerance: ") + disagree;
  } else if (!cmp.exact()) {
    p.pair_class = PairClass::within_tol;
    p.note = "no common hash; the figures are within tolerance";
  } else {
    p.pair_class = PairClass::unsupported;
    p.note =
        "no common hash: the figures agree, bitwise equality cannot be checked (switch on "
        "the probe's torch-compatible hash to compare with Python logs)";
  }
}

// A NumericsLogger weights.log record against another record: its hash decides, or nothing.
void classify_hash_alone(Pair& p, std::optional<bool> hashes_equal) {
  if (hashes_equal == false) {
    p.pair_class = PairClass::different;
    p.note = "differs in the hash (a NumericsLogger weights.log holds no other figure)";
    return;
  }
  p.pair_class = PairClass::unsupported;
  p.note =
      "no common hash: a NumericsLogger weights.log holds torch.hash_tensor values only "
      "(switch on the probe's torch-compatible hash to compare with it)";
}

void classify_tensors(Pair& p, const Comparator& cmp) {
  const TensorStats &s = p.base.merged.record.stats, &t = p.test.merged.record.stats;
  if (s.unsupported || t.unsupported) {
    p.pair_class = PairClass::unsupported;
    p.note = s.unsupported ? *s.unsupported : *t.unsupported;
    return;
  }
  p.rel_diff = rel_diff(s.norm, t.norm);
  const bool python = p.base.merged.hash_source != HashSource::spec_v1 ||
                      p.test.merged.hash_source != HashSource::spec_v1;
  // A weights.log record has no norm: its hash is all there is to compare.
  const bool hash_alone = p.base.merged.hash_source == HashSource::torch_hash_alone ||
                          p.test.merged.hash_source == HashSource::torch_hash_alone;
  if (hash_alone) p.rel_diff = 0;  // no norm on one side: no size of a difference
  if (s.shape != t.shape && !python) {
    p.pair_class = PairClass::different;
    p.note = "shapes differ";
    return;
  }
  if (!s.dtype.empty() && !t.dtype.empty() && s.dtype != t.dtype) {
    p.pair_class = PairClass::different;
    p.note = "dtypes differ (" + s.dtype + " vs " + t.dtype + ")";
    return;
  }
  std::optional<bool> hashes_equal;
  if (!python) hashes_equal = s.hash == t.hash;
  else if (s.torch_hash && t.torch_hash) hashes_equal = *s.torch_hash == *t.torch_hash;
  if (hashes_equal == true) {
    p.pair_class = PairClass::equal;
    return;
  }
  if (hash_alone) return classify_hash_alone(p, hashes_equal);
  const std::string disagree = disagreeing_figures(s, t, python, cmp);
  if (!hashes_equal) return classify_without_common_hash(p, disagree, cmp);
  if (cmp.exact()) {
    p.pair_class = PairClass::different;
    if (p.kind == Kind::rng) return;  // the figures of RNG state bytes add nothing to its hash
    if (!disagree.empty()) p.note = "differs in: hash, " + disagree;
    else
      p.note = python ? "differs in the hash alone; the norms are equal"
                      : "differs in the hash alone; norm, min, max and mean are bitwise equal";
    return;
  }
  p.pair_class = disagree.empty() ? PairClass::within_tol : PairClass::different;
  if (!disagree.empty()) p.note = "beyond tolerance: " + disagree;
}

}  // namespace

void classify(Pair& p, const Comparator& cmp) {
  const Record &x = p.base.merged.record, &y = p.test.merged.record;
  using S = Record::State;
  if (x.state == S::none || y.state == S::none) {
    p.pair_class = x.state == y.state ? PairClass::equal : PairClass::none_one_side;
    return;
  }
  if (x.state != y.state) {
    p.pair_class = PairClass::different;
    p.note = "a scalar in one run, a tensor in the other";
    return;
  }
  if (x.state == S::tensor) return classify_tensors(p, cmp);
  p.rel_diff = rel_diff(x.value, y.value);
  const bool bitwise = same_bits(x.value, y.value) || (std::isnan(x.value) && std::isnan(y.value));
  p.pair_class = bitwise                       ? PairClass::equal
                 : cmp.agree(x.value, y.value) ? PairClass::within_tol
                                               : PairClass::different;
}

}  // namespace probe::differ
