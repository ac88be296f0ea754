// Op records in a comparison (docs/diff-logs.md, "Op traces"): set-aside ops, the root-cause
// rule, the inherited op and the re-run hint.
#include "differ/detail/judge/op_align.h"

#include <regex>
#include <unordered_map>

#include "differ/detail/judge/replay_region.h"
#include "differ/detail/judge/weight_causes.h"
#include "differ/detail/merge/split_op.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace {

// "step 3 mb 1 forward"
std::string where(std::int64_t step, std::optional<std::int64_t> mb, Phase phase) {
  std::string s = "step " + std::to_string(step);
  if (mb) s += " mb " + std::to_string(*mb);
  return s + " " + std::string(phase_name(phase));
}

// The scope of an op record's name: what precedes its first '/' (a backward op's is its
// forward op's scope).
std::string scope_of(const std::string& name) { return name.substr(0, name.find('/')); }

bool output_differs(const Pair& p) {
  return p.pair_class == PairClass::different || p.pair_class == PairClass::none_one_side;
}

// Which op of one run produced each output hash seen so far in the step.
using Producers = std::unordered_map<std::uint64_t, std::string>;

void note_outputs(const Pair& p, Producers& base, Producers& test) {
  std::vector<std::uint64_t> hashes;
  for (const auto* side : {&p.base, &p.test}) {
    if (!side->present) continue;
    // Every whole a split record may be; a name with an output index (op.1) still names the op.
    output_hashes(side->merged, hashes);
    for (std::uint64_t h : hashes) (side == &p.base ? base : test).try_emplace(h, p.name);
  }
}

