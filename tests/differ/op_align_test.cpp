// Op records in a comparison: set-aside ops, the root-cause rule, the inherited op and the
// re-run hint (docs/diff-logs.md, "Op traces").
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "differ/report_html.h"
#include "differ_test_util.h"
#include "differ/detail/judge/op_align.h"
#include "probe/trace_spec.h"

using namespace differ_test;
using probe::Kind;
using probe::Phase;
using probe::Record;
using probe::differ::Rule;
using probe::differ::rule_name;

namespace {

Record op(const std::string& name, std::uint64_t out, std::vector<std::optional<std::uint64_t>> in,
          Phase phase = Phase::forward, std::int64_t mb = 0) {
  Record r = tensor(0, Kind::op, name, out, static_cast<double>(out % 97) + 1, mb);
  r.phase = phase;
  r.inputs = std::move(in);
  return r;
}

Record tap(const std::string& name, std::uint64_t hash) {
  return tensor(0, Kind::tap, name, hash, 1.0 + hash % 7, 0);
}

}  // namespace

TEST(OpAlign, RootCauseIsTheFirstOpWhoseInputsAgreeAndOutputDiffers) {
  auto dir = fresh_dir("op_root");
  const std::vector<Record> base = {op("layers.0.attention/aten::matmul#0", 10, {1, 2}),
                                    op("layers.0.attention/aten::softmax#0", 11, {10}),
                                    op("layers.0.attention/aten::matmul#1", 12, {11, 3}),
                                    tap("layers.0", 13)};
  std::vector<Record> test = base;
  test[1].stats.hash = 21;  // softmax: same input, another output
  test[2].inputs = {21, 3};
  test[2].stats.hash = 22;
  test[3].stats.hash = 23;
  write_run(dir / "a", {base});
  write_run(dir / "b", {test});
  const auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->name, "layers.0.attention/aten::softmax#0");
  ASSERT_TRUE(r.ops.root_cause);
  EXPECT_EQ(r.ops.root_cause->name, "layers.0.attention/aten::softmax#0");
  EXPECT_EQ(r.ops.root_cause->phase, Phase::forward);
  ASSERT_TRUE(r.ops.inherited);
  EXPECT_EQ(r.ops.inherited->name, "layers.0.attention/aten::matmul#1");
  EXPECT_NE(r.ops.inherited->message.find("input 0 already differs"), std::string::npos)
      << r.ops.inherited->message;
  EXPECT_NE(r.ops.inherited->message.find("made by layers.0.attention/aten::softmax#0"),
            std::string::npos)
      << r.ops.inherited->message;
  ASSERT_GE(r.causes.size(), 2u);
  EXPECT_EQ(r.causes[0].rule, Rule::op_root_cause);
  EXPECT_EQ(r.causes[1].rule, Rule::op_inherited);
  EXPECT_FALSE(r.ops.trace_hint);
  const std::string json = probe::differ::to_json(r, {});
  EXPECT_NE(json.find("\"op_trace\""), std::string::npos);
}

TEST(OpAlign, OpsInOneRunOnlyAreSetAsideAndListed) {
  auto dir = fresh_dir("op_aside");
  const std::vector<Record> base = {op("s/aten::add#0", 5, {1}), tap("s", 6)};
  std::vector<Record> test = {op("s/aten::add#0", 5, {1}), op("s/c10d::allreduce_#0", 5, {5}),
                              tap("s", 6)};
  write_run(dir / "a", {base});
  write_run(dir / "b", {test});
  const auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 0);  // not a divergence
  EXPECT_FALSE(r.any_divergence());
  EXPECT_EQ(r.ops.only_test_count, 1);
  ASSERT_EQ(r.ops.only_test.size(), 1u);
  EXPECT_EQ(r.ops.only_test[0], "step 0 mb 0 forward s/c10d::allreduce_#0");
  EXPECT_NE(text_of(r).find("OPS IN ONE RUN ONLY"), std::string::npos);
}

