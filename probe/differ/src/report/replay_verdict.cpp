// numprobe_replay's verdict file (schema numprobe.replay/1), written by the replay and read by
// diff_logs.
#include "differ/replay_verdict.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <type_traits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "differ/options.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace {

constexpr const char* kSchema = "numprobe.replay/1";

// JSON has no infinity or NaN: such a figure (a run off by inf) is written as "inf", "-inf", "nan".
nlohmann::json number_json(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

double number_of(const nlohmann::json& j) {
  if (!j.is_string()) return j.get<double>();
  const std::string s = j.get<std::string>();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf" || s == "-inf") return s == "inf" ? INFINITY : -INFINITY;
  throw nlohmann::json::type_error::create(302, "a number expected, not \"" + s + "\"", &j);
}

nlohmann::json figures_json(const std::optional<ReplayRunFigures>& f) {
  if (!f) return nullptr;
  return {{"dtype", f->dtype},
          {"units", number_json(f->units)},
          {"tolerance", number_json(f->tolerance)},
          {"element", f->element},
          {"recorded", number_json(f->recorded)},
          {"reference", number_json(f->reference)},
          {"replays_bitwise",
           f->replays_bitwise ? nlohmann::json(*f->replays_bitwise) : nlohmann::json(nullptr)},
          {"replay_note", f->replay_note},
          {"families", f->families}};
}

std::optional<ReplayRunFigures> figures_of(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  ReplayRunFigures f;
  f.dtype = j.at("dtype").get<std::string>();
  f.units = number_of(j.at("units"));
  f.tolerance = number_of(j.at("tolerance"));
  f.element = j.at("element").get<std::vector<std::int64_t>>();
  f.recorded = number_of(j.at("recorded"));
  f.reference = number_of(j.at("reference"));
  if (!j.at("replays_bitwise").is_null()) f.replays_bitwise = j.at("replays_bitwise").get<bool>();
  f.replay_note = j.at("replay_note").get<std::string>();
  f.families = j.at("families").get<std::vector<std::string>>();
  return f;
}

template <typename T>
nlohmann::json optional_json(const std::optional<T>& v) {
  if constexpr (std::is_same_v<T, double>) return v ? number_json(*v) : nlohmann::json(nullptr);
  else return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

template <typename T>
std::optional<T> optional_of(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  if constexpr (std::is_same_v<T, double>) return number_of(j);
  else return j.get<T>();
}

// Why a verdict file is about another region than the comparison's, "" where it is about it.
std::string other_region(const ReplayVerdict& v, const ReplayRegion& region) {
  if (v.root_cause != region.root_cause || v.step != region.step || v.mb != region.mb)
    return "it is about " + v.root_cause + " at step " + std::to_string(v.step) +
           ", the comparison's region about " + region.root_cause + " at step " +
           std::to_string(region.step);
  if (v.base_output != region.base_output || v.test_output != region.test_output)
    return "its runs' values differ from these runs' (the runs were made again since)";
  return "";
}

}  // namespace

std::string shell_quoted(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@") ==
          std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::filesystem::path default_replay_file(const std::filesystem::path& test_run) {
  if (std::filesystem::is_directory(test_run)) return test_run / "replay.json";
  return std::filesystem::path(test_run.string() + ".replay.json");
}

void describe_region(const ReplayRegion& region, ReplayVerdict& v) {
  v.step = region.step;
  v.mb = region.mb;
  v.phase = std::string(phase_name(region.phase));
  v.root_cause = region.root_cause;
  v.base_output = region.base_output;
  v.test_output = region.test_output;
  v.base_ops.clear();
  v.test_ops.clear();
  for (const auto& op : region.base) v.base_ops.push_back(op.name);
  for (const auto& op : region.test) v.test_ops.push_back(op.name);
}

std::string replay_verdict_json(const ReplayVerdict& v) {
  nlohmann::json j = {{"schema", kSchema},
                      {"verdict", v.verdict},
                      {"reason", v.reason},
                      {"evidence", v.evidence},
                      {"runs", {{"base", v.base_run}, {"test", v.test_run}}},
                      {"region",
                       {{"step", v.step},
                        {"mb", optional_json(v.mb)},
                        {"phase", v.phase},
                        {"root_cause", v.root_cause},
                        {"base_ops", v.base_ops},
                        {"test_ops", v.test_ops},
                        {"base_output", log_format::format_hash(v.base_output)},
                        {"test_output", log_format::format_hash(v.test_output)}}},
                      {"base", figures_json(v.base)},
                      {"test", figures_json(v.test)},
                      {"references",
                       {{"rel_diff", optional_json(v.references_rel_diff)},
                        {"bound", optional_json(v.references_bound)}}},
                      {"wall_seconds", v.wall_seconds}};
  return j.dump(2) + "\n";
}

ReplayVerdict parse_replay_verdict(const std::string& text, const std::string& file) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.value("schema", "") != kSchema)
      throw InputError(file + ": not a " + std::string(kSchema) + " document (schema \"" +
                       j.value("schema", "") + "\")");
    ReplayVerdict v;
    v.file = file;
    v.verdict = j.at("verdict").get<std::string>();
    v.reason = j.at("reason").get<std::string>();
    v.evidence = j.at("evidence").get<std::vector<std::string>>();
    v.base_run = j.at("runs").at("base").get<std::string>();
    v.test_run = j.at("runs").at("test").get<std::string>();
    const auto& r = j.at("region");
    v.step = r.at("step").get<std::int64_t>();
    v.mb = optional_of<std::int64_t>(r.at("mb"));
    v.phase = r.at("phase").get<std::string>();
    v.root_cause = r.at("root_cause").get<std::string>();
    v.base_ops = r.at("base_ops").get<std::vector<std::string>>();
    v.test_ops = r.at("test_ops").get<std::vector<std::string>>();
    v.base_output = log_format::parse_hash(r.at("base_output").get<std::string>());
    v.test_output = log_format::parse_hash(r.at("test_output").get<std::string>());
    v.base = figures_of(j.at("base"));
    v.test = figures_of(j.at("test"));
    v.references_rel_diff = optional_of<double>(j.at("references").at("rel_diff"));
    v.references_bound = optional_of<double>(j.at("references").at("bound"));
    v.wall_seconds = j.at("wall_seconds").get<double>();
    return v;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(file + ": not a " + std::string(kSchema) + " document: " + e.what());
  } catch (const std::exception& e) {
    if (dynamic_cast<const InputError*>(&e)) throw;
    throw InputError(file + ": " + e.what());
  }
}

void attach_replay_verdict(Result& r) {
  if (!r.ops.region) return;
  const ReplayRegion& region = *r.ops.region;
  const auto file = default_replay_file(r.test.path);
  if (std::filesystem::exists(file)) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    try {
      auto v = parse_replay_verdict(text.str(), file.string());
      const std::string other = other_region(v, region);
      if (other.empty()) {
        r.replay = std::make_shared<const ReplayVerdict>(std::move(v));
        return;
      }
      r.replay_note = file.string() + " left out: " + other;
    } catch (const InputError& e) {
      r.replay_note = std::string(e.what()) + " (left out)";
    }
  }
  if (region.dumped())
    r.replay_command =
        "numprobe_replay " + shell_quoted(r.base.path) + " " + shell_quoted(r.test.path);
}

}  // namespace probe::differ
