// ProbeOptions from the environment (PROBE_* variables, RANK, WORLD_SIZE) and KindSet from text.
#include "probe/probe_options.h"

#include <charconv>
#include <limits>
#include <stdexcept>
#include <string>

#include "environment.h"
#include "probe/trace_spec.h"

namespace probe {
namespace {

bool parse_bool(const char* name, const std::string& v) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  throw std::invalid_argument(std::string("numprobe: ") + name + "='" + v +
                              "' is not a boolean (1/0, true/false, on/off)");
}

// An integer environment setting of at least `least` (RANK: 0; WORLD_SIZE, PROBE_EVERY: 1),
// decimal digits only, and no more than `most` (what the option's type holds).
std::int64_t parse_at_least(const char* name, const std::string& v, std::int64_t least,
                            std::int64_t most = std::numeric_limits<std::int64_t>::max()) {
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n < least || n > most)
    throw std::invalid_argument(std::string("numprobe: ") + name + "='" + v +
                                "' is not an integer from " + std::to_string(least) + " to " +
                                std::to_string(most));
  return n;
}

}  // namespace

KindSet KindSet::parse(const std::string& text) {
  try {
    return KindSet(parse_kind_mask(text));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("numprobe: ") + e.what());
  }
}

ProbeOptions ProbeOptions::from_env(ProbeOptions o) {
  constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
  if (const char* v = env("PROBE_ENABLE")) o.enabled = parse_bool("PROBE_ENABLE", v);
  if (const char* v = env("PROBE_DIR")) o.run_dir = v;
  if (const char* v = env("PROBE_EVERY")) {
    o.every = parse_at_least("PROBE_EVERY", v, 1);
  }
  if (const char* v = env("PROBE_KINDS")) {
    try {
      o.kinds = KindSet(parse_kind_mask(v));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("numprobe: PROBE_KINDS='") + v + "': " + e.what());
    }
  }
  if (const char* v = env("PROBE_TORCH_HASH")) o.torch_hash = parse_bool("PROBE_TORCH_HASH", v);
  if (const char* v = env("PROBE_ON_ERROR")) {
    const std::string mode = v;
    if (mode == "report") o.on_error = ProbeOptions::OnError::report;
    else if (mode == "throw") o.on_error = ProbeOptions::OnError::throw_error;
    else
      throw std::invalid_argument("numprobe: PROBE_ON_ERROR='" + mode +
                                  "' is not 'report' or 'throw'");
  }
  if (const char* v = env("PROBE_SETUP")) o.setup = v;
  if (const char* v = env("PROBE_TRACE")) {
    try {
      TraceSpec::parse(v);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("numprobe: PROBE_TRACE: ") + e.what());
    }
    o.trace = v;
  }
  if (o.rank < 0)
    if (const char* v = env("RANK"))
      o.rank = static_cast<int>(parse_at_least("RANK", v, 0, kMaxInt));
  if (o.world_size < 0)
    if (const char* v = env("WORLD_SIZE"))
      o.world_size = static_cast<int>(parse_at_least("WORLD_SIZE", v, 1, kMaxInt));
  return o;
}

}  // namespace probe
