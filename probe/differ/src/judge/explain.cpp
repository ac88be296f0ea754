// Noise or bug: one explanation per divergent pair (explain.h, docs/diff-logs.md).
#include "differ/detail/judge/explain.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "differ/detail/pair/classify.h"
#include "differ/detail/judge/constant_factor.h"
#include "differ/detail/judge/rounding_floor.h"
#include "differ/detail/judge/weight_causes.h"
#include "differ/detail/read/names.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace lf = probe::log_format;

namespace {

Explanation bug(Rule rule) { return Explanation{true, rule, 0, 0, 0, {}}; }

// The consequence of a bug upstream: the independent divergences it descends from.
Explanation inherited_bug(const Upstream& up) {
  Explanation e = bug(Rule::inherited);
  e.bug_roots = up.bug_roots;
  return e;
}

bool both_tensors(const Pair& p) {
  return p.base.present && p.test.present && p.base.merged.record.state == Record::State::tensor &&
         p.test.merged.record.state == Record::State::tensor;
}

std::int64_t nonfinite(const Side& s) {
  return s.present && s.merged.record.state == Record::State::tensor
             ? s.merged.record.stats.nan + s.merged.record.stats.inf
             : 0;
}

const std::string& dtype_of(const Pair& p) {
  return (p.base.present ? p.base.merged : p.test.merged).record.stats.dtype;
}

// A noise root: its own difference, at least one rounding of its dtype (a hash that differs
// while the norm does not still moved a last bit).
double root_size(const Pair& p) { return std::max(p.rel_diff, unit_roundoff(dtype_of(p))); }

// A summation-order root's ceiling is its derived bound: each element within n·u·Σ|x_i| of the
// exact sum, so the difference vector within 2·n·u·Σ‖x_i‖ in norm. Its figures' difference only
// bounds it from below (an element-wise update such as Adam's squares sees elements that moved
// while the norm did not), so nothing smaller is sound.
Explanation summation_order(const Pair& p, double bound) {
  return Explanation{false,        Rule::summation_order,         bound,
                     root_size(p), std::max(root_size(p), bound), {}};
}

// Everything a record depends on is equal, yet it differs. Where both runs hold the step's
// records alike, the same kernels ran on the same pieces: the computation differs. Otherwise,
// between its recorded dependencies and it run ops the log does not see, and a kernel that reads
// the same values in another layout (a sequence shard rather than the whole sequence, a gathered
// tensor's strides, another blocking) may accumulate in another order and round its result
// otherwise: each run's element then lies within u·|x| of the same value (u: the unit roundoff of
// the op's dtype; an accumulation in a wider type adds far less), the runs within 2u·|x| of each
// other. The rest of the module carries that rounding to the record, as it carries a
// reduction's: `bound` = the direct bound (--reduction-amplification) times 2u, for each figure
// of its own size: the norm, l1, min and
// max, the mean of the largest magnitude. Within all of that it is a rounding of the same
// values, or a change of the computation no larger: the figures cannot tell which. Beyond any of
// it, the computation differs. (The Python transformer in bfloat16, `tp 2` against `tp 2 --sp`:
// the sequence-sharded RMSNorm's mean rounds to another bfloat16 in some rows, and `tap
// layers.0.attention.wo` is 4.2e-3 apart at step 0, its maximum two ulps.) The same holds where
// one run ran compiled code and the other did not (the step ends say which, log format 9): a
// fused kernel keeps intermediates in registers instead of rounding them to the tensor's dtype,
// evaluates erf, exp or tanh by another vectorized approximation (each correctly implemented to
// within an ulp or two), and may re-associate a reduction: the same function, rounded otherwise.
// (Eager against inductor, a linear layer's GELU tapped: 6.8e-9 relative in float32, 0.06 x 2u.)
bool within_roundings(const Pair& p, double r) {
  if (!both_tensors(p)) return false;
  const TensorStats &a = p.base.merged.record.stats, &b = p.test.merged.record.stats;
  if (a.dtype != b.dtype || a.shape != b.shape || a.nan != b.nan || a.inf != b.inf || a.nan > 0 ||
      a.inf > 0)
    return false;
  auto close = [r](double x, double y) {
    return std::abs(x - y) <= r * std::max(std::abs(x), std::abs(y));
  };
  const double magnitude =
      std::max({std::abs(a.min), std::abs(a.max), std::abs(b.min), std::abs(b.max)});
  return r > 0 && std::isfinite(a.norm) && std::isfinite(b.norm) && close(a.norm, b.norm) &&
         close(a.min, b.min) && close(a.max, b.max) && (!a.l1 || !b.l1 || close(*a.l1, *b.l1)) &&
         std::abs(a.mean - b.mean) <= r * magnitude;
}

// Both runs hold the record alike: logged by the same ranks, as the same partial sum (or none).
bool held_alike(const Pair& p) {
  if (!(p.base.present && p.test.present)) return true;
  return p.base.merged.ranks == p.test.merged.ranks &&
         p.base.merged.partial.count == p.test.merged.partial.count;
}

// What a record whose dependencies are all equal is explained by.
Explanation equal_inputs(const Pair& p, double amplification, bool layouts_alike, bool same_code) {
  const double bound = amplification * 2 * unit_roundoff(dtype_of(p));
  if ((layouts_alike && same_code) || !within_roundings(p, bound)) return bug(Rule::unexplained);
  const std::string otherwise = !same_code ? "one run ran the step compiled and the other did not: "
                                             "a fused kernel rounding the same function otherwise"
                                           : "the runs lay the step out otherwise: an op rounding "
                                             "the same values otherwise in another layout";
  return Explanation{
      false,
      Rule::cannot_tell,
      bound,
      root_size(p),
      std::max(root_size(p), bound),
      "what it depends on is equal and every figure is within " + lf::format_double(amplification) +
          " x 2u = " + lf::format_double(bound) +
          " of its own (a rounding of its dtype carried through the rest of its module), and " +
          otherwise + ", or a change of the computation that small; the figures cannot tell which"};
}

// The weights a step starts from carry what the steps before left in them: their measured
// difference (at least a rounding) is a root of what the step computes from them. Training
// amplifies noise from step to step (AdamW at a learning rate of 0.1 by about 10x a step in the
// Python transformer's calibration), so the roots of the first step alone would bound later
// steps too tightly and call their clean differences bugs.
Upstream as_root_of_its_step(const Pair& param) {
  Upstream u;
  u.add(param);
  if (!param.why.bug) u.roots = std::max(u.roots, root_size(param));
  return u;
}

// Inherited noise: within `bound` of the roots it descends from; what is computed from it may
// inherit up to `ceiling` (the bound of noise grown from those roots, never that of an update
// it went through: ceilings do not compound from step to step).
Explanation inherited_noise(Rule rule, const Pair& p, double bound, double roots, double ceiling,
                            std::string detail = {}) {
  return Explanation{false, rule, bound, roots, std::max(root_size(p), ceiling), std::move(detail)};
}

// A value one run passes through an op of its own that changed it (one_sided_ops.h).
Explanation different_ops(const Pair& p, const OneSidedChange& c) {
  const std::string other = c.run == "test" ? "base" : "test";
  return Explanation{true,
                     Rule::different_ops,
                     c.bound,
                     0,
                     0,
                     std::string(kind_name(p.kind)) + " " + p.name + " is, in the " + c.run +
                         " run, the output of " + c.op + " (an op of that run only) on " +
                         c.producer + "'s, which the " + other +
                         " run reads as it is; it moves it by relative norm " +
                         lf::format_double(c.change) + ", beyond the " +
                         lf::format_double(c.bound) + " a copy or a rounding of the noise in " +
                         c.producer + " may: the runs execute different ops"};
}

std::string mb_text(const Pair& p) { return p.mb ? " mb " + std::to_string(*p.mb) : ""; }

// The most summands either side's partial sum holds (0: neither holds one).
std::int64_t partial_count(const Pair& p) {
  const PartialSum *b = p.base.partial(), *t = p.test.partial();
  return std::max(b ? b->count : 0, t ? t->count : 0);
}

// The noise root of one side's partial sum (partial_sum_root), 0 where the side holds none.
double partial_root_of(const Side& s) {
  const PartialSum* sum = s.partial();
  if (!sum) return 0;
  const TensorStats& st = s.merged.record.stats;
  const double norm = st.unsupported ? 0 : st.norm;
  const double cancellation = norm > 0 && std::isfinite(norm) && sum->summand_norms > 0
                                  ? std::max(1.0, sum->summand_norms / norm)
                                  : 1.0;
  return 2.0 * static_cast<double>(sum->count) * unit_roundoff(st.dtype) * cancellation;
}

std::string what(const Pair& p) {
  return std::string(kind_name(p.kind)) + " " + p.name + mb_text(p);
}

// A difference nothing it depends on explains: with noise in its inputs, one beyond what that
// noise accounts for; without, the computation itself (or, for a parameter, the uncompared
// step before it).
Cause unexplained_cause(const Pair& p, const std::string& s, const std::string& rel,
                        std::vector<Evidence> ev, double noise_amplification) {
  if (p.why.roots > 0) {
    ev.push_back({"noise_roots", lf::format_double(p.why.roots)});
    ev.push_back({"bound", lf::format_double(p.why.bound)});
    return Cause{Rule::unexplained,
                 what(p) + " differs by relative norm " + rel + " at step " + s +
                     ", beyond what the noise it depends on explains (at most " +
                     lf::format_double(noise_amplification) + " x " +
                     lf::format_double(p.why.roots) + " = " + lf::format_double(p.why.bound) +
                     "): a difference of its own adds to the inherited one",
                 std::move(ev)};
  }
  const bool gap = p.kind == Kind::param;
  return Cause{Rule::unexplained,
               what(p) + " differs by relative norm " + rel + " at step " + s +
                   (gap ? " while the step before it was not compared: what changed it is unknown"
                        : " while everything it depends on (the step's parameters or the steps "
                          "before, and the records of its microbatch before it) is equal: the "
                          "computation itself differs (a kernel, an op order, the code)"),
               std::move(ev)};
}

// A gradient at the rounding floor of its backward (rounding_floor.h): its digits may be
// roundings of larger intermediates alone, which noise in what it depends on moves by up to their
// own size. Relative to itself its difference is then bounded by 2 (|a - b| <= |a| + |b|), and
// what is updated from it may differ that much; in the scale it was computed at, it is within
// two roundings of the largest gradient: that is the root it passes on.
Explanation at_rounding_floor(const Pair& p, const RoundingFloor& f) {
  const TensorStats &a = p.base.merged.record.stats, &b = p.test.merged.record.stats;
  return Explanation{
      false,
      Rule::cannot_tell,
      2,
      2 * f.unit,
      2,
      "its norm in both runs (" + lf::format_double(a.norm) + ", " + lf::format_double(b.norm) +
          ") is at most u = " + lf::format_double(f.unit) + " times the largest gradient of its " +
          (p.kind == Kind::grad ? "step" : "microbatch") + " (" + f.largest_name + ", norm " +
          lf::format_double(f.largest_norm) +
          "): at the rounding floor of its backward, a gradient zero or nearly in exact "
          "arithmetic (its terms cancel, as a normalisation over one element's does) whose digits "
          "may be roundings of larger intermediates alone, which noise moves by up to their own "
          "size; the figures cannot tell that from a change that small"};
}

std::string setting_words(const std::string& name) {
  if (name.ends_with(".lr")) return "learning rate";
  if (name.ends_with(".step")) return "update count";
  return "setting";
}

}  // namespace

