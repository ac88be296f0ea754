// param and optim records in the differ: their order in a step, the [init] and [optimizer]
// causes (each where it fires and where it must not), and their evidence in text and --json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {

const Cause* find_cause(const Result& r, std::string_view rule) {
  for (const auto& c : r.causes)
    if (rule_name(c.rule) == rule) return &c;
  return nullptr;
}

std::string evidence(const Cause& c, const std::string& key) {
  for (const auto& e : c.evidence)
    if (e.key == key)
      return std::holds_alternative<std::string>(e.value)
                 ? std::get<std::string>(e.value)
                 : std::to_string(std::get<std::int64_t>(e.value));
  return "(no " + key + ")";
}

Record optim_scalar(std::int64_t step, const std::string& name, double v) {
  Record r = scalar(step, name, v);
  r.kind = Kind::optim;
  return r;
}

// One step of a tiny trainer: parameters w and b, a forward output, their grads, the loss and
// the optimizer state. `param_hash`, `grad_hash` and `state_hash` choose the values.
std::vector<Record> step_records(std::int64_t step, std::uint64_t w_hash, std::uint64_t b_hash,
                                 std::uint64_t grad_hash, std::uint64_t state_hash) {
  return {tensor(step, Kind::param, "w", w_hash, 1.0),
          tensor(step, Kind::param, "b", b_hash, 1.0),
          tensor(step, Kind::output, "model", 100 + w_hash + b_hash, 2.0, 0),
          tensor(step, Kind::grad, "w", grad_hash, 0.5),
          tensor(step, Kind::grad, "b", grad_hash + 1, 0.5),
          scalar(step, "loss", 1.0),
          tensor(step, Kind::optim, "w.exp_avg", state_hash, 0.1),
          tensor(step, Kind::optim, "b.exp_avg", state_hash + 1, 0.1),
          optim_scalar(step, "w.step", static_cast<double>(step + 1)),
          optim_scalar(step, "b.step", static_cast<double>(step + 1))};
}

std::vector<Record> run_of(std::vector<std::vector<Record>> steps) {
  std::vector<Record> all;
  for (auto& s : steps) all.insert(all.end(), s.begin(), s.end());
  return all;
}

}  // namespace

TEST(WeightCauses, ParamsThatDifferAtTheFirstStepAreInitialization) {
  auto dir = fresh_dir("init_fires");
  write_run(dir / "a", {run_of({step_records(0, 1, 2, 10, 20), step_records(1, 3, 4, 11, 21)})});
  // b drawn from another seed: its param, and everything computed from it, differs.
  write_run(dir / "b", {run_of({step_records(0, 1, 7, 10, 20), step_records(1, 3, 9, 11, 21)})});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::param);
  EXPECT_EQ(res.first_divergence->name, "b");
  const Cause* c = find_cause(res, "init");
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->message.find("param b differs at step 0"), std::string::npos) << c->message;
  EXPECT_NE(c->message.find("1 of 2 parameters"), std::string::npos) << c->message;
  EXPECT_EQ(evidence(*c, "first_param"), "b");
  EXPECT_EQ(evidence(*c, "params_differing"), "1");
  EXPECT_EQ(evidence(*c, "step"), "0");
  EXPECT_EQ(find_cause(res, "optimizer"), nullptr);
}

TEST(WeightCauses, ParamRecordsComeFirstInAStepWhateverTheLogOrder) {
  auto dir = fresh_dir("param_first");
  // The forward output is logged before the parameters: the parameter still comes first.
  write_run(dir / "a",
            {{tensor(0, Kind::output, "model", 5, 1.0, 0), tensor(0, Kind::param, "w", 1, 1.0)}});
  write_run(dir / "b",
            {{tensor(0, Kind::output, "model", 6, 1.0, 0), tensor(0, Kind::param, "w", 2, 1.0)}});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::param);
  std::ostringstream text;
  print_text(res, text, {});
  EXPECT_NE(text.str().find("step 0  step begin  param w"), std::string::npos) << text.str();
  // SUMMARY lists param before the forward kinds.
  EXPECT_LT(text.str().find("  param "), text.str().find("  output "));
}

