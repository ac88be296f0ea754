// The terminal report, its answer first: runs, result, first (unexplained) divergence and likely
// causes, the op trace's re-run setting, noise; then one-sided kinds, run issues, the summary per
// kind, one-sided names and ops, top differences, paired statistics, the result again. One
// function per section.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <type_traits>
#include <variant>

#include "differ/detail/read/names.h"
#include "differ/detail/read/record_text.h"
#include "differ/replay_verdict.h"
#include "differ/report.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace lf = probe::log_format;

namespace {

struct Paint {
  bool on;
  std::string operator()(std::string_view code, const std::string& text) const {
    if (!on) return text;
    return "\033[" + std::string(code) + "m" + text + "\033[0m";
  }
};
constexpr std::string_view kRed = "31", kGreen = "32", kYellow = "33", kBold = "1", kDim = "2";

std::string num(double v) { return lf::format_double(v); }

std::string pad(std::string s, std::size_t width, bool right = false) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

// Where a side's value comes from. Ranks that disagree (replica_mismatch) show one rank's value.
std::string ranks_text(const Merged& m) {
  if (m.ranks.empty() || m.ranks[0] < 0) return "";
  if (!m.replicas_disagree) return "  (rank " + format_ranks(m.ranks) + ")";
  return "  (rank " + format_ranks(m.value_ranks) + "; ranks " + format_ranks(m.ranks) +
         " disagree, see RUN ISSUES)";
}

std::string side_text(const Side& s, Kind kind) {
  if (!s.present) return "(absent)";
  const Record& r = s.merged.record;
  std::string out, extra;
  switch (r.state) {
    case Record::State::none: out = "none"; break;
    case Record::State::scalar: out = "value=" + num(r.value); break;
    case Record::State::tensor: {
      const auto& t = r.stats;
      if (t.unsupported) {
        out = "unsupported (" + *t.unsupported + ")";
      } else if (s.merged.hash_source == HashSource::torch_hash_alone) {
        // torch.hash_tensor's value, which NumericsLogger writes in decimal: in hex, 16 digits,
        // like every other hash the report prints.
        out = "hash=" + lf::format_hash(t.torch_hash.value_or(0));  // weights.log: no norm
      } else if (s.merged.hash_source == HashSource::torch_only) {
        out = "hash=" + lf::format_hash(t.torch_hash.value_or(0)) + " norm=" + num(t.norm);
      } else if (kind == Kind::rng) {
        out = "hash=" + lf::format_hash(t.hash);  // the figures of state bytes mean nothing
      } else {
        out = "hash=" + lf::format_hash(t.hash) + " norm=" + num(t.norm);
        // The hash a NumericsLogger log is compared by, where the probe wrote it too.
        if (t.torch_hash) out += " torch_hash=" + lf::format_hash(*t.torch_hash);
        extra = "min=" + num(t.min) + " max=" + num(t.max) + " mean=" + num(t.mean);
        if (t.nan || t.inf)
          extra += " nan=" + std::to_string(t.nan) + " inf=" + std::to_string(t.inf);
      }
      if (!t.dtype.empty()) {
        out += " " + t.dtype + dims_text(t.shape);
      }
      break;
    }
  }
  out += ranks_text(s.merged);
  if (!extra.empty()) out += "\n        " + extra;  // keeps lines terminal-wide
  return out;
}

// The relative norm (or value) difference, or why there is none.
std::string rel_diff_text(const Pair& p) {
  auto nan_side = [](const Side& s) {
    return s.present && s.merged.record.state == Record::State::tensor &&
           std::isnan(s.merged.record.stats.norm);
  };
  const bool nb = nan_side(p.base), nt = nan_side(p.test);
  if (nb || nt)
    return std::string("n/a (NaN in ") + (nb && nt ? "both" : nb ? "base" : "test") + ")";
  return num(p.rel_diff);
}

std::string where(const Pair& p) {
  static constexpr std::array<std::string_view, 4> kPhase = {"step begin", "forward", "backward",
                                                             "step end"};
  std::string s = "step " + std::to_string(p.step) + "  " +
                  std::string(kPhase[static_cast<std::size_t>(phase_of(p))]);
  if (p.mb) s += "  mb " + std::to_string(*p.mb);
  s += "  " + std::string(kind_name(p.kind)) + " " + p.name;
  return s;
}

std::string run_line(const char* label, const RunInfo& i) {
  std::string s = std::string(label) + ": " + i.path;
  if (i.python) s += "  (NumericsLogger log)";
  else
    s += "  (" + std::to_string(i.ranks_found) + "/" + std::to_string(i.world_size) + " ranks" +
         (i.setup.empty() ? "" : ", " + i.setup) + ")";
  s += "  steps " + std::to_string(i.steps);
  if (i.first_step)
    s += " [" + std::to_string(*i.first_step) + ".." + std::to_string(*i.last_step) + "]";
  s += ", " + std::to_string(i.records) + " records";
  return s;
}

std::string result_text(const Result& r) {
  const std::int64_t unsupported = r.count(PairClass::unsupported);
  const std::string not_compared =
      unsupported ? " (" + std::to_string(unsupported) + " unsupported pair(s) not compared)" : "";
  switch (r.verdict()) {
    case Result::Verdict::different: return "differences found";
    case Result::Verdict::noise:
      return "differences found, every one explained as noise (" +
             std::to_string(r.noise.all.pairs) + " pair(s), largest relative difference " +
             num(r.noise.all.max_rel_diff) + "); --strict counts them as differences";
    case Result::Verdict::run_errors: return "the runs agree, but a run has errors (RUN ISSUES)";
    case Result::Verdict::incomplete: {
      const std::int64_t at = *r.truncated_at;
      return "incomplete: " +
             (at > 0 ? "no difference through step " + std::to_string(at - 1) + ", but "
                     : std::string()) +
             "a run's log ends early, at step " + std::to_string(at) + " (rank killed?)" +
             (at > 0 ? "; --steps :" + std::to_string(at - 1) + " compares the complete steps alone"
                     : "");
    }
    case Result::Verdict::nothing_compared:
      if (r.records_compared > 0)
        return "nothing compared: all " + std::to_string(r.records_compared) +
               " pairs are unsupported (see the notes above and in --json)";
      if (r.kinds_left_out && !r.filtered)
        return "nothing compared: the runs share no kind (KINDS IN ONE RUN ONLY); --kinds all "
               "compares them";
      return r.filtered ? "nothing compared: no record passes --kinds, --steps and --name"
                        : "nothing compared: the runs hold no records";
    case Result::Verdict::within_tolerance:
      return "equal within tolerance (" + std::to_string(r.count(PairClass::within_tol)) +
             " pair(s) not bitwise equal)" + not_compared;
    case Result::Verdict::equal: break;
  }
  return "equal" + not_compared;
}

// Order of the mismatching tensor series on the terminal: earliest divergence first (the
// culprit, not its knock-on effects), then first-seen (execution) order.
std::vector<std::size_t> tensor_series_order(const Result& r) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < r.series.size(); ++i) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& sa = r.series[a].second;
    const auto& sb = r.series[b].second;
    return sa.first_divergent_step.value_or(std::numeric_limits<std::int64_t>::max()) <
           sb.first_divergent_step.value_or(std::numeric_limits<std::int64_t>::max());
  });
  return order;
}