double coarsest_unit_roundoff(const Pair& p) {
  double u = 0;
  for (const Side* s : {&p.base, &p.test})
    if (s->present && s->merged.record.state == Record::State::tensor)
      u = std::max(u, unit_roundoff(s->merged.record.stats.dtype));
  return u;
}

double summation_order_bound(const Pair& grad, std::int64_t summands, double summand_norms,
                             double summand_unit, const DiffOptions& o) {
  const std::string& dtype = dtype_of(grad);
  if (o.sum_order_fixed || summands == 0)
    return low_precision(dtype) ? o.sum_order_rtol_lowp : o.sum_order_rtol;
  const double norm = grad.base.present ? grad.base.merged.record.stats.norm : 0;
  // Cancellation: the summands' norms over the sum's, at least 1.
  const double cancellation = norm > 0 ? std::max(1.0, summand_norms / norm) : 1.0;
  // Each addition rounds to the coarser of the sum's dtype and its summands' (bfloat16 gradients
  // accumulated over microbatches before a float32 reduction round to bfloat16).
  const double u = std::max(unit_roundoff(dtype), summand_unit);
  return 2.0 * static_cast<double>(summands) * u * cancellation;
}

bool figures_hide_the_difference(const Pair& p) {
  if (!both_tensors(p) || p.pair_class != PairClass::different) return false;
  if (p.base.merged.hash_source != HashSource::spec_v1 ||
      p.test.merged.hash_source != HashSource::spec_v1)
    return false;
  const TensorStats &a = p.base.merged.record.stats, &b = p.test.merged.record.stats;
  // An Inf or NaN makes the norm (and mean) the same whatever the other elements hold.
  if (!std::isfinite(a.norm) || !std::isfinite(a.mean)) return false;
  const bool l1_equal = !a.l1 || !b.l1 || same_bits(*a.l1, *b.l1);
  return a.hash != b.hash && same_bits(a.norm, b.norm) && same_bits(a.min, b.min) &&
         same_bits(a.max, b.max) && same_bits(a.mean, b.mean) && l1_equal && a.nan == b.nan &&
         a.inf == b.inf && a.shape == b.shape && a.dtype == b.dtype;
}

