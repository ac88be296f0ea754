// Op records aligned by what they compute (op_match.h).
#include "differ/detail/pair/op_match.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "differ/detail/merge/split_op.h"

namespace probe::differ {
namespace {

// Aligning two sequences costs their lengths' product: beyond this, records pair by name.
constexpr std::size_t kMaxCells = std::size_t{1} << 22;

// "layers.0.attention/aten::narrow#2" -> prefix "layers.0.attention", type "aten::narrow";
// a backward op "<forward op>/aten::mm#1.0" -> prefix "<forward op>", type "aten::mm.0" (the
// output index stays: the outputs of one op are different tensors).
std::string_view prefix_of(const std::string& name) {
  const auto slash = name.rfind('/');
  return slash == std::string::npos ? std::string_view() : std::string_view(name).substr(0, slash);
}

std::string type_of(const std::string& name) {
  const auto slash = name.rfind('/');
  const std::string_view last =
      std::string_view(name).substr(slash == std::string::npos ? 0 : slash + 1);
  const auto hash = last.rfind('#');
  if (hash == std::string_view::npos) return std::string(last);
  std::string type(last.substr(0, hash));
  const auto dot = last.find('.', hash);
  if (dot != std::string_view::npos) type += last.substr(dot);
  return type;
}

// The op a record is an output of: its name without the output index.
std::string op_of(const std::string& name) {
  const auto hash = name.rfind('#');
  const auto dot = hash == std::string::npos ? std::string::npos : name.find('.', hash);
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// One run's op records of one microbatch, phase and scope, in execution order.
using Sequences = std::map<std::string, std::vector<std::size_t>>;

std::string sequence_key(const Merged& m, std::string_view prefix) {
  std::string key = m.record.phase == Phase::backward ? "b|" : "f|";
  key += m.record.microbatch ? std::to_string(*m.record.microbatch) : "-";
  key += '|';
  key += prefix;
  return key;
}

// How well two records align: 0 not at all (another op type, no shape in common); more for
// the same inputs (the same computation), and for the same output.
int affinity(const Merged& b, const Merged& t, const std::string& type_b,
             const std::string& type_t) {
  if (type_b != type_t || !shapes_compatible(b, t)) return 0;
  return 1 + (inputs_agree(b, t) ? 4 : 0) + (outputs_agree(b, t) ? 1 : 0);
}

bool same_names(const std::vector<Merged>& base, const std::vector<std::size_t>& bi,
                const std::vector<Merged>& test, const std::vector<std::size_t>& ti) {
  if (bi.size() != ti.size()) return false;
  for (std::size_t k = 0; k < bi.size(); ++k)
    if (base[bi[k]].record.name != test[ti[k]].record.name || !base[bi[k]].split.empty() ||
        !test[ti[k]].split.empty())
      return false;
  return true;
}

// The order-keeping alignment of most affinity (a longest common subsequence, weighted): pairs
// of indices into bi and ti.
std::vector<std::pair<std::size_t, std::size_t>> align(const std::vector<Merged>& base,
                                                       const std::vector<std::size_t>& bi,
                                                       const std::vector<Merged>& test,
                                                       const std::vector<std::size_t>& ti) {
  const std::size_t n = bi.size(), m = ti.size();
  std::vector<std::string> base_types(n), test_types(m);
  for (std::size_t i = 0; i < n; ++i) base_types[i] = type_of(base[bi[i]].record.name);
  for (std::size_t j = 0; j < m; ++j) test_types[j] = type_of(test[ti[j]].record.name);
  // affinity_of[i*m + j]: record i's with record j's; best[at(i, j)]: the most affinity an
  // alignment of the first i and first j records reaches.
  std::vector<int> affinity_of(n * m), best((n + 1) * (m + 1), 0);
  const auto at = [m](std::size_t i, std::size_t j) { return i * (m + 1) + j; };
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const int a = affinity_of[(i - 1) * m + (j - 1)] =
          affinity(base[bi[i - 1]], test[ti[j - 1]], base_types[i - 1], test_types[j - 1]);
      best[at(i, j)] = std::max(
          {best[at(i - 1, j)], best[at(i, j - 1)], a > 0 ? best[at(i - 1, j - 1)] + a : 0});
    }
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for (std::size_t i = n, j = m; i > 0 && j > 0;) {
    const int a = affinity_of[(i - 1) * m + (j - 1)];
    if (a > 0 && best[at(i, j)] == best[at(i - 1, j - 1)] + a) {
      pairs.emplace_back(i - 1, j - 1);
      --i;
      --j;
    } else if (best[at(i, j)] == best[at(i - 1, j)]) {
      --i;
    } else {
      --j;
    }
  }
  std::reverse(pairs.begin(), pairs.end());
  return pairs;
}

// Which record of a run made each output hash first (every view of a split record).
std::unordered_map<std::uint64_t, std::size_t> producers(const std::vector<Merged>& run) {
  std::unordered_map<std::uint64_t, std::size_t> out;
  std::vector<std::uint64_t> hashes;
  for (std::size_t i = 0; i < run.size(); ++i) {
    if (run[i].record.kind != Kind::op) continue;
    output_hashes(run[i], hashes);
    for (std::uint64_t h : hashes) out.try_emplace(h, i);
  }
  return out;
}

// Norms of two outputs this close are one tensor's up to rounding: rounding moves a norm by far
// less (the noise of a layout is ~1e-7 relative), a summand more or less by far more (a partial
// sum of gradients lacking one differs by 0.5 in the example's backward).
constexpr double kSameNorm = 1e-3;

bool same_tensor_up_to_rounding(const Merged& a, const Merged& b) {
  if (a.record.state != Record::State::tensor || b.record.state != Record::State::tensor ||
      !shapes_compatible(a, b))
    return false;
  const double x = a.record.stats.norm, y = b.record.stats.norm;
  if (!std::isfinite(x) || !std::isfinite(y)) return false;
  return std::fabs(x - y) <= kSameNorm * std::max(std::fabs(x), std::fabs(y));
}

class OpMatcher {
 public:
  OpMatcher(std::vector<Merged>& base, std::vector<Merged>& test)
      : base_(base), test_(test), partner_(test.size(), kNone) {}

