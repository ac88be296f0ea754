// Comparing two runs: both read step by step in lockstep, each step both hold (or one holds)
// handed to the aligner unless --steps or a killed rank leaves it out.
#include "differ/diff.h"

#include <algorithm>
#include <vector>

#include "differ/detail/align.h"

namespace probe::differ {

namespace {

void note_step(RunInfo& info, std::int64_t step) {
  ++info.steps;
  if (!info.first_step) info.first_step = step;
  info.last_step = step;
}

RunInfo info_of(const Run& run) {
  RunInfo i;
  i.path = run.path().string();
  i.setup = run.setup();
  i.torch_version = run.torch_version();
  i.world_size = run.world_size();
  i.ranks_found = run.ranks_found();
  i.python = run.python();
  return i;
}

void check_compatible(const Run& base, const Run& test) {
  if (base.python() || test.python()) return;
  // Log format versions may differ: every version the reader accepts holds the same records.
  if (base.hash_spec_version() != test.hash_spec_version())
    throw InputError(
        "the runs use different hash spec versions (" + base.header_file().string() +
        ":1: " + std::to_string(base.hash_spec_version()) + ", " + test.header_file().string() +
        ":1: " + std::to_string(test.hash_spec_version()) + "): their hashes cannot be compared");
}

bool outside_steps(std::int64_t step, const DiffOptions& o) {
  return (o.step_min && step < *o.step_min) || (o.step_max && step > *o.step_max);
}

// The first step a killed rank may have left incomplete, of either run.
std::optional<std::int64_t> incomplete_from(const Run& base, const Run& test) {
  std::optional<std::int64_t> limit;
  for (const Run* run : {&base, &test})
    if (run->incomplete_from() && (!limit || *run->incomplete_from() < *limit))
      limit = run->incomplete_from();
  return limit;
}

// The kinds each run recorded on the steps both hold, whatever --steps and --name leave out.
struct KindsRecorded {
  std::uint32_t base = 0, test = 0;
};

std::uint32_t kinds_of(const std::vector<Merged>& records) {
  std::uint32_t bits = 0;
  for (const auto& m : records) bits |= 1u << static_cast<unsigned>(m.record.kind);
  return bits;
}

std::vector<Kind> kinds_in(std::uint32_t bits) {
  std::vector<Kind> kinds;
  for (int k = 0; k < kKindCount; ++k)
    if (bits & (1u << k)) kinds.push_back(static_cast<Kind>(k));
  return kinds;
}

// The region's dumps as files: a record names its dump relative to its rank's directory.
void resolve_dumps(const Run& base, const Run& test, OpReport& ops) {
  if (!ops.region) return;
  for (auto [run, region_ops] :
       {std::pair{&base, &ops.region->base}, std::pair{&test, &ops.region->test}})
    for (ReplayOp& op : *region_ops)
      if (!op.dump.empty()) op.dump = (run->rank_dir(op.rank) / op.dump).string();
}

Result compare_once(Run& base, Run& test, const DiffOptions& options, KindsRecorded& recorded) {
  Result r;
  r.base = info_of(base);
  r.test = info_of(test);
  r.filtered = options.kinds_mask || options.step_min || options.step_max || options.name_filter;
  Aligner aligner(options, r);
  std::vector<Merged> a, b;
  std::int64_t sa = 0, sb = 0;
  for (;;) {
    auto pa = base.peek_step(), pb = test.peek_step();
    if (!pa && !pb) break;
    const std::int64_t step = !pa ? *pb : !pb ? *pa : std::min(*pa, *pb);
    const bool has_a = pa && *pa == step, has_b = pb && *pb == step;
    if (has_a) base.next_step(sa, a);
    if (has_b) test.next_step(sb, b);
    // Every step is read (the header counts what each run holds); only those in --steps and
    // before a killed rank's first incomplete step are compared.
    if (has_a) note_step(r.base, step);
    if (has_b) note_step(r.test, step);
    if (has_a && has_b) {
      recorded.base |= kinds_of(a);
      recorded.test |= kinds_of(b);
    }
    if (outside_steps(step, options)) continue;
    if (auto limit = incomplete_from(base, test); limit && step >= *limit) {
      r.truncated_at = *limit;
      continue;
    }
    if (has_a && has_b) ++r.paired_steps;
    aligner.compare_step(step, has_a ? &a : nullptr, has_b ? &b : nullptr,
                         base.step_compiled(step) == test.step_compiled(step));
  }
  aligner.finish();
  r.base.records = base.records_read();
  r.test.records = test.records_read();
  resolve_dumps(base, test, r.ops);
  r.base_issues = base.issues();
  r.test_issues = test.issues();
  return r;
}

}  // namespace

Result diff_runs(Run& base, Run& test, const DiffOptions& options) {
  check_compatible(base, test);
  KindsRecorded recorded;
  Result first = compare_once(base, test, options, recorded);
  // Op records of one run only (one run traced) are set aside and listed one by one instead.
  const std::uint32_t one_sided =
      (recorded.base ^ recorded.test) & ~(1u << static_cast<unsigned>(Kind::op));
  if (options.kinds_mask || one_sided == 0) return first;
  // Which kinds a run records is known once all of it was read: the runs are read again.
  DiffOptions without = options;
  without.kinds_mask = kAllKinds & ~one_sided;
  without.kinds_not_recorded = one_sided;
  if (options.on_restart) options.on_restart();
  Run base_again(base.path(), base.options());
  Run test_again(test.path(), test.options());
  Result r = compare_once(base_again, test_again, without, recorded);
  r.kinds_only_base = kinds_in(recorded.base & one_sided);
  r.kinds_only_test = kinds_in(recorded.test & one_sided);
  r.kinds_left_out = true;
  r.filtered = first.filtered;  // the user's filters (--steps, --name), not the kinds left out
  return r;
}

}  // namespace probe::differ
