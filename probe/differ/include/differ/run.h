// One run as the differ reads it: a directory of rank<R>/diff.log files, a directory holding
// one diff.log, or one log file (numprobe format, or autoparallel NumericsLogger lines).
// Its ranks are merged step by step: memory holds one step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "differ/options.h"
#include "differ/result.h"

namespace probe::differ {

class NameMapper;
struct Group;
struct StepGroups;
// Deletes the step merge's groups where their type is known (merge.cpp).
struct StepGroupsDelete {
  void operator()(StepGroups* groups) const;
};

class Run {
 public:
  Run(const std::filesystem::path& path, RunOptions options);  // throws InputError
  ~Run();
  Run(Run&&) noexcept;

  std::optional<std::int64_t> peek_step() const;
  // The next step's merged records in execution order, into `records` (whose elements and
  // their buffers are reused); false at the end.
  bool next_step(std::int64_t& step, std::vector<Merged>& records);

  const std::filesystem::path& path() const { return path_; }
  const RunOptions& options() const { return options_; }  // what it was opened with
  int world_size() const { return world_size_; }
  int ranks_found() const { return static_cast<int>(ranks_.size()); }
  int format_version() const { return format_version_; }
  int hash_spec_version() const { return hash_spec_version_; }
  bool python() const { return python_; }
  const std::string& setup() const { return setup_; }
  const std::string& torch_version() const { return torch_version_; }
  IssueLog& issues() { return issues_; }
  std::int64_t records_read() const { return records_read_; }
  // Whether compiled code ran in step `step` on some rank (log format 9's step ends), once the
  // step was read by next_step().
  bool step_compiled(std::int64_t step) const;
  // Set once a rank's log turned out truncated (a killed writer): the first step that may be
  // incomplete. Steps from it on are not compared.
  std::optional<std::int64_t> incomplete_from() const { return incomplete_from_; }
  // The log whose header stands for the run's (its first rank's); empty for a Python log.
  const std::filesystem::path& header_file() const { return header_file_; }
  // The directory of rank `rank`'s log (where its op dumps lie), empty where it has none.
  std::filesystem::path rank_dir(int rank) const;
  // Ranks whose log is opened for each step and closed again (RunOptions::max_open_files).
  int pooled_ranks() const { return pooled_ranks_; }

  struct RankSource;  // detail/merge.h

 private:
  // Opening (run.cpp).
  void open_python_log(const std::filesystem::path& file);
  void open_rank_logs(const std::vector<std::pair<int, std::filesystem::path>>& files);
  void note_missing_ranks(const std::vector<std::pair<int, std::filesystem::path>>& files,
                          const std::vector<bool>& seen);
  // Reading one rank ahead (run.cpp).
  void advance(RankSource& src);
  void note_truncation(const RankSource& src);
  // The step merge (merge.cpp).
  void note_early_ends(std::int64_t step);
  void group_step(std::int64_t step);
  std::uint32_t group_of(const Record& r, int rank, std::uint32_t hint);
  void add_to_group(std::int64_t step, RankSource& src, std::int64_t order, Group& g);

  std::filesystem::path path_, header_file_;
  RunOptions options_;
  std::unique_ptr<NameMapper> mapper_;
  std::vector<std::unique_ptr<RankSource>> ranks_;
  int world_size_ = 1;
  int format_version_ = 1;
  int hash_spec_version_ = 1;
  bool python_ = false;
  std::string setup_, torch_version_;
  IssueLog issues_;
  std::int64_t records_read_ = 0;
  // The step merge's groups (detail/merge/merge.h), made by the first step merged.
  std::unique_ptr<StepGroups, StepGroupsDelete> step_groups_;
  StepGroups& step_groups();
  std::optional<std::int64_t> incomplete_from_;
  bool partial_view_ = false;  // one rank's log of a multi-rank run, named on its own
  int missing_ranks_ = 0;      // ranks of world_size without a log
  int pooled_ranks_ = 0;       // ranks whose log is opened per step (see max_open_files)
};

}  // namespace probe::differ
