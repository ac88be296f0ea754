// What an op trace records (docs/log-format.md, "Op records"): the `PROBE_TRACE` /
// ProbeOptions::trace setting, e.g. `steps=7;scopes=^layers\.3\.;phases=forward,backward;mb=0-3`.
// Torch-free: the probe parses it, and diff_logs writes one for the re-run it suggests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace probe {

class TraceSpec {
 public:
  // Inclusive ranges; empty: every value.
  using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;

  TraceSpec() = default;  // traces nothing
  // `key=value` fields separated by ';':
  //   steps=7 | 3-5 | 1,4,7-9   the steps traced (default: every step)
  //   scopes=REGEX              scopes searched with ECMAScript regex (default: every scope)
  //   phases=forward,backward   (default: both)
  //   mb=0-3                    global microbatch ids (default: every microbatch)
  //   dump=1                    each traced op's schema, arguments and outputs saved as a .pt
  //   dump_cap=MiB              a rank's dumps stop once they would pass this (default 256)
  // An empty text traces nothing. Throws std::invalid_argument saying which field is wrong.
  static TraceSpec parse(std::string_view text);

  bool enabled() const { return enabled_; }
  bool traces_step(std::int64_t step) const { return enabled_ && in(steps_, step); }
  bool traces_microbatch(std::optional<std::int64_t> mb) const;
  bool traces_forward() const { return enabled_ && forward_; }
  bool traces_backward() const { return enabled_ && backward_; }
  bool traces_scope(const std::string& scope) const;
  bool dumps() const { return enabled_ && dump_; }
  std::int64_t dump_cap_bytes() const { return dump_cap_mib_ << 20; }
  static constexpr std::int64_t kDefaultDumpCapMiB = 256;

  // The canonical text (parse(text()) traces the same); empty when nothing is traced.
  const std::string& text() const { return text_; }

 private:
  static bool in(const Ranges& ranges, std::int64_t v);
  bool enabled_ = false;
  Ranges steps_, microbatches_;
  std::shared_ptr<const std::regex> scopes_;  // null: every scope
  bool forward_ = true, backward_ = true;
  bool dump_ = false;
  std::int64_t dump_cap_mib_ = kDefaultDumpCapMiB;
  std::string text_;
};

// Formats ranges as "1,4,7-9".
std::string format_ranges(const TraceSpec::Ranges& ranges);

}  // namespace probe