std::string escape_regex(const std::string& text) {
  static const std::string special = R"(\^$.|?*+()[]{})";
  std::string out;
  for (char c : text) {
    if (special.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// Input `i`'s hash as compared: a split record's first view (the ranks' common hash, or the whole
// along dim 0), not one rank's.
std::string input_text(const Merged& m, std::size_t i) {
  std::vector<std::uint64_t> scratch;
  const auto& hashes = input_hashes(m, i, scratch);
  return hashes.empty() ? std::string("-") : log_format::format_hash(hashes.front());
}

bool in_both(const Pair& p) { return p.base.present && p.test.present; }

// What a step's op records tell about each other: which op of each run produced each output
// hash, and the ops of one run only.
struct StepOps {
  Producers base, test;
  std::vector<const Pair*> one_sided;
  std::string update_counts;  // the step's update counts where they differ (weight_causes.h)
};

// The op that made input `i` of `m`, "" where no traced op did.
std::string producer_of(const Producers& from, const Merged& m, std::size_t i) {
  std::vector<std::uint64_t> scratch;
  for (std::uint64_t h : input_hashes(m, i, scratch))
    if (auto it = from.find(h); it != from.end()) return it->second;
  return "";
}

OpFinding root_cause_finding(std::int64_t step, const Pair& p) {
  const Phase phase = phase_of(p);
  return {step, p.mb, phase, p.name,
          p.name + " (" + where(step, p.mb, phase) +
              "): its inputs agree with the other run, its output differs" +
              (p.note.empty() ? "" : " (" + p.note + ")")};
}

// "made by X", or by which op in each run; producers empty where no traced op made the input.
std::string made_by_text(const std::string& base_producer, const std::string& test_producer) {
  if (base_producer.empty() && test_producer.empty()) return ", made outside the traced ops";
  if (base_producer == test_producer) return ", made by " + base_producer;
  return ", made by " + (base_producer.empty() ? "an untraced op" : base_producer) +
         " in base and " + (test_producer.empty() ? "an untraced op" : test_producer) + " in test";
}

// Where the runs ran different ops, no op pair has agreeing inputs and a differing output: the
// op of one run only that made `p`'s differing input `input` is the root cause.
std::optional<OpFinding> one_sided_root_cause(std::int64_t step, const Pair& p, std::size_t input,
                                              const std::string& base_producer,
                                              const std::string& test_producer,
                                              const StepOps& ops) {
  for (const Pair* q : ops.one_sided) {
    if (q->name != test_producer && q->name != base_producer) continue;
    const Phase phase = phase_of(*q);
    const std::string scope = scope_of(q->name);
    // The scope's one-sided ops of that microbatch and phase, the first kListed of each run.
    constexpr int kListed = 8;
    std::string base_ops, test_ops;
    int base_count = 0, test_count = 0;
    for (const Pair* o : ops.one_sided) {
      if (scope_of(o->name) != scope || o->mb != q->mb || phase_of(*o) != phase) continue;
      std::string& list = o->base.present ? base_ops : test_ops;
      int& count = o->base.present ? base_count : test_count;
      if (count++ < kListed) list += (list.empty() ? "" : ", ") + o->name;
    }
    const auto more = [](int count) {
      return count > kListed ? ", ... " + std::to_string(count - kListed) + " more" : std::string();
    };
    base_ops += more(base_count);
    test_ops += more(test_count);
    return OpFinding{step, q->mb, phase, q->name,
                     "the runs execute different ops in " + scope + " (" +
                         where(step, q->mb, phase) + "): base runs [" + base_ops +
                         "], test runs [" + test_ops + "]; " + q->name + "'s output feeds " +
                         p.name + ", whose input " + std::to_string(input) + " differs"};
  }
  return std::nullopt;
}

// An op whose output differs and whose inputs already differ; may find the root cause among the
// one-sided ops that fed it.
OpFinding inherited_finding(std::int64_t step, const Pair& p, const StepOps& ops,
                            OpReport& report) {
  const Record &b = p.base.merged.record, &t = p.test.merged.record;
  const Phase phase = phase_of(p);
  std::string msg = p.name + " (" + where(step, p.mb, phase) + "): ";
  if (b.inputs.size() != t.inputs.size()) {
    msg += "it takes " + std::to_string(b.inputs.size()) + " tensor inputs in base, " +
           std::to_string(t.inputs.size()) + " in test";
    return {step, p.mb, phase, p.name, msg};
  }
  const std::size_t i = first_differing_input(p.base.merged, p.test.merged);
  msg += "input " + std::to_string(i) + " already differs (base " + input_text(p.base.merged, i) +
         ", test " + input_text(p.test.merged, i) + ")";
  const std::string pb = producer_of(ops.base, p.base.merged, i),
                    pt = producer_of(ops.test, p.test.merged, i);
  msg += made_by_text(pb, pt);
  // An input no traced op made is a weight or a microbatch's input; after the first microbatch
  // of a step whose update counts differ, a weight one run's optimizer updated inside the step.
  if (pb.empty() && pt.empty() && !ops.update_counts.empty() && p.mb && *p.mb > 0)
    msg += " (the step's update counts differ, " + ops.update_counts +
           ": one run's optimizer stepped within the step, so a weight this op reads may be one "
           "it had already updated)";
  // Where the difference is noise (a reduction's rounding carried along), the ops of one run only
  // that made the input (the reduction) are no cause.
  if (!report.root_cause && p.why.bug)
    report.root_cause = one_sided_root_cause(step, p, i, pb, pt, ops);
  return {step, p.mb, phase, p.name, msg};
}

// Inputs that differ by noise only and an output that differs beyond what that noise explains
// (the explainer's verdict on the pair): where every op already carries noise (after a
// row-parallel sum), the first op that adds a difference of its own.
bool beyond_noise(const Pair& p) {
  return p.why.bug && p.why.rule == Rule::unexplained && p.why.roots > 0;
}

OpFinding beyond_noise_finding(std::int64_t step, const Pair& p) {
  const Phase phase = phase_of(p);
  return {step, p.mb, phase, p.name,
          p.name + " (" + where(step, p.mb, phase) +
              "): its inputs differ from the other run's by noise only (" +
              log_format::format_double(p.why.roots) + " relative at its roots), its output by " +
              log_format::format_double(p.rel_diff) + ", beyond the " +
              log_format::format_double(p.why.bound) +
              " that noise explains: the first op adding a difference of its own"};
}

}  // namespace

bool set_aside_op(const Pair& p, OpReport& report) {
  if (p.kind != Kind::op || (p.base.present && p.test.present)) return false;
  const bool base = p.base.present;
  auto& list = base ? report.only_base : report.only_test;
  ++(base ? report.only_base_count : report.only_test_count);
  if (list.size() < OpReport::kListed)
    list.push_back(where(p.step, p.mb, phase_of(p)) + " " + p.name);
  return true;
}

void OpAnalysis::add_step(std::int64_t step, const std::vector<Pair>& pairs, OpReport& report) {
  if (done_) return;
  StepOps ops;
  ops.update_counts = differing_update_counts_text(pairs);
  // This step's ops of one run only: test-only records sit after the base records of their
  // phase and microbatch, not where they ran, so they all count as producers from the start.
  for (const Pair& p : pairs)
    if (p.kind == Kind::op && !in_both(p)) {
      ops.one_sided.push_back(&p);
      note_outputs(p, ops.base, ops.test);
    }
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const Pair& p = pairs[k];
    if (p.kind != Kind::op || !in_both(p)) continue;
    // A partial sum (a row-parallel op's output on each rank) is set aside: no output to compare.
    if (output_differs(p) && !p.set_aside) {
      const bool agree = inputs_agree(p.base.merged, p.test.merged);
      if (agree && !report.root_cause) {
        report.root_cause = root_cause_finding(step, p);
        if (replay_op_.empty()) report.region = replay_region(step, pairs, k);
      } else if (!agree && !report.inherited) {
        const bool had_root_cause = report.root_cause.has_value();
        report.inherited = inherited_finding(step, p, ops, report);
        // A root cause among the ops of one run only: the region is what made p's input.
        if (!had_root_cause && report.root_cause && replay_op_.empty()) {
          report.region = replay_region(step, pairs, k);
          report.region->root_cause = report.root_cause->name;
        }
      }
      if (!agree && !report.beyond_noise && beyond_noise(p))
        report.beyond_noise = beyond_noise_finding(step, p);
    }
    note_outputs(p, ops.base, ops.test);
  }
  if (report.root_cause) report.beyond_noise.reset();  // only where no op's inputs agree
  note_replay_op(step, pairs, report);
  done_ = (report.root_cause || report.inherited || report.beyond_noise) &&
          (replay_op_.empty() || report.region);
}

void OpAnalysis::note_replay_op(std::int64_t step, const std::vector<Pair>& pairs,
                                OpReport& report) const {
  if (replay_op_.empty() || report.region) return;
  for (std::size_t k = 0; k < pairs.size(); ++k)
    if (pairs[k].kind == Kind::op && pairs[k].name == replay_op_ && in_both(pairs[k])) {
      report.region = replay_region(step, pairs, k, /*starts_here=*/true);
      return;
    }
}

std::optional<std::string> scope_regex_for(Kind kind, const std::string& raw_name) {
  // A repeated key's "#k" is the probe's numbering, not part of the scope.
  const std::string name = raw_name.substr(0, raw_name.find('#'));
  switch (kind) {
    case Kind::tap: return "^" + escape_regex(name) + "(\\.|$)";
    case Kind::mb_grad:
    case Kind::grad: {
      // A parameter's module (its name without the last component), the module's own scopes
      // and its ancestors' (a model may scope only down to layers.3.attention, not to the
      // Linear layers.3.attention.wq): ^layers(\.3(\.attention(\.wq(\..*)?)?)?)?$
      const auto dot = name.rfind('.');
      if (dot == std::string::npos) return std::string();
      const std::string module = name.substr(0, dot);
      std::vector<std::string> parts;
      for (std::size_t begin = 0;;) {
        const auto end = module.find('.', begin);
        parts.push_back(module.substr(begin, end - begin));
        if (end == std::string::npos) break;
        begin = end + 1;
      }
      std::string re = "(\\..*)?";
      for (std::size_t i = parts.size(); i-- > 1;) re = "(\\." + escape_regex(parts[i]) + re + ")?";
      return "^" + escape_regex(parts[0]) + re + "$";
    }
    case Kind::input:
    case Kind::output:
    case Kind::output_grad:
    case Kind::scalar: return std::string();  // somewhere in the model: every scope
    case Kind::rng:
    case Kind::op:
    case Kind::param:  // weights and optimizer state differ before any op runs: init, optimizer
    case Kind::optim: return std::nullopt;
  }
  return std::nullopt;
}

void OpAnalysis::suggest_trace(const Pair& first, const std::vector<Pair>& pairs,
                               std::optional<std::uint32_t> kinds, OpReport& report) const {
  if (report.trace_hint) return;
  // A record one run lacks, or `none` in one, is no numerical difference for ops to explain; a
  // comparison that leaves op records out (--kinds) is not looking at them.
  if (first.pair_class != PairClass::different) return;
  if (kinds && !(*kinds & (1u << static_cast<unsigned>(Kind::op)))) return;
  const auto scopes = scope_regex_for(first.kind, first.name);
  if (!scopes) return;
  const std::regex re(scopes->empty() ? std::string(".*") : *scopes);
  for (const Pair& p : pairs)
    // ops there were traced
    if (p.kind == Kind::op && std::regex_search(scope_of(p.name), re)) return;
  std::string hint = "steps=" + std::to_string(first.step);
  if (!scopes->empty()) hint += ";scopes=" + *scopes;
  if (first.mb) hint += ";mb=" + std::to_string(*first.mb);
  report.trace_hint = hint;
}

void OpAnalysis::add_causes(const OpReport& report, std::vector<Cause>& causes) const {
  std::vector<Cause> found;
  if (report.root_cause) found.push_back({Rule::op_root_cause, report.root_cause->message});
  else if (report.beyond_noise)
    found.push_back({Rule::op_beyond_noise, report.beyond_noise->message});
  if (report.inherited)
    found.push_back({Rule::op_inherited,
                     "the first op whose inputs already differ: " + report.inherited->message});
  causes.insert(causes.begin(), found.begin(), found.end());
}

}  // namespace probe::differ