bool mismatching(const SeriesStats& s) {
  return s.exact != s.paired || s.base_steps != s.test_steps;
}

std::string series_title(const SeriesKey& k) {
  std::string title = std::string(kind_name(k.kind)) + " " + k.name;
  if (k.mb) title += " mb=" + std::to_string(*k.mb);
  return title;
}

// A series that agrees on every paired step but has values on steps the other run lacks.
std::string one_sided_text(const SeriesStats& s) {
  if (s.paired == 0 && s.base_steps == 0) return "no value in the base run";
  if (s.paired == 0 && s.test_steps == 0) return "no value in the test run";
  return "agree on all " + std::to_string(s.paired) + " paired steps; steps with a value: base " +
         std::to_string(s.base_steps) + ", test " + std::to_string(s.test_steps);
}

void print_runs(const Result& r, std::ostream& out, const Paint& paint) {
  out << run_line("base", r.base) << "\n" << run_line("test", r.test) << "\n";
  out << "paired steps " << r.paired_steps << ", records compared " << r.records_compared << "\n";
  if (r.truncated_at)
    out << paint(kYellow, "a rank's log ends early (killed?): steps from " +
                              std::to_string(*r.truncated_at) +
                              " on are read but not compared (RUN ISSUES)")
        << "\n";
  out << "\n";
}

