// Writing and streaming-reading one rank's diff.log (torch-free).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "probe/log_format.h"

namespace probe {

// Appends steps to a diff.log through an spdlog async logger, so file I/O runs off the
// training thread. write_step() returns once the step's lines reached the OS: a process
// killed afterwards leaves that step readable.
class LogWriter {
 public:
  // Creates missing parent directories. Throws std::runtime_error naming the path when the
  // file cannot be created.
  LogWriter(const std::filesystem::path& path, const log_format::Header& header);
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  void write_step(const std::vector<std::string>& lines);
  const std::filesystem::path& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a diff.log one record at a time: memory stays that of one line.
class LogReader {
 public:
  // Throws std::runtime_error naming the path when it cannot be opened, and
  // log_format::ParseError ("path:1: ...") when the header is missing or not v1.
  explicit LogReader(const std::filesystem::path& path);

  const log_format::Header& header() const { return header_; }
  const std::filesystem::path& path() const { return path_; }

  // The next record, or nullopt at the end of the file. A bad line throws
  // log_format::ParseError("path:LINE: message"); reading may continue after it.
  std::optional<Record> next();

  // True once the end was reached and the last line had no newline (a writer killed
  // mid-line): that fragment was not parsed.
  bool truncated() const { return truncated_; }
  // The unparsed fragment once truncated() (e.g. "step=7 kind=gr"), else empty.
  std::string_view truncated_fragment() const {
    return truncated_ ? std::string_view(line_) : std::string_view();
  }
  std::int64_t line_number() const { return line_number_; }

 private:
  std::filesystem::path path_;
  std::ifstream in_;
  log_format::Header header_;
  std::int64_t line_number_ = 0;
  bool truncated_ = false;
  std::string line_;  // the line buffer, kept between next() calls
};

}  // namespace probe