bool elements_moved(const Pair& p) {
  const auto &a = p.base.merged.record.stats.mhash, &b = p.test.merged.record.stats.mhash;
  return figures_hide_the_difference(p) && a && b && *a == *b;
}

bool cannot_tell_moved(const Pair& p) {
  return figures_hide_the_difference(p) &&
         !(p.base.merged.record.stats.mhash && p.test.merged.record.stats.mhash);
}

bool is_setting(const Pair& p) {
  return p.base.present && p.test.present && p.base.merged.record.state == Record::State::scalar &&
         p.test.merged.record.state == Record::State::scalar;
}

bool one_sided_setting(const Pair& p) {
  if (p.kind != Kind::optim) return false;
  if (p.pair_class != PairClass::only_base && p.pair_class != PairClass::only_test) return false;
  const Side& s = p.base.present ? p.base : p.test;
  return s.merged.record.state == Record::State::scalar;
}

std::string parameter_of_state(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

void merge_roots(std::vector<std::uint32_t>& into, const std::vector<std::uint32_t>& from) {
  if (from.empty()) return;
  std::vector<std::uint32_t> both;
  both.reserve(into.size() + from.size());
  std::set_union(into.begin(), into.end(), from.begin(), from.end(), std::back_inserter(both));
  if (both.size() > Explanation::kRootsKept) both.resize(Explanation::kRootsKept);
  into.swap(both);
}

void Upstream::add(const Pair& p) {
  if (!is_divergence(p.pair_class)) return;
  ++pairs;
  bug = bug || p.why.bug;
  if (p.why.bug) merge_roots(bug_roots, p.why.bug_roots);
  roots = std::max(roots, p.why.roots);
  largest = std::max({largest, root_size(p), p.why.ceiling});
}

void Upstream::add(const Upstream& u) {
  pairs += u.pairs;
  bug = bug || u.bug;
  merge_roots(bug_roots, u.bug_roots);
  roots = std::max(roots, u.roots);
  largest = std::max(largest, u.largest);
  partial_sums += u.partial_sums;
  if (u.partial_what && (!partial_what || u.partial_root > partial_root))
    partial_what = u.partial_what;
  partial_root = std::max(partial_root, u.partial_root);
}

double partial_sum_root(const Pair& p) {
  return std::max(partial_root_of(p.base), partial_root_of(p.test));
}

Upstream Explainer::carried() const {
  if (step_has_params_) return step_params_;
  return earlier_;  // weights not recorded: every divergence of the steps before may reach them
}

// The network bound is an assumption about the network, not a derivation: its roots are the
// step's weights' measured differences, lower bounds of their real ones (a norm's), and a network
// near chaos (the Python transformer under AdamW at a learning rate of 0.1: microbatch gradients
// up to 3.1% apart from weights at most 7.5e-6 apart by step 9, 20% from 1.8e-5 at step 10)
// amplifies them more than any fixed factor. What this comparison measured is evidence: its earlier
// steps' inherited noise grew by up to measured_amplification_ over its roots, and one more step
// may grow it by an update's factor again. Beyond the network bound but within that, the figures
// cannot tell a bug from the chaos the runs have shown; beyond both, it is unexplained.
double Explainer::measured_bound(double roots) const {
  return options_.update_amplification * measured_amplification_ * roots;
}

Explanation Explainer::beyond_the_network_bound(const Pair& p, double bound, double roots) const {
  return Explanation{false,
                     Rule::cannot_tell,
                     measured_bound(roots),
                     roots,
                     std::max(root_size(p), measured_bound(roots)),
                     "beyond the network bound of its roots (" + lf::format_double(bound) +
                         "), within the growth this comparison measured on its earlier steps "
                         "(inherited noise up to " +
                         lf::format_double(measured_amplification_) + " times its roots, times " +
                         lf::format_double(options_.update_amplification) +
                         " for one more step): the runs amplify noise as much as a bug would "
                         "show"};
}

// Inherited: noise when what it depends on is noise and it stays within the amplification
// bound of the noise it descends from; a consequence of a bug when any of it is a bug. Where
// partial sums are all it depends on that differs (roots where the other run does not sum the
// same summands alike), partial_sum: the first records after a tensor-parallel reduction.
Explanation Explainer::from_upstream(const Pair& p, const Upstream& up,
                                     Explanation none_upstream) const {
  if (up.pairs == 0 && up.partial_sums == 0) return none_upstream;
  if (up.bug) return inherited_bug(up);
  // Right after a reduction the difference is its rounding carried through the rest of its
  // module: the direct bound, not the wider one of noise grown through the network.
  const bool after_reduction = up.pairs == 0;
  // Once its inputs differ, its own roundings differ too: a root of one unit roundoff of its
  // dtype. Negligible in float32; in bfloat16 a float32 difference far below 2^-8 still flips the
  // rounding of some elements (a master weight cast to its compute copy moves a whole bfloat16
  // ulp), which no multiple of that difference bounds.
  const double roots = std::max(up.roots, coarsest_unit_roundoff(p));
  const double network_bound = options_.noise_amplification * roots;
  const double bound = after_reduction ? options_.reduction_amplification * roots : network_bound;
  if (p.rel_diff > bound && !after_reduction && p.rel_diff <= measured_bound(roots))
    return beyond_the_network_bound(p, bound, roots);
  if (p.rel_diff > bound) return Explanation{true, Rule::unexplained, bound, roots, 0, {}};
  if (after_reduction)
    return inherited_noise(Rule::partial_sum, p, bound, roots, bound,
                           up.partial_what ? *up.partial_what : "");
  return inherited_noise(Rule::inherited, p, bound, roots, network_bound);
}

// An optimizer update: the new weights (or state) from the step's gradient, the weights and
// the state before. It scales their differences by factors of order one (SGD: |p| + lr |g|
// over |p'|), so its bound is --update-amplification times the most they may differ by, not the
// forward and backward's wider one; beyond it, the update itself differs. The most an input may
// differ by is its ceiling, not its figures' difference: a norm difference only bounds the
// difference from below (noise spread over the elements cancels in it), and an element-wise
// update (Adam's squares and divisions) sees the elements. A root's ceiling is its derived bound;
// inherited noise's the network's bound of its roots.
Explanation Explainer::from_update(const Pair& p, const Upstream& up, double amplification) const {
  if (up.pairs == 0 && up.partial_sums == 0) return bug(Rule::optimizer);
  if (up.bug) return inherited_bug(up);
  const double bound = std::max(options_.update_amplification, amplification) * up.largest;
  // What is updated from it may inherit up to the update's bound, capped at the network's
  // bound of its roots: over many steps the ceilings grow to that cap, never past it.
  if (p.rel_diff <= bound)
    return inherited_noise(Rule::inherited, p, bound, up.roots,
                           std::min(bound, options_.noise_amplification * up.roots));
  return Explanation{true, Rule::optimizer, bound, up.roots, 0, {}};
}

Explanation Explainer::explain_param(const Pair& p, std::int64_t step, bool first_step) const {
  if (first_step) return bug(Rule::init);
  if (previous_step_ == step - 1) {
    const auto it = previous_by_param_.find(p.name);
    // Its gradient, value and optimizer state of the step before all agree: the update differs.
    if (it == previous_by_param_.end()) return bug(Rule::optimizer);
    return from_update(p, it->second);
  }
  // The step before was not compared: what happened there is unknown.
  return from_upstream(p, earlier_, bug(Rule::unexplained));
}

Explanation Explainer::explain_grad(const Pair& p) {
  const auto it = mb_grads_.find(p.name);
  if (it != mb_grads_.end() && it->second.set_aside) {
    // Its mb_grads are set aside: partial sums (a weight computed on sequence shards), or records
    // of other microbatches than the other run's (an expert's gradient under expert
    // parallelism). Not compared, so the grad is judged by the summation-order bound of every
    // summand (its own partial sums are those summands, not roots to amplify) and, where what the
    // step computed it from diverges, also by that noise.
    const double bound = grad_bound(p);
    // Not counted in summation_order_grads_: that counts grads whose mb_grads compared equal.
    if (p.rel_diff <= bound) return summation_order(p, bound);
    Upstream up = carried();
    up.add(step_so_far_);
    if (up.pairs == 0) return unless_scaled(p, bug(Rule::wrong_reduction));
    return unless_scaled(p, from_upstream(p, up, bug(Rule::unexplained)));
  }
  if (it != mb_grads_.end() && it->second.count > 0) {
    const MbGrads& mb = it->second;
    if (mb.diverging.pairs > 0)
      return unless_scaled(p, from_upstream(p, mb.diverging, bug(Rule::unexplained)));
    const double bound = grad_bound(p);
    if (p.rel_diff > bound) return unless_scaled(p, bug(Rule::wrong_reduction));
    ++summation_order_grads_;
    return summation_order(p, bound);
  }
  Upstream up = carried();
  up.add(step_so_far_);
  const double bound = grad_bound(p);
  return unless_scaled(
      p, from_upstream(p, up,
                       p.rel_diff <= bound ? summation_order(p, bound) : bug(Rule::unexplained)));
}

double Explainer::grad_bound(const Pair& p) const {
  const auto it = mb_grads_.find(p.name);
  if (it == mb_grads_.end() || (it->second.count == 0 && !it->second.set_aside))
    return summation_order_bound(p, 0, 0, 0, options_);
  const MbGrads& mb = it->second;
  return summation_order_bound(p, mb.summands, mb.norms, mb.unit, options_);
}

// Gradient clipping (torch.nn.utils.clip_grad_norm_, torchtitan's trainer) multiplies every
// gradient of a step by one coefficient c = max_norm / (‖g‖ + 1e-6), with ‖g‖ the total norm of
// all of them, computed in the gradients' dtype in each layout's own order (every rank its
// shards, then a reduction over the ranks). In floating point a sum of N non-negative terms is
// within γ_N = N·u / (1 − N·u) of the exact sum relative to itself, whatever the order, so ‖g‖ =
// √Σ is within γ_N / 2 + u of the exact norm, and two runs' coefficients within γ_N + 4u of each
// other (N: the elements of every gradient of the step; u: their dtype's). Each grad is then the
// base run's times f = c_test / c_base, up to its own summation-order noise. torchtitan's llama3
// at debug sizes, clipped at 1.0, one rank against FSDP2 over two: every gradient 4.2e-5 apart,
// their mb_grads bitwise equal (the float32 norm of 2.1 off by 7.3e-5 and 3.1e-5 from exact).
// Where every grad of the step is one factor f times the base run's, f ≠ 1 within that bound,
// the grads cannot tell a clipping coefficient from a change that uniform: cannot_tell.
void Explainer::find_step_grad_scale(const std::vector<Pair>& pairs) {
  step_grad_scale_ = 1;
  step_grad_scale_bound_ = 0;
  std::vector<double> ratios;
  std::int64_t elements = 0;
  double u = 0;
  for (const auto& p : pairs) {
    if (p.kind != Kind::grad || !both_tensors(p)) continue;
    const TensorStats &b = p.base.merged.record.stats, &t = p.test.merged.record.stats;
    if (!(b.norm > 0) || !std::isfinite(b.norm) || !std::isfinite(t.norm) || b.shape != t.shape)
      return;
    ratios.push_back(t.norm / b.norm);
    elements += b.numel();
    u = std::max(u, unit_roundoff(dtype_of(p)));
  }
  if (ratios.size() < 2 || u <= 0) return;
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  const double f = ratios[ratios.size() / 2];
  const double n_u = static_cast<double>(elements) * u;
  if (f == 1 || n_u >= 0.5) return;
  const double bound = n_u / (1 - n_u) + 4 * u;
  if (std::abs(f - 1) > bound) return;
  for (const auto& p : pairs)
    if (p.kind == Kind::grad && both_tensors(p) && !scaled_alike(p, f)) return;
  step_grad_scale_ = f;
  step_grad_scale_bound_ = bound;
}

// The grad is f times the base run's within its summation-order bound, figure by figure.
bool Explainer::scaled_alike(const Pair& p, double f) const {
  const TensorStats &b = p.base.merged.record.stats, &t = p.test.merged.record.stats;
  if (b.dtype != t.dtype || b.nan != t.nan || b.inf != t.inf || b.nan > 0 || b.inf > 0)
    return false;
  const double tol = grad_bound(p) + 2 * unit_roundoff(dtype_of(p));
  const double magnitude = std::max(std::abs(b.min), std::abs(b.max)) * f;
  auto close = [tol](double x, double y) {
    return std::abs(x - y) <= tol * std::max(std::abs(x), std::abs(y));
  };
  return close(t.norm, f * b.norm) && std::abs(t.min - f * b.min) <= tol * magnitude &&
         std::abs(t.max - f * b.max) <= tol * magnitude &&
         std::abs(t.mean - f * b.mean) <= tol * magnitude &&
         (!b.l1 || !t.l1 || close(*t.l1, f * *b.l1));
}

Explanation Explainer::unless_scaled(const Pair& p, Explanation otherwise) const {
  if (step_grad_scale_ == 1 || !otherwise.bug || !both_tensors(p)) return otherwise;
  const double scale = std::abs(step_grad_scale_ - 1);
  return Explanation{
      false,
      Rule::cannot_tell,
      step_grad_scale_bound_,
      root_size(p),
      std::max(root_size(p), scale + grad_bound(p)),
      "every gradient of the step is the base run's times one factor, 1 " +
          std::string(step_grad_scale_ < 1 ? "- " : "+ ") + lf::format_double(scale) + ", within " +
          lf::format_double(step_grad_scale_bound_) +
          " of 1: gradient clipping by a total norm each run computes in its own order "
          "(a norm of that many elements rounds by up to that much), or a change of "
          "every gradient that uniform; the figures cannot tell which"};
}

Explanation Explainer::explain_optim(const Pair& p) const {
  // A number the update reads or counts (`.lr`, `.step`) is set, not computed from the tensors
  // that carry noise: any difference is the update's own.
  if (is_setting(p)) return bug(Rule::optimizer);
  const std::string param = parameter_of_state(p.name);
  Upstream up;
  if (auto it = this_step_by_param_.find(param); it != this_step_by_param_.end())
    up.add(it->second);
  // The step before: the parameter's grad, value and state, kept under the parameter's name.
  if (auto it = previous_by_param_.find(param); it != previous_by_param_.end()) up.add(it->second);
  // A state tensor may square the gradient (below): its inputs' ceilings times A, then the
  // update's own amplification.
  const auto squares = square_amplification_.find(param);
  const double a = squares == square_amplification_.end() ? 1 : std::max(1.0, squares->second);
  return from_update(p, up, options_.update_amplification * a);
}

// State an optimizer keeps from the gradient's squares (Adam's exp_avg_sq, RMSprop's square_avg,
// Adagrad's sum) moves element by element: with g' = g + d, g'^2 - g^2 = 2 g d + d^2, so
// ||d(g^2)|| <= 2 max|g| ||d|| (first order), while ||g^2|| = sqrt(sum g^4) >= ||g||^2 / sqrt(n)
// (Cauchy-Schwarz over n elements). Relative to its own size the square's difference is then at
// most A = 2 sqrt(n) max|g| / ||g|| times the gradient's, between 2 (every element alike) and
// 2 sqrt(n) (one element carries the norm), from the grad's own figures. A state updated as
// beta v + (1 - beta) g^2 is a weighted mean of such squares, held to the same A; a state linear
// in the gradient (a momentum) moves by at most 1 <= A times it. Every state tensor's bound is
// then --update-amplification x A x the largest ceiling of its inputs (settings such as `.lr`
// stay exact). (The Python transformer with AdamW, seed 11, against `tp 2 --sp` on a CPU whose
// kernels round otherwise: layers.0.ffn_norm.weight's exp_avg at step 1 4.6 times the ceiling of
// its partial-sum gradient, its exp_avg_sq 10.2 times: squared.)
void Explainer::note_square_amplification(const Pair& grad) {
  if (!both_tensors(grad)) return;
  const TensorStats& g = grad.base.merged.record.stats;
  if (!(g.norm > 0) || !std::isfinite(g.norm) || g.numel() <= 0) return;
  const double largest = std::max(std::fabs(g.min), std::fabs(g.max));
  square_amplification_[grad.name] =
      2 * std::sqrt(static_cast<double>(g.numel())) * std::min(1.0, largest / g.norm);
}

Explanation Explainer::explain(const Pair& p, std::int64_t step, bool first_step) {
  // Bug classes a pair shows by itself, whatever it depends on.
  // A compiled forward returns an output the loss is computed beside (inside the graph), where no
  // gradient reaches the returned tensor; run eagerly, the loss is computed from it. Which
  // tensors the gradient passes through is the compiler's: the step's mb_grads and grads decide.
  if (p.pair_class == PairClass::none_one_side && p.kind == Kind::output_grad && !same_code_)
    return Explanation{false,
                       Rule::cannot_tell,
                       0,
                       0,
                       0,
                       "the output's gradient is none in one run only, and one run ran the step "
                       "compiled: compiled code computes the loss inside its graph, beside the "
                       "output it returns, where no gradient arrives; the step's mb_grad and grad "
                       "records, compared as usual, tell whether the gradients agree"};
  if (p.pair_class == PairClass::none_one_side)
    return bug(p.kind == Kind::grad ? Rule::none_gradient : Rule::none);
  if (p.pair_class == PairClass::only_base || p.pair_class == PairClass::only_test)
    return bug(Rule::missing_record);
  if ((nonfinite(p.base) == 0) != (nonfinite(p.test) == 0)) return bug(Rule::nonfinite);
  if ((p.base.present && p.base.merged.replicas_disagree) ||
      (p.test.present && p.test.merged.replicas_disagree)) {
    const auto it = mb_grads_.find(p.name);
    const bool mb_equal = p.kind == Kind::grad && it != mb_grads_.end() && it->second.count > 0 &&
                          it->second.diverging.pairs == 0;
    return bug(mb_equal ? Rule::unreduced_gradient : Rule::replica_mismatch);
  }
  if (p.kind == Kind::rng) return bug(Rule::rng);
  if (p.kind == Kind::input) return bug(Rule::data);
  if (elements_moved(p)) return explain_moved(p, step, first_step);
  if (microbatch_factor_.in_differing_step(p))
    return Explanation{
        true, Rule::constant_factor, 0, 0, 0, microbatch_factor_.differing_words(step)};
  if (constant_factor(p)) return bug(Rule::constant_factor);
  if (auto change = one_sided_ops_.change(p)) return different_ops(p, *change);
  Explanation why = explain_by_dependencies(p, step, first_step);
  // Beyond the bound of the noise it depends on, or with equal inputs under other layouts or
  // code: a gradient at the rounding floor cannot tell. With equal inputs and the step laid out
  // and compiled alike the same kernels ran on the same values, and rounded alike even there.
  if (why.bug && why.rule == Rule::unexplained &&
      (why.roots > 0 || !(layouts_alike_ && same_code_)))
    if (auto floor = gradient_scales_.at_floor(p)) return at_rounding_floor(p, *floor);
  // Moved or changed below what the figures resolve, the log cannot say: what the rules would
  // call noise (a difference of size 0 is within every bound) is "cannot tell" instead. A bug
  // they find (the initialization differs, the inputs are equal) is one whichever it is.
  if (!why.bug && cannot_tell_moved(p)) {
    why.rule = Rule::cannot_tell;
    why.detail =
        "the hash differs while every figure is bitwise equal, and a log without the "
        "order-independent hash (format 8's mhash) cannot tell moved elements from "
        "values changed below what the figures resolve";
  }
  return why;
}

Explanation Explainer::explain_scaled(Pair& p, std::int64_t step, bool first_step) {
  const Pair divided = microbatch_factor_.divided(p);
  p.rel_diff = divided.rel_diff;
  const std::string words = microbatch_factor_.words(step);
  // Every figure the other run's times the factor, bit for bit: the convention and nothing else.
  if (figures_hide_the_difference(divided))
    return Explanation{false, Rule::convention, 0, 0, 0, words};
  Explanation why = explain(divided, step, first_step);
  if (why.bug || !why.rule) return why;
  const std::string inner(rule_name(*why.rule));
  why.detail =
      words + "; divided by it: " + inner + (why.detail.empty() ? "" : " (" + why.detail + ")");
  if (why.rule != Rule::cannot_tell) why.rule = Rule::convention;
  return why;
}

// The same values in other places. Where what it depends on is equal, or only summed in
// another order (a grad of its mb_grads: each element rounds on its own, none moves), that is a
// permutation, a wrong offset: a bug. Where its inputs differ by noise, values that repeat (an
// Adam update's first step, p ± lr; zeros after a ReLU; a clipped tensor) trade places when
// noise moves a tiny input across a threshold in opposite directions at two places: the
// figures cannot tell that from a move (the Python transformer with AdamW, seed 3: `param
// norm.weight` at step 1, 32 elements of two values, against `tp 2`).
Explanation Explainer::explain_moved(const Pair& p, std::int64_t step, bool first_step) {
  if (p.kind == Kind::grad) return bug(Rule::elements_moved);
  Explanation why = explain_by_dependencies(p, step, first_step);
  if (why.bug && why.rule == Rule::inherited) return why;
  if (why.bug || (why.rule != Rule::inherited && why.rule != Rule::partial_sum))
    return bug(Rule::elements_moved);
  why.rule = Rule::cannot_tell;
  why.detail =
      "the same values in other places (both runs' order-independent hashes agree) while what it "
      "depends on differs by noise: values that repeat (an update of +-lr, zeros, a clipped "
      "tensor) trade places where noise moves a tiny input; the figures cannot tell that from "
      "a permutation";
  return why;
}

Explanation Explainer::explain_by_dependencies(const Pair& p, std::int64_t step, bool first_step) {
  switch (p.kind) {
    case Kind::param: return explain_param(p, step, first_step);
    case Kind::grad: return explain_grad(p);
    case Kind::optim: return explain_optim(p);
    case Kind::scalar: {
      // A scalar (the loss) is computed from the step's records, and reduced over ranks.
      Upstream up = carried();
      up.add(step_so_far_);
      const double bound = summation_order_bound(p, 0, 0, 0, options_);
      return from_upstream(
          p, up, p.rel_diff <= bound ? summation_order(p, bound) : bug(Rule::unexplained));
    }
    default: {
      // Forward and backward records of a microbatch: its weights and its records before.
      Upstream up = carried();
      if (p.mb) {
        if (auto it = by_mb_.find(*p.mb); it != by_mb_.end()) up.add(it->second);
      } else {
        up.add(step_so_far_);
      }
      return from_upstream(
          p, up, equal_inputs(p, options_.reduction_amplification, layouts_alike_, same_code_));
    }
  }
}

// An mb_grad pair set aside for its covered microbatches: each side's pieces (its microbatches
// times its summands) and their norms, counted per run.
void Explainer::add_covered_pieces(const Pair& p, MbGrads& mb) {
  for (int run = 0; run < 2; ++run) {
    const Side& s = run == 0 ? p.base : p.test;
    if (!s.present || s.merged.record.state != Record::State::tensor) continue;
    const PartialSum* sum = s.partial();
    const bool summands = sum && sum->index < 0;
    const auto microbatches =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(s.merged.record.covers.size()));
    mb.covered_pieces[run] += microbatches * (summands ? sum->count : 1);
    const double norms = summands ? sum->summand_norms : s.merged.record.stats.norm;
    if (std::isfinite(norms)) mb.covered_norms[run] += norms;
  }
}