// Kinds in the order a step records them (parameters first, optimizer state last): SUMMARY's rows.
std::vector<Kind> kinds_in_step_order() {
  std::vector<Kind> kinds;
  for (int k = 0; k < kKindCount; ++k) kinds.push_back(static_cast<Kind>(k));
  std::stable_sort(kinds.begin(), kinds.end(),
                   [](Kind a, Kind b) { return phase_of(a) < phase_of(b); });
  return kinds;
}

std::string evidence_text(const Evidence& e) {
  return e.key + "=" +
         std::visit(
             [](const auto& v) {
               if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) return v;
               else return std::to_string(v);
             },
             e.value);
}

void print_summary(const Result& r, std::ostream& out, const Paint& paint) {
  static constexpr std::array<std::string_view, kPairClassCount> kHead = {
      "equal", "within_tol", "different", "only_base", "only_test", "none_1side", "unsupported"};
  // The first column fits the longest kind name, output_grad.
  out << paint(kBold, pad("SUMMARY", 13));
  for (auto h : kHead) out << pad(std::string(h), 12, true);
  out << "\n";
  for (Kind kind : kinds_in_step_order()) {
    const auto& row = r.counts[static_cast<std::size_t>(kind)];
    std::int64_t total = 0;
    for (auto c : row) total += c;
    if (total == 0) continue;
    out << "  " << pad(std::string(kind_name(kind)), 11);
    for (int c = 0; c < kPairClassCount; ++c) {
      const auto n = row[static_cast<std::size_t>(c)];
      std::string cell = pad(std::to_string(n), 12, true);
      if (n > 0 && is_divergence(static_cast<PairClass>(c))) cell = paint(kRed, cell);
      else if (n > 0 && c == static_cast<int>(PairClass::equal)) cell = paint(kGreen, cell);
      else if (n == 0) cell = paint(kDim, cell);
      out << cell;
    }
    out << "\n";
  }
  out << "\n";
}

void print_pair(const char* title, const Pair& p, const std::string& label, std::ostream& out,
                const Paint& paint) {
  out << paint(kBold, title) << "  " << paint(kRed, where(p)) << "  ["
      << pair_class_name(p.pair_class) << "]" << label << "\n";
  out << "  base: " << side_text(p.base, p.kind) << "\n";
  out << "  test: " << side_text(p.test, p.kind) << "\n";
  if (p.rel_diff > 0 && p.kind != Kind::rng) {
    const bool values = p.base.present && p.base.merged.record.state == Record::State::scalar;
    out << (values ? "  relative difference: " : "  relative norm difference: ") << rel_diff_text(p)
        << "\n";
  }
  if (!p.note.empty()) out << "  note: " << p.note << "\n";
}

void print_cause(const Cause& c, std::ostream& out) {
  out << "  [" << c.rule << "] " << c.message << "\n";
  if (c.evidence.empty()) return;
  out << "    evidence:";
  for (const auto& e : c.evidence) out << " " << evidence_text(e);
  out << "\n";
}

// "  noise: summation_order (within 9.5e-07)": how the first divergence is explained, when it
// is noise; a partial sum's in words ("noise: partial_sum (the sum of 2 partial products of tap
// wo mb 0 in the test run, added in another order than one rank's product; within 3.4e-06)").
std::string noise_label(const Pair& p) {
  if (p.why.bug || !p.why.rule) return "";
  if (p.why.rule == Rule::cannot_tell) return "  cannot tell: " + p.why.detail;
  std::string s = "  noise: " + std::string(rule_name(*p.why.rule));
  if (!p.why.detail.empty())
    s += " (" + p.why.detail + (p.why.bound > 0 ? "; within " + num(p.why.bound) : "") + ")";
  else if (p.why.bound > 0) s += " (within " + num(p.why.bound) + ")";
  return s;
}

