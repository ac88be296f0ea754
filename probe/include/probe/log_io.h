// Writing and streaming-reading one rank's diff.log (torch-free).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "probe/log_format.h"

namespace probe {

// What LogWriter throws when the log cannot be written (a full disk, a file-size limit): the
// message names the file and the reason ("numprobe: cannot write log file '<path>': <reason>").
struct LogWriteError : std::runtime_error {
  LogWriteError(const std::string& message, bool stop_line_written)
      : std::runtime_error(message), stop_line_written(stop_line_written) {}
  // Whether the log's last line now records the reason (log format 3's stop line).
  bool stop_line_written;
};

// Appends steps to a diff.log through an spdlog async logger, so file I/O runs off the
// training thread. write_step() returns once the step reached the OS: a process killed
// afterwards leaves that step readable.
class LogWriter {
 public:
  // Creates missing parent directories and writes the header (format kVersion, whatever
  // header.format_version says). Throws std::runtime_error naming the path when the file
  // cannot be created or written.
  LogWriter(const std::filesystem::path& path, const log_format::Header& header);
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // Appends `lines` (step `step`'s records) and the step's end line, in one write(). An empty
  // step writes nothing. A write error (a full disk), or a step that would pass the file-size
  // limit (RLIMIT_FSIZE, whose signal would kill the process), throws LogWriteError, and so does
  // every later call. Before it throws, the file is cut back to its last complete step (no
  // partial step or half line is left) and, where there is room, ends with a stop line naming
  // the failed step and the reason; room for it is reserved after each step (fallocate), so on
  // a full disk it usually fits.
  void write_step(std::int64_t step, const std::vector<std::string>& lines);
  // The same for `count` records already formatted into `records`, each line ending in '\n'
  // (log_format::append_record): the caller's buffer can be reused from step to step.
  // `compiled`: compiled code ran in the step (log_format::StepEnd).
  void write_step(std::int64_t step, std::string_view records, std::size_t count,
                  bool compiled = false);
  const std::filesystem::path& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a diff.log one record at a time: memory stays that of one line.
class LogReader {
 public:
  // Throws std::runtime_error naming the path and the reason (errno's text) when it cannot be
  // opened, and
  // log_format::ParseError ("path:1: ...") when the header is missing or of a version this
  // build does not read.
  explicit LogReader(const std::filesystem::path& path);

  const log_format::Header& header() const { return header_; }
  const std::filesystem::path& path() const { return path_; }

  // The next record, or nullopt at the end of the file. A bad line, or (format 2) a step end
  // that disagrees with the records before it, throws log_format::ParseError("path:LINE:
  // message"); reading may continue after it.
  std::optional<Record> next();
  // The same into `out` (false at the end), reusing its buffers: no allocation per record
  // once they have grown. `out` is unspecified after a ParseError or at the end.
  bool next(Record& out);

  // True once the end was reached and the log was cut short (a writer killed mid-write): the
  // last line has no newline (that fragment was not parsed), or (format 2) lines follow the
  // last step end.
  bool truncated() const { return truncated_; }
  // Once truncated(): the last line when it has no newline (e.g. "step=7 kind=gr"), else the
  // first line after the last step end. Empty otherwise.
  std::string_view truncated_fragment() const;
  // Format 2, once truncated() with complete lines after the last step end: where they begin,
  // and the step of their records (unknown when none of them parsed).
  struct Unterminated {
    std::int64_t line = 0;
    std::optional<std::int64_t> step;
  };
  std::optional<Unterminated> unterminated() const;
  // Format 3, once read: the probe's stop line (it could not write step `step`, for `reason`).
  // The log is then truncated(): the steps before `step` are complete, later ones are missing.
  struct Stop {
    std::int64_t step = 0;
    std::string reason;
    std::int64_t line = 0;
  };
  const std::optional<Stop>& stopped() const { return stopped_; }
  std::int64_t line_number() const { return line_number_; }
  // Format 9: whether step `step`'s end, once read, says compiled code ran in it. Safe to ask
  // from another thread than the one reading (the differ reads ahead on a worker).
  bool step_compiled(std::int64_t step) const;

  // Closes the file, keeping the read position: the next next() reopens it there. For readers
  // of more files than the process may hold open at once (thousands of ranks).
  void release();
  bool holds_file() const { return in_.is_open(); }

 private:
  void end_step(std::string_view line);
  void read_stop_line(std::string_view line);
  void reopen();

  std::filesystem::path path_;
  std::ifstream in_;
  std::streampos resume_at_ = 0;  // where a released file is read on from
  bool at_end_ = false;           // released after the end was reached: nothing to reopen
  log_format::Header header_;
  std::int64_t line_number_ = 0;
  bool truncated_ = false;
  bool cut_mid_line_ = false;
  std::optional<Stop> stopped_;
  std::string line_;  // the line buffer, kept between next() calls
  // Format 2: the lines since the last step end (the step being read).
  bool step_ends_ = false;         // the format has step ends
  std::int64_t open_lines_ = 0;    // every line: lines after the last step end are a cut step
  std::int64_t open_records_ = 0;  // the lines that parsed: what the step end counts
  std::int64_t open_first_line_ = 0;
  std::string open_first_text_;
  std::optional<std::int64_t> open_step_;        // the first parsed record's step
  std::optional<std::int64_t> open_other_step_;  // a record of another step among them
  mutable std::mutex compiled_mutex_;
  std::set<std::int64_t> compiled_steps_;  // steps whose end said compiled=1
};

}  // namespace probe
