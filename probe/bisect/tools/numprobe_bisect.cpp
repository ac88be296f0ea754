// numprobe_bisect: from two parallel setups to the degree change that brings an unexplained
// divergence in, and on to its root-cause op (docs/bisect.md). Exit status as diff_logs': 0 the
// setups agree bitwise, 4 noise only, 1 a culprit found, 2 bad input, 3 the base or test run
// failed; 130 interrupted.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "configs.h"
#include "differ/diff.h"
#include "differ/replay_verdict.h"
#include "differ/report_html.h"
#include "runner.h"
#include "search.h"

namespace b = probe::bisect;
namespace d = probe::differ;
namespace fs = std::filesystem;

namespace {

struct Cli {
  std::string launch, world, base, test, out = "out/bisect", json;
};

// One configuration's run (plain or traced) and how it compares with the base's.
struct Entry {
  b::Config config;
  bool traced = false;
  std::string dir, log, command;
  b::RunOutcome outcome;
  std::optional<b::Against> against;  // against the base (not for the base itself)
  bool ok() const { return !outcome.interrupted && outcome.exit_code == 0; }
};

class Bisect {
 public:
  // `test` is kept in `base`'s degree order (one name per configuration: the cache's key); the
  // walk changes degrees in the order --test names them.
  Bisect(const Cli& cli, b::Launch launch, b::Config base, const b::Config& test)
      : cli_(cli), launch_(std::move(launch)), base_(std::move(base)), test_(b::in_order_of(test, base_)) {
    for (const auto& [n, v] : test.degrees) order_of_test_.push_back(n);
  }
  int run();

 private:
  Entry& launch_run(const b::Config& c, const std::string& trace = "");
  b::Against against_base(const b::Config& c);
  d::Result compare(const Entry& a, const Entry& b, d::PairGrid* grid = nullptr) const;
  int finish(const b::Culprit& culprit);
  void print_runs() const;
  void write_json(const nlohmann::json& answer, int code) const;
  int interrupted_exit(const std::string& where) const;