bool same_pair(const Pair& a, const Pair& b) { return a.step == b.step && a.key == b.key; }

// The headline: the first divergence with a bug-class explanation (unless --strict), then the
// first divergence of any kind with its noise explanation.
// `with_cause`: its cause even where the likely causes below it list it (the headline alone).
void print_first_unexplained(const Result& r, std::ostream& out, const Paint& paint,
                             bool with_cause = false) {
  if (r.strict || !r.first_divergence) return;
  if (!r.first_unexplained) {
    out << paint(kBold, "FIRST UNEXPLAINED DIVERGENCE") << "  "
        << paint(kGreen, "none: every difference is explained as noise (NOISE)") << "\n";
    return;
  }
  print_pair("FIRST UNEXPLAINED DIVERGENCE", *r.first_unexplained, "", out, paint);
  // Where the headline is the first divergence and its cause is among the likely causes
  // printed right below, it is said once.
  const Cause* c = r.unexplained_cause ? &*r.unexplained_cause : nullptr;
  const bool listed =
      c && r.first_divergence && same_pair(*r.first_divergence, *r.first_unexplained) &&
      std::any_of(r.causes.begin(), r.causes.end(),
                  [&](const Cause& l) { return l.rule == c->rule && l.message == c->message; });
  if (c && (!listed || with_cause)) print_cause(*c, out);
  out << "\n";
}

// Every independent divergence, ranked, where there is more than the headline to say: several,
// or one whose effect on training is not shown. The headline's cause is printed above it.
void print_independent(const Result& r, std::ostream& out, const Paint& paint) {
  const auto& all = r.independent;
  if (r.strict || all.empty() ||
      (all.size() == 1 && all[0].effect == Independent::Effect::training))
    return;
  out << paint(kBold, "INDEPENDENT DIVERGENCES") << "  " << all.size()
      << (all.size() == 1 ? ", the headline"
                          : ", ranked by their effect on training (the first "
                            "is the headline)")
      << "\n";
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Independent& d = all[i];
    out << "  " << i + 1 << ". [" << d.rule << "] " << paint(kRed, where(d.first)) << "\n";
    out << "     " << effect_words(d) << "\n";
    if (d.distinct_names > 1) {
      out << "     names: ";
      for (std::size_t n = 0; n < d.names.size(); ++n) out << (n ? ", " : "") << d.names[n];
      if (d.distinct_names > static_cast<std::int64_t>(d.names.size()))
        out << ", and " << d.distinct_names - static_cast<std::int64_t>(d.names.size()) << " more";
      out << "\n";
    }
    if (i > 0) out << "     " << d.cause.message << "\n";
  }
  out << "\n";
}

void print_first_divergence(const Result& r, std::ostream& out, const Paint& paint) {
  print_first_unexplained(r, out, paint);
  print_independent(r, out, paint);
  const bool headlined = !r.strict && r.first_divergence && r.first_unexplained &&
                         same_pair(*r.first_divergence, *r.first_unexplained);
  if (r.first_divergence && !headlined) {
    print_pair("FIRST DIVERGENCE", *r.first_divergence,
               r.strict ? "" : noise_label(*r.first_divergence), out, paint);
  } else if (!r.first_divergence) {
    out << paint(kBold, "FIRST DIVERGENCE") << "  " << paint(kGreen, "none") << "\n";
  }
  if (!r.causes.empty()) {
    out << paint(kBold,
                 headlined || r.strict ? "LIKELY CAUSE" : "LIKELY CAUSE OF THE FIRST DIVERGENCE")
        << "\n";
    for (const auto& c : r.causes) print_cause(c, out);
  }
  if (r.summation_order_grads > 0)
    out << "  " << r.summation_order_grads
        << " grad record(s) differ only at summation-order size with bitwise-equal mb_grads\n";
  out << "\n";
}

