// The --json document (schema numprobe.diff_logs/1, docs/diff-logs.md): every pair class count,
// the first divergence, causes, top differences and every series, with each run's issues.
#include <nlohmann/json.hpp>

#include <cmath>
#include <variant>

#include "differ/replay_verdict.h"
#include "differ/report.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace lf = probe::log_format;

namespace {

nlohmann::json num_json(double v) {
  if (std::isfinite(v)) return v;
  return lf::format_double(v);  // "nan", "inf", "-inf": JSON has no such numbers
}

nlohmann::json side_json(const Side& s) {
  if (!s.present) return nullptr;
  const Record& r = s.merged.record;
  nlohmann::json j;
  j["ranks"] = s.merged.ranks;
  if (s.merged.replicas_disagree) {  // the figures below are those of value_ranks' records
    j["replicas_disagree"] = true;
    j["value_ranks"] = s.merged.value_ranks;
  }
  j["raw_name"] = s.merged.raw_name;
  switch (r.state) {
    case Record::State::none: j["state"] = "none"; return j;
    case Record::State::scalar:
      j["state"] = "scalar";
      j["value"] = num_json(r.value);
      return j;
    case Record::State::tensor: j["state"] = "tensor";
  }
  const auto& t = r.stats;
  if (t.unsupported) j["unsupported"] = *t.unsupported;
  if (s.merged.hash_source == HashSource::spec_v1 && !t.unsupported)
    j["hash"] = lf::format_hash(t.hash);
  if (t.torch_hash) j["torch_hash"] = lf::format_hash(*t.torch_hash);
  j["norm"] = num_json(t.norm);
  if (s.merged.hash_source == HashSource::spec_v1) {
    j["min"] = num_json(t.min);
    j["max"] = num_json(t.max);
    j["mean"] = num_json(t.mean);
    j["nan"] = t.nan;
    j["inf"] = t.inf;
    j["dtype"] = t.dtype;
    j["shape"] = t.shape;
  }
  if (!r.tied.empty()) j["tied"] = r.tied;  // a parameter's other names
  if (r.kind == Kind::op) {  // the op's input hashes, argument order; null: an input without one
    auto& inputs = j["inputs"] = nlohmann::json::array();
    for (const auto& h : r.inputs)
      inputs.push_back(h ? nlohmann::json(lf::format_hash(*h)) : nlohmann::json(nullptr));
  }
  return j;
}

nlohmann::json pair_json(const Pair& p) {
  nlohmann::json j;
  j["step"] = p.step;
  j["kind"] = kind_name(p.kind);
  j["phase"] = phase_name(phase_of(p));
  j["name"] = p.name;
  j["mb"] = p.mb ? nlohmann::json(*p.mb) : nlohmann::json(nullptr);
  j["class"] = pair_class_name(p.pair_class);
  j["rel_diff"] = num_json(p.rel_diff);
  j["base"] = side_json(p.base);
  j["test"] = side_json(p.test);
  if (!p.note.empty()) j["note"] = p.note;
  if (p.untied)
    j["untied"] = {
        {"param", p.untied->param}, {"named", p.untied->named}, {"copy", p.untied->copy}};
  if (p.why.rule) {
    j["explanation"] = {{"category", p.why.bug ? "bug" : "noise"},
                        {"rule", rule_name(*p.why.rule)}};
    if (p.why.bound > 0) j["explanation"]["bound"] = num_json(p.why.bound);
    if (p.why.roots > 0) j["explanation"]["noise_roots"] = num_json(p.why.roots);
    if (!p.why.detail.empty()) j["explanation"]["detail"] = p.why.detail;
  }
  return j;
}

nlohmann::json cause_json(const Cause& c) {
  nlohmann::json evidence = nlohmann::json::object();
  for (const auto& e : c.evidence) std::visit([&](const auto& v) { evidence[e.key] = v; }, e.value);
  return {{"rule", rule_name(c.rule)}, {"message", c.message}, {"evidence", evidence}};
}

nlohmann::json noise_json(const NoiseSummary& n) {
  auto figures = [](const NoiseSummary::Figures& f) {
    return nlohmann::json{{"pairs", f.pairs}, {"max_rel_diff", num_json(f.max_rel_diff)}};
  };
  nlohmann::json j = figures(n.all);
  j["bug_pairs"] = n.bug_pairs;
  auto& kinds = j["by_kind"] = nlohmann::json::object();
  for (const auto& [kind, f] : n.by_kind) kinds[std::string(kind_name(kind))] = figures(f);
  auto& rules = j["by_rule"] = nlohmann::json::object();
  for (const auto& [rule, count] : n.by_rule) rules[std::string(rule_name(rule))] = count;
  return j;
}

nlohmann::json run_json(const RunInfo& i, const IssueLog& issues) {
  nlohmann::json j;
  j["path"] = i.path;
  j["python"] = i.python;
  j["world_size"] = i.world_size;
  j["ranks_found"] = i.ranks_found;
  j["setup"] = i.setup;
  j["torch"] = i.torch_version;
  j["steps"] = i.steps;
  j["first_step"] = i.first_step ? nlohmann::json(*i.first_step) : nlohmann::json(nullptr);
  j["last_step"] = i.last_step ? nlohmann::json(*i.last_step) : nlohmann::json(nullptr);
  j["records"] = i.records;
  j["issue_counts"] = issues.count_by_type;
  j["hints"] = issues.hints;
  auto& list = j["issues"] = nlohmann::json::array();
  for (const auto& is : issues.detail)
    list.push_back({{"severity", is.severity == Issue::Severity::error ? "error" : "warning"},
                    {"type", is.type},
                    {"step", is.step >= 0 ? nlohmann::json(is.step) : nlohmann::json(nullptr)},
                    {"message", is.message}});
  return j;
}

nlohmann::json optional_json(const std::optional<std::int64_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json options_json(const DiffOptions& opt) {
  nlohmann::json kinds = nullptr;
  if (opt.kinds_mask) {
    kinds = nlohmann::json::array();
    for (int k = 0; k < kKindCount; ++k)
      if (*opt.kinds_mask & (1u << k)) kinds.push_back(kind_name(static_cast<Kind>(k)));
  }
  return {{"rtol", opt.cmp.rtol},
          {"atol", opt.cmp.atol},
          {"sum_order_rtol", opt.sum_order_rtol},
          {"sum_order_rtol_lowp", opt.sum_order_rtol_lowp},
          {"sum_order_fixed", opt.sum_order_fixed},
          {"noise_amplification", opt.noise_amplification},
          {"update_amplification", opt.update_amplification},
          {"reduction_amplification", opt.reduction_amplification},
          {"strict", opt.strict},
          {"kinds", kinds},
          {"steps", {optional_json(opt.step_min), optional_json(opt.step_max)}},
          {"name", opt.name_filter_text},
          {"top", opt.top}};
}

nlohmann::json summary_json(const Result& r) {
  auto summary = nlohmann::json::object();
  for (int k = 0; k < kKindCount; ++k) {
    nlohmann::json row;
    for (int c = 0; c < kPairClassCount; ++c)
      row[std::string(pair_class_name(static_cast<PairClass>(c)))] =
          r.counts[static_cast<std::size_t>(k)][static_cast<std::size_t>(c)];
    summary[std::string(kind_name(static_cast<Kind>(k)))] = row;
  }
  return summary;
}

nlohmann::json series_json(const SeriesKey& k, const SeriesStats& s) {
  return {
      {"kind", kind_name(k.kind)},
      {"name", k.name},
      {"mb", optional_json(k.mb)},
      {"value", k.kind == Kind::scalar ? "value" : "norm"},
      {"base_steps", s.base_steps},
      {"test_steps", s.test_steps},
      {"paired_steps", s.paired},
      {"exact_matches", s.exact},
      {"first_divergent_step", optional_json(s.first_divergent_step)},
      // null where there is no difference to average (no paired step, or none finite)
      {"mae", s.finite_pairs ? num_json(s.mae()) : nullptr},
      {"rmse", s.finite_pairs ? num_json(s.rmse()) : nullptr},
      {"max_abs_diff", s.max_abs_step ? num_json(s.max_abs) : nullptr},
      {"max_abs_diff_step", optional_json(s.max_abs_step)},
      {"final_diff", s.final_step ? num_json(s.final_diff) : nullptr},
      {"nonfinite_mismatch_steps", s.nonfinite_mismatch},
  };
}

nlohmann::json op_finding_json(const std::optional<OpFinding>& f) {
  if (!f) return nullptr;
  return {{"step", f->step},
          {"mb", optional_json(f->mb)},
          {"phase", phase_name(f->phase)},
          {"name", f->name},
          {"message", f->message}};
}

nlohmann::json region_json(const std::optional<ReplayRegion>& region) {
  if (!region) return nullptr;
  const auto ops_of = [](const std::vector<ReplayOp>& ops) {
    auto list = nlohmann::json::array();
    for (const auto& op : ops)
      list.push_back({{"name", op.name}, {"rank", op.rank}, {"dump", op.dump}});
    return list;
  };
  return {{"step", region->step},
          {"mb", optional_json(region->mb)},
          {"phase", phase_name(region->phase)},
          {"root_cause", region->root_cause},
          {"end", region->end},
          {"base_ops", ops_of(region->base)},
          {"test_ops", ops_of(region->test)},
          {"dumped", region->dumped()}};
}

nlohmann::json ops_json(const OpReport& ops) {
  return {
      {"root_cause", op_finding_json(ops.root_cause)},
      {"region", region_json(ops.region)},
      {"inherited", op_finding_json(ops.inherited)},
      {"beyond_noise", op_finding_json(ops.beyond_noise)},
      {"only_base", ops.only_base},
      {"only_base_count", ops.only_base_count},
      {"only_test", ops.only_test},
      {"only_test_count", ops.only_test_count},
      {"trace_hint", ops.trace_hint ? nlohmann::json(*ops.trace_hint) : nlohmann::json(nullptr)}};
}

nlohmann::json set_aside_json(const SetAsideReport& report) {
  auto kinds = nlohmann::json::object();
  for (const auto& [kind, n] : report.by_kind) kinds[std::string(kind_name(kind))] = n;
  return {{"pairs", report.pairs}, {"by_kind", kinds}, {"examples", report.examples}};
}

nlohmann::json kinds_json(const std::vector<Kind>& kinds) {
  auto list = nlohmann::json::array();
  for (Kind k : kinds) list.push_back(kind_name(k));
  return list;
}

// Every independent divergence, ranked (the first is the headline unless --strict).
nlohmann::json independent_json(const std::vector<Independent>& all) {
  auto out = nlohmann::json::array();
  for (const Independent& d : all) {
    nlohmann::json e = pair_json(d.first);
    e["rule"] = rule_name(d.rule);
    e["effect"] = effect_name(d.effect);
    e["effect_words"] = effect_words(d);
    e["records"] = d.records;
    e["last_step"] = d.last_step;
    e["names"] = d.names;
    e["distinct_names"] = d.distinct_names;
    e["inherited"] = d.inherited;
    e["cause"] = cause_json(d.cause);
    e["trace_hint"] = d.trace_hint ? nlohmann::json(*d.trace_hint) : nlohmann::json(nullptr);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

std::string to_json(const Result& r, const DiffOptions& opt) {
  nlohmann::json j;
  j["schema"] = "numprobe.diff_logs/1";
  j["exit_code"] = r.exit_code();
  j["result"] = r.verdict_name();
  j["options"] = options_json(opt);
  j["base"] = run_json(r.base, r.base_issues);
  j["test"] = run_json(r.test, r.test_issues);
  j["paired_steps"] = r.paired_steps;
  j["truncated_at"] = optional_json(r.truncated_at);
  j["records_compared"] = r.records_compared;
  j["summary"] = summary_json(r);
  j["first_divergence"] =
      r.first_divergence ? pair_json(*r.first_divergence) : nlohmann::json(nullptr);
  auto& causes = j["likely_causes"] = nlohmann::json::array();
  for (const auto& c : r.causes) causes.push_back(cause_json(c));
  // The first divergence with a bug-class explanation (null when every difference is noise),
  // with that cause; the headline unless --strict.
  nlohmann::json unexplained = nullptr;
  if (r.first_unexplained) {
    unexplained = pair_json(*r.first_unexplained);
    if (r.unexplained_cause) unexplained["cause"] = cause_json(*r.unexplained_cause);
  }
  j["first_unexplained_divergence"] = unexplained;
  j["independent_divergences"] = independent_json(r.independent);
  j["noise"] = noise_json(r.noise);
  j["summation_order_grads"] = r.summation_order_grads;
  auto& top = j["top"] = nlohmann::json::array();
  for (const auto& p : r.top) top.push_back(pair_json(p));
  j["op_trace"] = ops_json(r.ops);
  // numprobe_replay's verdict on the region (its numprobe.replay/1 document), or the command.
  j["replay"] =
      r.replay ? nlohmann::json::parse(replay_verdict_json(*r.replay)) : nlohmann::json(nullptr);
  if (r.replay) j["replay"]["file"] = r.replay->file;
  j["replay_command"] =
      r.replay_command ? nlohmann::json(*r.replay_command) : nlohmann::json(nullptr);
  j["replay_note"] = r.replay_note;
  // Pairs with a partial sum on one side and none of the same count on the other: set aside.
  j["partial_records"] = set_aside_json(r.partial);
  // Pairs whose sides cover other microbatches (expert parallelism against another grouping).
  j["covered_records"] = set_aside_json(r.covered);
  j["regrouped_records"] = set_aside_json(r.regrouped);
  j["names_only_base"] = r.names_only_base;
  j["names_only_test"] = r.names_only_test;
  j["kinds_only_base"] = kinds_json(r.kinds_only_base);
  j["kinds_only_test"] = kinds_json(r.kinds_only_test);
  j["kinds_left_out"] = r.kinds_left_out;  // those kinds were not compared
  auto& series = j["series"] = nlohmann::json::array();
  for (const auto& [k, s] : r.series) series.push_back(series_json(k, s));
  return j.dump(1) + "\n";
}

}  // namespace probe::differ
