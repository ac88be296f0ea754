// diff_logs BASE TEST: where two training runs stop agreeing. Thin CLI over numprobe_differ.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "differ/diff.h"
#include "differ/report_html.h"

int main(int argc, char** argv) {
  namespace d = probe::differ;
  CLI::App app{
      "diff_logs: compare two numprobe runs (run directories of rank<R>/diff.log, or log "
      "files) and report where they stop agreeing.\nExit status: 0 equal (or within "
      "tolerance), 1 differences found, a run with errors or a truncated run, 2 nothing "
      "compared, bad input or usage."};
  std::string base_path, test_path, json_path, html_path, kinds, steps, name_re, model_name = "model";
  std::vector<std::string> maps, maps_base, maps_test;
  double rtol = 0, atol = 0, sum_rtol = 1e-5, sum_rtol_lowp = 1e-2;
  std::size_t top = 10, max_series = 20;
  bool lenient = false, no_strip = false, color_always = false, color_never = false;
  app.add_option("base", base_path, "baseline run directory or log file")->required();
  app.add_option("test", test_path, "test run directory or log file")->required();
  const CLI::Validator non_negative(
      [](std::string& text) -> std::string {
        double v = -1;
        std::size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (...) {
          used = 0;
        }
        return used == text.size() && std::isfinite(v) && v >= 0 ? "" : "'" + text + "' is not a number >= 0";
      },
      "NUMBER>=0");
  app.add_option("--rtol", rtol, "relative tolerance: |test-base| <= atol + rtol*|base| (a mean: rtol * max(|base|, RMS of the elements))")->check(non_negative);
  app.add_option("--atol", atol, "absolute tolerance")->check(non_negative);
  app.add_option("--map", maps,
                 "[@RANKS:]REGEX=REPLACEMENT rule applied to names of both runs (repeatable); "
                 "@4-7: limits it to those ranks; $1, ${1}, ${1+4} (arithmetic), $&, $$");
  app.add_option("--map-base", maps_base, "REGEX=REPLACEMENT rule for the base run's names only");
  app.add_option("--map-test", maps_test, "REGEX=REPLACEMENT rule for the test run's names only");
  app.add_flag("--no-strip-wrappers", no_strip, "keep module./_fsdp_wrapped_module./_orig_mod./_checkpoint_wrapped_module.");
  app.add_option("--kinds", kinds, "kinds to compare: a comma-separated list (rng,input,output,tap,output_grad,mb_grad,grad,scalar), or -kind to drop one from all");
  app.add_option("--steps", steps, "steps to compare: N, A:B, A: or :B (inclusive)");
  app.add_option("--name", name_re, "compare only names matching this regular expression");
  app.add_option("--top", top, "how many largest differences to list (default 10)");
  app.add_option("--max-series", max_series, "tensor norm series shown on the terminal (default 20)");
  app.add_option("--sum-order-rtol", sum_rtol, "relative norm difference bound of the summation-order rule, fp32/fp64 grads (default 1e-5)")->check(non_negative);
  app.add_option("--sum-order-rtol-lowp", sum_rtol_lowp, "the same bound for bf16/fp16/fp8 grads (default 1e-2)")->check(non_negative);
  app.add_option("--model-name", model_name,
                 "the name the probe run gives the model's forward output (ProbeOptions::model_name; "
                 "default model): a NumericsLogger log's [mb<N> fwd out] is the output record of "
                 "that name, microbatch N");
  app.add_flag("--lenient", lenient, "skip and count garbage lines, out-of-order and duplicate records instead of failing");
  app.add_option("--json", json_path, "write the whole result as JSON to this file ('-' for stdout)");
  app.add_option("--html", html_path, "also write a self-contained HTML report (heat map, curves, tables) to this file");
  app.add_flag("--color", color_always, "colour even when stdout is not a terminal");
  app.add_flag("--no-color", color_never, "never colour");
  // Every rank's log is open at once where the limit allows: thousands of ranks need more
  // than the usual soft limit of 1024 (beyond the hard limit, Run opens logs step by step).
  d::raise_open_file_limit();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    d::DiffOptions opt;
    opt.cmp = {rtol, atol};
    opt.top = top;
    opt.sum_order_rtol = sum_rtol;
    opt.sum_order_rtol_lowp = sum_rtol_lowp;
    if (!kinds.empty()) opt.kinds_mask = d::parse_kinds(kinds);
    if (!steps.empty()) std::tie(opt.step_min, opt.step_max) = d::parse_step_range(steps);
    if (!name_re.empty()) {
      try {
        opt.name_filter = std::regex(name_re);
      } catch (const std::regex_error& e) {
        throw d::InputError("--name '" + name_re + "': bad regular expression: " + e.what());
      }
      opt.name_filter_text = name_re;
    }
    auto rules = [&](const std::vector<std::string>& own) {
      std::vector<std::string> all = maps;
      all.insert(all.end(), own.begin(), own.end());
      return all;
    };
    // The --json file is opened before comparing: a path it cannot write is bad usage, found
    // before a report that would end "RESULT: equal" and exit 2 all the same.
    std::ofstream json_file, html_file;
    // Removes the file again unless the result gets written: a run that stops with an error
    // leaves no empty file, nor an earlier run's result, for a script to misread.
    struct RemoveUnlessWritten {
      std::string path;
      bool written = false;
      ~RemoveUnlessWritten() {
        if (!path.empty() && !written) std::remove(path.c_str());
      }
    } json_guard, html_guard;
    if (!json_path.empty() && json_path != "-") {
      json_file.open(json_path);
      if (!json_file) throw d::InputError("cannot write --json file '" + json_path + "'");
      json_guard.path = json_path;
    }
    // --html gathers every pair's figures while comparing (the heat map and the curves).
    d::PairGrid grid;
    if (!html_path.empty()) {
      if (!d::html_report_available()) throw d::InputError("--html: " + d::html_report_unavailable_reason());
      html_file.open(html_path, std::ios::binary);
      if (!html_file) throw d::InputError("cannot write --html file '" + html_path + "'");
      html_guard.path = html_path;
      opt.on_pair = [&grid](const d::Pair& p, std::size_t series) { grid.add(p, series); };
    }
    d::Run base(base_path, {lenient, !no_strip, rules(maps_base), "base", model_name});
    d::Run test(test_path, {lenient, !no_strip, rules(maps_test), "test", model_name});
    d::Result result = d::diff_runs(base, test, opt);
    d::TextOptions text;
    text.color = !color_never && (color_always || ::isatty(STDOUT_FILENO));
    text.max_series = max_series;
    if (json_path != "-") d::print_text(result, std::cout, text);
    if (!json_path.empty()) {
      const std::string doc = d::to_json(result, opt);
      if (json_path == "-") {
        std::cout << doc;
      } else {
        json_file << doc;
        json_file.close();
        if (!json_file) throw d::InputError("cannot write --json file '" + json_path + "'");
        json_guard.written = true;
      }
    }
    if (!html_path.empty()) {
      d::write_html(result, opt, grid, html_file);
      html_file.close();
      if (!html_file) throw d::InputError("cannot write --html file '" + html_path + "'");
      html_guard.written = true;
    }
    return result.exit_code();
  } catch (const d::InputError& e) {
    std::cerr << "diff_logs: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "diff_logs: error: " << e.what() << "\n";
    return 2;
  }
}
