// A bisection's runs, comparisons, search and answer (session.h).
#include "session.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "differ/diff.h"
#include "differ/replay_verdict.h"
#include "differ/report_html.h"

namespace probe::bisect {

namespace fs = std::filesystem;

namespace {

std::string fmt_seconds(double s) {
  std::ostringstream o;
  o.precision(1);
  o << std::fixed << s << " s";
  return o.str();
}

nlohmann::json runs_json(const std::map<std::string, Entry>& runs,
                         const std::vector<std::string>& order) {
  auto list = nlohmann::json::array();
  for (const auto& k : order) {
    const Entry& e = runs.at(k);
    list.push_back(
        {{"config", e.config.text()},
         {"traced", e.traced},
         {"dir", e.dir},
         {"log", e.log},
         {"command", e.command},
         {"exit_code", e.outcome.exit_code},
         {"seconds", e.outcome.seconds},
         {"against_base", e.versus_base ? nlohmann::json(versus_base_name(*e.versus_base))
                                        : nlohmann::json(nullptr)}});
  }
  return list;
}

// numprobe_replay beside this tool ("" where it was not built: no LibTorch).
std::string replay_tool() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path tool = self.parent_path() / "numprobe_replay";
  return !ec && fs::exists(tool) ? tool.string() : "";
}

}  // namespace

Session::Session(SessionOptions options, Launch launch, Config base, const Config& test)
    : options_(std::move(options)),
      launch_(std::move(launch)),
      base_(std::move(base)),
      test_(in_order_of(test, base_)) {
  for (const auto& [n, v] : test.degrees) order_of_test_.push_back(n);
}

Entry& Session::launch_run(const Config& c, const std::string& trace) {
  const std::string key = (trace.empty() ? "" : "T:") + c.text();
  // no configuration runs twice
  if (auto it = runs_.find(key); it != runs_.end()) return it->second;
  Entry e;
  e.config = c;
  e.traced = !trace.empty();
  const fs::path root = fs::path(options_.out) / (e.traced ? "traced" : "runs");
  e.dir = (root / c.dir_name()).string();
  e.log = e.dir + ".log";
  e.command = launch_.command(c, e.dir);
  const std::int64_t ranks = launch_.world.empty() ? 0 : launch_.world_size(c);
  std::cout << "[" << order_.size() + 1 << "] " << (e.traced ? "traced " : "") << c.text()
            << (ranks ? " (" + std::to_string(ranks) + " ranks)" : std::string()) << " ..."
            << std::flush;
  std::map<std::string, std::string> set = {{"PROBE_DIR", e.dir}};
  if (e.traced) set["PROBE_TRACE"] = trace;
  try {
    std::error_code ec;
    fs::remove_all(e.dir, ec);  // an earlier bisection's run of it
    fs::create_directories(root);
    e.outcome = run_command(
        e.command, set,
        e.traced ? std::vector<std::string>{} : std::vector<std::string>{"PROBE_TRACE"}, e.log);
  } catch (const std::exception& ex) {  // no room for its log: it did not run
    std::cout << " not started: " << ex.what();
    e.outcome.exit_code = 126;
  }
  std::cout << " " << fmt_seconds(e.outcome.seconds) << ", "
            << (e.outcome.interrupted ? std::string("interrupted")
                                      : "exit " + std::to_string(e.outcome.exit_code))
            << "  (log " << e.log << ")" << std::endl;
  order_.push_back(key);
  return runs_.emplace(key, std::move(e)).first->second;
}

differ::Result Session::compare(const Entry& a, const Entry& t, differ::PairGrid* grid) const {
  differ::RunOptions ao, to;
  ao.label = "base";
  to.label = "test";
  differ::Run base(a.dir, ao), test(t.dir, to);
  differ::DiffOptions o;
  if (grid) {
    o.on_pair = [grid](const differ::Pair& p, std::size_t series) { grid->add(p, series); };
    o.on_restart = [grid] { *grid = differ::PairGrid{}; };
  }
  return differ::diff_runs(base, test, o);
}

VersusBase Session::against_base(const Config& c) {
  Entry& e = launch_run(c);
  if (e.versus_base) return *e.versus_base;
  if (!e.ok()) return *(e.versus_base = VersusBase::failed);
  try {
    const differ::Result r = compare(runs_.at(base_.text()), e);
    using V = differ::Result::Verdict;
    switch (r.verdict()) {
      case V::different:
      case V::run_errors: e.versus_base = VersusBase::bug; break;
      case V::noise:
        e.versus_base = r.noise.by_rule.contains(differ::Rule::cannot_tell)
                            ? VersusBase::cannot_tell
                            : VersusBase::noise;
        break;
      case V::equal:
      case V::within_tolerance: e.versus_base = VersusBase::equal; break;
      case V::incomplete:  // a rank died and the launcher hid it: no answer from it
      case V::nothing_compared: e.versus_base = VersusBase::failed; break;
    }
  } catch (const std::exception& ex) {  // a run that wrote no logs
    std::cout << "    not compared: " << ex.what() << std::endl;
    e.versus_base = VersusBase::failed;
  }
  std::cout << "    against the base: " << versus_base_name(*e.versus_base) << std::endl;
  return *e.versus_base;
}

