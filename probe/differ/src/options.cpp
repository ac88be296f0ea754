// Parsing the comparison's options from their command-line texts.
#include "differ/options.h"

#include "probe/record.h"

namespace probe::differ {

std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>> parse_step_range(
    const std::string& text) {
  auto num = [&](const std::string& s) -> std::optional<std::int64_t> {
    if (s.empty()) return std::nullopt;
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used != s.size() || v < 0) throw InputError("--steps '" + text + "': bad step number");
    return v;
  };
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    auto v = num(text);
    if (!v) throw InputError("--steps is empty");
    return {v, v};
  }
  auto lo = num(text.substr(0, colon)), hi = num(text.substr(colon + 1));
  if (lo && hi && *lo > *hi) throw InputError("--steps '" + text + "': empty range");
  return {lo, hi};
}

std::uint32_t parse_kinds(const std::string& text) {
  try {
    return parse_kind_mask(text);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--kinds '") + text + "': " + e.what());
  }
}

std::regex parse_name_filter(const std::string& text) {
  try {
    return std::regex(text);
  } catch (const std::regex_error& e) {
    throw InputError("--name '" + text + "': bad regular expression: " + e.what());
  }
}

}  // namespace probe::differ