void Explainer::index_mb_grads(const std::vector<Pair>& pairs) {
  mb_grads_.clear();
  const bool grad_differs = std::any_of(pairs.begin(), pairs.end(), [](const Pair& p) {
    return p.kind == Kind::grad && is_divergence(p.pair_class);
  });
  if (!grad_differs) return;
  for (const auto& p : pairs) {
    if (p.kind != Kind::mb_grad) continue;
    MbGrads& mb = mb_grads_[p.name];
    ++mb.count;
    mb.unit = std::max(mb.unit, coarsest_unit_roundoff(p));
    mb.set_aside = mb.set_aside || p.set_aside;
    if (p.covered) {
      add_covered_pieces(p, mb);
      continue;
    }
    // A partial sum's summands are summands of the grad too: the side with more of them counts.
    const PartialSum *b = p.base.partial(), *t = p.test.partial();
    const PartialSum* sum = b && (!t || b->count >= t->count) ? b : t;
    if (sum) {
      mb.summands += std::max<std::int64_t>(sum->count, 1);
      mb.norms += sum->summand_norms;
      continue;
    }
    ++mb.summands;
    const Side& s = p.base.present ? p.base : p.test;
    if (s.merged.record.state == Record::State::tensor && std::isfinite(s.merged.record.stats.norm))
      mb.norms += s.merged.record.stats.norm;
  }
  // Records covering other microbatches in either run: each run sums the same microbatches'
  // contributions, grouped its own way. The finer run counts (the most pieces, and the largest sum
  // of norms: a record's norm is at most the sum of its pieces').
  for (auto& [name, mb] : mb_grads_) {
    mb.summands += std::max(mb.covered_pieces[0], mb.covered_pieces[1]);
    mb.norms += std::max(mb.covered_norms[0], mb.covered_norms[1]);
  }
}

