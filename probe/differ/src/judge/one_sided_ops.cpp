// Ops of one run only on a value's path (one_sided_ops.h).
//
// The bound. Op R runs in both runs, its outputs y_A and y_B within relative c of each other
// (c: the ceiling of R's pair, the most its noise may hold; 0 where R's outputs are equal). Run A
// passes y_A through an op Q of its own before the next record reads it; run B reads y_B. Were Q
// a copy, a view or a layout change, Q(y_A) = y_A; a dtype round trip moves each element by at
// most u of the coarser dtype: ||Q(y_A) - y_A|| <= u ||y_A|| <= u (1 + c) ||y_B||. So
// ||Q(y_A) - y_B|| / ||y_B|| <= c + u (1 + c) <= c + 2u. The figures show the norms' difference,
// which only bounds that from below: where it is larger than c + 2u, Q computed something the
// other run does not (a scaling, an activation, a dropout) and the runs compute different
// functions there, whatever the noise upstream.
#include "differ/detail/judge/one_sided_ops.h"

#include <cmath>

#include "differ/detail/pair/classify.h"
#include "differ/detail/judge/explain.h"
#include "differ/detail/merge/split_op.h"

namespace probe::differ {
namespace {

bool in_both(const Pair& p) { return p.base.present && p.test.present; }

const Side& side(const Pair& p, bool test) { return test ? p.test : p.base; }

// A record that holds its whole tensor, on one rank or replicated: no partial sum, no piece of a
// split scope (a shard's norm is not the whole's).
bool whole(const Side& s) {
  return s.present && s.merged.record.state == Record::State::tensor && s.merged.partial.empty() &&
         s.merged.split.size == 0;
}

bool takes(const Merged& op, std::uint64_t hash) {
  std::vector<std::uint64_t> scratch;
  for (std::size_t i = 0; i < op.record.inputs.size(); ++i)
    for (std::uint64_t h : input_hashes(op, i, scratch))
      if (h == hash) return true;
  return false;
}

}  // namespace

void OneSidedOps::start_step(const std::vector<Pair>& pairs) {
  for (auto& m : one_sided_) m.clear();
  for (auto& m : paired_) m.clear();
  for (const Pair& p : pairs) {
    if (p.kind != Kind::op || in_both(p)) continue;
    const bool test = p.test.present;
    if (whole(side(p, test)))
      one_sided_[test].try_emplace(side(p, test).merged.record.stats.hash, &p);
  }
}

void OneSidedOps::note_paired(const Pair& p) {
  if (p.kind != Kind::op || !in_both(p) || p.set_aside) return;
  for (bool test : {false, true})
    if (whole(side(p, test))) paired_[test].try_emplace(side(p, test).merged.record.stats.hash, &p);
}

std::optional<OneSidedChange> OneSidedOps::through(std::uint64_t own, std::uint64_t other,
                                                   bool in_test) const {
  const auto q = one_sided_[in_test].find(own);
  const auto r = paired_[!in_test].find(other);
  if (q == one_sided_[in_test].end() || r == paired_[!in_test].end()) return std::nullopt;
  const Pair &one_sided = *q->second, &producer = *r->second;
  // Q takes R's output of its own run.
  if (!whole(side(producer, in_test)) ||
      !takes(side(one_sided, in_test).merged, side(producer, in_test).merged.record.stats.hash))
    return std::nullopt;
  double c = 0;
  if (is_divergence(producer.pair_class)) {
    if (!producer.why.rule || producer.why.bug) return std::nullopt;  // a bug upstream: inherited
    c = std::max(producer.why.ceiling, producer.rel_diff);
  }
  const TensorStats &changed = side(one_sided, in_test).merged.record.stats,
                    &fed = side(producer, !in_test).merged.record.stats;
  if (!(fed.norm > 0) || !std::isfinite(fed.norm) || !std::isfinite(changed.norm))
    return std::nullopt;
  const double u = std::max(unit_roundoff(changed.dtype), unit_roundoff(fed.dtype));
  const double bound = c + 2 * u;
  // The comparator's relative difference (over the larger norm) is at most the one above.
  const double change = rel_diff(changed.norm, fed.norm);
  if (!(change > bound)) return std::nullopt;
  return OneSidedChange{one_sided.name, in_test ? "test" : "base", producer.name, change, bound};
}

std::optional<OneSidedChange> OneSidedOps::change(const Pair& p) const {
  if (!in_both(p)) return std::nullopt;
  if (p.kind == Kind::op) {
    if (p.base.merged.record.inputs.size() != p.test.merged.record.inputs.size())
      return std::nullopt;
    std::vector<std::uint64_t> base_scratch, test_scratch;
    for (std::size_t i = 0; i < p.base.merged.record.inputs.size(); ++i) {
      if (same_input(p.base.merged, p.test.merged, i)) continue;
      const auto& b = input_hashes(p.base.merged, i, base_scratch);
      const auto& t = input_hashes(p.test.merged, i, test_scratch);
      if (b.empty() || t.empty()) continue;
      for (bool in_test : {true, false})
        if (auto c =
                through(in_test ? t.front() : b.front(), in_test ? b.front() : t.front(), in_test))
          return c;
    }
    return std::nullopt;
  }
  if (p.kind != Kind::tap && p.kind != Kind::output) return std::nullopt;
  if (!whole(p.base) || !whole(p.test)) return std::nullopt;
  for (bool in_test : {true, false})
    if (auto c = through(side(p, in_test).merged.record.stats.hash,
                         side(p, !in_test).merged.record.stats.hash, in_test))
      return c;
  return std::nullopt;
}

}  // namespace probe::differ
