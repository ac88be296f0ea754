// The step merge: every rank's records of one step grouped by key (kind, canonical name,
// microbatch), put in execution order, and each group merged into one logical record.
#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "differ/detail/merge/merge.h"
#include "differ/detail/read/names.h"
#include "differ/detail/read/record_text.h"

namespace probe::differ {

void StepGroupsDelete::operator()(StepGroups* groups) const { delete groups; }

StepGroups& Run::step_groups() {
  if (!step_groups_) step_groups_.reset(new StepGroups());
  return *step_groups_;
}

bool Run::next_step(std::int64_t& step, std::vector<Merged>& records) {
  auto s = peek_step();
  if (!s) {
    records.clear();
    return false;
  }
  step = *s;
  note_early_ends(step);

  StepGroups& sg = step_groups();
  group_step(step);
  sg.put_in_execution_order();

  MergeContext ctx;
  ctx.step = step;
  ctx.python = python_;
  ctx.partial_view = partial_view_;
  ctx.missing_ranks = missing_ranks_ > 0;
  // From a killed rank's incomplete step on, steps are read but not compared (diff_runs): the
  // records the kill lost are no tiling or replica errors.
  ctx.compared = !incomplete_from_ || step < *incomplete_from_;
  ctx.label = &options_.label;
  ctx.issues = &issues_;
  ctx.reps.reserve(ranks_.size());
  ctx.shards.reserve(ranks_.size());
  // Merged into the records of the previous step: their buffers are reused.
  records.resize(sg.in_order.size());
  for (std::size_t i = 0; i < records.size(); ++i)
    merge_group(sg.groups[sg.in_order[i]], ctx, records[i]);
  for (auto& src : ranks_) src->release_step_records();
  return true;
}

// Execution order, sorted by index (a Group is too large to move around). Steps of a run
// mostly hold the same keys, first read in the same order: the previous step's order is
// checked first and kept when it still holds.
void StepGroups::put_in_execution_order() {
  const auto before = [&](std::uint32_t i, std::uint32_t j) {
    const Group &a = groups[i], &b = groups[j];
    return std::make_tuple(a.phase, a.mb.value_or(-1), a.order) <
           std::make_tuple(b.phase, b.mb.value_or(-1), b.order);
  };
  const bool same_groups = touched == previous_touched;
  std::swap(previous_touched, touched);  // touched is refilled by the next step
  if (same_groups && std::is_sorted(in_order.begin(), in_order.end(), before)) return;
  in_order = previous_touched;
  std::sort(in_order.begin(), in_order.end(), before);
}

void StepGroups::start_step() {
  ++generation;
  touched.clear();
}

std::pair<std::uint32_t, bool> StepGroups::find_or_add(const std::string& k, std::uint32_t hint) {
  if (hint < groups.size() && groups[hint].key == k) return {hint, false};
  auto [it, added] = index.try_emplace(k, static_cast<std::uint32_t>(groups.size()));
  if (added) {
    groups.emplace_back();
    groups.back().key = k;
  }
  return {it->second, added};
}

std::pair<Group*, bool> StepGroups::touch(std::uint32_t i) {
  Group& g = groups[i];
  if (g.generation == generation) return {&g, false};
  g.generation = generation;
  touched.push_back(i);
  g.parts.clear();
  return {&g, true};
}

// A rank whose log ended cleanly at a step boundary while others go on: the process stopped
// (killed between steps). Its later records are missing, not different: stop comparing here.
void Run::note_early_ends(std::int64_t step) {
  for (auto& src : ranks_) {
    if (!src->reader || src->ahead || src->reported_early_end || src->reader->truncated() ||
        src->last_step >= step)
      continue;
    src->reported_early_end = true;
    if (src->last_step < 0) {
      // No record at all. A rank may legitimately record nothing (PROBE_KINDS=scalar with the
      // loss logged on rank 0), so the comparison goes on; the warning explains the records
      // the other run has and this one lacks.
      issues_.add({Issue::Severity::warning, "empty_rank", options_.label, step,
                   src->reader->path().string() + ": rank " + std::to_string(src->rank) +
                       "'s log has no records while other ranks log step " + std::to_string(step) +
                       ": the rank was killed before its first step, or it records nothing"});
      continue;
    }
    if (!incomplete_from_ || step < *incomplete_from_) incomplete_from_ = step;
    issues_.add({Issue::Severity::warning, "truncated", options_.label, step,
                 src->reader->path().string() + ": rank " + std::to_string(src->rank) +
                     "'s log ends after step " + std::to_string(src->last_step) +
                     " while other ranks go on to step " + std::to_string(step) +
                     " (rank stopped early, killed?): steps before " + std::to_string(step) +
                     " are used, later ones are not compared"});
  }
}

// Groups this step's records of every rank by (kind, canonical name, mb).
void Run::group_step(std::int64_t step) {
  StepGroups& sg = step_groups();
  sg.start_step();
  const std::int64_t world = std::max<std::int64_t>(world_size_, 1);
  for (auto& src : ranks_) {
    std::int64_t pos = 0;
    while (src->ahead && src->ahead->step == step) {
      Record& r = *src->ahead;
      ++records_read_;
      const auto at = static_cast<std::size_t>(pos);
      const std::uint32_t hint = at < src->step_groups.size() ? src->step_groups[at] : UINT32_MAX;
      const std::uint32_t gi = group_of(r, src->rank, hint);
      auto [g, added] = sg.touch(gi);
      if (at < src->step_groups.size()) src->step_groups[at] = gi;
      else src->step_groups.push_back(gi);
      // Execution order: ranks ascending in forward and step end, descending in backward
      // (pipeline stages run backward last stage first), then the rank's own line order.
      const std::int64_t rank_order =
          phase_of(r) == Phase::backward ? world - 1 - src->rank : src->rank;
      const std::int64_t order = rank_order * (std::int64_t{1} << 40) + pos++;
      if (added) {  // its first record this step
        g->phase = phase_of(r);
        g->raw_name = r.name;
        g->order = order;
      }
      add_to_group(step, *src, order, *g);
      advance(*src);
    }
    src->step_groups.resize(static_cast<std::size_t>(pos));
    src->release();  // its next step's first record is read: close it until then
  }
}

// The group of `r`'s key (kind, canonical name, microbatch), added when new. `hint`: the group
// of the record at the same position of the rank's previous step.
std::uint32_t Run::group_of(const Record& r, int rank, std::uint32_t hint) {
  StepGroups& sg = step_groups();
  // Steps of a run repeat: most records have the key of their position's group of the
  // previous step, seen from their raw names without mapping them.
  if (mapper_->rank_independent() && hint < sg.groups.size() && sg.groups[hint].has_key_of(r))
    return hint;
  const std::string& canon = mapper_->map(r.name, rank);
  std::string& key = sg.key;
  key.clear();
  key += static_cast<char>('0' + static_cast<int>(r.kind));
  if (r.microbatch) key += std::to_string(*r.microbatch);
  key += '|';
  key += canon;
  const auto [gi, added] = sg.find_or_add(key, hint);
  if (added) {
    Group& g = sg.groups[gi];
    g.kind = r.kind;
    g.name = canon;
    g.mb = r.microbatch;
  }
  return gi;
}

// Puts the rank's record ahead into its group; a second record of the same rank and shard is
// a duplicate.
void Run::add_to_group(std::int64_t step, RankSource& src, std::int64_t order, Group& g) {
  Record& r = *src.ahead;
  g.order = std::min(g.order, order);
  // Ranks are read one after the other, so this rank's parts are the group's last ones:
  // looking at those alone keeps a key replicated on thousands of ranks linear.
  bool duplicate = false;
  for (auto p = g.parts.rbegin(); p != g.parts.rend() && p->rank == src.rank; ++p)
    duplicate = duplicate || p->record->stats.shard == r.stats.shard;
  if (!duplicate) {
    g.parts.push_back({src.rank, &r});
    return;
  }
  std::string msg = src.reader
                        ? src.reader->path().string() + ":" + std::to_string(src.ahead_line) + ": "
                        : std::string();
  msg += "duplicate record " + key_text(r.kind, r.name, r.microbatch) + " at step " +
         std::to_string(step);
  if (!options_.lenient) throw InputError(msg);
  issues_.add({Issue::Severity::warning, "duplicate_record", options_.label, step, msg});
}

}  // namespace probe::differ