// "the sum of 2 partial products of tap wo mb 0 in the test run, added in another order than
// one rank's product", once per text.
const std::string* Explainer::partial_words(const Pair& p) {
  const PartialSum *b = p.base.partial(), *t = p.test.partial();
  const bool gradient = p.kind == Kind::mb_grad || p.kind == Kind::grad;
  const std::string summands = gradient ? " partial gradients of " : " partial products of ";
  const std::string one_rank = gradient ? " one rank's gradient" : " one rank's product";
  std::string text;
  if (b && t && b->count == t->count)
    text = "the sum of " + std::to_string(b->count) + summands + what(p) +
           " in both runs, each run's reduction adding them in its own order";
  else if (b && t)
    text = "the sums of " + std::to_string(b->count) + " and " + std::to_string(t->count) +
           summands + what(p) + " in the base and test runs, added in other orders";
  else
    text = "the sum of " + std::to_string((b ? b : t)->count) + summands + what(p) + " in the " +
           (b ? "base" : "test") + " run, added in another order than" + one_rank;
  return &*partial_words_.insert(std::move(text)).first;
}

void Explainer::note_partial_root(const Pair& p) {
  const double r0 = partial_sum_root(p);
  if (r0 <= 0) return;
  Upstream root;
  root.partial_sums = 1;
  root.partial_root = root.roots = root.largest = r0;
  root.partial_what = partial_words(p);
  if (p.mb) by_mb_[*p.mb].add(root);
  step_so_far_.add(root);
  // A gradient that is a partial sum (a sequence-parallel norm weight's, left Partial by
  // DTensor until the optimizer reads it) is what its parameter's update is computed from.
  if (p.kind == Kind::grad) this_step_by_param_[p.name].add(root);
}

