// The replay region of an op finding (docs/diff-logs.md, "Replay verdict").
#include "differ/detail/judge/replay_region.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "differ/detail/merge/split_op.h"

namespace probe::differ {
namespace {

bool in_both(const Pair& p) { return p.base.present && p.test.present; }

bool same_place(const Pair& a, const Pair& b) { return a.mb == b.mb && phase_of(a) == phase_of(b); }

// Outputs both runs hold bitwise: those of aligned op pairs whose outputs agree.
std::unordered_set<std::uint64_t> common_values(const std::vector<Pair>& pairs, const Pair& at) {
  std::unordered_set<std::uint64_t> common;
  std::vector<std::uint64_t> hashes;
  for (const Pair& p : pairs) {
    if (p.kind != Kind::op || !in_both(p) || !same_place(p, at) ||
        !outputs_agree(p.base.merged, p.test.merged))
      continue;
    output_hashes(p.base.merged, hashes);
    common.insert(hashes.begin(), hashes.end());
  }
  return common;
}

// One run's side of the step's op pairs: which pairs made each output hash.
struct RunOps {
  bool base = true;
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> producers;
  const Side& side(const Pair& p) const { return base ? p.base : p.test; }
  const std::vector<std::optional<std::uint64_t>>& inputs(std::size_t k,
                                                          const std::vector<Pair>& pairs) const {
    return side(pairs[k]).merged.record.inputs;
  }
  // The op that made `value` for the op `consumer`: not the consumer itself, and not an op that
  // hands on the value it takes (a view, a contiguous copy: the hash has no shape); the last
  // such before it, else any. Nullopt where no traced op made it.
  std::optional<std::size_t> producer(std::uint64_t value, std::optional<std::size_t> consumer,
                                      const std::vector<Pair>& pairs) const {
    const auto it = producers.find(value);
    if (it == producers.end()) return std::nullopt;
    std::optional<std::size_t> chosen;
    for (std::size_t k : it->second) {
      if (k == consumer) continue;
      const auto& in = inputs(k, pairs);
      if (std::find(in.begin(), in.end(), std::optional(value)) != in.end()) continue;
      if (!chosen || !consumer || k < *consumer) chosen = k;
    }
    return chosen;
  }
};

RunOps run_ops(const std::vector<Pair>& pairs, const Pair& at, bool base) {
  RunOps ops{base, {}};
  std::vector<std::uint64_t> hashes;
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const Pair& p = pairs[k];
    if (p.kind != Kind::op || !ops.side(p).present || !same_place(p, at) ||
        (p.set_aside && in_both(p)))
      continue;
    output_hashes(ops.side(p).merged, hashes);
    for (std::uint64_t h : hashes) ops.producers[h].push_back(k);
  }
  return ops;
}

ReplayOp replay_op_of(const Pair& p, const Merged& m) {
  ReplayOp op;
  op.name = p.name;
  // The rank whose record `m` holds (where replicas disagree, the first of those it came from).
  op.rank = !m.value_ranks.empty() ? m.value_ranks.front() : m.ranks.empty() ? 0 : m.ranks.front();
  op.dump = m.record.dump;
  op.output = m.record.stats.hash;
  op.inputs = m.record.inputs;
  op.split = !m.split.empty();
  return op;
}

// One run's ops that `value` descends from, back to values both runs hold (or no traced op
// made), producers first; `stop` (a pair index) is taken but not looked behind.
struct Walk {
  const std::vector<Pair>& pairs;
  const RunOps& ops;
  const std::unordered_set<std::uint64_t>& common;
  std::optional<std::size_t> stop;
  std::vector<std::size_t> order;  // pair indices, producers first
  std::unordered_set<std::size_t> seen;
  std::vector<std::uint64_t> inputs;
  bool inputs_differ = false;
  bool too_wide = false;