// The re-run setting that would record the ops where the headline's divergence arises. Where a
// run's records cover several microbatches (expert parallelism), op traces of the two layouts do
// not line up yet (docs/diff-logs.md, Op traces): said, so that no one trusts them.
void print_trace_hint(const Result& r, std::ostream& out, const Paint& paint) {
  if (!r.ops.trace_hint) return;
  out << paint(kBold, "OP TRACE")
      << "  the runs diverge where no op was recorded; to find the op, re-run both with\n"
      << "  PROBE_TRACE='" << *r.ops.trace_hint << "'\n";
  if (r.covered.pairs > 0)
    out << "  (a run sends tokens to experts on other ranks: op traces of an expert-parallel "
           "layout are not aligned\n"
        << "  with another layout's yet; trace it against a run of the same layout)\n";
  out << "\n";
}

// numprobe_replay's verdict on the region where the runs part, or the command that makes it.
void print_replay(const Result& r, std::ostream& out, const Paint& paint) {
  if (r.replay) {
    const ReplayVerdict& v = *r.replay;
    const bool ok = v.verdict == "noise";
    out << paint(kBold, "REPLAY VERDICT") << "  " << paint(ok ? kGreen : kRed, v.verdict) << "  ("
        << v.file << ")\n";
    if (!v.reason.empty()) out << "  " << v.reason << "\n";
    for (const auto& line : v.evidence) out << "  " << line << "\n";
    out << "\n";
    return;
  }
  if (!r.replay_note.empty()) out << paint(kBold, "REPLAY") << "  " << r.replay_note << "\n";
  if (r.replay_command)
    out << paint(kBold, "REPLAY")
        << "  the ops where the runs part were dumped; for a numerical verdict (float64), run\n"
        << "  " << *r.replay_command << "\n";
  if (r.replay_command || !r.replay_note.empty()) out << "\n";
}

// The ops of one run only, set aside.
void print_one_sided_ops(const OpReport& ops, std::ostream& out, const Paint& paint) {
  if (ops.only_base_count == 0 && ops.only_test_count == 0) return;
  out << paint(kBold, "OPS IN ONE RUN ONLY") << " (set aside: not compared, not a divergence)\n";
  for (const auto* list : {&ops.only_base, &ops.only_test}) {
    const bool base = list == &ops.only_base;
    const std::int64_t count = base ? ops.only_base_count : ops.only_test_count;
    if (count == 0) continue;
    out << "  " << (base ? "base only" : "test only") << " (" << count << ")\n";
    for (const auto& line : *list) out << "    " << line << "\n";
    if (count > static_cast<std::int64_t>(list->size()))
      out << "    ... and " << count - static_cast<std::int64_t>(list->size()) << " more\n";
  }
  out << "\n";
}

// What noise explains, in words: how many pairs, by which rules, how large, by kind.
void print_noise(const Result& r, std::ostream& out, const Paint& paint) {
  const NoiseSummary& n = r.noise;
  if (n.all.pairs == 0) return;
  std::string rules;
  for (const auto& [rule, count] : n.by_rule)
    rules +=
        (rules.empty() ? "" : ", ") + std::string(rule_name(rule)) + " " + std::to_string(count);
  out << paint(kBold, "NOISE") << "  " << n.all.pairs << " divergent pair(s) explained as noise ("
      << rules << "), largest relative difference " << num(n.all.max_rel_diff);
  if (n.bug_pairs > 0) out << "; " << n.bug_pairs << " more with a bug-class explanation";
  out << "\n  by kind:";
  std::string sep = " ";
  for (const auto& [kind, f] : n.by_kind) {
    out << sep << kind_name(kind) << " " << f.pairs << " (largest " << num(f.max_rel_diff) << ")";
    sep = ", ";
  }
  out << "\n\n";
}

