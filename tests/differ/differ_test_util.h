// The differ tests' helpers: runs written through probe::LogWriter (the probe's own writer),
// comparisons, class counts, the terminal report and its text matched by content; the shared
// ones from test_util.h.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "differ/diff.h"
#include "differ/report.h"
#include "differ/run.h"
#include "probe/log_io.h"
#include "test_util.h"

namespace differ_test {

using namespace test_util;  // fresh_dir, read_all, write_file, record builders

// Writes rank<R>/diff.log for each rank through LogWriter (the current format), one write_step per
// step.
inline void write_run(const std::filesystem::path& dir,
                      const std::vector<std::vector<Record>>& ranks, int world_size = -1,
                      int hash_spec = 1) {
  const int world = world_size < 0 ? static_cast<int>(ranks.size()) : world_size;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].empty() && world_size >= 0) continue;  // a missing rank
    probe::log_format::Header h;
    h.rank = static_cast<int>(r);
    h.world_size = world;
    h.hash_spec_version = hash_spec;
    h.setup = "test";
    probe::LogWriter w(dir / ("rank" + std::to_string(r)) / "diff.log", h);
    std::map<std::int64_t, std::vector<std::string>> steps;
    for (const auto& rec : ranks[r])
      steps[rec.step].push_back(probe::log_format::format_record(rec));
    for (const auto& [s, lines] : steps) w.write_step(s, lines);
  }
}

// Marks every step of the run at `dir` as one that ran compiled code (log format 9).
inline void mark_compiled(const std::filesystem::path& dir) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.path().filename() != "diff.log") continue;
    std::ifstream in(entry.path());
    std::string text, line;
    while (std::getline(in, line))
      text += line + (line.rfind("#end ", 0) == 0 ? " compiled=1\n" : "\n");
    in.close();
    std::ofstream(entry.path()) << text;
  }
}

// Report text compared by content: each line trimmed and its runs of blanks made one space,
// so a test pins what a report says, not its column widths.
inline std::string squeeze(const std::string& text) {
  std::string out;
  bool blank = false, line_start = true;
  for (char c : text) {
    if (c == ' ' || c == '\t') {
      blank = true;
    } else if (c == '\n') {
      out += '\n';
      blank = false;
      line_start = true;
    } else {
      if (blank && !line_start) out += ' ';
      out += c;
      blank = line_start = false;
    }
  }
  return out;
}
inline bool says(const std::string& text, const std::string& expected) {
  return squeeze(text).find(squeeze(expected)) != std::string::npos;
}

// Pairs of class `c` among kind `k`'s.
inline std::int64_t count(const probe::differ::Result& r, Kind k, probe::differ::PairClass c) {
  return r.counts[static_cast<std::size_t>(k)][static_cast<std::size_t>(c)];
}

inline probe::differ::Result diff(const std::filesystem::path& a, const std::filesystem::path& b,
                                  probe::differ::DiffOptions opt = {}, bool lenient = false,
                                  std::vector<std::string> maps = {}) {
  probe::differ::Run base(a, {lenient, true, maps, "base"});
  probe::differ::Run test(b, {lenient, true, maps, "test"});
  return probe::differ::diff_runs(base, test, opt);
}

// The terminal report of `r`, with diff_logs' default options (no colour) unless told.
inline std::string text_of(const probe::differ::Result& r,
                           const probe::differ::TextOptions& opt = {}) {
  std::ostringstream out;
  probe::differ::print_text(r, out, opt);
  return out.str();
}

// The merged records of a run's first step (one Run reading `dir`), and the run's issues.
struct FirstStep {
  std::vector<probe::differ::Merged> records;
  probe::differ::IssueLog issues;
  const probe::differ::Merged& at(Kind kind, const std::string& name) const {
    for (const auto& m : records)
      if (m.record.kind == kind && m.record.name == name) return m;
    throw std::runtime_error("no record " + name);
  }
};

inline FirstStep first_step(const std::filesystem::path& dir) {
  probe::differ::Run run(dir, {false, true, {}, "test"});
  FirstStep s;
  std::int64_t step = 0;
  EXPECT_TRUE(run.next_step(step, s.records));
  s.issues = run.issues();
  return s;
}

}  // namespace differ_test
