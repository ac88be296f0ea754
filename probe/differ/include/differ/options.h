// What a comparison is asked to do: the comparator, the filters, the cause rules' bounds, and
// how a run's names are read. Every default is written here once (the CLI prints them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace probe::differ {

struct Pair;  // differ/result.h

// Bad input or usage: diff_logs exits 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Decides whether two numbers agree: the same bits by default (NaN agrees with NaN; 0 and -0
// do not), |test - base| <= atol + rtol * |base| otherwise (NaN agrees with NaN only, +-Inf
// with itself). The one comparison policy every classification and every statistic uses.
struct Comparator {
  double rtol = 0;
  double atol = 0;
  bool exact() const { return rtol == 0 && atol == 0; }
  bool agree(double base, double test) const;
  // The same, with the relative part taken of max(|base|, scale): for a figure that sits near
  // 0 while the elements it summarises do not. A mean's scale is the elements' RMS: elements
  // that each agree within rtol give means that agree within rtol * RMS.
  bool agree(double base, double test, double scale) const;
};

struct DiffOptions {
  Comparator cmp;
  std::optional<std::uint32_t> kinds_mask;  // bit per Kind
  // Kinds left out because one run never recorded them (set by diff_runs, not by --kinds): the
  // causes say so instead of blaming --kinds.
  std::uint32_t kinds_not_recorded = 0;
  std::optional<std::int64_t> step_min, step_max;
  std::optional<std::regex> name_filter;
  std::string name_filter_text;
  std::size_t top = 10;
  // The summation-order bound where a grad's mb_grads are not recorded (and of scalars);
  // where they are, the bound follows from their count, their norms and the dtype, unless
  // sum_order_fixed (--sum-order-rtol given) makes these the bound everywhere.
  double sum_order_rtol = 1e-5;       // fp32/fp64 grads
  double sum_order_rtol_lowp = 1e-2;  // bf16/fp16 grads
  bool sum_order_fixed = false;
  // Inherited noise stays within this factor of the noise it descends from (Explanation::roots).
  double noise_amplification = 1e4;
  // An optimizer update (param, optim records) stays within this factor of the largest
  // difference of the gradient, weights and state it is computed from.
  double update_amplification = 10;
  // The first records after a reduction of partial sums (partial_sum) stay within this factor
  // of its rounding: the rest of the module that holds the reduction lies between them
  // (docs/diff-logs.md, "Partial sums").
  double reduction_amplification = 10;
  // The op record (its name, as in the base run) whose replay region is wanted instead of the
  // root cause's (numprobe_replay --op): its first occurrence in both runs.
  std::string replay_op;
  // Headline the first divergence of any kind and exit 1 on any difference, noise included.
  bool strict = false;
  // Called with every compared pair once it is classified, in execution order, with the index
  // of its series in Result::series: for reports that draw every pair (--html's heat map),
  // while the Result keeps aggregates only.
  std::function<void(const Pair&, std::size_t series)> on_pair;
  // Called when the comparison starts over without the kinds one run never recorded
  // (diff_runs): what on_pair gathered so far is to be dropped.
  std::function<void()> on_restart;
};

struct RunOptions {
  bool lenient = false;  // skip (and count) garbage lines and duplicates instead of failing
  bool strip_wrappers = true;
  std::vector<std::string> map_rules;
  std::string label = "run";  // "base" / "test", used in issues
  // The name a probe run gives a model's forward output (ProbeOptions::model_name): a
  // NumericsLogger "[mb<N> fwd out]" line becomes the output record of that name, microbatch N.
  std::string model_name = "model";
  // Rank logs held open at once. Beyond it, the other ranks' files are opened for each step
  // and closed again (a run of more ranks than the process may have files open). 0: half of
  // the descriptors the open-file limit leaves free (two runs are read side by side).
  int max_open_files = 0;
  // Parse each rank's log on a worker thread of its own, ahead of the step merge (when every
  // log is held open and there are at most kMaxReadAheadRanks). The same result either way.
  bool read_ahead = true;
  static constexpr std::size_t kMaxReadAheadRanks = 64;
};

// Raises the soft open-file limit (RLIMIT_NOFILE) to the hard limit, as far as the system
// allows; returns the soft limit in force afterwards (0 when it cannot be read).
std::uint64_t raise_open_file_limit();
// The rank logs one Run may hold open when RunOptions::max_open_files is 0.
int default_max_open_files();

// Parses "--steps": "N", "A:B", "A:" or ":B". Throws InputError.
std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>> parse_step_range(
    const std::string& text);
// Parses "--kinds": comma-separated kind names. Throws InputError.
std::uint32_t parse_kinds(const std::string& text);
// Parses "--name": a regular expression. Throws InputError.
std::regex parse_name_filter(const std::string& text);

}  // namespace probe::differ