// "3 mb_grad": a set-aside report's counts by kind, "and" before the last.
std::string kinds_text(const std::map<Kind, std::int64_t>& by_kind) {
  std::string kinds;
  std::size_t i = 0;
  for (const auto& [kind, n] : by_kind) {
    kinds += (i == 0                    ? ""
              : i + 1 == by_kind.size() ? " and "
                                        : ", ") +
             std::to_string(n) + " " + std::string(kind_name(kind));
    ++i;
  }
  return kinds;
}

// Pairs set aside: how many, of which kinds ("<n> <kind> <one|many> <why>"), a few of them.
void print_set_aside(const SetAsideReport& report, const char* title, const char* one,
                     const char* many, const char* why, std::ostream& out, const Paint& paint) {
  if (report.pairs == 0) return;
  out << paint(kBold, title) << "  " << kinds_text(report.by_kind)
      << (report.pairs == 1 ? one : many) << why << ": set aside, not compared\n";
  for (const auto& e : report.examples) out << "  " << e << "\n";
  if (report.pairs > static_cast<std::int64_t>(report.examples.size()))
    out << "  ... and " << report.pairs - static_cast<std::int64_t>(report.examples.size())
        << " more\n";
  out << "\n";
}

void print_issues(const Result& r, std::ostream& out, const Paint& paint) {
  for (const auto* log : {&r.base_issues, &r.test_issues}) {
    if (log->count_by_type.empty()) continue;
    const char* label = log == &r.base_issues ? "base" : "test";
    out << paint(kBold, std::string("RUN ISSUES (") + label + ")");
    for (const auto& [type, n] : log->count_by_type) out << "  " << type << "=" << n;
    out << "\n";
    for (const auto& h : log->hints) out << "  (" << h << ")\n";
    std::size_t shown = 0;
    for (const auto& i : log->detail) {
      if (shown++ >= 8) {
        out << "  ... (all in --json, up to " << IssueLog::kDetailPerType << " per type)\n";
        break;
      }
      out << "  "
          << (i.severity == Issue::Severity::error ? paint(kRed, "error")
                                                   : paint(kYellow, "warning"))
          << " " << i.type << ": " << i.message << "\n";
    }
    out << "\n";
  }
}

void print_one_sided_kinds(const Result& r, std::ostream& out, const Paint& paint) {
  for (const auto* kinds : {&r.kinds_only_base, &r.kinds_only_test}) {
    if (kinds->empty()) continue;
    std::string names;
    for (Kind k : *kinds) names += (names.empty() ? "" : ", ") + std::string(kind_name(k));
    out << paint(kBold, "KINDS IN ONE RUN ONLY") << "  the "
        << (kinds == &r.kinds_only_base ? "test" : "base") << " run recorded no " << names
        << (r.kinds_left_out
                ? " (PROBE_KINDS?): left out of the comparison; --kinds all compares them\n\n"
                : " (PROBE_KINDS?); --kinds can leave them out\n\n");
  }
}

void print_one_sided_names(const Result& r, std::ostream& out, const Paint& paint) {
  if (r.names_only_base.empty() && r.names_only_test.empty()) return;
  out << paint(kBold, "NAMES IN ONE RUN ONLY")
      << " (use --map REGEX=REPLACEMENT to align renamed ones)\n";
  for (const auto* list : {&r.names_only_base, &r.names_only_test}) {
    const char* label = list == &r.names_only_base ? "base only" : "test only";
    for (std::size_t i = 0; i < list->size() && i < 10; ++i)
      out << "  " << label << ": " << (*list)[i] << "\n";
    if (list->size() > 10) out << "  " << label << ": ... " << list->size() - 10 << " more\n";
  }
  out << "\n";
}

void print_top(const Result& r, std::ostream& out, const Paint& paint) {
  if (r.top.empty()) return;
  out << paint(kBold, "TOP " + std::to_string(r.top.size()) + " DIFFERENCES")
      << " (relative norm/value difference)\n";
  for (const auto& p : r.top)
    out << "  " << pad(rel_diff_text(p), 24) << " " << where(p) << "  ["
        << pair_class_name(p.pair_class) << "]\n";
  out << "\n";
}