  void run() {
    // Forward first: a test backward op's sequence is named after its forward op's partner.
    for (const Phase phase : {Phase::forward, Phase::backward}) {
      const Sequences b = sequences(base_, phase, false), t = sequences(test_, phase, true);
      std::vector<std::size_t> matched;  // test records aligned by what they compute in this phase
      for (const auto& [key, ti] : t)
        if (const auto it = b.find(key); it != b.end()) match(it->second, ti, matched);
      drop_foreign_inputs(matched);
      if (phase == Phase::forward) name_forward_ops();
    }
    apply();
  }

 private:
  static constexpr std::size_t kNone = SIZE_MAX;

  // A run's op records of `phase` by sequence. A test backward op's scope is its forward op,
  // named as the base record it was aligned with (or, unaligned, as no base op is).
  Sequences sequences(const std::vector<Merged>& run, Phase phase, bool is_test) const {
    Sequences out;
    for (std::size_t i = 0; i < run.size(); ++i) {
      const Merged& m = run[i];
      if (m.record.kind != Kind::op || m.record.phase.value_or(Phase::forward) != phase) continue;
      std::string prefix(prefix_of(m.record.name));
      if (is_test && phase == Phase::backward) {
        if (auto it = forward_names_.find(prefix); it != forward_names_.end()) prefix = it->second;
        else if (forward_ops_.count(prefix)) prefix += "\x01unaligned";
      }
      out[sequence_key(m, prefix)].push_back(i);
    }
    return out;
  }

  // The same names in the same order (and no split record) pair by name, as every record does;
  // so do sequences too long to align (kMaxCells). Only the others are aligned, and checked.
  void match(const std::vector<std::size_t>& bi, const std::vector<std::size_t>& ti,
             std::vector<std::size_t>& matched) {
    if (same_names(base_, bi, test_, ti) || bi.size() * ti.size() > kMaxCells) {
      std::unordered_map<std::string_view, std::size_t> by_name;
      for (std::size_t k : bi) by_name.emplace(base_[k].record.name, k);
      for (std::size_t l : ti)
        if (auto it = by_name.find(test_[l].record.name); it != by_name.end())
          partner_[l] = it->second;
      return;
    }
    for (const auto& [k, l] : align(base_, bi, test_, ti)) {
      partner_[ti[l]] = bi[k];
      matched.push_back(ti[l]);
    }
  }

  // The record of its run that made input `i` of record `at` of `run`, or kNone where an
  // untraced op did (a traced one that comes later gives the same values again, as a backward
  // op may: the gradient of x^1).
  static std::size_t maker(const std::vector<Merged>& run, std::size_t at, std::size_t i,
                           const std::unordered_map<std::uint64_t, std::size_t>& made) {
    std::vector<std::uint64_t> scratch;
    for (std::uint64_t h : input_hashes(run[at], i, scratch))
      if (auto it = made.find(h); it != made.end() && it->second < at) return it->second;
    return kNone;
  }

