// The format's tag lines (docs/log-format.md): the header, a step's end, the stop line. One
// reader for all three, so they agree on what a line may hold.
#include <string>

#include "log_fields.h"

namespace probe::log_format {
namespace {

// Reads "<tag> key=value ...": `not_tagged` is the error for a line that does not start with
// `tag`; `read(field)` takes each field and returns false for a key the line does not define.
// One rule for unknown fields, in every line of the format (docs/log-format.md, "Unknown
// fields"): an error naming the field. A log states its format version and a reader reads only
// the versions it knows, each of which defines its lines' fields, so an unknown field is a
// damaged or foreign line, never a later addition that could be skipped.
template <class Read>
void read_tag_line(std::string_view line, std::string_view tag, std::string_view what,
                   const std::string& not_tagged, Read&& read) {
  bool tagged = false;
  for_each_field(line, [&](const Field& f) {
    if (!tagged) {
      if (!f.bare || f.key != tag) fail(not_tagged);
      tagged = true;
      return;
    }
    if (f.bare) fail("unexpected token '" + std::string(f.key) + "' in " + std::string(what));
    if (!read(f)) fail("unknown field '" + std::string(f.key) + "' in " + std::string(what));
  });
  if (!tagged) fail(not_tagged);
}

}  // namespace

std::string format_header(const Header& header) {
  std::string out(kHeaderTag);
  out += " format=" + std::to_string(header.format_version);
  out += " hash_spec=" + std::to_string(header.hash_spec_version);
  out += " rank=" + std::to_string(header.rank);
  out += " world_size=" + std::to_string(header.world_size);
  out += " torch=" + escape_value(header.torch_version);
  out += " setup=" + escape_value(header.setup);
  return out;
}

Header parse_header(std::string_view line) {
  Header header;
  bool has_format = false, has_spec = false;
  const std::string not_tagged =
      "not a numprobe log: the first line does not start with '" + std::string(kHeaderTag) + "'";
  read_tag_line(line, kHeaderTag, "header", not_tagged, [&](const Field& f) {
    if (f.key == "format") {
      header.format_version = static_cast<int>(parse_int(f.value, f.key));
      has_format = true;
    } else if (f.key == "hash_spec") {
      header.hash_spec_version = static_cast<int>(parse_int(f.value, f.key));
      has_spec = true;
    } else if (f.key == "rank") {
      header.rank = static_cast<int>(parse_int(f.value, f.key));
    } else if (f.key == "world_size") {
      header.world_size = static_cast<int>(parse_int(f.value, f.key));
    } else if (f.key == "torch") {
      header.torch_version = unescape_value(f.value);
    } else if (f.key == "setup") {
      header.setup = unescape_value(f.value);
    } else {
      return false;
    }
    return true;
  });
  if (!has_format || !has_spec) fail("header lacks format= or hash_spec=");
  if (header.format_version < kOldestVersion || header.format_version > kVersion)
    fail("log format version " + std::to_string(header.format_version) +
         " is not supported (this build reads versions " + std::to_string(kOldestVersion) + " to " +
         std::to_string(kVersion) + ")");
  if (header.rank < 0 || header.world_size < 1 || header.rank >= header.world_size)
    fail("header has rank " + std::to_string(header.rank) + " outside world_size " +
         std::to_string(header.world_size));
  return header;
}

std::string format_step_end(std::int64_t step, std::size_t records, bool compiled) {
  std::string out(kStepEndTag);
  out += " step=" + std::to_string(step);
  out += " records=" + std::to_string(records);
  if (compiled) out += " compiled=1";
  return out;
}

StepEnd parse_step_end(std::string_view line) {
  StepEnd end;
  bool has_step = false, has_records = false;
  const std::string not_tagged = "step end does not start with '" + std::string(kStepEndTag) + "'";
  read_tag_line(line, kStepEndTag, "step end", not_tagged, [&](const Field& f) {
    if (f.key == "step") {
      end.step = parse_int(f.value, f.key);
      has_step = true;
    } else if (f.key == "records") {
      end.records = parse_int(f.value, f.key);
      has_records = true;
    } else if (f.key == "compiled") {
      if (f.value != "0" && f.value != "1")
        fail("compiled=" + std::string(f.value) + " in step end is not 0 or 1");
      end.compiled = f.value == "1";
    } else {
      return false;
    }
    return true;
  });
  if (!has_step || !has_records) fail("step end lacks step= or records=");
  if (end.step < 0 || end.records < 0) fail("negative step or records in step end");
  return end;
}

std::string format_stopped(const Stopped& stopped) {
  std::string out(kStoppedTag);
  out += " step=" + std::to_string(stopped.step);
  out += " reason=" + escape_value(stopped.reason);
  return out;
}

Stopped parse_stopped(std::string_view line) {
  Stopped stopped;
  bool has_step = false, has_reason = false;
  const std::string not_tagged = "stop line does not start with '" + std::string(kStoppedTag) + "'";
  read_tag_line(line, kStoppedTag, "stop line", not_tagged, [&](const Field& f) {
    if (f.key == "step") {
      stopped.step = parse_int(f.value, f.key);
      has_step = true;
    } else if (f.key == "reason") {
      stopped.reason = unescape_value(f.value);
      has_reason = true;
    } else {
      return false;
    }
    return true;
  });
  if (!has_step || !has_reason) fail("stop line lacks step= or reason=");
  if (stopped.step < 0) fail("negative step in stop line");
  return stopped;
}

}  // namespace probe::log_format
