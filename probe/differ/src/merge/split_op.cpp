// Op records of a split scope: merged into the wholes their pieces may tile, viewed against the
// other run's record (split_op.h).
#include "differ/detail/merge/split_op.h"

#include <algorithm>
#include <cmath>

#include "differ/detail/figures.h"
#include "differ/detail/merge/compose.h"
#include "differ/detail/read/record_text.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace {

bool is_tensor(const Record& r) { return r.state == Record::State::tensor && r.stats.supported(); }

// Every rank of the split once, each holding a hashed tensor of one shape with a hash per dim.
bool complete(const std::vector<Part>& parts) {
  const Record& first = *parts[0].record;
  const auto n = first.split.size;
  if (static_cast<std::int64_t>(parts.size()) != n) return false;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Record& r = *parts[i].record;
    if (r.split.size != n || r.split.rank != static_cast<std::int64_t>(i) || !is_tensor(r) ||
        r.stats.shape != first.stats.shape || r.split.output.size() != first.stats.shape.size())
      return false;
  }
  return true;
}

bool replicated(const std::vector<Part>& parts) {
  const Record& first = *parts[0].record;
  for (const Part& p : parts) {
    const Record& r = *p.record;
    if (r.state != first.state ||
        (is_tensor(r) && (r.stats.hash != first.stats.hash || r.stats.shape != first.stats.shape)))
      return false;
  }
  return true;
}

// Per dim: the whole the pieces tile when cut along it (piece r at r * extent), and the
// figures of that whole (the same elements whatever the dim: composed once, along dim 0).
void compose_wholes(const std::vector<Part>& parts, SplitOp& s) {
  const auto& shape = parts[0].record->stats.shape;
  const auto n = static_cast<std::int64_t>(parts.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    SplitOp::Whole w{shape, 0};
    w.shape[d] *= n;
    for (const Part& p : parts) w.hash += p.record->split.output[d];
    s.wholes.push_back(std::move(w));
  }
  if (shape.empty()) {
    s.combined = s.local;
    return;
  }
  std::vector<TensorStats> pieces;
  pieces.reserve(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    pieces.push_back(parts[i].record->stats);
    pieces.back().hash = parts[i].record->split.output[0];
    pieces.back().shard =
        Shard::along(s.wholes[0].shape, 0, static_cast<std::int64_t>(i) * shape[0]);
  }
  std::vector<const TensorStats*> ptrs;
  for (const auto& p : pieces) ptrs.push_back(&p);
  s.combined = TensorStats{};
  compose_shards_into(ptrs, s.combined);
}

// Per input: the hash the ranks share (a replicated input), and each dim's composed hash.
void input_wholes(const std::vector<Part>& parts, bool all_ranks, SplitOp& s) {
  const Record& first = *parts[0].record;
  for (std::size_t i = 0; i < first.inputs.size(); ++i) {
    std::vector<std::uint64_t> hashes;
    bool same = true;
    for (const Part& p : parts)
      same = same && i < p.record->inputs.size() && p.record->inputs[i] &&
             p.record->inputs[i] == first.inputs[i];
    if (same) hashes.push_back(*first.inputs[i]);
    std::size_t dims = i < first.split.inputs.size() ? first.split.inputs[i].size() : 0;
    for (const Part& p : parts)
      dims =
          std::min(dims, i < p.record->split.inputs.size() ? p.record->split.inputs[i].size() : 0);
    for (std::size_t d = 0; all_ranks && d < dims; ++d) {
      std::uint64_t h = 0;
      for (const Part& p : parts) h += p.record->split.inputs[i][d];
      hashes.push_back(h);
    }
    s.inputs.push_back(std::move(hashes));
  }
}

bool shares_hash(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) {
  for (auto x : a)
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  return false;
}

void shapes_of(const Merged& m, std::vector<const std::vector<std::int64_t>*>& out) {
  out.clear();
  out.push_back(&m.record.stats.shape);
  if (m.split.empty()) return;
  out.push_back(&m.split.local.shape);
  for (const auto& w : m.split.wholes) out.push_back(&w.shape);
}