// The series PAIRED STATISTICS shows: every scalar series, and the tensor norm series that
// mismatch; those whose values agree wherever both runs have one (steps or records one run
// lacks) are grouped, one line per kind and shape of mismatch, instead of a line of zeros each.
struct SeriesShown {
  std::size_t tensor_total = 0;
  std::vector<std::size_t> shown;   // scalars, then tensors (earliest first)
  std::vector<std::size_t> single;  // mismatching tensor series with paired steps that differ
  std::size_t single_shown = 0;
  std::vector<std::pair<std::string, std::vector<std::size_t>>> groups;  // first-seen order
};

SeriesShown series_shown(const Result& r, std::size_t max_series) {
  SeriesShown s;
  for (std::size_t i = 0; i < r.series.size(); ++i) {
    if (r.series[i].first.kind == Kind::scalar) s.shown.push_back(i);
    else ++s.tensor_total;
  }
  for (std::size_t i : tensor_series_order(r)) {
    const auto& [k, st] = r.series[i];
    if (k.kind == Kind::scalar || !mismatching(st)) continue;
    if (st.exact != st.paired) {
      s.single.push_back(i);
      continue;
    }
    const std::string what = std::string(kind_name(k.kind)) + " series: " + one_sided_text(st);
    auto g = std::find_if(s.groups.begin(), s.groups.end(),
                          [&](const auto& x) { return x.first == what; });
    if (g == s.groups.end()) g = s.groups.insert(s.groups.end(), {what, {}});
    g->second.push_back(i);
  }
  s.single_shown = std::min(s.single.size(), max_series);
  s.shown.insert(s.shown.end(), s.single.begin(),
                 s.single.begin() + static_cast<std::ptrdiff_t>(s.single_shown));
  return s;
}

void print_series_lines(const SeriesKey& k, const SeriesStats& s, std::ostream& out,
                        const Paint& paint) {
  out << "  " << (mismatching(s) ? paint(kRed, series_title(k)) : paint(kGreen, series_title(k)))
      << "\n";
  out << "    steps base " << s.base_steps << " test " << s.test_steps << " paired " << s.paired
      << " exact " << s.exact << " first-divergent "
      << (s.first_divergent_step ? std::to_string(*s.first_divergent_step) : "-") << "\n";
  if (k.kind == Kind::rng) {  // the norm of RNG state bytes means nothing: hashes only
    out << "    hash differs at " << s.paired - s.exact << " of " << s.paired << " paired steps\n";
    return;
  }
  // "-" where there is no difference to average (no paired step, or none finite).
  const bool diffs = s.finite_pairs > 0;
  out << "    MAE " << (diffs ? num(s.mae()) : "-") << "  RMSE " << (diffs ? num(s.rmse()) : "-")
      << "  max|d| "
      << (s.max_abs_step ? num(s.max_abs) + " @" + std::to_string(*s.max_abs_step) : "-")
      << "  final d " << (s.final_step ? num(s.final_diff) : "-");
  if (s.nonfinite_mismatch) out << "  NaN/Inf-on-one-side steps " << s.nonfinite_mismatch;
  out << "\n";
}

// The series the headline's pair belongs to (the first unexplained divergence, or the first
// divergence with --strict or where all is noise).
std::optional<std::size_t> headline_series(const Result& r) {
  const std::optional<Pair>& p =
      !r.strict && r.first_unexplained ? r.first_unexplained : r.first_divergence;
  if (!p) return std::nullopt;
  for (std::size_t i = 0; i < r.series.size(); ++i) {
    const SeriesKey& k = r.series[i].first;
    if (k.kind == p->kind && k.mb == p->mb && k.name == p->name) return i;
  }
  return std::nullopt;
}

