// diff_logs' library: merge each run's ranks into one logical view, align two runs by
// (step, kind, name, microbatch), classify each pair, and keep streaming statistics.
// Torch-free: depends on numprobe::core only. docs/diff-logs.md describes the rules.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "probe/log_io.h"
#include "probe/record.h"

namespace probe::differ {

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

// Canonicalises parameter names: strips wrapper prefixes (module., _fsdp_wrapped_module.,
// _orig_mod., _checkpoint_wrapped_module.) at any depth, then applies rules in order.
// A rule is `[@RANKS:]REGEX=REPLACEMENT`: RANKS (e.g. `4-7` or `1,3`) limits it to records of
// those ranks (pipeline stages that renumber their layers); the replacement takes `$N`,
// `${N}`, `$&`, `$$` and arithmetic on a numeric group, `${N+K}` / `${N-K}`. Results are
// cached (names repeat every step).
class NameMapper {
 public:
  NameMapper(bool strip_wrappers, const std::vector<std::string>& rules);  // throws InputError
  const std::string& map(const std::string& name, int rank = 0);

  struct Rule {
    std::vector<std::pair<int, int>> ranks;  // empty: every rank
    std::regex re;
    std::string replacement;
  };

 private:
  bool strip_;
  bool rank_scoped_ = false;
  std::vector<Rule> rules_;
  std::unordered_map<std::string, std::string> cache_;
};
// "0-3,6": sorted ranks with consecutive runs collapsed (reports and issue messages).
std::string format_ranks(const std::vector<int>& ranks);
// Expands a replacement (see NameMapper) for one match. Throws InputError.
std::string expand_replacement(const std::smatch& m, const std::string& replacement);
std::string strip_wrapper_prefixes(const std::string& name);

// Where a merged record's hash came from: hash spec v1 (the probe) or torch.hash_tensor
// (autoparallel's NumericsLogger, held in stats.torch_hash).
enum class HashSource : std::uint8_t { spec_v1, torch_only };

// One logical record of a run at one step, after its ranks were merged.
struct Merged {
  Record rec;             // rec.name is the canonical name; shards composed to the whole
  std::string raw_name;   // as logged (first rank)
  std::vector<int> ranks; // ranks that logged it
  HashSource hash_source = HashSource::spec_v1;
  std::string key;  // alignment key: kind, microbatch and canonical name
  bool replicas_disagree = false;  // ranks holding the same shard (or whole) logged different values
  std::vector<int> value_ranks;    // when they disagree: the ranks whose records rec holds
};

struct Issue {
  enum class Severity : std::uint8_t { warning, error };
  Severity severity = Severity::warning;
  std::string type;  // replica_mismatch, shard_tiling, missing_rank, truncated, skipped_line,
                     // duplicate_record, ...
  std::string run;   // "base" or "test"
  std::int64_t step = -1;
  std::string message;
};

// Caps detail while counting everything: real runs can mismatch at every step.
struct IssueLog {
  static constexpr std::size_t kDetailPerType = 20;
  std::vector<Issue> detail;
  std::map<std::string, std::int64_t> count_by_type;
  std::int64_t errors = 0;
  std::vector<std::string> hints;  // what the issues most likely mean, each once
  void add(Issue issue);
  void hint(const std::string& text);
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
};

// Raises the soft open-file limit (RLIMIT_NOFILE) to the hard limit, as far as the system
// allows; returns the soft limit in force afterwards (0 when it cannot be read).
std::uint64_t raise_open_file_limit();
// The rank logs one Run may hold open when RunOptions::max_open_files is 0.
int default_max_open_files();

// One run: a directory of rank<R>/diff.log files, a directory holding one diff.log, or one
// log file (numprobe format, or autoparallel NumericsLogger lines). Reads step by step:
// memory holds one step.
class Run {
 public:
  Run(const std::filesystem::path& path, RunOptions options);  // throws InputError
  ~Run();
  Run(Run&&) noexcept;

  std::optional<std::int64_t> peek_step() const;
  // The next step's merged records in execution order; false at the end.
  bool next_step(std::int64_t& step, std::vector<Merged>& records);

