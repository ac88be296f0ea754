// Helpers: write runs through probe::LogWriter (the probe's own writer) for differ tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "differ/diff.h"
#include "probe/log_io.h"

namespace differ_test {

using probe::Kind;
using probe::Record;

inline std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("numprobe_differ_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline Record tensor(std::int64_t step, Kind kind, const std::string& name, std::uint64_t hash,
                     double norm, std::optional<std::int64_t> mb = std::nullopt) {
  Record r;
  r.step = step;
  r.kind = kind;
  r.name = name;
  r.microbatch = mb;
  r.stats.hash = hash;
  r.stats.norm = norm;
  r.stats.min = -1;
  r.stats.max = 1;
  r.stats.mean = 0;
  r.stats.dtype = "float32";
  r.stats.shape = {4, 2};
  return r;
}

inline Record sharded(Record r, std::int64_t row0, std::int64_t rows) {
  r.stats.shard = probe::Shard{r.stats.shape, {row0, 0}};
  r.stats.shape[0] = rows;
  return r;
}

inline Record none(std::int64_t step, Kind kind, const std::string& name) {
  Record r;
  r.step = step;
  r.kind = kind;
  r.name = name;
  r.state = Record::State::none;
  return r;
}

inline Record scalar(std::int64_t step, const std::string& name, double v) {
  Record r;
  r.step = step;
  r.kind = Kind::scalar;
  r.name = name;
  r.state = Record::State::scalar;
  r.value = v;
  return r;
}

// Writes rank<R>/diff.log for each rank through LogWriter (the current format), one write_step per step.
inline void write_run(const std::filesystem::path& dir, const std::vector<std::vector<Record>>& ranks,
                      int world_size = -1, int hash_spec = 1) {
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
    for (const auto& rec : ranks[r]) steps[rec.step].push_back(probe::log_format::format_record(rec));
    for (const auto& [s, lines] : steps) w.write_step(s, lines);
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

inline probe::differ::Result diff(const std::filesystem::path& a, const std::filesystem::path& b,
                                  probe::differ::DiffOptions opt = {}, bool lenient = false,
                                  std::vector<std::string> maps = {}) {
  probe::differ::Run base(a, {lenient, true, maps, "base"});
  probe::differ::Run test(b, {lenient, true, maps, "test"});
  return probe::differ::diff_runs(base, test, opt);
}

}  // namespace differ_test