void Session::print_runs() const {
  double total = 0;
  for (const auto& k : order_) total += runs_.at(k).outcome.seconds;
  std::cout << "RUNS  " << order_.size() << " runs, " << fmt_seconds(total) << " of runs, "
            << fmt_seconds(
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count())
            << " in all\n";
  for (const auto& k : order_) {
    const Entry& e = runs_.at(k);
    std::cout << "  " << (e.traced ? "traced " : "") << e.config.text() << "  "
              << fmt_seconds(e.outcome.seconds) << "  "
              << (e.versus_base ? versus_base_name(*e.versus_base)
                  : e.ok()      ? "ran"
                                : "failed")
              << "  " << e.log << "\n";
  }
}

void Session::write_json(const nlohmann::json& answer, int code) const {
  if (options_.json.empty()) return;
  nlohmann::json j = answer;
  j["schema"] = "numprobe.bisect/1";
  j["exit_code"] = code;
  j["base"] = base_.text();
  j["test"] = test_.text();
  j["runs"] = runs_json(runs_, order_);
  j["wall_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::ofstream(options_.json) << j.dump(1) << "\n";
}

int Session::interrupted_exit(const std::string& where) const {
  std::cout << "\nINTERRUPTED  " << where << "; the run under way was stopped. So far:\n";
  print_runs();
  write_json({{"interrupted", where}}, 130);
  return 130;
}

// What the culprit brings in: its configuration against the base (the search's own comparison;
// `before` against the base is noise). With the differ's PROBE_TRACE setting, both re-run traced
// with op dumps, their root-cause op and the replay's verdict; then the answer.
int Session::finish(const Culprit& culprit) {
  const Localized found = localize(culprit);
  if (interrupted()) return 130;  // run() reports what was found
  return answer(culprit, found);
}

Session::Localized Session::localize(const Culprit& culprit) {
  const Entry& before = runs_.at(base_.text());
  const Entry& after = launch_run(culprit.after);
  Localized found;
  // The headline is the records' (a gradient, a module's output); the op trace then says which op.
  found.plain = compare(before, after, &found.grid);
  found.result = found.plain;
  if (!found.plain.ops.trace_hint || interrupted()) return found;
  const std::string trace = *found.plain.ops.trace_hint + ";dump=1";
  std::cout << "localizing: both re-run with PROBE_TRACE='" << trace << "'" << std::endl;
  const Entry& traced_base = launch_run(base_, trace);
  const Entry& traced_after = launch_run(culprit.after, trace);
  if (!traced_base.ok() || !traced_after.ok()) return found;
  try {
    differ::PairGrid traced_grid;
    found.result = compare(traced_base, traced_after, &traced_grid);
    found.grid = std::move(traced_grid);
    found.traced = true;
  } catch (const std::exception& ex) {
    std::cout << "the traced runs could not be compared: " << ex.what() << std::endl;
    found.result = found.plain;
    return found;
  }
  replay_region(traced_base, traced_after, found.result);
  return found;
}

// numprobe_replay on the traced runs' region, its verdict attached to `result`, where the
// region was dumped and the replay was built.
void Session::replay_region(const Entry& traced_base, const Entry& traced_after,
                            differ::Result& result) const {
  const std::string tool = replay_tool();
  if (!result.ops.region || !result.ops.region->dumped() || tool.empty()) return;
  const std::string log = (fs::path(options_.out) / "replay.log").string();
  try {
    const auto r =
        run_command(differ::shell_quoted(tool) + " " + differ::shell_quoted(traced_base.dir) + " " +
                        differ::shell_quoted(traced_after.dir),
                    {}, {}, log);
    std::cout << "replayed the region in float64: " << fmt_seconds(r.seconds) << ", exit "
              << r.exit_code << " (log " << log << ")" << std::endl;
  } catch (const std::exception& ex) {
    std::cout << "the replay did not start: " << ex.what() << std::endl;
  }
  differ::attach_replay_verdict(result);
}

// "tp 1 -> 2 (at dp=2,tp=1; it needs ...)": the culprit's change(s), where, and what it needs.
std::string Session::culprit_text(const Culprit& culprit) const {
  std::string text;
  for (std::size_t i = 0; i < culprit.degrees.size(); ++i)
    text += (i ? " and " : "") + change_text(culprit.degrees[i], culprit.before, culprit.after);
  if (culprit.degrees.size() > 1) text += " together";
  text += " (at " + culprit.before.text();
  for (const auto& p : culprit.prerequisites)
    text += "; it needs " + change_text(p, base_, test_) + ": without it the run does not run";
  return text + ")";
}

int Session::answer(const Culprit& culprit, const Localized& found) {
  std::string root =
      found.plain.unexplained_cause
          ? "none: an op trace does not locate [" +
                std::string(rule_name(found.plain.unexplained_cause->rule)) +
                "] (no op computes otherwise; the differ suggests no PROBE_TRACE setting for it)"
          : "none: the comparison suggests no PROBE_TRACE setting";
  if (found.result.ops.root_cause) root = found.result.ops.root_cause->message;
  else if (found.result.ops.beyond_noise) root = found.result.ops.beyond_noise->message;
  std::string verdict = "none";
  if (found.result.replay)
    verdict =
        found.result.replay->verdict +
        (found.result.replay->evidence.empty() ? "" : ": " + found.result.replay->evidence.front());
  const std::string text = culprit_text(culprit);
  const fs::path html = fs::path(options_.out) / "report.html";
  std::cout << "\nCULPRIT  " << text << "\n";
  for (const auto& f : culprit.findings) std::cout << "  " << f << "\n";
  std::cout << "\n";
  differ::print_headline(found.plain, std::cout, {});
  std::cout << "ROOT CAUSE OP  " << root << "\n";
  std::cout << "VERDICT  " << verdict << "\n\n";
  print_runs();
  if (differ::html_report_available()) {
    std::ofstream page(html, std::ios::binary);
    differ::write_html(found.result, {}, found.grid, page);
    std::cout << "REPORT  " << html.string() << "\n";
  }
  nlohmann::json answer = {
      {"culprit",
       {{"degrees", culprit.degrees},
        {"text", text},
        {"before", culprit.before.text()},
        {"after", culprit.after.text()},
        {"prerequisites", culprit.prerequisites},
        {"findings", culprit.findings}}},
      {"comparison", nlohmann::json::parse(differ::to_json(found.plain, {}))},
      {"traced_comparison", found.traced ? nlohmann::json::parse(differ::to_json(found.result, {}))
                                         : nlohmann::json(nullptr)},
      {"root_cause_op", root},
      {"verdict", verdict},
      {"report", differ::html_report_available() ? html.string() : ""}};
  write_json(answer, 1);
  return 1;
}

int Session::run() {
  const auto changed = [&] {
    std::string s;
    for (const auto& [n, v] : test_.degrees)
      if (base_.get(n) != v) s += (s.empty() ? "" : ", ") + n;
    return s;
  }();
  std::cout << "numprobe_bisect  base " << base_.text() << "  test " << test_.text()
            << "  (changed: " << (changed.empty() ? "none" : changed) << ")\n";
  for (const Config* c : {&base_, &test_}) {
    const Entry& e = launch_run(*c);
    if (e.outcome.interrupted) return interrupted_exit("while running " + c->text());
    if (!e.ok()) {
      std::cout << "\nthe " << (c == &base_ ? "base" : "test") << " run failed (exit "
                << e.outcome.exit_code << "): nothing to compare\n  command: " << e.command
                << "\n  log: " << e.log << "\n";
      write_json({{"error", "the " + std::string(c == &base_ ? "base" : "test") + " run failed"}},
                 3);
      return 3;
    }
  }
  const VersusBase whole = against_base(test_);
  if (interrupted()) return interrupted_exit("while comparing the test run with the base");
  if (whole == VersusBase::failed) {
    const Entry& t = runs_.at(test_.text());
    std::cout << "\nthe test run could not be compared with the base (its logs: " << t.dir
              << ")\n  command: " << t.command << "\n  log: " << t.log << "\n";
    write_json({{"error", "the test run could not be compared with the base"}}, 3);
    return 3;
  }
  if (!diverges(whole)) {
    const int code = whole == VersusBase::equal ? 0 : 4;
    std::cout << "\nNO CULPRIT  the test setup against the base: " << versus_base_name(whole)
              << ": no unexplained divergence to bisect\n\n";
    print_runs();
    write_json({{"culprit", nullptr}, {"against_base", versus_base_name(whole)}}, code);
    return code;
  }
  const auto cost = [&](const Config& c) {
    return launch_.world.empty() ? 0 : launch_.world_size(c);
  };
  const auto culprit = find_culprit(
      base_, test_, [&](const Config& c) { return against_base(c); }, [] { return interrupted(); },
      cost, order_of_test_);
  if (interrupted()) return interrupted_exit("while bisecting");
  if (!culprit) {  // cannot be: the last step of the walk is the test itself
    std::cout << "\nNO CULPRIT  the test diverges, but no step of the walk to it did\n";
    print_runs();
    write_json({{"culprit", nullptr}, {"against_base", versus_base_name(whole)}}, 1);
    return 1;
  }
  const int code = finish(*culprit);
  if (interrupted()) return interrupted_exit("while localizing " + culprit->after.text());
  return code;
}

}  // namespace probe::bisect
