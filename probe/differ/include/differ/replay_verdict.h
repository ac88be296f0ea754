// numprobe_replay's verdict on a replay region (docs/diff-logs.md, "Replay verdict"): written by
// numprobe_replay as JSON (schema numprobe.replay/1) beside the test run, read by diff_logs,
// which shows it when it is about the comparison's own region.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

// One run's output measured against its float64 reference, in rounding units of its dtype
// (|recorded - reference| / (u * |reference|) at the element where it is largest against its
// tolerance).
struct ReplayRunFigures {
  std::string dtype;
  double units = 0;      // the difference there, in rounding units
  double tolerance = 0;  // what the region's ops allow there, in rounding units
  std::vector<std::int64_t> element;
  double recorded = 0, reference = 0;
  std::optional<bool> replays_bitwise;  // re-run in its recorded dtypes; nullopt: not re-run
  std::string replay_note;              // where it does not: by how much
  std::vector<std::string> families;    // the tolerance family of each op, in order
};

struct ReplayVerdict {
  // noise, precision: base, precision: test, precision: both, different math, inputs differ,
  // not replayable
  std::string verdict;
  std::string reason;                 // for inputs differ and not replayable
  std::vector<std::string> evidence;  // the lines printed under VERDICT
  // The region it is about.
  std::string base_run, test_run;
  std::int64_t step = 0;
  std::optional<std::int64_t> mb;
  std::string phase, root_cause;
  std::vector<std::string> base_ops, test_ops;
  std::uint64_t base_output = 0, test_output = 0;
  // The figures (absent where it did not get that far).
  std::optional<ReplayRunFigures> base, test;
  std::optional<double> references_rel_diff;  // largest relative difference of the references
  std::optional<double> references_bound;     // what float64 rounding allows there, relative
  double wall_seconds = 0;
  std::string file;  // where it was read from (not written)
};

// Where numprobe_replay writes its verdict by default and diff_logs looks for it: replay.json in
// the test run's directory (beside a log given as a file: <file>.replay.json).
std::filesystem::path default_replay_file(const std::filesystem::path& test_run);

// The verdict's region fields from a comparison's region.
void describe_region(const ReplayRegion& region, ReplayVerdict& v);

std::string replay_verdict_json(const ReplayVerdict& v);
// Throws InputError naming the file where `text` is no numprobe.replay/1 document.
ReplayVerdict parse_replay_verdict(const std::string& text, const std::string& file);

// diff_logs: the verdict beside the test run, when it is about `r`'s region (the same step,
// op and output hashes); otherwise r.replay_note says why it was left out. The command to run
// (r.replay_command) where the region was dumped and no verdict is there.
void attach_replay_verdict(Result& r);

// `s` as one shell word, quoted where it has to be (the commands the tools print and run).
std::string shell_quoted(const std::string& s);

}  // namespace probe::differ