  const std::filesystem::path& path() const { return path_; }
  // The log whose header stands for the run's (its first rank's); empty for a Python log.
  const std::filesystem::path& header_file() const { return header_file_; }
  int world_size() const { return world_size_; }
  int ranks_found() const { return static_cast<int>(ranks_.size()); }
  int format_version() const { return format_version_; }
  int hash_spec_version() const { return hash_spec_version_; }
  bool python() const { return python_; }
  const std::string& setup() const { return setup_; }
  const std::string& torch_version() const { return torch_version_; }
  IssueLog& issues() { return issues_; }
  std::int64_t records_read() const { return records_read_; }
  // Set once a rank's log turned out truncated (a killed writer): the first step that may be
  // incomplete. Steps from it on are not compared.
  std::optional<std::int64_t> incomplete_from() const { return incomplete_from_; }
  // Ranks whose log is opened for each step and closed again (RunOptions::max_open_files).
  int pooled_ranks() const { return pooled_ranks_; }

  struct RankSource;

 private:
  void advance(RankSource& src);
  std::filesystem::path path_, header_file_;
  RunOptions options_;
  NameMapper mapper_;
  std::vector<std::unique_ptr<RankSource>> ranks_;
  int world_size_ = 1;
  int format_version_ = 1;
  int hash_spec_version_ = 1;
  bool python_ = false;
  std::string setup_, torch_version_;
  IssueLog issues_;
  std::int64_t records_read_ = 0;
  std::size_t last_step_groups_ = 0;  // sizes the next step's index
  std::optional<std::int64_t> incomplete_from_;
  bool partial_view_ = false;  // one rank's log of a multi-rank run, named on its own
  int missing_ranks_ = 0;      // ranks of world_size without a log
  int pooled_ranks_ = 0;       // ranks whose log is opened per step (see max_open_files)
};

// Composes shard records of one tensor (distinct offsets, same global shape) into the whole:
// hashes add mod 2^64, norms combine as sqrt(sum of squares), min/max/nan/inf exactly, mean
// weighted by non-NaN counts, torch_hash XORs. Returns an error message instead when the
// shards do not tile the global tensor exactly once.
struct ComposeResult {
  std::optional<TensorStats> stats;
  std::string error;
  bool gap = false;  // the error is a gap: shards missing, none overlapping
};
ComposeResult compose_shards(const std::vector<const TensorStats*>& shards);

// Bitwise agreement of two records of the same key (the replica check).
bool same_record(const Record& a, const Record& b);

enum class Class : std::uint8_t {
  equal,          // bitwise equal (hash, or scalar bits)
  within_tol,     // not bitwise equal, but within --rtol/--atol
  different,
  only_base,
  only_test,
  none_one_side,  // `none` in one run only (a gradient never computed)
  unsupported,    // cannot be compared (unsupported dtype, incomplete tiling, no common hash)
};
inline constexpr int kClassCount = 7;
std::string_view class_name(Class c);
bool is_divergence(Class c);  // different, only_*, none_one_side

// Streaming paired statistics of one series (a scalar, or a tensor record's norm).
struct SeriesStats {
  std::int64_t base_steps = 0, test_steps = 0, paired = 0, exact = 0;
  std::optional<std::int64_t> first_divergent_step;
  double sum_abs = 0, sum_sq = 0;
  std::int64_t finite_pairs = 0;     // pairs whose difference entered MAE/RMSE
  std::int64_t nonfinite_mismatch = 0;  // NaN/Inf on one side only
  double max_abs = 0;
  std::optional<std::int64_t> max_abs_step;
  double final_diff = 0;
  std::optional<std::int64_t> final_step;