  // Ops aligned by type and shape whose inputs differ compute the same only where each differing
  // input is the same tensor up to rounding in both runs: made by ops aligned with each other,
  // by an untraced op in either run (the input of a traced scope, a collective), or by other
  // ops whose outputs have the same shape and a norm within kSameNorm (a gradient accumulated in
  // another order, a re-layout). Else they are other computations (partial sums of other
  // gradients where the backward adds them as they arrive, in an order that follows the graph)
  // and stay unaligned. Repeated until no pair is dropped: a dropped op's partner no longer
  // vouches for its output.
  void drop_foreign_inputs(const std::vector<std::size_t>& matched) {
    if (matched.empty()) return;
    if (base_made_.empty() && test_made_.empty()) {  // only where some pair is to be checked
      base_made_ = producers(base_);
      test_made_ = producers(test_);
    }
    for (bool dropped = true; dropped;) {
      dropped = false;
      for (std::size_t ti : matched)
        if (partner_[ti] != kNone && foreign_input(partner_[ti], ti)) {
          partner_[ti] = kNone;
          dropped = true;
        }
    }
  }

  bool foreign_input(std::size_t bi, std::size_t ti) const {
    const Merged &b = base_[bi], &t = test_[ti];
    for (std::size_t i = 0; i < b.record.inputs.size() && i < t.record.inputs.size(); ++i) {
      if (same_input(b, t, i)) continue;
      const std::size_t mb = maker(base_, bi, i, base_made_), mt = maker(test_, ti, i, test_made_);
      if (mb == kNone || mt == kNone || partner_[mt] == mb) continue;
      if (!same_tensor_up_to_rounding(base_[mb], test_[mt])) return true;
    }
    return false;
  }

  void name_forward_ops() {
    for (std::size_t ti = 0; ti < test_.size(); ++ti) {
      const Merged& t = test_[ti];
      if (t.record.kind != Kind::op || t.record.phase.value_or(Phase::forward) != Phase::forward)
        continue;
      const std::string op = op_of(t.record.name);
      forward_ops_.insert(op);
      // An op's first output aligned names it (its other outputs may align with other ops').
      if (partner_[ti] != kNone)
        forward_names_.try_emplace(op, op_of(base_[partner_[ti]].record.name));
    }
  }

  // Each aligned test record takes its partner's key and name, and both their views; a test op
  // record left unaligned gets a key no base record has, so that it pairs with none by name.
  void apply() {
    std::unordered_set<std::string_view> base_keys;
    for (const Merged& b : base_)
      if (b.record.kind == Kind::op) base_keys.insert(b.key);
    std::vector<bool> unaligned(test_.size(), false), has_base_key(test_.size(), false);
    for (std::size_t ti = 0; ti < test_.size(); ++ti) {
      has_base_key[ti] = test_[ti].record.kind == Kind::op && base_keys.count(test_[ti].key);
      unaligned[ti] = partner_[ti] == kNone && has_base_key[ti];
    }
    base_keys.clear();  // views of the base keys, which test keys are about to copy
    for (std::size_t ti = 0; ti < test_.size(); ++ti) {
      Merged& t = test_[ti];
      if (partner_[ti] != kNone && !choose_views(base_[partner_[ti]], t)) {
        unaligned[ti] = has_base_key[ti];
        partner_[ti] = kNone;
      }
      if (unaligned[ti]) t.key += "\x01unaligned";
      if (partner_[ti] == kNone) continue;
      Merged& b = base_[partner_[ti]];
      t.key = b.key;
      t.record.name = b.record.name;
    }
  }

  std::vector<Merged>& base_;
  std::vector<Merged>& test_;
  // Which record made each output hash, per run: built when the first aligned pair is checked.
  std::unordered_map<std::uint64_t, std::size_t> base_made_, test_made_;
  std::vector<std::size_t> partner_;  // per test record: its base partner, or kNone
  std::unordered_map<std::string, std::string> forward_names_;  // test forward op -> its partner's
  std::unordered_set<std::string> forward_ops_;                 // every test forward op
};

}  // namespace

void match_ops(std::vector<Merged>& base, std::vector<Merged>& test) {
  const auto has_op = [](const std::vector<Merged>& run) {
    return std::any_of(run.begin(), run.end(),
                       [](const Merged& m) { return m.record.kind == Kind::op; });
  };
  if (!has_op(base) || !has_op(test)) return;
  OpMatcher(base, test).run();
}

}  // namespace probe::differ