TEST(WeightCauses, InitDoesNotFireWhenTheComparisonStartsAfterTheFirstStep) {
  auto dir = fresh_dir("init_later");
  write_run(dir / "a", {run_of({step_records(0, 1, 2, 10, 20), step_records(1, 3, 4, 11, 21)})});
  write_run(dir / "b", {run_of({step_records(0, 1, 2, 10, 20), step_records(1, 3, 5, 11, 21)})});
  DiffOptions opt;
  opt.step_min = 1;  // step 1 is not where the runs start: not their initialization
  auto res = diff(dir / "a", dir / "b", opt);
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::param);
  EXPECT_EQ(find_cause(res, "init"), nullptr);
  // Nor is it the optimizer: step 0 was not compared, its grads say nothing.
  EXPECT_EQ(find_cause(res, "optimizer"), nullptr);
}

TEST(WeightCauses, ParamsThatDifferAfterAnUpdateWithEqualGradsAreTheOptimizer) {
  auto dir = fresh_dir("optimizer_fires");
  // Step 0 equal throughout (grads and state); the parameters of step 1 differ: the update.
  write_run(dir / "a", {run_of({step_records(0, 1, 2, 10, 20), step_records(1, 3, 4, 11, 21)})});
  write_run(dir / "b", {run_of({step_records(0, 1, 2, 10, 20), step_records(1, 8, 9, 12, 22)})});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->step, 1);
  EXPECT_EQ(res.first_divergence->kind, Kind::param);
  const Cause* c = find_cause(res, "optimizer");
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->message.find("grads of step 0 agree bitwise but param w differs at step 1"),
            std::string::npos)
      << c->message;
  EXPECT_NE(c->message.find("optimizer state after that update is bitwise equal (4 optim records)"),
            std::string::npos)
      << c->message;
  EXPECT_EQ(evidence(*c, "update_step"), "0");
  EXPECT_EQ(evidence(*c, "first_param"), "w");
  EXPECT_EQ(evidence(*c, "params_differing"), "2");
  EXPECT_EQ(evidence(*c, "grads_compared"), "2");
  EXPECT_EQ(evidence(*c, "grads_agree"), "bitwise");
  EXPECT_EQ(find_cause(res, "init"), nullptr);

  // The same evidence in --json, typed.
  const auto j = nlohmann::json::parse(to_json(res, {}));
  bool found = false;
  for (const auto& jc : j["likely_causes"]) {
    if (jc["rule"] != "optimizer") continue;
    found = true;
    EXPECT_EQ(jc["evidence"]["first_param"], "w");
    EXPECT_EQ(jc["evidence"]["update_step"], 0);
    EXPECT_EQ(jc["evidence"]["params_differing"], 2);
  }
  EXPECT_TRUE(found) << j["likely_causes"].dump();
  EXPECT_EQ(j["summary"]["param"]["different"], 2);
}

TEST(WeightCauses, OptimizerStateThatDiffersWithEqualGradsNamesTheStateTensor) {
  auto dir = fresh_dir("optimizer_state");
  write_run(dir / "a", {run_of({step_records(0, 1, 2, 10, 20), step_records(1, 3, 4, 11, 21)})});
  // Other betas: the state after step 0's update differs though its grads agree.
  write_run(dir / "b", {run_of({step_records(0, 1, 2, 10, 30), step_records(1, 5, 6, 12, 31)})});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::optim);
  const Cause* c = find_cause(res, "optimizer");
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->message.find("optimizer state w.exp_avg differs after the update of step 0"),
            std::string::npos)
      << c->message;
  EXPECT_EQ(evidence(*c, "first_state"), "w.exp_avg");
  EXPECT_EQ(evidence(*c, "first_param"), "w");
  EXPECT_EQ(evidence(*c, "states_differing"), "2");
  EXPECT_EQ(evidence(*c, "states_compared"), "4");
}

TEST(WeightCauses, OptimizerDoesNotFireWhenTheGradsDiffer) {
  auto dir = fresh_dir("optimizer_grads_differ");
  write_run(dir / "a", {run_of({step_records(0, 1, 2, 10, 20), step_records(1, 3, 4, 11, 21)})});
  write_run(dir / "b", {run_of({step_records(0, 1, 2, 15, 25), step_records(1, 5, 6, 16, 26)})});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::grad);
  EXPECT_EQ(find_cause(res, "optimizer"), nullptr);
  EXPECT_EQ(find_cause(res, "init"), nullptr);
}

