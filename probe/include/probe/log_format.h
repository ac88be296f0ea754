// The log format (docs/log-format.md), version kVersion: a header line, then one record per
// line of space-separated key=value fields, each step closed by a step-end line, and a last line
// saying why when the probe stopped recording. Every version from kOldestVersion stays readable.
// Torch-free; the probe writes it, the differ reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "probe/record.h"

namespace probe::log_format {

// The version written (4: op records; 5: partial records; 6: covers; 7: split ops; 8: l1,
// mhash; 9: compiled steps; 10: tied parameters' other names).
inline constexpr int kVersion = 10;
inline constexpr int kOldestVersion = 1;  // oldest still read
inline constexpr std::string_view kHeaderTag = "#numprobe";
inline constexpr std::string_view kStepEndTag = "#end";
inline constexpr std::string_view kStoppedTag = "#stopped";

struct Header {
  int format_version = kVersion;
  int hash_spec_version = 1;
  int rank = 0;
  int world_size = 1;
  std::string torch_version;
  std::string setup;  // free text describing the run's layout
};

// A step's end (format 2): "#end step=<N> records=<K>", K the record lines of step N before it;
// format 9 adds " compiled=1" where code a compiler generated (torch.compile) ran in the step,
// whose kernels round otherwise than eager ones.
struct StepEnd {
  std::int64_t step = 0;
  std::int64_t records = 0;
  bool compiled = false;
};

// Why the probe stopped recording (format 3): "#stopped step=<N> reason=<escaped text>", the
// log's last line, after the last complete step; step N is the one it could not write.
struct Stopped {
  std::int64_t step = 0;
  std::string reason;
};

struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Shortest decimal text that parses back to exactly `v` ("nan", "inf", "-inf" for those).
std::string format_double(double v);
// Inverse of format_double; throws ParseError.
double parse_double(std::string_view text);

// 16 lowercase hex digits.
std::string format_hash(std::uint64_t h);
std::uint64_t parse_hash(std::string_view text);
// The same without throwing: nullopt for text that is not 16 lowercase hex digits.
std::optional<std::uint64_t> read_hash(std::string_view text);

// Values are percent-escaped so they never hold a space, '=', '%' or a control character.
std::string escape_value(std::string_view raw);
std::string unescape_value(std::string_view escaped);
// The same into `out`, reusing its capacity.
void unescape_value_into(std::string_view escaped, std::string& out);

std::string format_header(const Header& header);
// Throws ParseError (saying what is wrong) for a line that is not a header of a version
// between kOldestVersion and kVersion.
Header parse_header(std::string_view line);

std::string format_step_end(std::int64_t step, std::size_t records, bool compiled = false);
// True for a line starting with "#end " (a step end, well-formed or not).
inline bool is_step_end(std::string_view line) {
  return line.size() > kStepEndTag.size() && line.substr(0, kStepEndTag.size()) == kStepEndTag &&
         line[kStepEndTag.size()] == ' ';
}
// Throws ParseError (saying what is wrong) for a line that is not a step end.
StepEnd parse_step_end(std::string_view line);

std::string format_stopped(const Stopped& stopped);
// True for a line starting with "#stopped " (well-formed or not).
inline bool is_stopped(std::string_view line) {
  return line.size() > kStoppedTag.size() && line.substr(0, kStoppedTag.size()) == kStoppedTag &&
         line[kStoppedTag.size()] == ' ';
}
// Throws ParseError (saying what is wrong) for a line that is not a stop line.
Stopped parse_stopped(std::string_view line);

std::string format_record(const Record& record);
// The same line appended to `out` (no newline): a writer that formats a step's records into one
// reused buffer allocates nothing per record.
void append_record(std::string& out, const Record& record);
// Throws ParseError (saying which field is wrong) for a line that is not a record.
Record parse_record(std::string_view line);
// The same into `out`, reusing its strings' and vectors' capacity: a reader that parses into
// the same Record again allocates nothing per record once the buffers have grown. `out` is
// unspecified after a ParseError.
void parse_record_into(std::string_view line, Record& out);
// `r` as a default Record, keeping its strings' and vectors' capacity (for code that reuses
// records, like parse_record_into).
void reset_record(Record& r);

}  // namespace probe::log_format