void take_view(Merged& m, const TensorStats& figures, const std::vector<std::int64_t>& shape,
               std::uint64_t hash) {
  m.record.stats = figures;
  m.record.stats.shape = shape;
  m.record.stats.hash = hash;
}

bool close(double a, double b, double scale) { return std::fabs(a - b) <= 1e-12 * scale; }

// The same elements (min, max, counts bitwise; norm and mean up to the rounding of combining
// the pieces' figures in float64) in other places.
bool same_elements_elsewhere(const TensorStats& whole, const TensorStats& other) {
  if (whole.hash == other.hash || whole.dtype != other.dtype || whole.nan != other.nan ||
      whole.inf != other.inf || !same_bits(whole.min, other.min) ||
      !same_bits(whole.max, other.max))
    return false;
  // Inf hides what moved
  if (!std::isfinite(other.norm) || !std::isfinite(other.mean)) return false;
  const double n = static_cast<double>(std::max<std::int64_t>(other.numel(), 1));
  return close(whole.norm, other.norm, std::fabs(other.norm)) &&
         close(whole.mean, other.mean,
               std::fabs(other.mean) + std::fabs(other.norm) / std::sqrt(n));
}

// The whole of the other's shape, or null (cut along two dims, the wholes' shapes differ).
const SplitOp::Whole* whole_like(const SplitOp& sp, const TensorStats& other) {
  for (const auto& w : sp.wholes)
    if (w.shape == other.shape) return &w;
  return nullptr;
}

// Each rank's output is a summand of the other's tensor: every rank's, of its shape, differing.
bool summands_of(const SplitOp& sp, const TensorStats& other) {
  return sp.complete && !sp.replicated && sp.local.shape == other.shape && !whole_like(sp, other);
}

// A split record `s` against the other run's output figures `other` (of no split scope); false
// where its pieces hold the other's elements in another arrangement.
bool view_against(Merged& s, const TensorStats& other) {
  const SplitOp& sp = s.split;
  if (sp.replicated && sp.local.shape == other.shape) {
    s.record.stats = sp.local;
    return true;
  }
  if (const SplitOp::Whole* pick = whole_like(sp, other)) {
    take_view(s, sp.combined, pick->shape, pick->hash);
    // Pieces along a dim that flattens a split dim with a whole one ([B*H, T, d] of a batched
    // matmul over heads) tile another arrangement than the other run's: no view to compare.
    return !same_elements_elsewhere(s.record.stats, other);
  }
  if (summands_of(sp, other)) {
    take_view(s, sp.combined, sp.local.shape, s.record.stats.hash);
    s.partial = PartialSum{sp.size, -1, sp.summand_norms};
  }
  return true;
}

// A split record's views: its replicated output, the whole along each dim.
struct View {
  const TensorStats* figures;
  const std::vector<std::int64_t>* shape;
  std::uint64_t hash;
};

std::vector<View> views_of(const SplitOp& sp) {
  std::vector<View> views;
  if (sp.replicated) views.push_back({&sp.local, &sp.local.shape, sp.local.hash});
  for (const auto& w : sp.wholes) views.push_back({&sp.combined, &w.shape, w.hash});
  return views;
}

// Both split: a view of each of one shape, one whose hashes agree first; false where none has
// the other's shape, or the pair holds the same elements in other places.
bool views_of_both(Merged& b, Merged& t) {
  const auto vb = views_of(b.split), vt = views_of(t.split);
  const View *pb = nullptr, *pt = nullptr;
  for (int pass = 0; pass < 2 && !pb; ++pass)
    for (const View& x : vb)
      for (const View& y : vt)
        if (!pb && *x.shape == *y.shape && (pass == 1 || x.hash == y.hash)) {
          pb = &x;
          pt = &y;
        }
  if (!pb) return false;
  take_view(b, *pb->figures, *pb->shape, pb->hash);
  take_view(t, *pt->figures, *pt->shape, pt->hash);
  return !same_elements_elsewhere(t.record.stats, b.record.stats);
}

}  // namespace

bool is_split_op_group(const Group& g) {
  return g.kind == Kind::op && std::any_of(g.parts.begin(), g.parts.end(),
                                           [](const Part& p) { return !p.record->split.empty(); });
}

