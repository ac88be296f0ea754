// numprobe_replay BASE TEST: where two runs part (the root cause's region, from the op dumps of
// a trace with dump=1), each run's ops replayed in float64 and in their recorded dtypes, and the
// verdict: noise, precision: base|test|both, different math, inputs differ or not replayable
// (docs/diff-logs.md, "Replay verdict"). Exit status: 0 noise, 1 precision or different math,
// 2 bad input (no region to replay), 3 inputs differ or not replayable.
#include <CLI/CLI.hpp>

#include <chrono>
#include <fstream>
#include <iostream>

#include "differ/diff.h"
#include "differ/replay_verdict.h"
#include "dump_file.h"
#include "op_call.h"
#include "probe/log_format.h"
#include "verdict.h"

namespace differ = probe::differ;
namespace replay = probe::replay;

namespace {

struct Cli {
  std::string base, test, op, json;
  bool no_json = false;
};

replay::RegionOp load_op(const differ::ReplayOp& op) {
  if (op.split)
    throw replay::NotReplayable(
        op.name +
        ": it ran split over tensor-parallel ranks; one rank's dump holds a piece of the op");
  if (op.dump.empty())
    throw replay::NotReplayable(
        op.name + ": it was not dumped (PROBE_TRACE's dump=1, or the rank's dump cap was reached)");
  replay::RegionOp out;
  out.name = op.name;
  try {
    out.dump = replay::load_dump(op.dump);
  } catch (const std::exception& e) {
    throw replay::NotReplayable(e.what());
  }
  if (!out.dump.schema.empty()) {
    try {
      out.schema = replay::parse_schema(out.dump.schema);
    } catch (const std::exception&) {
    }
  }
  out.inputs = op.inputs;
  out.output = op.output;
  out.output_index = replay::output_index_of(op.name);
  return out;
}

// A run with no ops of its own hands on the value the other run's ops start from: its dumps
// hold it.
at::Tensor value_in(const replay::RunRegion& other, std::uint64_t hash) {
  for (const auto& op : other.ops) {
    std::vector<at::Tensor> tensors;
    for (const auto& a : op.dump.args) replay::flatten_tensors(a, tensors);
    for (std::size_t i = 0; i < tensors.size() && i < op.inputs.size(); ++i)
      if (op.inputs[i] == hash) return tensors[i];
  }
  throw replay::NotReplayable("the value " + probe::log_format::format_hash(hash) +
                              " the region starts from is in no dump");
}

std::string ops_text(const std::vector<std::string>& names) {
  if (names.empty()) return "(no op of its own)";
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string hashes_text(const std::vector<std::uint64_t>& hashes) {
  std::string s;
  for (auto h : hashes) s += (s.empty() ? "" : " ") + probe::log_format::format_hash(h);
  return "[" + s + "]";
}

void replay(const differ::ReplayRegion& region, differ::ReplayVerdict& v) {
  if (region.inputs_differ) {
    v.verdict = "inputs differ";
    v.reason = "the runs start from other values (base " + hashes_text(region.base_inputs) +
               ", test " + hashes_text(region.test_inputs) + "): " + region.root_cause +
               " inherits the difference, it is not where the runs part";
    return;
  }
  if (region.too_wide) {
    v.verdict = "not replayable";
    v.reason = "the runs part over more than " + std::to_string(differ::ReplayRegion::kMaxOps) +
               " ops: too wide a region for a replay to say why";
    return;
  }
  try {
    replay::RunRegion base, test;
    for (const auto& op : region.base) base.ops.push_back(load_op(op));
    for (const auto& op : region.test) test.ops.push_back(load_op(op));
    base.output = region.base_output;
    test.output = region.test_output;
    if (base.ops.empty()) base.handed_on = value_in(test, base.output);
    if (test.ops.empty()) test.handed_on = value_in(base, test.output);
    replay::judge(base, test, v);
  } catch (const std::exception& e) {  // NotReplayable, a dump torch cannot read
    v.verdict = "not replayable";
    v.reason = e.what();
  }
}

int exit_code(const std::string& verdict) {
  if (verdict == "noise") return 0;
  if (verdict.rfind("precision", 0) == 0 || verdict == "different math") return 1;
  return 3;
}

void print(const differ::ReplayRegion& region, const differ::ReplayVerdict& v) {
  std::cout << "REGION  step " << region.step
            << (region.mb ? " mb " + std::to_string(*region.mb) : "") << " "
            << probe::phase_name(region.phase) << ": where the runs part at " << region.root_cause;
  if (!region.end.empty()) std::cout << ", up to the input of " << region.end;
  std::cout << "\n  base: " << ops_text(v.base_ops) << "\n  test: " << ops_text(v.test_ops)
            << "\n\n";
  std::cout << "VERDICT  " << v.verdict << "\n";
  if (!v.reason.empty()) std::cout << "  " << v.reason << "\n";
  for (const auto& line : v.evidence) std::cout << "  " << line << "\n";
}

int run(const Cli& c) {
  const auto start = std::chrono::steady_clock::now();
  differ::RunOptions base_options, test_options;
  base_options.label = "base";
  test_options.label = "test";
  differ::Run base(c.base, base_options);
  differ::Run test(c.test, test_options);
  differ::DiffOptions options;
  options.replay_op = c.op;
  const differ::Result result = differ::diff_runs(base, test, options);
  if (!result.ops.region) {
    std::cerr << "numprobe_replay: "
              << (c.op.empty() ? "the runs have no root-cause op to replay (diff_logs names one "
                                 "where both runs traced "
                                 "the ops where they part)"
                               : "no op record '" + c.op + "' in both runs")
              << "\n";
    return 2;
  }
  const differ::ReplayRegion& region = *result.ops.region;
  differ::ReplayVerdict v;
  v.base_run = c.base;
  v.test_run = c.test;
  differ::describe_region(region, v);
  replay(region, v);
  v.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print(region, v);
  if (!c.no_json) {
    const std::string file = c.json.empty() ? differ::default_replay_file(c.test).string() : c.json;
    std::ofstream out(file);
    out << differ::replay_verdict_json(v);
    if (!out) {
      std::cerr << "numprobe_replay: cannot write " << file << "\n";
      return 2;
    }
    std::cout << "\nreplayed in " << probe::log_format::format_double(v.wall_seconds)
              << " s; written to " << file << (c.json.empty() ? " (diff_logs shows it)" : "")
              << "\n";
  }
  return exit_code(v.verdict);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "numprobe_replay: replay the ops where two runs part in float64 and say whether the "
      "difference is "
      "noise, lost precision or different math"};
  Cli c;
  app.add_option("BASE", c.base, "the base run (a directory of rank logs, as diff_logs takes)")
      ->required();
  app.add_option("TEST", c.test, "the test run")->required();
  app.add_option("--op", c.op,
                 "replay this op record (its name in the base run) instead of the root cause");
  app.add_option("--json", c.json,
                 "write the verdict here (default: replay.json in the test run's directory)");
  app.add_flag("--no-json", c.no_json, "write no verdict file");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(c);
  } catch (const std::exception& e) {
    std::cerr << "numprobe_replay: " << e.what() << "\n";
    return 2;
  }
}
