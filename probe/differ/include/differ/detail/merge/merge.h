// The step merge's working parts: one key's parts across ranks, a run's groups.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "differ/detail/read/rank_source.h"
#include "differ/run.h"
#include "probe/log_io.h"
#include "probe/record.h"

namespace probe::differ {

// One rank's record of a key.
struct Part {
  int rank;
  Record* record;  // where it was read (Run::RankSource::ahead), until the step is merged
};

// Every rank's records of one key (kind, canonical name, microbatch) at one step.
struct Group {
  std::string key;
  Kind kind;
  Phase phase;       // an op record carries its own
  std::string name;  // canonical
  std::optional<std::int64_t> mb;
  std::string raw_name;
  std::int64_t order = 0;  // execution-order position (see Run::group_step)
  std::vector<Part> parts;
  std::uint64_t generation = 0;  // the last step that held the key (StepGroups::generation)

  // Whether `r` has this group's key, known without mapping its name: the same kind,
  // microbatch and raw name as a record of the group (names mapping the same on every rank).
  bool has_key_of(const Record& r) const {
    return kind == r.kind && mb == r.microbatch && raw_name == r.name;
  }
};

// A run's groups, and what they keep between steps so that merging a step allocates nothing
// once the first steps have grown it. Each key has one Group for good (its strings and part
// list are reused every step it occurs); the index maps keys to groups, and each rank's
// records of the previous step say which group each position went to: steps of a run mostly
// repeat, so the record at that position of the next step is looked up there first. The
// parts point at the records where their readers put them (Run::RankSource::ahead).
struct StepGroups {
  std::vector<Group> groups;                             // every key's group
  std::unordered_map<std::string, std::uint32_t> index;  // key -> its group
  std::uint64_t generation = 0;                          // the step being grouped (counted from 1)
  std::vector<std::uint32_t> touched;   // this step's groups, in the order first read
  std::vector<std::uint32_t> in_order;  // the same in execution order (put_in_execution_order)
  std::vector<std::uint32_t> previous_touched;  // the previous step's `touched`
  std::string key;                              // scratch for the key being looked up

  // The group of `key` (`hint`: the group a rank's record at the same position went to in
  // the previous step), and whether it was added (new: its key's fields to fill in).
  std::pair<std::uint32_t, bool> find_or_add(const std::string& key, std::uint32_t hint);
  // Group `i` as this step's, and whether this step had it before (false: to fill in).
  std::pair<Group*, bool> touch(std::uint32_t i);
  void start_step();
  void put_in_execution_order();
};

// What merging a group needs to know of its run, and where its issues go.
struct MergeContext {
  std::int64_t step = 0;
  bool python = false;         // NumericsLogger hashes (torch_only)
  bool partial_view = false;   // one rank's log of a multi-rank run: shards stay as logged
  bool missing_ranks = false;  // a gap in the shards is that missing_rank error
  bool compared = true;        // issues of steps that are not compared are not reported
  const std::string* label = nullptr;
  IssueLog* issues = nullptr;
  // Scratch, kept across groups: the replica buckets' representatives and the shards; the
  // microbatches the group's records cover; a partial sum's whole summands, in index order, and
  // those composed of shards.
  std::vector<const Part*> reps;
  std::vector<const TensorStats*> shards;
  std::vector<std::int64_t> covers;
  std::vector<const TensorStats*> summands;
  std::vector<TensorStats> composed_summands;
};

// The group's logical record, into `m` (every field set; its buffers reused): replicas
// checked against each other, shards composed. Consumes the group's parts.
void merge_group(Group& g, MergeContext& ctx, Merged& m);

}  // namespace probe::differ