namespace {

// One forward: fc1, a GELU, in the test run (compiled) an op of its own after the GELU, a tap
// of what comes out. The GELU's outputs differ by a rounding (1e-8 relative, equal inputs: the
// fused kernel's); the test's extra op outputs `extra_norm`.
void write_gelu_runs(const std::filesystem::path& dir, const std::string& extra,
                     double extra_norm) {
  auto rec = [](const std::string& name, std::uint64_t out, double norm,
                std::vector<std::optional<std::uint64_t>> in) {
    Record r = tensor(0, Kind::op, name, out, norm, 0);
    r.phase = Phase::forward;
    r.inputs = std::move(in);
    return r;
  };
  const std::vector<Record> base = {rec("fc1/aten::linear#0", 10, 7.0, {1, 2, 3}),
                                    rec("model/aten::gelu#0", 11, 4.0, {10}),
                                    tensor(0, Kind::tap, "fc1.gelu", 11, 4.0, 0)};
  std::vector<Record> test = {rec("fc1/aten::linear#0", 10, 7.0, {1, 2, 3}),
                              rec("model/aten::gelu#0", 21, 4.0 * (1 + 1e-8), {10}),
                              rec(extra, 22, extra_norm, {21}),
                              tensor(0, Kind::tap, "fc1.gelu", 22, extra_norm, 0)};
  write_run(dir / "eager", {base});
  write_run(dir / "compiled", {test});
  mark_compiled(dir / "compiled");
}

}  // namespace

TEST(OpAlign, AnOpOfOneRunOnlyThatChangesAValueBeyondRoundingIsABug) {
  // The GELU's rounding, carried through the rest of the network, could explain a tap that
  // differs by 1e-4; but the test run multiplied the GELU's output by 1 + 1e-4 in an op the
  // other run does not have: it computes another function there.
  auto dir = fresh_dir("op_one_sided_change");
  write_gelu_runs(dir, "model/aten::mul#0", 4.0 * (1 + 1e-4));
  const auto r = diff(dir / "eager", dir / "compiled");
  EXPECT_EQ(r.exit_code(), 1) << text_of(r);
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->name, "fc1.gelu");
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::different_ops);
  EXPECT_NE(text_of(r).find("model/aten::mul#0"), std::string::npos) << text_of(r);
}

TEST(OpAlign, AnOpOfOneRunOnlyThatOnlyCopiesOrRoundsTheValueIsNoBug) {
  // A copy of the GELU's output (its norm is the GELU's own) and a dtype round trip (within 2u
  // of it) change nothing the other run computes.
  for (const double moved : {0.0, 1e-7}) {
    auto dir = fresh_dir("op_one_sided_copy");
    write_gelu_runs(dir, "model/aten::clone#0", 4.0 * (1 + 1e-8) * (1 + moved));
    const auto r = diff(dir / "eager", dir / "compiled");
    EXPECT_NE(r.exit_code(), 1) << text_of(r);
    EXPECT_EQ(text_of(r).find("different_ops"), std::string::npos) << text_of(r);
  }
}

