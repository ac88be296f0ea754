// Shards and replicas: composing shard records into the whole tensor, checking that ranks
// holding the same shard (or the whole) agree, and one key's merged record out of both.
#include "differ/detail/merge/compose.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "differ/detail/merge/covers.h"
#include "differ/detail/merge/merge.h"
#include "differ/detail/read/names.h"
#include "differ/detail/read/record_text.h"
#include "differ/detail/merge/split_op.h"
#include "probe/log_format.h"

namespace probe::differ {

bool same_record(const Record& a, const Record& b) {
  if (a.state != b.state) return false;
  switch (a.state) {
    case Record::State::none: return true;
    case Record::State::scalar:
      return a.value == b.value || (std::isnan(a.value) && std::isnan(b.value));
    case Record::State::tensor: break;
  }
  const auto &x = a.stats, &y = b.stats;
  if (x.unsupported != y.unsupported || x.dtype != y.dtype || x.shape != y.shape) return false;
  if (x.torch_hash && y.torch_hash && *x.torch_hash != *y.torch_hash) return false;
  if (x.unsupported) return true;
  return x.hash == y.hash && x.nan == y.nan && x.inf == y.inf;
}

namespace {

// Why the shards do not tile their global tensor exactly once; empty when they do. `gap` says
// the error is a gap (shards missing, none overlapping).
std::string tiling_error(const std::vector<const TensorStats*>& shards, bool& gap) {
  const auto& g = shards[0]->shard.global_shape;
  std::int64_t global_numel = 1;
  for (auto d : g)
    if (d < 0 || __builtin_mul_overflow(global_numel, d, &global_numel)) return "bad global shape";
  std::int64_t total = 0;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& s = *shards[i];
    if (s.shard.global_shape != g) return "shards disagree on the global shape";
    if (s.dtype != shards[0]->dtype)
      return "shards disagree on dtype (" + shards[0]->dtype + " vs " + s.dtype + ")";
    try {
      s.shard.check_fits(s.shape, "shard");
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    // fits: inside the global shape
    if (__builtin_add_overflow(total, s.numel(), &total)) return "shards overlap";
    for (std::size_t j = 0; j < i; ++j) {  // overlap: boxes intersect in every dim
      const auto& t = *shards[j];
      bool overlap = true;
      for (std::size_t d = 0; d < g.size() && overlap; ++d) {
        auto a0 = s.shard.offset[d], a1 = a0 + s.shape[d];
        auto b0 = t.shard.offset[d], b1 = b0 + t.shape[d];
        overlap = std::max(a0, b0) < std::min(a1, b1);
      }
      if (overlap && s.numel() > 0 && t.numel() > 0) return "shards overlap";
    }
  }
  if (total != global_numel) {
    gap = true;
    return "shards cover " + std::to_string(total) + " of " + std::to_string(global_numel) +
           " elements (gap)";
  }
  return {};
}

// The whole tensor's figures from shards that tile it, into `out` (default figures, reused
// buffers).
void combine_shards_into(const std::vector<const TensorStats*>& shards, TensorStats& out) {
  out.dtype = shards[0]->dtype;
  out.shape = shards[0]->shard.global_shape;
  double sum_sq = 0, weighted_mean = 0;
  std::int64_t non_nan = 0;
  bool all_torch_hash = true, all_mhash = true, all_l1 = true;
  std::uint64_t torch_hash = 0, mhash = 0;
  double l1 = 0;
  for (const TensorStats* s : shards) {
    if (s->unsupported) {
      out.unsupported = *s->unsupported;  // the figures gathered so far go with it
      return;
    }
    out.hash += s->hash;
    sum_sq += s->norm * s->norm;
    if (!std::isnan(s->min) && !(s->min >= out.min))
      out.min = std::isnan(out.min) ? s->min : std::min(out.min, s->min);
    if (!std::isnan(s->max) && !(s->max <= out.max))
      out.max = std::isnan(out.max) ? s->max : std::max(out.max, s->max);
    out.nan += s->nan;
    out.inf += s->inf;
    const std::int64_t n = s->numel() - s->nan;
    if (n > 0) {
      weighted_mean += s->mean * static_cast<double>(n);
      non_nan += n;
    }
    if (s->torch_hash) torch_hash ^= *s->torch_hash;
    else all_torch_hash = false;
    // The order-independent figures are sums over the elements: the shards' add up.
    if (s->mhash) mhash += *s->mhash;
    all_mhash = all_mhash && s->mhash;
    if (s->l1) l1 += *s->l1;
    all_l1 = all_l1 && s->l1;
  }
  out.norm = out.nan > 0 ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(sum_sq);
  out.mean = non_nan > 0 ? weighted_mean / static_cast<double>(non_nan)
                         : std::numeric_limits<double>::quiet_NaN();
  if (all_torch_hash) out.torch_hash = torch_hash;
  if (all_mhash) out.mhash = mhash;
  if (all_l1) out.l1 = l1;
}

}  // namespace

ComposeError compose_shards_into(const std::vector<const TensorStats*>& shards, TensorStats& out) {
  ComposeError e;
  if (shards.empty()) {
    e.error = "no shards";
    return e;
  }
  e.error = tiling_error(shards, e.gap);
  if (e.error.empty()) combine_shards_into(shards, out);
  return e;
}

ComposeResult compose_shards(const std::vector<const TensorStats*>& shards) {
  ComposeResult res;
  TensorStats stats;
  static_cast<ComposeError&>(res) = compose_shards_into(shards, stats);
  if (res.error.empty()) res.stats = std::move(stats);
  return res;
}

// Why ranks that logged the same key with different values most likely did, by kind.
std::string replica_mismatch_hint(Kind kind) {
  if (kind == Kind::scalar)
    return "a scalar logged under one name on several ranks must be the same on each: a "
           "rank's local value (its own loss) needs the reduced value, or a name per rank";
  if (kind == Kind::grad)
    return "data-parallel replicas of a gradient must agree after the reduction: an unreduced "
           "gradient, or pipeline stages reusing names (align them with a rank-scoped rule: "
           "--map '@RANKS:REGEX=REPLACEMENT')";
  return "records of one microbatch id on several ranks are read as replicas: microbatch ids "
         "must be global across data-parallel ranks (rank r's k-th of M local microbatches is "
         "r * M + k), and pipeline stages reusing names need a rank-scoped rule: --map "
         "'@RANKS:REGEX=REPLACEMENT'";
}

namespace {

// Records a replica mismatch: the merged record says its ranks disagree, the run's issues say
// where and (once) what it most likely means.
void mismatch(Merged& m, Kind kind, const MergeContext& ctx, std::string message) {
  m.replicas_disagree = true;
  if (!ctx.compared) return;
  ctx.issues->hint(replica_mismatch_hint(kind));
  ctx.issues->add(
      {Issue::Severity::error, "replica_mismatch", *ctx.label, ctx.step, std::move(message)});
}

std::string disagreement(const MergeContext& ctx, const Group& g, const Part& a, const Part& b,
                         const char* a_has) {
  return "step " + std::to_string(ctx.step) + " " + key_text(g.kind, g.name, g.mb) + ": rank " +
         std::to_string(a.rank) + a_has + record_brief(*a.record) + ", rank " +
         std::to_string(b.rank) + " has " + record_brief(*b.record);
}

// Buckets of replicas: same shard (or whole) and the same summand (or none). Each bucket's
// first part represents it (into ctx.reps); every other member must agree with it.
void check_replicas(Merged& m, const Group& g, MergeContext& ctx) {
  ctx.reps.clear();
  for (const auto& p : g.parts) {
    const Part* rep = nullptr;
    for (const Part* r : ctx.reps) {
      if (r->record->stats.shard == p.record->stats.shard &&
          r->record->stats.partial == p.record->stats.partial) {
        rep = r;
        break;
      }
    }
    if (!rep) ctx.reps.push_back(&p);
    else if (!same_record(*rep->record, *p.record))
      mismatch(m, g.kind, ctx, disagreement(ctx, g, *rep, p, " has "));
  }
}

// The bucket holding the whole record (none when every bucket is a shard); the shards go to
// ctx.shards. Two whole records that differ (`none` on one rank, a scalar on another) are a
// mismatch.
const Part* split_whole_and_shards(Merged& m, const Group& g, MergeContext& ctx) {
  const Part* whole = nullptr;
  ctx.shards.clear();
  for (const Part* b : ctx.reps) {
    if (b->record->state == Record::State::tensor && !b->record->stats.shard.empty())
      ctx.shards.push_back(&b->record->stats);
    else if (!whole) whole = b;
    else mismatch(m, g.kind, ctx, disagreement(ctx, g, *whole, *b, " has "));
  }
  if (ctx.partial_view && ctx.reps.size() == 1 && !ctx.shards.empty()) {
    // One rank's view of the run: its shard is compared as logged, not composed into a
    // whole it does not hold.
    ctx.shards.clear();
    whole = ctx.reps[0];
  }
  return whole;
}

// A record of an expert-parallel dispatch (covers=[...]) with shards or summands missing while
// every rank's log is there: an expert that received no token in that dispatch, on one rank or
// from one sequence shard, computes no gradient there, so nothing was recorded. The log cannot
// tell that from a lost gradient, and need not: the step's `grad` of the expert, compared as
// any other, carries what was lost. So a warning, and the record is set aside, not an error.
void expert_without_tokens(const MergeContext& ctx, const std::string& what) {
  if (!ctx.compared) return;
  ctx.issues->add({Issue::Severity::warning, "expert_without_tokens", *ctx.label, ctx.step,
                   what + " (an expert that received no token in this dispatch records no "
                          "gradient)"});
}

// Into `out`: the whole tensor composed of ctx.shards, or an unsupported record saying why it
// cannot be. Only the key fields of a part go with it: the figures come from composing.
void compose_into(const Merged& m, const Group& g, MergeContext& ctx, Record& out) {
  log_format::reset_record(out);
  out.step = ctx.step;
  out.kind = g.kind;
  out.microbatch = g.mb;
  out.state = Record::State::tensor;
  ComposeError c = compose_shards_into(ctx.shards, out.stats);
  if (c.error.empty()) return;
  // A gap where a rank's log is missing is that missing_rank error, not one per record.
  const bool missing = c.gap && ctx.missing_ranks;
  const std::string what = "step " + std::to_string(ctx.step) + " " +
                           key_text(g.kind, g.name, g.mb) + ": " + c.error + " (ranks " +
                           format_ranks(m.ranks) + "); not composed";
  if (!missing && c.gap && !ctx.covers.empty()) expert_without_tokens(ctx, what);
  else if (!missing && ctx.compared)
    ctx.issues->add({Issue::Severity::error, "shard_tiling", *ctx.label, ctx.step, what});
  out.stats = TensorStats{};
  out.stats.dtype = ctx.shards[0]->dtype;
  out.stats.shape = ctx.shards[0]->shard.global_shape;
  out.stats.unsupported = missing ? "shards missing: a rank's log is missing (missing_rank)"
                                  : "shards do not tile: " + c.error;
}

bool is_summand(const Record& r) {
  return r.state == Record::State::tensor && !r.stats.partial.empty();
}

std::string summand_text(const Partial& p) {
  return std::to_string(p.index) + "/" + std::to_string(p.count);
}

// The ranks of the group's parts that are summands (`summands`) or not.
std::vector<int> ranks_of(const Group& g, bool summands) {
  std::vector<int> ranks;
  for (const auto& p : g.parts)
    if (is_summand(*p.record) == summands) ranks.push_back(p.rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

// Into `out`: an unsupported record of the group's key saying why its parts are not merged.
void unsupported_record(const Group& g, const MergeContext& ctx, const TensorStats& like,
                        std::string why, Record& out) {
  log_format::reset_record(out);
  out.step = ctx.step;
  out.kind = g.kind;
  out.microbatch = g.mb;
  out.state = Record::State::tensor;
  out.stats.dtype = like.dtype;
  out.stats.shape = like.shape;
  out.stats.unsupported = std::move(why);
}

void partial_issue(const Group& g, const MergeContext& ctx, const std::string& what) {
  if (!ctx.compared) return;
  ctx.issues->add(
      {Issue::Severity::error, "partial_sum", *ctx.label, ctx.step,
       "step " + std::to_string(ctx.step) + " " + key_text(g.kind, g.name, g.mb) + ": " + what});
}

// Why the summands (ctx.reps, every one a summand, sorted by index) cannot be summed, or empty.
struct SumError {
  std::string text;     // empty: they can
  bool gap = false;     // summands, or shards of a summand, missing
  bool tiling = false;  // a summand's shards do not tile it (a shard_tiling issue)
};

// The summands' counts agree.
SumError count_error(const MergeContext& ctx) {
  const TensorStats& first = ctx.reps[0]->record->stats;
  for (const Part* r : ctx.reps)
    if (r->record->stats.partial.count != first.partial.count)
      return {"summands disagree on their count (rank " + std::to_string(ctx.reps[0]->rank) +
              " has partial=" + summand_text(first.partial) + ", rank " + std::to_string(r->rank) +
              " partial=" + summand_text(r->record->stats.partial) + ")"};
  return {};
}

// Summand `index` whole, out of its buckets ctx.reps[begin, end): the one logged whole, or its
// shards composed (an expert shard under sequence parallelism is a shard of its rank's summand).
// A whole copy next to shards must equal their composition (a replica mismatch otherwise).
SumError whole_summand(Merged& m, const Group& g, MergeContext& ctx, std::size_t begin,
                       std::size_t end, TensorStats& composed) {
  const Part* whole = nullptr;
  ctx.shards.clear();
  for (std::size_t i = begin; i < end; ++i) {
    const TensorStats& s = ctx.reps[i]->record->stats;
    if (s.shard.empty()) whole = ctx.reps[i];
    else ctx.shards.push_back(&s);
  }
  if (ctx.shards.empty()) {
    ctx.summands.push_back(&whole->record->stats);
    return {};
  }
  const std::int64_t index = ctx.reps[begin]->record->stats.partial.index;
  composed = TensorStats{};
  const ComposeError c = compose_shards_into(ctx.shards, composed);
  if (!c.error.empty()) {
    if (whole) {  // the whole copy stands for the summand
      ctx.summands.push_back(&whole->record->stats);
      return {};
    }
    return {"summand " + std::to_string(index) + ": " + c.error, c.gap, !c.gap};
  }
  if (whole &&
      (whole->record->stats.hash != composed.hash || whole->record->stats.shape != composed.shape))
    mismatch(m, g.kind, ctx,
             "step " + std::to_string(ctx.step) + " " + key_text(g.kind, g.name, g.mb) + ": rank " +
                 std::to_string(whole->rank) + " has summand " + std::to_string(index) + " whole " +
                 record_brief(*whole->record) + ", its composed shards differ");
  ctx.summands.push_back(whole ? &whole->record->stats : &composed);
  return {};
}

// Every summand whole, in index order, into ctx.summands; then their dtypes and shapes agree and
// every index 0..count-1 is there.
SumError whole_summands(Merged& m, const Group& g, MergeContext& ctx) {
  ctx.summands.clear();
  std::size_t indices = 0;
  for (std::size_t i = 0; i < ctx.reps.size(); ++i)
    indices += i == 0 || ctx.reps[i]->record->stats.partial.index !=
                             ctx.reps[i - 1]->record->stats.partial.index;
  // Sized once: ctx.summands points into it.
  if (ctx.composed_summands.size() < indices) ctx.composed_summands.resize(indices);
  for (std::size_t begin = 0, k = 0; begin < ctx.reps.size(); ++k) {
    std::size_t end = begin + 1;
    while (end < ctx.reps.size() && ctx.reps[end]->record->stats.partial.index ==
                                        ctx.reps[begin]->record->stats.partial.index)
      ++end;
    SumError e = whole_summand(m, g, ctx, begin, end, ctx.composed_summands[k]);
    if (!e.text.empty()) return e;
    begin = end;
  }
  const TensorStats& first = *ctx.summands[0];
  for (std::size_t k = 1; k < ctx.summands.size(); ++k) {
    const TensorStats& s = *ctx.summands[k];
    if (s.dtype != first.dtype || s.shape != first.shape)
      return {"summands disagree on dtype or shape (summand 0: " + first.dtype +
              dims_text(first.shape) + ", summand " + std::to_string(k) + ": " + s.dtype +
              dims_text(s.shape) + ")"};
  }
  const auto count = static_cast<std::size_t>(ctx.reps[0]->record->stats.partial.count);
  if (indices == count) return {};
  std::string present;
  for (std::size_t i = 0; i < ctx.reps.size(); ++i)
    if (i == 0 ||
        ctx.reps[i]->record->stats.partial.index != ctx.reps[i - 1]->record->stats.partial.index)
      present +=
          (present.empty() ? "" : ", ") + std::to_string(ctx.reps[i]->record->stats.partial.index);
  return {"summands " + present + " of " + std::to_string(count) + " present (ranks " +
              format_ranks(ranks_of(g, true)) + "): summands missing",
          true};
}

// splitmix64's finalizer: every bit of the input moves about half of the output's.
std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The partial sum's figures from its whole summands (ctx.summands, in index order, complete) of
// `count`, into `out` (default figures). The hash is a fingerprint of the summands' hashes in index
// order: two runs whose summands are bitwise equal get the same one (and, but for a 2^-64 chance,
// no others); the norm is that of the sum were the summands uncorrelated, sqrt(sum of squared
// norms); mean adds exactly (every summand has the sum's shape); min and max add to bounds of the
// sum's; NaN/Inf counts add.
void combine_summands_into(const MergeContext& ctx, std::int64_t count, TensorStats& out,
                           double& summand_norms) {
  const TensorStats& first = *ctx.summands[0];
  out.dtype = first.dtype;
  out.shape = first.shape;
  out.hash = mix64(static_cast<std::uint64_t>(count));
  out.min = out.max = out.mean = 0;
  double sum_sq = 0;
  summand_norms = 0;
  for (const TensorStats* summand : ctx.summands) {
    const TensorStats& s = *summand;
    if (s.unsupported) {
      out.unsupported = "a summand is unsupported: " + *s.unsupported;
      return;
    }
    out.hash = mix64(out.hash ^ s.hash);
    sum_sq += s.norm * s.norm;
    if (std::isfinite(s.norm)) summand_norms += s.norm;
    out.min += s.min;
    out.max += s.max;
    out.mean += s.mean;
    out.nan += s.nan;
    out.inf += s.inf;
  }
  out.norm = out.nan > 0 ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(sum_sq);
}

// A group whose parts are summands of a partial sum (docs/log-format.md, "Partial records"), into
// `m`; false when no part is one. Summands of one index are replicas (checked before), or shards of
// that summand (composed first); a key mixing summands and whole records, or summands of other
// counts, is a partial_sum issue.
bool merge_summands(const Group& g, MergeContext& ctx, Merged& m) {
  std::size_t summands = 0;
  for (const Part* r : ctx.reps) summands += is_summand(*r->record);
  if (summands == 0) return false;
  m.partial = {};
  const TensorStats& like = ctx.reps[0]->record->stats;
  if (summands != ctx.reps.size()) {
    const std::string why = "summands of a partial sum (ranks " + format_ranks(ranks_of(g, true)) +
                            ") next to records that are not (ranks " +
                            format_ranks(ranks_of(g, false)) + ")";
    partial_issue(g, ctx, why + "; not merged");
    unsupported_record(g, ctx, like, why, m.record);
    return true;
  }
  std::stable_sort(ctx.reps.begin(), ctx.reps.end(), [](const Part* a, const Part* b) {
    return a->record->stats.partial.index < b->record->stats.partial.index;
  });
  SumError error = count_error(ctx);
  if (error.text.empty()) error = whole_summands(m, g, ctx);
  // Summands missing is the one error with a sum of one count: still a partial sum, set aside.
  if (error.text.empty() || error.gap) m.partial = {like.partial.count, -1, 0};
  if (ctx.partial_view && ctx.reps.size() == 1) {
    // One rank's view of the run: its summand is compared as logged (with another run's view of
    // the same summand), not summed with summands it does not hold.
    Part* only = const_cast<Part*>(ctx.reps[0]);  // g's own part
    m.partial = {like.partial.count, like.partial.index, std::isfinite(like.norm) ? like.norm : 0};
    if (m.replicas_disagree) m.value_ranks = {only->rank};
    swap(m.record, *only->record);
    m.record.stats.partial = {};
    return true;
  }
  if (!error.text.empty()) {
    // Summands or shards missing where a rank's log is missing are that missing_rank error, not
    // one per record.
    const bool missing = error.gap && ctx.missing_ranks;
    if (!missing && error.tiling && ctx.compared)
      ctx.issues->add({Issue::Severity::error, "shard_tiling", *ctx.label, ctx.step,
                       "step " + std::to_string(ctx.step) + " " + key_text(g.kind, g.name, g.mb) +
                           ": " + error.text + " (ranks " + format_ranks(m.ranks) +
                           "); not composed"});
    else if (!missing && error.gap && !ctx.covers.empty())
      expert_without_tokens(ctx, "step " + std::to_string(ctx.step) + " " +
                                     key_text(g.kind, g.name, g.mb) + ": " + error.text +
                                     "; not summed");
    else if (!missing) partial_issue(g, ctx, error.text + "; not summed");
    unsupported_record(
        g, ctx, like,
        missing ? "summands missing: a rank's log is missing (missing_rank)" : error.text,
        m.record);
    return true;
  }
  log_format::reset_record(m.record);
  m.record.step = ctx.step;
  m.record.kind = g.kind;
  m.record.microbatch = g.mb;
  m.record.state = Record::State::tensor;
  combine_summands_into(ctx, like.partial.count, m.record.stats, m.partial.summand_norms);
  if (m.replicas_disagree)
    for (const Part* r : ctx.reps) m.value_ranks.push_back(r->rank);
  return true;
}

// Every part of a key covers the same microbatches (docs/log-format.md, "Covered microbatches"):
// the shards of one expert-parallel dispatch, its replicas and summands alike. Keeps them in
// ctx.covers; false, with a covers_mismatch issue naming the ranks and an unsupported record in
// `m`, where parts disagree.
bool covers_agree(Merged& m, const Group& g, MergeContext& ctx) {
  ctx.covers = g.parts[0].record->covers;
  if (std::all_of(g.parts.begin(), g.parts.end(),
                  [&](const Part& p) { return p.record->covers == ctx.covers; }))
    return true;
  std::vector<std::pair<const std::vector<std::int64_t>*, std::vector<int>>> ranks_by_covers;
  for (const auto& p : g.parts) {
    auto it = std::find_if(ranks_by_covers.begin(), ranks_by_covers.end(),
                           [&](const auto& rc) { return *rc.first == p.record->covers; });
    if (it == ranks_by_covers.end()) it = ranks_by_covers.insert(it, {&p.record->covers, {}});
    it->second.push_back(p.rank);
  }
  std::string what;
  for (auto& [covers, ranks] : ranks_by_covers) {
    std::sort(ranks.begin(), ranks.end());
    what += (what.empty() ? "" : ", ") + std::string("ranks ") + format_ranks(ranks) + " cover " +
            covered_text(*covers, g.mb);
  }
  if (ctx.compared)
    ctx.issues->add({Issue::Severity::error, "covers_mismatch", *ctx.label, ctx.step,
                     "step " + std::to_string(ctx.step) + " " + key_text(g.kind, g.name, g.mb) +
                         ": " + what + "; not merged"});
  const Record& first = *g.parts[0].record;
  TensorStats like;
  if (first.state == Record::State::tensor) like = first.stats;
  unsupported_record(g, ctx, like, "its ranks cover different microbatches: " + what, m.record);
  ctx.covers.clear();
  return false;
}

}  // namespace

void merge_group(Group& g, MergeContext& ctx, Merged& m) {
  m.raw_name = g.raw_name;
  // NumericsLogger's param records come from weights.log: a hash without a norm.
  m.hash_source = !ctx.python             ? HashSource::spec_v1
                  : g.kind == Kind::param ? HashSource::torch_hash_alone
                                          : HashSource::torch_only;
  m.ranks.clear();
  for (const auto& p : g.parts) m.ranks.push_back(p.rank);
  std::sort(m.ranks.begin(), m.ranks.end());
  m.ranks.erase(std::unique(m.ranks.begin(), m.ranks.end()), m.ranks.end());
  m.replicas_disagree = false;
  m.value_ranks.clear();
  m.partial = {};
  m.split.size = 0;
  if (is_split_op_group(g)) {
    merge_split_op(g, ctx, m);
    m.record.name = g.name;
    m.key = g.key;
    return;
  }
  if (!covers_agree(m, g, ctx)) {
    m.record.name = g.name;
    m.key = g.key;
    return;
  }
  check_replicas(m, g, ctx);
  if (merge_summands(g, ctx, m)) {
    m.record.name = g.name;
    m.record.covers = ctx.covers;
    m.key = g.key;
    return;
  }
  Part* whole = const_cast<Part*>(split_whole_and_shards(m, g, ctx));  // g's own parts
  if (!ctx.shards.empty()) {
    compose_into(m, g, ctx, m.record);
    m.record.tied = g.parts[0].record->tied;  // a parameter's other names, on each of its shards
    if (whole && !same_record(*whole->record, m.record))
      mismatch(m, g.kind, ctx,
               "step " + std::to_string(ctx.step) + " " + key_text(g.kind, g.name, g.mb) +
                   ": rank " + std::to_string(whole->rank) + " has the whole tensor " +
                   record_brief(*whole->record) + ", the composed shards have " +
                   record_brief(m.record));
    if (m.replicas_disagree)
      for (const Part* b : ctx.reps)
        if (!b->record->stats.shard.empty()) m.value_ranks.push_back(b->rank);
  } else {
    if (m.replicas_disagree) m.value_ranks = {whole->rank};
    // The group's parts are consumed: the part takes m's old record, whose buffers its reader
    // parses a later record into.
    swap(m.record, *whole->record);
  }
  m.record.name = g.name;
  m.record.covers = ctx.covers;  // composing starts from a fresh record
  m.key = g.key;
}

}  // namespace probe::differ
