// numprobe_bisect's work (docs/bisect.md): runs the base and test setups and the configurations
// between them, compares each with the base through the differ's library, finds the smallest
// degree change that brings an unexplained divergence in, re-runs it traced, replays its region,
// and answers (text, HTML report, JSON). The CLI only parses its options into a Session.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "configs.h"
#include "differ/report_html.h"
#include "differ/result.h"
#include "runner.h"
#include "search.h"

namespace probe::bisect {

struct SessionOptions {
  std::string out = "out/bisect";  // where the runs, their logs and the report go
  std::string json;                // also the answer as JSON (schema numprobe.bisect/1) here
};

// One configuration's run (plain or traced) and how it compares with the base's.
struct Entry {
  Config config;
  bool traced = false;
  std::string dir, log, command;
  RunOutcome outcome;
  std::optional<VersusBase> versus_base;  // against the base (not for the base itself)
  bool ok() const { return !outcome.interrupted && outcome.exit_code == 0; }
};

class Session {
 public:
  // `test` is kept in `base`'s degree order (one name per configuration: the cache's key); the
  // walk changes degrees in the order `test` names them.
  Session(SessionOptions options, Launch launch, Config base, const Config& test);
  // The whole bisection, its answer printed (and written as JSON when asked); the exit status
  // (docs/bisect.md).
  int run();

 private:
  Entry& launch_run(const Config& c, const std::string& trace = "");
  VersusBase against_base(const Config& c);
  differ::Result compare(const Entry& a, const Entry& b, differ::PairGrid* grid = nullptr) const;
  // The culprit's comparison, traced and replayed where it can be.
  struct Localized {
    differ::Result plain;   // the culprit against the base, untraced (the headline's)
    differ::Result result;  // traced where the trace ran, else the plain one
    differ::PairGrid grid;  // the report's pairs of `result`
    bool traced = false;
  };
  int finish(const Culprit& culprit);
  Localized localize(const Culprit& culprit);
  void replay_region(const Entry& traced_base, const Entry& traced_after,
                     differ::Result& result) const;
  std::string culprit_text(const Culprit& culprit) const;
  int answer(const Culprit& culprit, const Localized& found);
  void print_runs() const;
  void write_json(const nlohmann::json& answer, int code) const;
  int interrupted_exit(const std::string& where) const;

  SessionOptions options_;
  Launch launch_;
  Config base_, test_;
  std::vector<std::string> order_of_test_;
  std::map<std::string, Entry> runs_;  // by config text, "T:" before a traced one
  std::vector<std::string> order_;     // the runs made, in order
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace probe::bisect