TEST(OpAlign, DifferentOpSequencesNameTheOneRunOpsThatFeedTheFirstInheritedOp) {
  auto dir = fresh_dir("op_sequence");
  const auto bwd = Phase::backward;
  const std::vector<Record> base = {
      op("l.attention/aten::softmax#0/aten::_softmax_backward_data#0", 30, {7, 8}, bwd),
      op("l.attention/aten::masked_fill#0/aten::masked_fill#0", 31, {30, 9}, bwd)};
  const std::vector<Record> test = {
      op("l.attention/aten::softmax#0/aten::mul#0", 40, {7, 8}, bwd),
      op("l.attention/aten::softmax#0/aten::sub#0", 41, {40, 8}, bwd),
      op("l.attention/aten::masked_fill#0/aten::masked_fill#0", 42, {41, 9}, bwd)};
  write_run(dir / "a", {base});
  write_run(dir / "b", {test});
  const auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.ops.inherited);
  EXPECT_EQ(r.ops.inherited->name, "l.attention/aten::masked_fill#0/aten::masked_fill#0");
  ASSERT_TRUE(r.ops.root_cause);
  EXPECT_EQ(r.ops.root_cause->phase, Phase::backward);
  EXPECT_EQ(r.ops.root_cause->name.rfind("l.attention/aten::softmax#0/", 0), 0u)
      << r.ops.root_cause->name;
  EXPECT_NE(r.ops.root_cause->message.find(
                "base runs [l.attention/aten::softmax#0/aten::_softmax_backward_data#0]"),
            std::string::npos)
      << r.ops.root_cause->message;
  EXPECT_NE(r.ops.root_cause->message.find("aten::sub#0"), std::string::npos)
      << r.ops.root_cause->message;
  EXPECT_EQ(r.ops.only_base_count, 1);
  EXPECT_EQ(r.ops.only_test_count, 2);
}

TEST(OpAlign, ADivergenceWithoutOpRecordsGetsTheExactReRunSetting) {
  auto dir = fresh_dir("op_hint");
  auto tap_at = [](std::int64_t step, const std::string& name, std::uint64_t h) {
    Record r = tap(name, h);
    r.step = step;
    return r;
  };
  write_run(dir / "a",
            {{tap_at(0, "layers.2", 1), tap_at(7, "layers.2", 1), tap_at(7, "layers.3", 2)}});
  write_run(dir / "b",
            {{tap_at(0, "layers.2", 1), tap_at(7, "layers.2", 1), tap_at(7, "layers.3", 3)}});
  const auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.ops.trace_hint);
  EXPECT_EQ(*r.ops.trace_hint, "steps=7;scopes=^layers\\.3(\\.|$);mb=0");
  const auto spec = probe::TraceSpec::parse(*r.ops.trace_hint);  // a setting the probe accepts
  EXPECT_TRUE(spec.traces_scope("layers.3.attention"));
  EXPECT_TRUE(spec.traces_scope("layers.3"));
  EXPECT_FALSE(spec.traces_scope("layers.30"));
  EXPECT_NE(text_of(r).find("PROBE_TRACE='steps=7;scopes=^layers\\.3(\\.|$);mb=0'"),
            std::string::npos)
      << text_of(r);
  EXPECT_NE(probe::differ::to_json(r, {}).find(
                "\"trace_hint\": \"steps=7;scopes=^layers\\\\.3(\\\\.|$);mb=0\""),
            std::string::npos);
}

TEST(OpAlign, NoHintWhereOpsWereTraced) {
  auto dir = fresh_dir("op_nohint");
  write_run(dir / "a", {{op("layers.3.attention/aten::add#0", 1, {1}), tap("layers.3", 2)}});
  write_run(dir / "b", {{op("layers.3.attention/aten::add#0", 1, {1}), tap("layers.3", 3)}});
  const auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_divergence);
  EXPECT_FALSE(r.ops.trace_hint);
}

TEST(OpAlign, ParameterGradientsPointAtTheirModule) {
  const auto module = probe::differ::scope_regex_for(Kind::mb_grad, "layers.1.attention.wq.weight");
  EXPECT_EQ(module, "^layers(\\.1(\\.attention(\\.wq(\\..*)?)?)?)?$");
  const auto spec = probe::TraceSpec::parse("scopes=" + *module);
  for (const char* traced : {"layers", "layers.1", "layers.1.attention", "layers.1.attention.wq",
                             "layers.1.attention.wq.x"})
    EXPECT_TRUE(spec.traces_scope(traced)) << traced;
  for (const char* untraced :
       {"layers.1.moe", "layers.10", "layers.1.attention_norm", "layers.2.attention"})
    EXPECT_FALSE(spec.traces_scope(untraced)) << untraced;
  EXPECT_EQ(probe::differ::scope_regex_for(Kind::tap, "layers.1#2"), "^layers\\.1(\\.|$)");
  EXPECT_EQ(probe::differ::scope_regex_for(Kind::output, "model"), "");
  EXPECT_FALSE(probe::differ::scope_regex_for(Kind::rng, "cpu"));
}