void merge_split_op(Group& g, MergeContext& ctx, Merged& m) {
  auto& parts = g.parts;
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
    return a.record->split.rank < b.record->split.rank;
  });
  SplitOp& s = m.split;  // every field set: a Merged is reused across steps
  s.size = std::max<std::int64_t>(parts.back().record->split.size, 1);
  s.wholes.clear();
  s.inputs.clear();
  s.local = parts[0].record->stats;
  s.replicated = replicated(parts);
  s.complete = complete(parts);
  s.summand_norms = 0;
  for (const Part& p : parts) s.summand_norms += p.record->stats.norm;
  if (s.complete) compose_wholes(parts, s);
  else s.combined = s.local;
  if (!s.complete && ctx.compared && ctx.issues)
    ctx.issues->add(
        {Issue::Severity::warning, "split_incomplete", *ctx.label, ctx.step,
         "step " + std::to_string(ctx.step) + " " + key_text(g.kind, g.name, g.mb) + ": " +
             std::to_string(parts.size()) + " record(s) of a split scope over " +
             std::to_string(s.size) +
             " ranks (each rank once, alike in shape, with a hash per dim, makes the whole): " +
             "compared as one rank's record"});
  input_wholes(parts, s.complete, s);
  swap(m.record, *parts[0].record);
  if (!s.replicated && !s.wholes.empty())
    take_view(m, s.combined, s.wholes[0].shape, s.wholes[0].hash);
}

const std::vector<std::uint64_t>& input_hashes(const Merged& m, std::size_t i,
                                               std::vector<std::uint64_t>& scratch) {
  if (!m.split.empty() && i < m.split.inputs.size()) return m.split.inputs[i];
  scratch.clear();
  if (i < m.record.inputs.size() && m.record.inputs[i]) scratch.push_back(*m.record.inputs[i]);
  return scratch;
}

bool same_input(const Merged& a, const Merged& b, std::size_t i) {
  if (a.split.empty() && b.split.empty())
    return i < a.record.inputs.size() && i < b.record.inputs.size() &&
           a.record.inputs[i] == b.record.inputs[i];
  std::vector<std::uint64_t> sa, sb;
  return shares_hash(input_hashes(a, i, sa), input_hashes(b, i, sb));
}

std::size_t first_differing_input(const Merged& a, const Merged& b) {
  std::size_t i = 0;
  while (i < a.record.inputs.size() && i < b.record.inputs.size() && same_input(a, b, i)) ++i;
  return i;
}

bool inputs_agree(const Merged& a, const Merged& b) {
  if (a.record.inputs.size() != b.record.inputs.size()) return false;
  for (std::size_t i = 0; i < a.record.inputs.size(); ++i)
    if (!same_input(a, b, i)) return false;
  return true;
}

void output_hashes(const Merged& m, std::vector<std::uint64_t>& out) {
  out.clear();
  if (!is_tensor(m.record)) return;
  out.push_back(m.record.stats.hash);
  if (m.split.empty()) return;
  if (m.split.replicated) out.push_back(m.split.local.hash);
  for (const auto& w : m.split.wholes) out.push_back(w.hash);
}

bool outputs_agree(const Merged& a, const Merged& b) {
  std::vector<std::uint64_t> ha, hb;
  output_hashes(a, ha);
  output_hashes(b, hb);
  return shares_hash(ha, hb);
}

bool shapes_compatible(const Merged& a, const Merged& b) {
  if (a.record.state != b.record.state) return false;
  std::vector<const std::vector<std::int64_t>*> sa, sb;
  shapes_of(a, sa);
  shapes_of(b, sb);
  for (const auto* x : sa)
    for (const auto* y : sb)
      if (*x == *y) return true;
  return false;
}

bool choose_views(Merged& base, Merged& test) {
  if (base.split.empty() && test.split.empty()) return true;
  if (!is_tensor(base.record) || !is_tensor(test.record)) return true;
  if (!base.split.empty() && !test.split.empty()) return views_of_both(base, test);
  return !test.split.empty() ? view_against(test, base.record.stats)
                             : view_against(base, test.record.stats);
}

}  // namespace probe::differ
