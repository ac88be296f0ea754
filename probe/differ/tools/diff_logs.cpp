// diff_logs BASE TEST: where two training runs stop agreeing. Thin CLI over numprobe_differ:
// parse the options (their defaults are the library's, printed by --help), compare, report.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "differ/diff.h"
#include "differ/replay_verdict.h"
#include "differ/report_html.h"

namespace {

namespace differ = probe::differ;

// Everything the command line sets. The comparison's and the report's defaults live in
// DiffOptions and TextOptions, once.
struct Cli {
  std::string base_path, test_path, json_path, html_path, kinds, steps, name_re;
  std::vector<std::string> maps, maps_base, maps_test;
  differ::RunOptions run;  // its defaults: --model-name
  bool lenient = false, no_strip = false, color_always = false, color_never = false;
  differ::DiffOptions diff;
  differ::TextOptions text;
};

const CLI::Validator kNonNegative(
    [](std::string& text) -> std::string {
      double v = -1;
      std::size_t used = 0;
      try {
        v = std::stod(text, &used);
      } catch (...) {
        used = 0;
      }
      return used == text.size() && std::isfinite(v) && v >= 0
                 ? ""
                 : "'" + text + "' is not a number >= 0";
    },
    "NON_NEGATIVE");

void add_options(CLI::App& app, Cli& c) {
  app.add_option("base", c.base_path, "baseline run directory or log file")->required();
  app.add_option("test", c.test_path, "test run directory or log file")->required();
  app.add_option("--rtol", c.diff.cmp.rtol,
                 "relative tolerance: |test-base| <= atol + rtol*|base| (a mean: rtol * "
                 "max(|base|, RMS of the elements))")
      ->check(kNonNegative)
      ->capture_default_str();
  app.add_option("--atol", c.diff.cmp.atol, "absolute tolerance")
      ->check(kNonNegative)
      ->capture_default_str();
  app.add_option("--map", c.maps,
                 "[@RANKS:]REGEX=REPLACEMENT rule applied to names of both runs (repeatable); "
                 "@4-7: limits it to those ranks; $1, ${1}, ${1+4} (arithmetic), $&, $$");
  app.add_option("--map-base", c.maps_base, "REGEX=REPLACEMENT rule for the base run's names only");
  app.add_option("--map-test", c.maps_test, "REGEX=REPLACEMENT rule for the test run's names only");
  app.add_flag("--no-strip-wrappers", c.no_strip,
               "keep module./_fsdp_wrapped_module./_orig_mod./_checkpoint_wrapped_module.");
  app.add_option(
      "--kinds", c.kinds,
      "kinds to compare: all, a comma-separated list (param,rng,input,output,tap,output_grad,"
      "mb_grad,grad,scalar,optim,op), or -kind to drop one from all; default: every kind both "
      "runs record (a kind one run never recorded is left out, and said so)");
  app.add_option("--steps", c.steps, "steps to compare: N, A:B, A: or :B (inclusive)");
  app.add_option("--name", c.name_re, "compare only names matching this regular expression");
  app.add_option("--top", c.diff.top, "how many largest differences to list")
      ->capture_default_str();
  app.add_flag(
      "--all-series", c.text.all_series,
      "PAIRED STATISTICS: list the mismatching tensor norm series too, not only the scalar "
      "series and the headline's");
  app.add_option("--max-series", c.text.max_series,
                 "list at most this many mismatching tensor norm series on the terminal (implies "
                 "--all-series)")
      ->capture_default_str()
      ->each([&c](const std::string&) { c.text.all_series = true; });
  // Given, either sets the summation-order bound everywhere (sum_order_fixed), not only where
  // a grad's mb_grads are missing.
  auto fix_bound = [&c](const auto&) { c.diff.sum_order_fixed = true; };
  app.add_option("--sum-order-rtol", c.diff.sum_order_rtol,
                 "summation-order bound (relative norm difference) of fp32/fp64 grads and scalars; "
                 "default: derived from the mb_grads' count and norms and the dtype, this value "
                 "where a grad has no mb_grads")
      ->check(kNonNegative)
      ->capture_default_str()
      ->each(fix_bound);
  app.add_option("--sum-order-rtol-lowp", c.diff.sum_order_rtol_lowp,
                 "the same bound for bf16/fp16/fp8 grads")
      ->check(kNonNegative)
      ->capture_default_str()
      ->each(fix_bound);
  app.add_option("--noise-amplification", c.diff.noise_amplification,
                 "inherited noise: how many times the noise it descends from a difference may grow")
      ->check(kNonNegative)
      ->capture_default_str();
  app.add_option(
         "--update-amplification", c.diff.update_amplification,
         "an optimizer update (param, optim records): how many times the largest difference of "
         "the gradient, weights and state it is computed from it may be")
      ->check(kNonNegative)
      ->capture_default_str();
  app.add_option(
         "--reduction-amplification", c.diff.reduction_amplification,
         "the first records after a tensor-parallel reduction (partial_sum): how many times its "
         "rounding their difference may be")
      ->check(kNonNegative)
      ->capture_default_str();
  app.add_flag(
      "--strict", c.diff.strict,
      "headline the first divergence of any kind and exit 1 on any difference, noise included");
  app.add_option(
         "--model-name", c.run.model_name,
         "the name the probe run gives the model's forward output (ProbeOptions::model_name): "
         "a NumericsLogger log's [mb<N> fwd out] is the output record of that name, microbatch N")
      ->capture_default_str();
  app.add_flag(
      "--lenient", c.lenient,
      "skip and count garbage lines, out-of-order and duplicate records instead of failing");
  app.add_option("--json", c.json_path,
                 "write the whole result as JSON to this file ('-' for stdout)");
  app.add_option("--html", c.html_path,
                 "also write a self-contained HTML report (heat map, curves, tables) to this file");
  app.add_flag("--color", c.color_always, "colour even when stdout is not a terminal");
  app.add_flag("--no-color", c.color_never, "never colour");
}

// The options that are texts to parse (filters); throws InputError.
void parse_filters(Cli& c) {
  if (!c.kinds.empty()) c.diff.kinds_mask = differ::parse_kinds(c.kinds);
  if (!c.steps.empty())
    std::tie(c.diff.step_min, c.diff.step_max) = differ::parse_step_range(c.steps);
  if (!c.name_re.empty()) {
    c.diff.name_filter = differ::parse_name_filter(c.name_re);
    c.diff.name_filter_text = c.name_re;
  }
}

differ::RunOptions run_options(const Cli& c, const std::vector<std::string>& own,
                               const char* label) {
  std::vector<std::string> rules = c.maps;
  rules.insert(rules.end(), own.begin(), own.end());
  differ::RunOptions o = c.run;
  o.lenient = c.lenient;
  o.strip_wrappers = !c.no_strip;
  o.map_rules = std::move(rules);
  o.label = label;
  return o;
}

// A report file (--json, --html), opened before comparing: a path it cannot write is bad usage,
// found before a report that would end "RESULT: equal" and exit 2 all the same. Removed again
// unless the result gets written: a run that stops with an error leaves no empty file, nor an
// earlier run's result, for a script to misread.
class ReportFile {
 public:
  ReportFile(const std::string& path, const char* flag, std::ios::openmode mode = std::ios::out)
      : flag_(flag) {
    if (path.empty() || path == "-") return;
    out_.open(path, mode);
    if (!out_)
      throw differ::InputError(std::string("cannot write ") + flag_ + " file '" + path + "'");
    path_ = path;
  }
  ~ReportFile() {
    if (!path_.empty() && !written_) std::remove(path_.c_str());
  }
  ReportFile(const ReportFile&) = delete;
  ReportFile& operator=(const ReportFile&) = delete;
  std::ostream& stream() { return out_; }
  void close() {
    out_.close();
    if (!out_)
      throw differ::InputError(std::string("cannot write ") + flag_ + " file '" + path_ + "'");
    written_ = true;
  }

