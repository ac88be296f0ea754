#include "probe/trace_spec.h"

#include <charconv>
#include <stdexcept>

namespace probe {
namespace {

[[noreturn]] void fail(std::string_view text, const std::string& why) {
  throw std::invalid_argument(
      "trace setting '" + std::string(text) + "': " + why +
      " (expected steps=N|A-B,...;scopes=REGEX;phases=forward,backward;mb=A-B,...;"
      "dump=1;dump_cap=MiB)");
}

std::int64_t parse_id(std::string_view all, std::string_view field, std::string_view v) {
  std::int64_t n = -1;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 0)
    fail(all, std::string(field) + ": '" + std::string(v) + "' is not a non-negative integer");
  return n;
}

TraceSpec::Ranges parse_ranges(std::string_view all, std::string_view field, std::string_view v) {
  TraceSpec::Ranges ranges;
  if (v.empty()) fail(all, std::string(field) + " is empty");
  while (true) {
    const std::size_t comma = v.find(',');
    const std::string_view item = v.substr(0, comma);
    const std::size_t dash = item.find('-');
    const std::int64_t a = parse_id(all, field, item.substr(0, dash));
    const std::int64_t b =
        dash == std::string_view::npos ? a : parse_id(all, field, item.substr(dash + 1));
    if (b < a)
      fail(all, std::string(field) + ": range '" + std::string(item) + "' ends before it starts");
    ranges.emplace_back(a, b);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return ranges;
}

}  // namespace

std::string format_ranges(const TraceSpec::Ranges& ranges) {
  std::string out;
  for (const auto& [a, b] : ranges) {
    if (!out.empty()) out += ',';
    out += std::to_string(a);
    if (b != a) out += "-" + std::to_string(b);
  }
  return out;
}

TraceSpec TraceSpec::parse(std::string_view text) {
  TraceSpec spec;
  if (text.empty()) return spec;
  spec.enabled_ = true;
  std::string scopes_text;
  bool seen_steps = false, seen_scopes = false, seen_phases = false, seen_mb = false,
       seen_dump = false, seen_cap = false;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t semi = rest.find(';');
    const std::string_view field = rest.substr(0, semi);
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    if (field.empty()) continue;
    const std::size_t eq = field.find('=');
    if (eq == std::string_view::npos) fail(text, "field '" + std::string(field) + "' has no '='");
    const std::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
    auto once = [&](bool& seen) {
      if (seen) fail(text, "field '" + std::string(key) + "' given twice");
      seen = true;
    };
    if (key == "steps") {
      once(seen_steps);
      spec.steps_ = parse_ranges(text, key, value);
    } else if (key == "mb") {
      once(seen_mb);
      spec.microbatches_ = parse_ranges(text, key, value);
    } else if (key == "scopes") {
      once(seen_scopes);
      try {
        spec.scopes_ =
            std::make_shared<const std::regex>(std::string(value), std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        fail(text,
             "scopes: '" + std::string(value) + "' is not a regular expression (" + e.what() + ")");
      }
      scopes_text = value;
    } else if (key == "phases") {
      once(seen_phases);
      spec.forward_ = spec.backward_ = false;
      std::string_view v = value;
      while (true) {
        const std::size_t comma = v.find(',');
        const std::string_view phase = v.substr(0, comma);
        if (phase == "forward") spec.forward_ = true;
        else if (phase == "backward") spec.backward_ = true;
        else fail(text, "phases: '" + std::string(phase) + "' is not forward or backward");
        if (comma == std::string_view::npos) break;
        v.remove_prefix(comma + 1);
      }
    } else if (key == "dump") {
      once(seen_dump);
      if (value != "0" && value != "1")
        fail(text, "dump: '" + std::string(value) + "' is not 0 or 1");
      spec.dump_ = value == "1";
    } else if (key == "dump_cap") {
      once(seen_cap);
      spec.dump_cap_mib_ = parse_id(text, key, value);
      if (spec.dump_cap_mib_ < 1 || spec.dump_cap_mib_ > (std::int64_t{1} << 40))
        fail(text, "dump_cap: '" + std::string(value) + "' MiB is not between 1 and 2^40");
    } else {
      fail(text, "unknown field '" + std::string(key) + "'");
    }
  }
  if (seen_cap && !spec.dump_) fail(text, "dump_cap is a cap on dumps: it needs dump=1");
  // Canonical text: fields in one order, only those that restrict.
  std::string& t = spec.text_;
  auto add = [&](const std::string& field) { t += (t.empty() ? "" : ";") + field; };
  if (!spec.steps_.empty()) add("steps=" + format_ranges(spec.steps_));
  if (spec.scopes_) add("scopes=" + scopes_text);
  if (!(spec.forward_ && spec.backward_))
    add(std::string("phases=") + (spec.forward_ ? "forward" : "backward"));
  if (!spec.microbatches_.empty()) add("mb=" + format_ranges(spec.microbatches_));
  if (spec.dump_) add("dump=1");
  if (spec.dump_ && spec.dump_cap_mib_ != kDefaultDumpCapMiB)
    add("dump_cap=" + std::to_string(spec.dump_cap_mib_));
  // every step: still a setting that traces
  if (t.empty()) t = "steps=0-" + std::to_string(INT64_MAX);
  return spec;
}

bool TraceSpec::in(const Ranges& ranges, std::int64_t v) {
  if (ranges.empty()) return true;
  for (const auto& [a, b] : ranges)
    if (a <= v && v <= b) return true;
  return false;
}

bool TraceSpec::traces_microbatch(std::optional<std::int64_t> mb) const {
  if (!enabled_) return false;
  if (microbatches_.empty()) return true;
  return mb && in(microbatches_, *mb);
}

bool TraceSpec::traces_scope(const std::string& scope) const {
  return enabled_ && (!scopes_ || std::regex_search(scope, *scopes_));
}

}  // namespace probe