  // `value`, taken by the op `consumer` (nullopt: the region's end).
  void from(std::uint64_t value, std::optional<std::size_t> consumer) {
    const auto k = common.count(value) ? std::nullopt : ops.producer(value, consumer, pairs);
    if (!k) {
      inputs.push_back(value);
      return;
    }
    if (seen.count(*k)) return;
    if (seen.size() >= ReplayRegion::kMaxOps) {
      too_wide = true;
      return;
    }
    seen.insert(*k);
    if (*k == stop) inputs_of_stop();
    else
      for (const auto& in : ops.inputs(*k, pairs))
        if (in) from(*in, k);
    order.push_back(*k);
  }
  // `stop`'s own inputs, not looked behind: one a traced op made that the runs do not hold alike
  // is a difference the region inherits.
  void inputs_of_stop() {
    for (const auto& in : ops.inputs(*stop, pairs)) {
      if (!in) continue;
      inputs.push_back(*in);
      if (!common.count(*in) && ops.producer(*in, stop, pairs)) inputs_differ = true;
    }
  }
};

std::optional<std::uint64_t> input_hash(const Merged& m, std::size_t i) {
  return i < m.record.inputs.size() ? m.record.inputs[i] : std::nullopt;
}

// The first op pair after `start` in its place whose inputs differ.
std::optional<std::size_t> end_after(const std::vector<Pair>& pairs, std::size_t start) {
  for (std::size_t k = start + 1; k < pairs.size(); ++k) {
    const Pair& p = pairs[k];
    if (p.kind == Kind::op && in_both(p) && !p.set_aside && same_place(p, pairs[start]) &&
        !inputs_agree(p.base.merged, p.test.merged))
      return k;
  }
  return std::nullopt;
}

void finish_side(const Walk& w, const RunOps& ops, std::vector<ReplayOp>& region,
                 std::vector<std::uint64_t>& inputs) {
  for (std::size_t k : w.order)
    region.push_back(replay_op_of(w.pairs[k], ops.side(w.pairs[k]).merged));
  inputs = w.inputs;
  std::sort(inputs.begin(), inputs.end());
  inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
}

}  // namespace

ReplayRegion replay_region(std::int64_t step, const std::vector<Pair>& pairs, std::size_t start,
                           bool starts_here) {
  const Pair& s = pairs[start];
  ReplayRegion region;
  region.step = step;
  region.mb = s.mb;
  region.phase = phase_of(s);
  region.root_cause = s.name;
  const auto common = common_values(pairs, s);
  const RunOps base_ops = run_ops(pairs, s, true), test_ops = run_ops(pairs, s, false);
  // An op whose inputs agree starts the region; otherwise it ends it, and the region is what
  // made its differing input.
  const bool starts = starts_here || (in_both(s) && inputs_agree(s.base.merged, s.test.merged));
  const std::optional<std::size_t> end =
      starts ? end_after(pairs, start) : std::optional<std::size_t>(start);
  Walk base{pairs, base_ops, common, starts ? std::optional(start) : std::nullopt, {}, {},
            {},    false,    false};
  Walk test{pairs, test_ops, common, base.stop, {}, {}, {}, false, false};
  if (end) {
    const Pair& e = pairs[*end];
    const std::size_t i = first_differing_input(e.base.merged, e.test.merged);
    const auto b = input_hash(e.base.merged, i), t = input_hash(e.test.merged, i);
    if (b && t) {
      base.from(*b, std::nullopt);
      test.from(*t, std::nullopt);
      region.end = e.name;
      region.base_output = *b;
      region.test_output = *t;
    }
  }
  // No traced op after it takes what it made (or what it made does not reach the next one):
  // the op alone, up to its own output.
  const bool reached = base.seen.count(start) && test.seen.count(start);
  if (starts && (region.end.empty() || !reached)) {
    for (Walk* w : {&base, &test}) {
      w->order = {start};
      w->inputs.clear();
      w->inputs_differ = w->too_wide = false;
      w->inputs_of_stop();
    }
    region.end.clear();
    region.base_output = s.base.merged.record.stats.hash;
    region.test_output = s.test.merged.record.stats.hash;
  }
  finish_side(base, base_ops, region.base, region.base_inputs);
  finish_side(test, test_ops, region.test, region.test_inputs);
  region.inputs_differ = base.inputs_differ || test.inputs_differ;
  region.too_wide = base.too_wide || test.too_wide;
  return region;
}

bool ReplayRegion::dumped() const {
  for (const auto* ops : {&base, &test})
    for (const auto& op : *ops)
      if (op.dump.empty()) return false;
  return !base.empty() || !test.empty();
}

}  // namespace probe::differ