TEST(WeightCauses, OptimizerDoesNotFireWithoutGradsOfThePreviousStep) {
  auto dir = fresh_dir("optimizer_no_grads");
  write_run(dir / "a", {run_of({step_records(0, 1, 2, 10, 20), step_records(1, 3, 4, 11, 21)})});
  write_run(dir / "b", {run_of({step_records(0, 1, 2, 10, 20), step_records(1, 8, 9, 12, 22)})});
  DiffOptions opt;
  opt.kinds_mask = probe::parse_kind_mask("param,output");  // no grads compared
  auto res = diff(dir / "a", dir / "b", opt);
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::param);
  EXPECT_EQ(res.first_divergence->step, 1);
  EXPECT_EQ(find_cause(res, "optimizer"), nullptr);
  EXPECT_EQ(find_cause(res, "init"), nullptr);
}

TEST(WeightCauses, OptimizerNeedsTheStepRightBeforeTheParams) {
  auto dir = fresh_dir("optimizer_gap");
  // PROBE_EVERY=2: steps 0 and 2; what ran in step 1 was not recorded.
  write_run(dir / "a", {run_of({step_records(0, 1, 2, 10, 20), step_records(2, 3, 4, 11, 21)})});
  write_run(dir / "b", {run_of({step_records(0, 1, 2, 10, 20), step_records(2, 8, 9, 12, 22)})});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->step, 2);
  EXPECT_EQ(find_cause(res, "optimizer"), nullptr);
}

TEST(WeightCauses, GradsWithinToleranceAreSaidToAgreeWithinTolerance) {
  auto dir = fresh_dir("optimizer_tol");
  auto a0 = step_records(0, 1, 2, 10, 20), b0 = a0;
  b0[3].stats.hash = 99;  // grad w: another hash, the same figures: within tolerance
  auto b1 = step_records(1, 8, 4, 11, 21);
  b1[0].stats.norm = 2.0;  // param w of step 1: beyond the tolerance
  write_run(dir / "a", {run_of({a0, step_records(1, 3, 4, 11, 21)})});
  write_run(dir / "b", {run_of({b0, b1})});
  DiffOptions opt;
  opt.cmp.rtol = 1e-6;
  auto res = diff(dir / "a", dir / "b", opt);
  const Cause* c = find_cause(res, "optimizer");
  ASSERT_NE(c, nullptr) << (res.first_divergence ? res.first_divergence->name : "no divergence");
  EXPECT_EQ(evidence(*c, "grads_agree"), "within tolerance (1 not bitwise)");
}

TEST(WeightCauses, AMicrobatchAfterAnUpdateInsideTheStepIsToldByTheUpdateCounts) {
  // Two microbatches a step; the test run's optimizer also steps after microbatch 0 (an update
  // inside the accumulation window): microbatch 1 reads updated weights while the step's param
  // records, taken when it began, are equal. Its update counts say 2 against 1.
  const auto microbatches = [](std::uint64_t second_output, double steps) {
    return std::vector<Record>{tensor(0, Kind::param, "w", 5, 1.0),
                               tensor(0, Kind::output, "model", 70, 2.0, 0),
                               tensor(0, Kind::mb_grad, "w", 80, 0.5, 0),
                               tensor(0, Kind::output, "model", second_output,
                                      2.0 + 1e-3 * static_cast<double>(second_output), 1),
                               tensor(0, Kind::mb_grad, "w", second_output + 10, 0.5, 1),
                               tensor(0, Kind::grad, "w", second_output + 20, 0.7),
                               optim_scalar(0, "w.step", steps)};
  };
  const auto dir = fresh_dir("mid_step_updates");
  write_run(dir / "a", {microbatches(71, 1)});
  write_run(dir / "b", {microbatches(171, 2)});
  const Result r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_unexplained && r.unexplained_cause) << text_of(r);
  EXPECT_EQ(r.first_unexplained->kind, Kind::output) << text_of(r);
  EXPECT_EQ(*r.first_unexplained->mb, 1);
  EXPECT_EQ(r.unexplained_cause->rule, Rule::optimizer) << text_of(r);
  EXPECT_TRUE(says(r.unexplained_cause->message,
                   "test run's optimizer stepped more often within step 0 than the base run's "
                   "(w.step: base 1, test 2): from microbatch 1 on, the test run computed from "
                   "weights its optimizer had already updated"))
      << r.unexplained_cause->message;
  EXPECT_EQ(evidence(*r.unexplained_cause, "update_count"), "w.step");
  // Equal update counts: the computation differs, as before.
  write_run(dir / "c", {microbatches(171, 1)});
  const Result same = diff(dir / "a", dir / "c");
  ASSERT_TRUE(same.unexplained_cause) << text_of(same);
  EXPECT_EQ(same.unexplained_cause->rule, Rule::unexplained) << text_of(same);
}
