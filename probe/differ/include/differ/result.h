// What a comparison found: classes of record pairs, the first divergence and its likely
// causes, paired statistics per series, and each run's issues.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "differ/rule.h"
#include "probe/record.h"

namespace probe::differ {

// Where a merged record's hash came from: hash spec v1 (the probe) or torch.hash_tensor
// (autoparallel's NumericsLogger, held in stats.torch_hash).
// torch_hash_alone: a NumericsLogger weights.log record, a torch.hash_tensor value with no norm.
enum class HashSource : std::uint8_t { spec_v1, torch_only, torch_hash_alone };

// A merged record that is a partial sum (docs/log-format.md, "Partial records"): its ranks
// logged summands of a tensor (a tensor-parallel rank's partial product, a sequence shard's part
// of a gradient) rather than the tensor. The record's figures are the summands'
// combined (docs/diff-logs.md, "Partial sums"); what the noise rule needs is kept here.
struct PartialSum {
  std::int64_t count = 0;    // summands of the sum; 0: the record is no partial sum
  std::int64_t index = -1;   // -1: every summand; else the one summand held (one rank's view)
  double summand_norms = 0;  // the sum of the summands' norms
  bool empty() const { return count == 0; }
  friend bool operator==(const PartialSum&, const PartialSum&) = default;
};

// An op record of a split scope (Record::split), merged over its ranks: the wholes it may be a
// piece of, to be chosen against the other run's record (docs/diff-logs.md, "Split ops").
struct SplitOp {
  // Readers look at `size` first: 0 (no split op record) leaves the other fields unread, so
  // that merging a record of no split scope resets only it.
  std::int64_t size = 0;     // ranks it is split over; 0: no split op record
  bool complete = false;     // every rank's record, of one shape, with a hash per dim
  bool replicated = false;   // every rank computed the same output
  TensorStats local;         // one rank's figures: the output, were it replicated
  TensorStats combined;      // every rank's figures combined: the whole's norm, min, max, mean
  double summand_norms = 0;  // the ranks' norms added: were they summands of a partial sum
  // Per dim d: the whole the ranks' outputs tile when cut along d, and its hash.
  struct Whole {
    std::vector<std::int64_t> shape;
    std::uint64_t hash = 0;
  };
  std::vector<Whole> wholes;
  // Per input: every hash the whole input may have (the ranks' common one, each dim's composed).
  std::vector<std::vector<std::uint64_t>> inputs;
  bool empty() const { return size == 0; }
};

// One logical record of a run at one step, after its ranks were merged.
struct Merged {
  Record record;           // record.name is the canonical name; shards composed to the whole
  std::string raw_name;    // as logged (first rank)
  std::vector<int> ranks;  // ranks that logged it
  HashSource hash_source = HashSource::spec_v1;
  std::string key;  // alignment key: kind, microbatch and canonical name
  // ranks holding the same shard (or whole) logged different values
  bool replicas_disagree = false;
  std::vector<int> value_ranks;  // when they disagree: the ranks whose records `record` holds
  PartialSum partial;            // set when its ranks logged summands of the tensor
  SplitOp split;                 // an op record of a split scope