void Explainer::explain_step(std::int64_t step, bool first_step, std::vector<Pair>& pairs,
                             bool same_code) {
  step_params_ = {};
  step_so_far_ = {};
  by_mb_.clear();
  this_step_by_param_.clear();
  step_has_params_ = std::any_of(pairs.begin(), pairs.end(), [](const Pair& p) {
    return p.kind == Kind::param && p.base.present && p.test.present;
  });
  layouts_alike_ = std::all_of(pairs.begin(), pairs.end(), held_alike);
  same_code_ = same_code;
  index_mb_grads(pairs);
  square_amplification_.clear();
  for (const auto& p : pairs)
    if (p.kind == Kind::grad) note_square_amplification(p);
  gradient_scales_.start_step(pairs);
  microbatch_factor_.start_step(pairs);
  find_step_grad_scale(pairs);
  one_sided_ops_.start_step(pairs);
  // Optimizer state is updated from the step's gradients: explained once they are.
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& p : pairs) {
      if ((p.kind == Kind::optim) != (pass == 1)) continue;
      // A pair set aside (an op of one run only, a partial sum against another record) is no
      // divergence.
      const bool one_sided_op = p.kind == Kind::op && !(p.base.present && p.test.present);
      if (is_divergence(p.pair_class) && !p.set_aside && !one_sided_op) {
        const bool scaled = microbatch_factor_.scales(p);
        p.why = scaled ? explain_scaled(p, step, first_step) : explain(p, step, first_step);
        if (p.why.bug && p.why.rule != Rule::inherited) number_roots(p, step, first_step);
        // Exactly the convention's factor times the other run's: equal for what depends on it.
        const bool as_equal = scaled && p.why.rule == Rule::convention && p.why.ceiling == 0;
        // A generator's state is no value a record computes from: what drew from it shows in
        // the records that drew (settle_rng).
        if (!as_equal && p.kind != Kind::rng) note_divergence(p);
      }
      // A partial sum is a noise root of what comes after it: the other run may add its summands
      // in another order (three or more: a ring all-reduce against a reduce-scatter), and even
      // two summands, which add alike (a + b = b + a), meet the residual stream in another
      // grouping under another layout ((x + a) + b against x + (a + b); tensor against sequence
      // parallelism, seeds 3, 1234 and 2027 of the calibration, docs/calibration.md).
      if (p.set_aside || partial_count(p) >= 2) note_partial_root(p);
      if (pass == 0) one_sided_ops_.note_paired(p);
    }
  }
  settle_rng(pairs);
  carry_to_next_step(step, pairs);
}