// Every mismatching tensor series, listed (up to max_series) or grouped: --all-series.
void print_all_series(const Result& r, std::ostream& out, const Paint& paint,
                      std::size_t max_series) {
  const SeriesShown s = series_shown(r, max_series);
  out << paint(kBold, "PAIRED STATISTICS") << " (d = test - base; all scalar series, "
      << s.single_shown << " of " << s.single.size() << " mismatching tensor norm series of "
      << s.tensor_total;
  std::size_t grouped = 0;
  for (const auto& g : s.groups) grouped += g.second.size();
  if (grouped) out << ", " << grouped << " more with values in one run only grouped by kind";
  out << "; every series in --json)\n";
  for (std::size_t i : s.shown)
    print_series_lines(r.series[i].first, r.series[i].second, out, paint);
  for (const auto& [what, members] : s.groups)
    out << "  " << paint(kRed, std::to_string(members.size()) + " " + what)
        << " (first: " << series_title(r.series[members[0]].first) << ")\n";
  out << "\n";
}

// The scalar series (the loss) and the headline's series; how many mismatching ones are left
// out, and where they are.
void print_series(const Result& r, std::ostream& out, const Paint& paint, const TextOptions& opt) {
  if (opt.all_series) return print_all_series(r, out, paint, opt.max_series);
  std::vector<std::size_t> shown;
  std::size_t tensors = 0, left_out = 0;
  const auto headline = headline_series(r);
  for (std::size_t i = 0; i < r.series.size(); ++i) {
    const auto& [k, st] = r.series[i];
    if (k.kind == Kind::scalar || i == headline) shown.push_back(i);
    else if (mismatching(st)) ++left_out;
    if (k.kind != Kind::scalar) ++tensors;
  }
  if (shown.empty() && left_out == 0) return;
  out << paint(kBold, "PAIRED STATISTICS") << " (d = test - base; the scalar series"
      << (headline ? " and the headline's" : "") << "; ";
  if (left_out > 0)
    out << left_out << " more mismatching tensor norm series of " << tensors
        << " left out: --all-series lists them, --json holds every series)\n";
  else
    out << "no other of the " << tensors
        << " tensor norm series mismatches; --json holds every series)\n";
  for (std::size_t i : shown) print_series_lines(r.series[i].first, r.series[i].second, out, paint);
  out << "\n";
}

void print_result(const Result& r, std::ostream& out, const Paint& paint) {
  const int code = r.exit_code();
  out << (code == 0 ? paint(kGreen, "RESULT: " + result_text(r))
                    : paint(kRed, "RESULT: " + result_text(r)))
      << " (exit " << code << ")\n";
}

}  // namespace

void print_headline(const Result& r, std::ostream& out, const TextOptions& opt) {
  print_first_unexplained(r, out, Paint{opt.color}, /*with_cause=*/true);
}

// The answer first: the result, the headline and its cause, the re-run hint and what noise
// explains fill the first screen; the counts, the lists and the statistics follow, and the
// result is repeated last, where a scrolled terminal ends.
void print_text(const Result& r, std::ostream& out, const TextOptions& opt) {
  const Paint paint{opt.color};
  print_runs(r, out, paint);
  print_result(r, out, paint);
  out << "\n";
  print_first_divergence(r, out, paint);
  print_replay(r, out, paint);
  print_trace_hint(r, out, paint);
  print_noise(r, out, paint);
  print_one_sided_kinds(r, out, paint);
  print_set_aside(r.partial, "PARTIAL RECORDS", " record is a partial sum",
                  " records are partial sums",
                  " without a like counterpart in the other run (a tensor-parallel rank's summand)",
                  out, paint);
  print_set_aside(r.covered, "COVERED MICROBATCHES", " record covers", " records cover",
                  " other microbatches than the other run's (an expert's gradient from one "
                  "expert-parallel dispatch "
                  "over several microbatches)",
                  out, paint);
  print_set_aside(r.regrouped, "REGROUPED MICROBATCHES", " record is", " records are",
                  " of microbatches the runs fill with other groups of the same samples (another "
                  "accumulation count or batch size, another sampler): the step's records judge it",
                  out, paint);
  print_issues(r, out, paint);
  print_summary(r, out, paint);
  print_one_sided_names(r, out, paint);
  print_one_sided_ops(r.ops, out, paint);
  print_top(r, out, paint);
  print_series(r, out, paint, opt);
  print_result(r, out, paint);
}

}  // namespace probe::differ
