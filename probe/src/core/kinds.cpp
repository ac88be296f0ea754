// Record kinds and phases by name (docs/log-format.md, "Records").
#include <array>
#include <stdexcept>
#include <string>

#include "probe/record.h"

namespace probe {
namespace {

constexpr std::array<std::string_view, kKindCount> kKindNames = {
    "rng",  "input",  "output", "tap",   "output_grad", "mb_grad",
    "grad", "scalar", "param",  "optim", "op"};
constexpr std::array<std::string_view, 4> kPhaseNames = {"step_begin", "forward", "backward",
                                                         "step_end"};

// "rng,input,...": every kind's name, for error messages.
std::string kind_list() {
  std::string out;
  for (auto name : kKindNames) (out += out.empty() ? "" : ",") += name;
  return out;
}

}  // namespace

std::string_view kind_name(Kind kind) { return kKindNames[static_cast<std::size_t>(kind)]; }

std::optional<Kind> parse_kind(std::string_view name) {
  // Length and first letter before the bytes: this runs for every record read.
  for (std::size_t i = 0; i < kKindNames.size(); ++i) {
    const std::string_view k = kKindNames[i];
    if (k.size() == name.size() && k[0] == name[0] && k == name) return static_cast<Kind>(i);
  }
  return std::nullopt;
}

std::uint32_t parse_kind_mask(std::string_view text) {
  if (text.empty() || text == "all") return kAllKinds;
  std::uint32_t mask = text[0] == '-' ? kAllKinds : 0;
  while (true) {
    const std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    const bool remove = !item.empty() && item[0] == '-';
    if (remove) item.remove_prefix(1);
    if (!item.empty()) {
      const auto kind = parse_kind(item);
      if (!kind)
        throw std::invalid_argument("unknown record kind '" + std::string(item) +
                                    "' (kinds: " + kind_list() + ")");
      const std::uint32_t bit = 1u << static_cast<unsigned>(*kind);
      mask = remove ? mask & ~bit : mask | bit;
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (mask == 0) throw std::invalid_argument("the kind list selects no kind");
  return mask;
}

Phase phase_of(Kind kind) {
  switch (kind) {
    case Kind::param: return Phase::step_begin;
    case Kind::rng:
    case Kind::input:
    case Kind::output:
    case Kind::tap: return Phase::forward;
    case Kind::output_grad:
    case Kind::mb_grad: return Phase::backward;
    case Kind::grad:
    case Kind::scalar:
    case Kind::optim: return Phase::step_end;
    case Kind::op: return Phase::forward;  // unless the record says otherwise (phase_of(Record))
  }
  return Phase::step_end;
}

Phase phase_of(const Record& record) {
  return record.kind == Kind::op && record.phase ? *record.phase : phase_of(record.kind);
}

std::string_view phase_name(Phase phase) { return kPhaseNames[static_cast<std::size_t>(phase)]; }

std::optional<Phase> parse_phase(std::string_view name) {
  for (std::size_t i = 0; i < kPhaseNames.size(); ++i)
    if (kPhaseNames[i] == name) return static_cast<Phase>(i);
  return std::nullopt;
}

}  // namespace probe