// An RNG state that differs is a cause only where something drew from it: a record of its
// microbatch that differs beyond what the rules explain (a dropout mask drawn otherwise changes
// the output while the inputs agree). Where every record of its microbatch is equal or noise,
// nothing drew from the generator there, or what drew changed nothing recorded (a trainer that
// reseeds or draws a sampler's seed before the first forward, a model without dropout): a note.
void Explainer::settle_rng(std::vector<Pair>& pairs) const {
  std::unordered_set<std::int64_t> drew;  // microbatches with a bug among their other records
  bool any_rng = false;
  for (const auto& p : pairs) {
    if (p.kind == Kind::rng) any_rng = any_rng || (p.why.rule == Rule::rng);
    else if (p.mb && is_divergence(p.pair_class) && !p.set_aside && p.why.bug) drew.insert(*p.mb);
  }
  if (!any_rng) return;
  for (auto& p : pairs)
    if (p.kind == Kind::rng && p.why.rule == Rule::rng && p.mb && !drew.count(*p.mb))
      p.why = Explanation{false,
                          Rule::rng_unused,
                          0,
                          0,
                          0,
                          "the generator's state differs, and every record of microbatch " +
                              std::to_string(*p.mb) +
                              " is equal or noise: nothing drew from it there, or what drew "
                              "changed nothing recorded"};
}