  const Cli& cli_;
  b::Launch launch_;
  b::Config base_, test_;
  std::vector<std::string> order_of_test_;
  std::map<std::string, Entry> runs_;  // by config text, "T:" before a traced one
  std::vector<std::string> order_;     // the runs made, in order
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

std::string fmt_seconds(double s) {
  std::ostringstream o;
  o.precision(1);
  o << std::fixed << s << " s";
  return o.str();
}

Entry& Bisect::launch_run(const b::Config& c, const std::string& trace) {
  const std::string key = (trace.empty() ? "" : "T:") + c.text();
  if (auto it = runs_.find(key); it != runs_.end()) return it->second;  // no configuration runs twice
  Entry e;
  e.config = c;
  e.traced = !trace.empty();
  const fs::path root = fs::path(cli_.out) / (e.traced ? "traced" : "runs");
  e.dir = (root / c.dir_name()).string();
  e.log = e.dir + ".log";
  e.command = launch_.command(c, e.dir);
  const std::int64_t ranks = launch_.world.empty() ? 0 : launch_.world_size(c);
  std::cout << "[" << order_.size() + 1 << "] " << (e.traced ? "traced " : "") << c.text()
            << (ranks ? " (" + std::to_string(ranks) + " ranks)" : std::string()) << " ..." << std::flush;
  std::map<std::string, std::string> set = {{"PROBE_DIR", e.dir}};
  if (e.traced) set["PROBE_TRACE"] = trace;
  try {
    std::error_code ec;
    fs::remove_all(e.dir, ec);  // an earlier bisection's run of it
    fs::create_directories(root);
    e.outcome = b::run_command(e.command, set, e.traced ? std::vector<std::string>{} : std::vector<std::string>{"PROBE_TRACE"},
                               e.log);
  } catch (const std::exception& ex) {  // no room for its log: it did not run
    std::cout << " not started: " << ex.what();
    e.outcome.exit_code = 126;
  }
  std::cout << " " << fmt_seconds(e.outcome.seconds) << ", "
            << (e.outcome.interrupted ? std::string("interrupted") : "exit " + std::to_string(e.outcome.exit_code))
            << "  (log " << e.log << ")" << std::endl;
  order_.push_back(key);
  return runs_.emplace(key, std::move(e)).first->second;
}

d::Result Bisect::compare(const Entry& a, const Entry& t, d::PairGrid* grid) const {
  d::RunOptions ao, to;
  ao.label = "base";
  to.label = "test";
  d::Run base(a.dir, ao), test(t.dir, to);
  d::DiffOptions o;
  if (grid) {
    o.on_pair = [grid](const d::Pair& p, std::size_t series) { grid->add(p, series); };
    o.on_restart = [grid] { *grid = d::PairGrid{}; };
  }
  return d::diff_runs(base, test, o);
}

b::Against Bisect::against_base(const b::Config& c) {
  Entry& e = launch_run(c);
  if (e.against) return *e.against;
  if (!e.ok()) return *(e.against = b::Against::failed);
  try {
    const d::Result r = compare(runs_.at(base_.text()), e);
    using V = d::Result::Verdict;
    switch (r.verdict()) {
      case V::different:
      case V::run_errors: e.against = b::Against::bug; break;
      case V::noise: e.against = r.noise.by_rule.contains(d::Rule::cannot_tell) ? b::Against::cannot_tell : b::Against::noise; break;
      case V::equal:
      case V::within_tolerance: e.against = b::Against::equal; break;
      case V::incomplete:  // a rank died and the launcher hid it: no answer from it
      case V::nothing_compared: e.against = b::Against::failed; break;
    }
  } catch (const std::exception& ex) {  // a run that wrote no logs
    std::cout << "    not compared: " << ex.what() << std::endl;
    e.against = b::Against::failed;
  }
  std::cout << "    against the base: " << b::against_name(*e.against) << std::endl;
  return *e.against;
}

void Bisect::print_runs() const {
  double total = 0;
  for (const auto& k : order_) total += runs_.at(k).outcome.seconds;
  std::cout << "RUNS  " << order_.size() << " runs, " << fmt_seconds(total) << " of runs, "
            << fmt_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count())
            << " in all\n";
  for (const auto& k : order_) {
    const Entry& e = runs_.at(k);
    std::cout << "  " << (e.traced ? "traced " : "") << e.config.text() << "  " << fmt_seconds(e.outcome.seconds)
              << "  " << (e.against ? b::against_name(*e.against) : e.ok() ? "ran" : "failed") << "  " << e.log << "\n";
  }
}

nlohmann::json runs_json(const std::map<std::string, Entry>& runs, const std::vector<std::string>& order) {
  auto list = nlohmann::json::array();
  for (const auto& k : order) {
    const Entry& e = runs.at(k);
    list.push_back({{"config", e.config.text()},
                    {"traced", e.traced},
                    {"dir", e.dir},
                    {"log", e.log},
                    {"command", e.command},
                    {"exit_code", e.outcome.exit_code},
                    {"seconds", e.outcome.seconds},
                    {"against_base", e.against ? nlohmann::json(b::against_name(*e.against)) : nlohmann::json(nullptr)}});
  }
  return list;
}

void Bisect::write_json(const nlohmann::json& answer, int code) const {
  if (cli_.json.empty()) return;
  nlohmann::json j = answer;
  j["schema"] = "numprobe.bisect/1";
  j["exit_code"] = code;
  j["base"] = base_.text();
  j["test"] = test_.text();
  j["runs"] = runs_json(runs_, order_);
  j["wall_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::ofstream(cli_.json) << j.dump(1) << "\n";
}

int Bisect::interrupted_exit(const std::string& where) const {
  std::cout << "\nINTERRUPTED  " << where << "; the run under way was stopped. So far:\n";
  print_runs();
  write_json({{"interrupted", where}}, 130);
  return 130;
}

// numprobe_replay beside this tool ("" where it was not built: no LibTorch).
std::string replay_tool() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path tool = self.parent_path() / "numprobe_replay";
  return !ec && fs::exists(tool) ? tool.string() : "";
}

// What the culprit brings in: its configuration against the base (the search's own comparison;
// `before` against the base is noise). With the differ's PROBE_TRACE setting, both re-run traced
// with op dumps, their root-cause op and the replay's verdict; then the answer.
int Bisect::finish(const b::Culprit& culprit) {
  const Entry& before = runs_.at(base_.text());
  const Entry& after = launch_run(culprit.after);
  d::PairGrid grid;
  // The headline is the records' (a gradient, a module's output); the op trace then says which op.
  const d::Result plain = compare(before, after, &grid);
  d::Result result = plain;
  bool traced = false;
  std::string root = plain.unexplained_cause
                         ? "none: an op trace does not locate [" + std::string(rule_name(plain.unexplained_cause->rule)) +
                               "] (no op computes otherwise; the differ suggests no PROBE_TRACE setting for it)"
                         : "none: the comparison suggests no PROBE_TRACE setting";
  std::string verdict = "none";
  if (result.ops.trace_hint && !b::interrupted()) {
    const std::string trace = *result.ops.trace_hint + ";dump=1";
    std::cout << "localizing: both re-run with PROBE_TRACE='" << trace << "'" << std::endl;
    const Entry& tb = launch_run(base_, trace);
    const Entry& ta = launch_run(culprit.after, trace);
    if (tb.ok() && ta.ok()) {
      try {
        d::PairGrid traced_grid;
        result = compare(tb, ta, &traced_grid);
        grid = std::move(traced_grid);
        traced = true;
      } catch (const std::exception& ex) {
        std::cout << "the traced runs could not be compared: " << ex.what() << std::endl;
        result = plain;
      }
    }
    if (traced) {
      const std::string tool = replay_tool();
      if (result.ops.region && result.ops.region->dumped() && !tool.empty()) {
        const std::string log = (fs::path(cli_.out) / "replay.log").string();
        try {
          const auto r = b::run_command(
              d::shell_quoted(tool) + " " + d::shell_quoted(tb.dir) + " " + d::shell_quoted(ta.dir), {}, {}, log);
          std::cout << "replayed the region in float64: " << fmt_seconds(r.seconds) << ", exit " << r.exit_code
                    << " (log " << log << ")" << std::endl;
        } catch (const std::exception& ex) {
          std::cout << "the replay did not start: " << ex.what() << std::endl;
        }
        d::attach_replay_verdict(result);
      }
    }
  }
  if (b::interrupted()) return 130;  // run() reports what was found
  if (result.ops.root_cause) root = result.ops.root_cause->message;
  else if (result.ops.beyond_noise) root = result.ops.beyond_noise->message;
  if (result.replay) verdict = result.replay->verdict + (result.replay->evidence.empty() ? "" : ": " + result.replay->evidence.front());
  // The answer.
  std::string culprit_text;
  for (std::size_t i = 0; i < culprit.degrees.size(); ++i)
    culprit_text += (i ? " and " : "") + b::change_text(culprit.degrees[i], culprit.before, culprit.after);
  if (culprit.degrees.size() > 1) culprit_text += " together";
  culprit_text += " (at " + culprit.before.text();
  for (const auto& p : culprit.prerequisites)
    culprit_text += "; it needs " + b::change_text(p, base_, test_) + ": without it the run does not run";
  culprit_text += ")";
  const fs::path html = fs::path(cli_.out) / "report.html";
  std::cout << "\nCULPRIT  " << culprit_text << "\n";
  for (const auto& f : culprit.findings) std::cout << "  " << f << "\n";
  std::cout << "\n";
  d::print_headline(plain, std::cout, {});
  std::cout << "ROOT CAUSE OP  " << root << "\n";
  std::cout << "VERDICT  " << verdict << "\n\n";
  print_runs();
  if (d::html_report_available()) {
    std::ofstream page(html, std::ios::binary);
    d::write_html(result, {}, grid, page);
    std::cout << "REPORT  " << html.string() << "\n";
  }
  nlohmann::json answer = {{"culprit", {{"degrees", culprit.degrees},
                                        {"text", culprit_text},
                                        {"before", culprit.before.text()},
                                        {"after", culprit.after.text()},
                                        {"prerequisites", culprit.prerequisites},
                                        {"findings", culprit.findings}}},
                           {"comparison", nlohmann::json::parse(d::to_json(plain, {}))},
                           {"traced_comparison", traced
                                                     ? nlohmann::json::parse(d::to_json(result, {}))
                                                     : nlohmann::json(nullptr)},
                           {"root_cause_op", root},
                           {"verdict", verdict},
                           {"report", d::html_report_available() ? html.string() : ""}};
  write_json(answer, 1);
  return 1;
}

int Bisect::run() {
  const auto changed = [&] {
    std::string s;
    for (const auto& [n, v] : test_.degrees)
      if (base_.get(n) != v) s += (s.empty() ? "" : ", ") + n;
    return s;
  }();
  std::cout << "numprobe_bisect  base " << base_.text() << "  test " << test_.text() << "  (changed: "
            << (changed.empty() ? "none" : changed) << ")\n";
  for (const b::Config* c : {&base_, &test_}) {
    const Entry& e = launch_run(*c);
    if (e.outcome.interrupted) return interrupted_exit("while running " + c->text());
    if (!e.ok()) {
      std::cout << "\nthe " << (c == &base_ ? "base" : "test") << " run failed (exit " << e.outcome.exit_code
                << "): nothing to compare\n  command: " << e.command << "\n  log: " << e.log << "\n";
      write_json({{"error", "the " + std::string(c == &base_ ? "base" : "test") + " run failed"}}, 3);
      return 3;
    }
  }
  const b::Against whole = against_base(test_);
  if (b::interrupted()) return interrupted_exit("while comparing the test run with the base");
  if (whole == b::Against::failed) {
    const Entry& t = runs_.at(test_.text());
    std::cout << "\nthe test run could not be compared with the base (its logs: " << t.dir << ")\n  command: " << t.command
              << "\n  log: " << t.log << "\n";
    write_json({{"error", "the test run could not be compared with the base"}}, 3);
    return 3;
  }
  if (!b::diverges(whole)) {
    const int code = whole == b::Against::equal ? 0 : 4;
    std::cout << "\nNO CULPRIT  the test setup against the base: " << b::against_name(whole)
              << ": no unexplained divergence to bisect\n\n";
    print_runs();
    write_json({{"culprit", nullptr}, {"against_base", b::against_name(whole)}}, code);
    return code;
  }
  const auto cost = [&](const b::Config& c) { return launch_.world.empty() ? 0 : launch_.world_size(c); };
  const auto culprit = b::find_culprit(base_, test_, [&](const b::Config& c) { return against_base(c); },
                                       [] { return b::interrupted(); }, cost, order_of_test_);
  if (b::interrupted()) return interrupted_exit("while bisecting");
  if (!culprit) {  // cannot be: the last step of the walk is the test itself
    std::cout << "\nNO CULPRIT  the test diverges, but no step of the walk to it did\n";
    print_runs();
    write_json({{"culprit", nullptr}, {"against_base", b::against_name(whole)}}, 1);
    return 1;
  }
  const int code = finish(*culprit);
  if (b::interrupted()) return interrupted_exit("while localizing " + culprit->after.text());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"numprobe_bisect: from two parallel setups to the degree change that brings an unexplained "
               "divergence in, and its root-cause op"};
  Cli c;
  app.add_option("--launch", c.launch, "the run's shell command: {NAME} a degree's value, {out} the run's directory, "
                                       "{world} the product of --world's degrees")->required();
  app.add_option("--world", c.world, "the degrees whose product is the world size (e.g. dp,tp,pp)");
  app.add_option("--base", c.base, "the base configuration: name=integer pairs (dp=4,tp=1,pp=1)")->required();
  app.add_option("--test", c.test, "the test configuration, naming the same degrees")->required();
  app.add_option("--out", c.out, "where the runs, their logs and the report go")->capture_default_str();
  app.add_option("--json", c.json, "also write the answer as JSON (schema numprobe.bisect/1)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;  // --help; bad usage is 2, as diff_logs'
  }
  try {
    b::Launch launch{c.launch, b::parse_world(c.world)};
    const b::Config base = b::parse_config(c.base, "--base"), test = b::parse_config(c.test, "--test");
    b::check(launch, base, test);
    fs::create_directories(c.out);
    b::catch_interrupts();
    return Bisect(c, launch, base, test).run();
  } catch (const b::BadInput& e) {
    std::cerr << "numprobe_bisect: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "numprobe_bisect: " << e.what() << "\n";
    return 2;
  }
}