  // Member by member, every field (see TensorStats' swap).
  friend void swap(Merged& a, Merged& b) noexcept {
    using std::swap;
    swap(a.record, b.record);
    a.raw_name.swap(b.raw_name);
    a.ranks.swap(b.ranks);
    swap(a.hash_source, b.hash_source);
    a.key.swap(b.key);
    swap(a.replicas_disagree, b.replicas_disagree);
    a.value_ranks.swap(b.value_ranks);
    swap(a.partial, b.partial);
    swap(a.split, b.split);
  }
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

// How a pair of records compares.
enum class PairClass : std::uint8_t {
  equal,       // bitwise equal (hash, or scalar bits)
  within_tol,  // not bitwise equal, but within --rtol/--atol
  different,
  only_base,
  only_test,
  none_one_side,  // `none` in one run only (a gradient never computed)
  unsupported,    // cannot be compared (unsupported dtype, incomplete tiling, no common hash)
};
inline constexpr int kPairClassCount = 7;
std::string_view pair_class_name(PairClass c);
bool is_divergence(PairClass c);  // different, only_*, none_one_side

// Streaming paired statistics of one series (a scalar, or a tensor record's norm).
struct SeriesStats {
  std::int64_t base_steps = 0, test_steps = 0, paired = 0, exact = 0;
  std::optional<std::int64_t> first_divergent_step;
  double sum_abs = 0, sum_sq = 0;
  std::int64_t finite_pairs = 0;        // pairs whose difference entered MAE/RMSE
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
  Merged merged;
  // Its partial sum, or null where the side holds none.
  const PartialSum* partial() const {
    return present && !merged.partial.empty() ? &merged.partial : nullptr;
  }
};

// Noise or bug (docs/diff-logs.md, "Noise or bug"): the one explanation a divergent pair gets.
struct Explanation {
  bool bug = false;          // a bug-class explanation; false: noise
  std::optional<Rule> rule;  // unset: the pair has no explanation (equal, or set aside)
  double bound = 0;          // the noise bound the pair was held to (0: none applied)
  // inherited: the largest relative difference of the noise it descends from
  double roots = 0;
  // Noise: the largest relative difference it may hold, as far as what is computed from it can
  // tell (its figures show a lower bound of its difference; its rule's bound is what is known
  // above): a derived bound for a root, the network's bound of its roots for inherited noise.
  double ceiling = 0;
  // partial_sum: the partial sum it descends from, in words ("the sum of 2 partial products of
  // tap wo mb 0 in the test run"); empty for every other rule.
  std::string detail;
  // A bug: the independent divergences it is or descends from, by their number in execution
  // order (a root holds its own; inherited, those of what it depends on; at most kRootsKept,
  // the earliest). Empty for noise.
  std::vector<std::uint32_t> bug_roots = {};
  static constexpr std::size_t kRootsKept = 32;
  // A bug none of whose dependencies is one: an independent divergence (bug_roots holds its own
  // number). A bug that shows by itself (a scale, a NaN, a move) where what it depends on already
  // differs by a bug is that bug's consequence: bug_roots holds those, root stays false.
  bool root = false;
};

// A parameter of one run only that the other run holds as one with another parameter (tied
// weights untied: a head no longer tied to its embedding). docs/diff-logs.md, "Tied weights".
struct Untied {
  std::string param;   // the parameter both runs record, which the other run ties it to
  bool named = false;  // the other run's log lists this name as that parameter's (tied=)
  bool copy = false;   // at this step it holds that parameter's values bit for bit
};

struct Pair {
  std::int64_t step = 0;
  Kind kind = Kind::scalar;
  std::string name;
  std::optional<std::int64_t> mb;
  PairClass pair_class = PairClass::equal;
  Side base, test;
  double rel_diff = 0;  // relative difference of norms (tensors) or values (scalars)
  std::string note;
  std::string key;               // internal: the series/alignment key
  std::int64_t order = 0;        // internal: its place within its phase and microbatch (pair_up)
  Explanation why;               // set on divergent pairs
  std::optional<Untied> untied;  // set on a first divergence that is an untied parameter
  // Not compared, never a divergence: an op record of one run only, a partial sum against
  // a record that is not the same partial sum (PartialReport), or records covering other
  // microbatches than the other run's (CoveredReport: `covered` says so).
  bool set_aside = false;
  bool covered = false;
};

// One figure a cause rests on: a count or step (number), or a name (text).
struct Evidence {
  std::string key;
  std::variant<std::int64_t, std::string> value;
};
// The phase a pair's records ran in (an op record carries its own).
Phase phase_of(const Pair& p);

struct Cause {
  Rule rule;
  std::string message;
  std::vector<Evidence> evidence = {};  // what the rule saw (printed under it, and in --json)
};

// What the op records (kind `op`) say (docs/diff-logs.md, "Op traces").
struct OpFinding {
  std::int64_t step = 0;
  std::optional<std::int64_t> mb;
  Phase phase = Phase::forward;
  std::string name;     // the op record's name, <scope>/<op>#<k>
  std::string message;  // what was found, in words
};
// One op record of a replay region: what numprobe_replay loads and links.
struct ReplayOp {
  std::string name;          // as its run logged it (an aligned test record takes the base's name)
  int rank = 0;              // the rank whose record it is
  std::string dump;          // the dump file (rank directory joined in), "" where none was written
  std::uint64_t output = 0;  // its output's hash
  std::vector<std::optional<std::uint64_t>> inputs;  // its tensor inputs' hashes
  bool split = false;  // ran in a split scope (a piece of a tensor-parallel op)
};

// Where the runs part (docs/diff-logs.md, "Replay verdict"): from the last values both runs hold
// bitwise to the input of the next op both runs execute. Each run's ops in execution order (one
// run's list may be empty: the other run inserted ops), the hashes of the values they start
// from, and of the value they hand on.
struct ReplayRegion {
  std::int64_t step = 0;
  std::optional<std::int64_t> mb;
  Phase phase = Phase::forward;
  std::string root_cause;  // the finding's op name
  std::string end;         // the next op both runs execute, "" where none was traced
  std::vector<ReplayOp> base, test;
  std::vector<std::uint64_t> base_inputs, test_inputs;  // distinct, ascending
  std::uint64_t base_output = 0, test_output = 0;
  // An input a traced op made and the runs do not hold alike (an op asked for by name that
  // inherits the difference): the region is not where the runs part.
  bool inputs_differ = false;
  static constexpr std::size_t kMaxOps = 64;
  bool too_wide = false;  // a run's ops went past kMaxOps: not all of them are listed
  bool dumped() const;    // every op has a dump file
};

struct OpReport {
  // The first op, in execution order, whose inputs agree with the other run and whose output
  // differs (or, where the runs run different ops, the first op of one run only that feeds an
  // op whose inputs differ).
  std::optional<OpFinding> root_cause;
  // The first op whose output differs and whose inputs already differ, naming their producer.
  std::optional<OpFinding> inherited;
  // Where no op's inputs agree (every op after a row-parallel sum carries its noise): the first
  // op whose inputs differ by noise only and whose output differs beyond that noise.
  std::optional<OpFinding> beyond_noise;
  // The root cause's region, or --replay-op's: what numprobe_replay replays.
  std::optional<ReplayRegion> region;
  // Op records of one run only ("step 0 mb 1 forward NAME"): set aside, never a divergence.
  std::vector<std::string> only_base, only_test;
  std::int64_t only_base_count = 0, only_test_count = 0;
  static constexpr std::size_t kListed = 50;
  // A PROBE_TRACE setting that records the ops of the module where the headline's divergence
  // arises (the first unexplained one), when neither run has op records there and its class is
  // one ops can locate (unexplained, elements_moved, nonfinite in a forward or backward record).
  std::optional<std::string> trace_hint;
};

// Pairs set aside, neither compared nor counted nor a divergence: how many, of which kinds, the
// first kListed in words.
struct SetAsideReport {
  std::int64_t pairs = 0;
  std::map<Kind, std::int64_t> by_kind;
  std::vector<std::string> examples;
  static constexpr std::size_t kListed = 10;
};

// Pairs where a side is a partial sum and the other is not one of the same count
// (docs/diff-logs.md, "Partial sums"): "step 0 mb 1 tap layers.0.attention.wo (test: 2 summands)".
using PartialReport = SetAsideReport;

// Pairs where a side covers several microbatches (an expert's gradient from one expert-parallel
// dispatch) and the other does not cover the same ones, with records of one run alone whose
// microbatch the other run covers within such a record (docs/diff-logs.md, "Covered
// microbatches"): "step 0 mb_grad layers.0.moe.experts.w1 mb 0: test covers microbatches 0,2,4,6
// (one expert-parallel dispatch), base microbatch 0 alone".
using CoveredReport = SetAsideReport;

// Pairs of microbatches the two runs fill with other groups of the same samples (gradient
// accumulation 1 x 8 against 4 x 2; docs/diff-logs.md, "Microbatches matched by their samples"):
// "step 0 mb_grad w: base microbatch 0 and test microbatches 0,1,2,3 hold the same 8 samples,
// grouped otherwise".
using RegroupedReport = SetAsideReport;

// What the noise explanations cover: how many divergent pairs, how large, by kind and rule.
struct NoiseSummary {
  struct Figures {
    std::int64_t pairs = 0;
    double max_rel_diff = 0;
  };
  Figures all;
  std::map<Kind, Figures> by_kind;
  std::map<Rule, std::int64_t> by_rule;
  std::int64_t bug_pairs = 0;  // divergent pairs with a bug-class explanation
  void add(const Pair& p);
};

// A divergence no earlier one explains (docs/diff-logs.md, "Independent divergences"): the
// bug-class roots of one rule and kind (a bug that recurs at every step, or hits every layer, is
// one entry), what training inherits of them, and the cause of the first.
struct Independent {
  // What it does to training: a gradient, a weight or optimizer state is or inherits it; or
  // the gradients (or next weights) after it were compared and none inherits it (local); or
  // nothing after it tells (unknown: no gradient or weight recorded after it).
  enum class Effect : std::uint8_t { training, unknown, local };
  Effect effect = Effect::unknown;
  Rule rule = Rule::unexplained;
  Kind kind = Kind::scalar;
  Pair first;  // its first record, in execution order
  Cause cause;
  std::int64_t records = 0;        // roots it holds
  std::int64_t last_step = 0;      // the last step one of them is at (first.step: the first)
  std::vector<std::string> names;  // distinct, in order seen, the first kNames
  static constexpr std::size_t kNames = 5;
  std::int64_t distinct_names = 0;
  std::int64_t inherited = 0;  // gradient, weight and optimizer records that descend from it
  std::optional<std::string> trace_hint;  // the PROBE_TRACE setting that locates it, if any
};
std::string_view effect_name(Independent::Effect e);  // "training", "unknown", "local"
// Its effect in words, with the counts that show it ("local: ...").
std::string effect_words(const Independent& d);

struct RunInfo {
  std::string path, setup, torch_version;
  int world_size = 1, ranks_found = 0;
  bool python = false;
  std::int64_t steps = 0, records = 0;
  std::optional<std::int64_t> first_step, last_step;
};

struct ReplayVerdict;  // differ/replay_verdict.h

struct Result {
  RunInfo base, test;
  std::int64_t paired_steps = 0;
  std::array<std::array<std::int64_t, kPairClassCount>, kKindCount> counts{};
  std::optional<Pair> first_divergence;
  std::vector<Cause> causes;
  // The first divergence, in execution order, with a bug-class explanation, and that cause
  // with its evidence: the headline unless --strict.
  std::optional<Pair> first_unexplained;
  std::optional<Cause> unexplained_cause;
  // Every independent divergence, ranked by its effect on training (then in execution order):
  // the first is the headline (first_unexplained) unless --strict.
  std::vector<Independent> independent;
  NoiseSummary noise;
  bool strict = false;  // --strict: any divergence is a difference, as before noise was told apart
  std::int64_t summation_order_grads = 0;                 // grads matching the summation-order rule
  std::vector<Pair> top;                                  // by rel_diff, largest first
  std::vector<std::pair<SeriesKey, SeriesStats>> series;  // first-seen order
  std::vector<std::string> names_only_base, names_only_test;  // kinds below excluded
  // Kinds one run recorded on the steps both runs hold while the other recorded none of them.
  std::vector<Kind> kinds_only_base, kinds_only_test;
  // Those kinds, left out of the comparison because --kinds did not choose the kinds.
  bool kinds_left_out = false;
  OpReport ops;
  // numprobe_replay's verdict on ops.region, when one lies beside the test run (replay_verdict.h),
  // else the command that makes it where the region's ops were dumped; replay_note: why a
  // verdict file there was left out.
  std::shared_ptr<const ReplayVerdict> replay;
  std::optional<std::string> replay_command;
  std::string replay_note;
  PartialReport partial;      // partial sums set aside
  CoveredReport covered;      // records covering other microbatches than the other run's, set aside
  RegroupedReport regrouped;  // records of microbatches the runs group otherwise, set aside
  IssueLog base_issues, test_issues;
  std::int64_t records_compared = 0;
  std::optional<std::int64_t> truncated_at;  // comparison stopped here (a killed rank)
  bool filtered = false;                     // --kinds, --steps or --name restricted the comparison
  bool any_divergence() const;
  std::int64_t count(PairClass c) const;  // pairs of that class, every kind

  // What the comparison concluded, the most serious first.
  enum class Verdict : std::uint8_t {
    different,         // a pair is different, only_* or none_one_side
    run_errors,        // the runs agree, but one has an error issue (replica mismatch, ...)
    incomplete,        // no difference, but a run is truncated: later steps were not compared
    noise,             // differences, every one explained as noise (not with --strict)
    nothing_compared,  // no pair passed the filters, or every pair is unsupported
    within_tolerance,  // every pair equal or within --rtol/--atol
    equal,             // every compared pair bitwise equal
  };
  Verdict verdict() const;
  std::string_view verdict_name() const;  // "different", "run_errors", ... (the JSON's "result")
  // 0 equal or within tolerance; 1 different (a bug-class explanation), run errors or
  // incomplete; 2 nothing compared (like bad input: the question was not answered); 4 every
  // difference explained as noise (1 with --strict).
  int exit_code() const;
};

}  // namespace probe::differ