Upstream Explainer::dependencies(const Pair& p, std::int64_t step, bool first_step) const {
  Upstream up;
  switch (p.kind) {
    case Kind::input:
    case Kind::rng: return up;  // the data: where a step's computation starts
    case Kind::param:
      if (first_step) return up;
      if (previous_step_ != step - 1) return earlier_;
      if (auto it = previous_by_param_.find(p.name); it != previous_by_param_.end())
        up.add(it->second);
      return up;
    case Kind::optim: {
      // A setting is set, not computed from the tensors that carry a difference.
      if (is_setting(p) || one_sided_setting(p)) return up;
      const std::string param = parameter_of_state(p.name);
      if (auto it = this_step_by_param_.find(param); it != this_step_by_param_.end())
        up.add(it->second);
      if (auto it = previous_by_param_.find(param); it != previous_by_param_.end())
        up.add(it->second);
      return up;
    }
    case Kind::grad:
      if (auto it = mb_grads_.find(p.name);
          it != mb_grads_.end() && it->second.count > 0 && !it->second.set_aside)
        return it->second.diverging;
      break;
    default:
      if (p.kind != Kind::scalar && p.mb) {
        up = carried();
        if (auto it = by_mb_.find(*p.mb); it != by_mb_.end()) up.add(it->second);
        return up;
      }
  }
  up = carried();
  up.add(step_so_far_);
  return up;
}

// A bug whose dependencies hold none is an independent divergence, numbered in execution order
// (what descends from it carries the number); one whose dependencies hold bugs, whatever its own
// rule, descends from those.
void Explainer::number_roots(Pair& p, std::int64_t step, bool first_step) {
  Upstream up = dependencies(p, step, first_step);
  p.why.root = up.bug_roots.empty();
  if (p.why.root) p.why.bug_roots = {roots_numbered_++};
  else p.why.bug_roots = std::move(up.bug_roots);
}

// What the records after a divergent pair read of it.
void Explainer::note_divergence(const Pair& p) {
  if (!p.why.bug && p.why.rule == Rule::inherited && p.why.roots > 0)
    step_amplification_ = std::max(step_amplification_, p.rel_diff / p.why.roots);
  step_so_far_.add(p);
  if (p.kind == Kind::param) step_params_.add(as_root_of_its_step(p));
  if (p.kind == Kind::param || p.kind == Kind::grad) this_step_by_param_[p.name].add(p);
  if (p.kind == Kind::mb_grad)
    if (auto it = mb_grads_.find(p.name); it != mb_grads_.end()) it->second.diverging.add(p);
  if (p.mb) by_mb_[*p.mb].add(p);
}

void Explainer::carry_to_next_step(std::int64_t step, const std::vector<Pair>& pairs) {
  previous_by_param_ = std::move(this_step_by_param_);
  this_step_by_param_.clear();
  for (const auto& p : pairs)
    if (p.kind == Kind::optim && is_divergence(p.pair_class))
      previous_by_param_[parameter_of_state(p.name)].add(p);
  earlier_.add(step_so_far_);
  measured_amplification_ = std::max(measured_amplification_, step_amplification_);
  step_amplification_ = 0;
  previous_step_ = step;
}

Cause Explainer::cause_of(std::int64_t step, const Pair& p) const {
  const std::string rel = lf::format_double(p.rel_diff);
  const std::string s = std::to_string(step);
  std::vector<Evidence> ev = {
      {"step", step}, {"kind", std::string(kind_name(p.kind))}, {"name", p.name}};
  if (p.mb) ev.push_back({"mb", *p.mb});
  ev.push_back({"rel_diff", rel});
  const Rule rule = p.why.rule.value_or(Rule::unexplained);
  // the factor of the bound it broke: the reduction's or the network's
  if (rule == Rule::unexplained)
    return unexplained_cause(
        p, s, rel, std::move(ev),
        p.why.roots > 0 ? p.why.bound / p.why.roots : options_.noise_amplification);
  if (rule == Rule::optimizer && p.why.roots > 0) {
    ev.push_back({"noise_roots", lf::format_double(p.why.roots)});
    ev.push_back({"bound", lf::format_double(p.why.bound)});
    return Cause{rule,
                 what(p) + " differs by relative norm " + rel + " at step " + s +
                     ", beyond what the noise in the gradients, weights and state it is updated "
                     "from explains (at most " +
                     lf::format_double(p.why.bound) +
                     "): the optimizer update differs (learning rate, weight decay, epsilon, "
                     "fused/foreach vs per-tensor kernels, optimizer state)",
                 std::move(ev)};
  }
  if (rule == Rule::optimizer && p.kind == Kind::optim && is_setting(p)) {
    ev.push_back({"base", lf::format_double(p.base.merged.record.value)});
    ev.push_back({"test", lf::format_double(p.test.merged.record.value)});
    return Cause{rule,
                 what(p) + " is " + lf::format_double(p.base.merged.record.value) +
                     " in the base run and " + lf::format_double(p.test.merged.record.value) +
                     " in the test run at step " + s + ": the optimizer update of step " + s +
                     " reads another " + setting_words(p.name) +
                     " (a schedule, a warmup or a group's setting that differs)",
                 std::move(ev)};
  }
  if (rule == Rule::different_ops)
    return Cause{rule, p.why.detail + " (step " + s + ")", std::move(ev)};
  if (rule == Rule::elements_moved)
    return Cause{rule,
                 what(p) + " holds other elements at step " + s +
                     " (the hash differs) while its norm, min, max, mean and NaN/Inf counts are "
                     "bitwise equal: the same values in other places (a wrong shard offset, a "
                     "permutation, a transposed copy), never rounding noise",
                 std::move(ev)};
  if (rule == Rule::replica_mismatch) {
    const bool in_test = p.test.present && p.test.merged.replicas_disagree;
    ev.push_back({"ranks", format_ranks((in_test ? p.test : p.base).merged.ranks)});
    return Cause{rule,
                 what(p) + " differs between replicas of the " + (in_test ? "test" : "base") +
                     " run at step " + s +
                     ": ranks that hold the same values logged different ones",
                 std::move(ev)};
  }
  if (rule == Rule::missing_record)
    return Cause{
        rule,
        what(p) + " is in the " + (p.pair_class == PairClass::only_base ? "base" : "test") +
            " run only at step " + s +
            (!p.untied ? ""
                       : std::string(", where ") +
                             (p.untied->named ? "the other run ties it to param "
                                              : "it holds bit for bit the values of param ") +
                             p.untied->param + ": tied weights untied (see LIKELY CAUSE)"),
        std::move(ev)};
  if (rule == Rule::nonfinite) {
    const bool in_test = nonfinite(p.test) > 0;
    const Record& r = (in_test ? p.test : p.base).merged.record;
    return Cause{rule,
                 "NaN/Inf in " + what(p) + " at step " + s + ", " + (in_test ? "test" : "base") +
                     " run only (nan=" + std::to_string(r.stats.nan) +
                     " inf=" + std::to_string(r.stats.inf) + ")",
                 std::move(ev)};
  }
  return Cause{rule, what(p) + " differs at step " + s, std::move(ev)};
}

}  // namespace probe::differ