  // `agree` is the comparator's verdict (or a bitwise-equal hash) for this pair.
  void add_pair(std::int64_t step, double base, double test, bool agree);
  double mae() const;
  double rmse() const;
};

struct SeriesKey {
  Kind kind;
  std::string name;
  std::optional<std::int64_t> mb;
};

struct Side {  // one side of a pair as reported
  bool present = false;
  Merged m;
};

struct Pair {
  std::int64_t step = 0;
  Kind kind = Kind::scalar;
  std::string name;
  std::optional<std::int64_t> mb;
  Class cls = Class::equal;
  Side base, test;
  double rel_diff = 0;  // relative difference of norms (tensors) or values (scalars)
  std::string note;
  std::string key;  // internal: the series/alignment key
};

struct Cause {
  std::string rule;  // rng, summation_order, wrong_reduction, none_gradient, unreduced_gradient,
                     // nonfinite, step_range, kind_not_recorded, names_differ, missing_record
  std::string message;
};

struct DiffOptions {
  Comparator cmp;
  std::optional<std::uint32_t> kinds_mask;  // bit per Kind
  std::optional<std::int64_t> step_min, step_max;
  std::optional<std::regex> name_filter;
  std::string name_filter_text;
  std::size_t top = 10;
  double sum_order_rtol = 1e-5;       // fp32/fp64 grads
  double sum_order_rtol_lowp = 1e-2;  // bf16/fp16 grads
  // Called with every compared pair once it is classified, in execution order, with the index
  // of its series in Result::series: for reports that draw every pair (--html's heat map),
  // while the Result keeps aggregates only.
  std::function<void(const Pair&, std::size_t series)> on_pair;
};

struct RunInfo {
  std::string path, setup, torch_version;
  int world_size = 1, ranks_found = 0;
  bool python = false;
  std::int64_t steps = 0, records = 0;
  std::optional<std::int64_t> first_step, last_step;
};

struct Result {
  RunInfo base, test;
  std::int64_t paired_steps = 0;
  std::array<std::array<std::int64_t, kClassCount>, kKindCount> counts{};
  std::optional<Pair> first_divergence;
  std::vector<Cause> causes;
  std::int64_t summation_order_grads = 0;  // grads matching the summation-order rule
  std::vector<Pair> top;                  // by rel_diff, largest first
  std::vector<std::pair<SeriesKey, SeriesStats>> series;  // first-seen order
  std::vector<std::string> names_only_base, names_only_test;  // kinds below excluded
  // Kinds one run recorded on the steps both runs hold while the other recorded none of them.
  std::vector<Kind> kinds_only_base, kinds_only_test;
  IssueLog base_issues, test_issues;
  std::int64_t records_compared = 0;
  std::optional<std::int64_t> truncated_at;  // comparison stopped here (a killed rank)
  bool filtered = false;  // --kinds, --steps or --name restricted the comparison
  bool any_divergence() const;
  std::int64_t count(Class c) const;  // pairs of that class, every kind

  // What the comparison concluded, the most serious first.
  enum class Verdict : std::uint8_t {
    different,         // a pair is different, only_* or none_one_side
    run_errors,        // the runs agree, but one has an error issue (replica mismatch, ...)
    incomplete,        // no difference, but a run is truncated: later steps were not compared
    nothing_compared,  // no pair passed the filters, or every pair is unsupported
    within_tolerance,  // every pair equal or within --rtol/--atol
    equal,             // every compared pair bitwise equal
  };
  Verdict verdict() const;
  std::string_view verdict_name() const;  // "different", "run_errors", ... (the JSON's "result")
  // 0 equal or within tolerance; 1 different, run errors or incomplete; 2 nothing compared
  // (like bad input: the question was not answered).
  int exit_code() const;
};

// Compares two runs step by step. Throws InputError for incompatible runs (format or hash
// spec versions) and, without --lenient, for bad lines.
Result diff_runs(Run& base, Run& test, const DiffOptions& options);

// Reports.
struct TextOptions {
  bool color = false;
  std::size_t max_series = 20;  // tensor series lines on the terminal (all go to JSON)
};
void print_text(const Result& r, std::ostream& out, const TextOptions& opt);
std::string to_json(const Result& r, const DiffOptions& opt);

// Parses "--steps": "N", "A:B", "A:" or ":B". Throws InputError.
std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>> parse_step_range(
    const std::string& text);
// Parses "--kinds": comma-separated kind names. Throws InputError.
std::uint32_t parse_kinds(const std::string& text);

// autoparallel NumericsLogger lines: "[prefix] hash=H, norm=N" or "[prefix] None". Returns
// nullopt for lines that are not of that shape; throws log_format::ParseError for a
// bracketed line whose fields cannot be read.
struct PythonLine {
  std::string prefix;
  bool none = false;
  std::optional<std::uint64_t> hash;  // torch.hash_tensor value
  std::string hash_text;  // when not one integer (complex tensors): hash is FNV-1a of it
  double norm = 0;
};
std::optional<PythonLine> parse_python_line(std::string_view line);

}  // namespace probe::differ