TEST(OpAlign, JsonAndHtmlDataCarryTheOpsPhaseInputsAndFindingsWithOpRowsLast) {
  auto dir = fresh_dir("op_json");
  const auto bwd = Phase::backward;
  const std::vector<Record> base = {
      tap("l", 3), op("l.attention/aten::softmax#0", 11, {10}),
      op("l.attention/aten::softmax#0/aten::_softmax_backward_data#0", 30, {7, std::nullopt}, bwd)};
  std::vector<Record> test = base;
  test[2].stats.hash = 31;  // a backward op: same inputs, another output
  write_run(dir / "a", {base});
  write_run(dir / "b", {test});
  const auto r = diff(dir / "a", dir / "b");
  const auto j = nlohmann::json::parse(probe::differ::to_json(r, {}));
  const auto& fd = j["first_divergence"];
  EXPECT_EQ(fd["kind"], "op");
  EXPECT_EQ(fd["phase"], "backward");  // its own phase, not the kind's
  EXPECT_EQ(fd["base"]["inputs"], nlohmann::json({"0000000000000007", nullptr}));
  EXPECT_EQ(j["op_trace"]["root_cause"]["name"],
            "l.attention/aten::softmax#0/aten::_softmax_backward_data#0");
  EXPECT_EQ(j["op_trace"]["root_cause"]["phase"], "backward");
  EXPECT_TRUE(j["op_trace"]["trace_hint"].is_null());
  EXPECT_EQ(j["summary"]["op"]["equal"], 1);
  EXPECT_EQ(j["summary"]["op"]["different"], 1);
  EXPECT_EQ(j["summary"]["tap"]["equal"], 1);

  // The heat map: op records after every other kind, in execution order.
  std::vector<std::string> rows;
  for (std::size_t i : probe::differ::heat_map_rows(r)) rows.push_back(r.series[i].first.name);
  EXPECT_EQ(rows, (std::vector<std::string>{
                      "l", "l.attention/aten::softmax#0",
                      "l.attention/aten::softmax#0/aten::_softmax_backward_data#0"}));
  // The text report says where the backward op ran.
  EXPECT_NE(
      text_of(r).find(
          "step 0  backward  mb 0  op l.attention/aten::softmax#0/aten::_softmax_backward_data#0"),
      std::string::npos)
      << text_of(r);
}

TEST(OpAlign, AnInputNoTracedOpMadeAfterAnUpdateInsideTheStepSaysSo) {
  // Microbatch 1's first traced op reads a weight (input 1, made by no traced op) that the test
  // run's optimizer had already updated after microbatch 0: the step's update counts say 2 vs 1.
  auto dir = fresh_dir("op_mid_step_update");
  Record steps = scalar(0, "w.step", 1);
  steps.kind = Kind::optim;
  const std::vector<Record> base = {op("layers.0/aten::matmul#0", 10, {1, 2}, Phase::forward, 0),
                                    op("layers.0/aten::matmul#0", 11, {3, 2}, Phase::forward, 1),
                                    steps};
  std::vector<Record> test = base;
  test[1].inputs = {3, 4};
  test[1].stats.hash = 21;
  test[1].stats.norm += 1;
  test[2].value = 2;
  write_run(dir / "a", {base});
  write_run(dir / "b", {test});
  const auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.ops.inherited) << text_of(r);
  EXPECT_NE(r.ops.inherited->message.find(
                "made outside the traced ops (the step's update counts differ, w.step: base 1, "
                "test 2: one run's optimizer stepped within the step"),
            std::string::npos)
      << r.ops.inherited->message;
}