 private:
  const char* flag_;
  std::string path_;
  std::ofstream out_;
  bool written_ = false;
};

int compare(Cli& c) {
  parse_filters(c);
  ReportFile json_file(c.json_path, "--json");
  std::optional<ReportFile> html_file;
  // --html gathers every pair's figures while comparing (the heat map and the curves).
  differ::PairGrid grid;
  if (!c.html_path.empty()) {
    if (!differ::html_report_available())
      throw differ::InputError("--html: " + differ::html_report_unavailable_reason());
    html_file.emplace(c.html_path, "--html", std::ios::out | std::ios::binary);
    c.diff.on_pair = [&grid](const differ::Pair& p, std::size_t series) { grid.add(p, series); };
    c.diff.on_restart = [&grid] { grid = differ::PairGrid{}; };
  }
  differ::Run base(c.base_path, run_options(c, c.maps_base, "base"));
  differ::Run test(c.test_path, run_options(c, c.maps_test, "test"));
  differ::Result result = differ::diff_runs(base, test, c.diff);
  differ::attach_replay_verdict(result);  // numprobe_replay's verdict beside the test run, if any
  c.text.color = !c.color_never && (c.color_always || ::isatty(STDOUT_FILENO));
  if (c.json_path != "-") differ::print_text(result, std::cout, c.text);
  if (c.json_path == "-") {
    std::cout << differ::to_json(result, c.diff);
  } else if (!c.json_path.empty()) {
    json_file.stream() << differ::to_json(result, c.diff);
    json_file.close();
  }
  if (html_file) {
    differ::write_html(result, c.diff, grid, html_file->stream());
    html_file->close();
  }
  return result.exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "diff_logs: compare two numprobe runs (run directories of rank<R>/diff.log, or log "
      "files) and report where they stop agreeing.\nExit status: 0 equal (or within "
      "tolerance), 1 differences with a bug-class explanation (any difference with --strict), "
      "a run with errors or a truncated run, 2 nothing compared, bad input or usage, 4 "
      "differences that are all explained as noise."};
  Cli c;
  add_options(app, c);
  // Every rank's log is open at once where the limit allows: thousands of ranks need more
  // than the usual soft limit of 1024 (beyond the hard limit, Run opens logs step by step).
  differ::raise_open_file_limit();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    return compare(c);
  } catch (const std::exception& e) {  // InputError and the rest alike
    std::cerr << "diff_logs: error: " << e.what() << "\n";
    return 2;
  }
}
