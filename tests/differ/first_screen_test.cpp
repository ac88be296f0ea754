// The answer first: what a user reads before anything else. Kinds one run never recorded are
// left out rather than headlined, the op-trace hint follows the first unexplained divergence,
// the terminal report's first screen holds the result, the headline and its cause, and every
// hash prints in hex.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {

Record with_torch_hash(Record r, std::uint64_t h) {
  r.stats.torch_hash = h;
  return r;
}

// A NumericsLogger trainer's logs (weights.log: the weights at each step's start; diff.log: each
// step's gradient) and a probe run of the same three steps recording every kind, its weights
// at step 2 updated another way.
void write_python_and_probe_runs(const std::filesystem::path& dir) {
  write_file(dir / "py" / "weights.log", "name='w' hash=11\nname='w' hash=21\nname='w' hash=31\n");
  write_file(dir / "py" / "diff.log",
             "[grad w] hash=7, norm=1.5\n[grad w] hash=8, norm=1.25\n[grad w] hash=9, norm=1.0\n");
  std::vector<Record> probe;
  const std::uint64_t weights[3] = {11, 21, 99}, grads[3] = {7, 8, 9};
  const double grad_norms[3] = {1.5, 1.25, 1.0};
  for (int s = 0; s < 3; ++s) {
    const auto i = static_cast<std::size_t>(s);
    probe.push_back(with_torch_hash(tensor(s, Kind::param, "w", 100 + i, 1.0), weights[i]));
    probe.push_back(tensor(s, Kind::rng, "cpu", 5, 1.0, 0));
    probe.push_back(tensor(s, Kind::input, "model", 6, 1.0, 0));
    probe.push_back(tensor(s, Kind::mb_grad, "w", 200 + i, grad_norms[i], 0));
    probe.push_back(with_torch_hash(tensor(s, Kind::grad, "w", 300 + i, grad_norms[i]), grads[i]));
    probe.push_back(scalar(s, "loss", 2.0 - 0.1 * s));
    probe.push_back(tensor(s, Kind::optim, "w.exp_avg", 400 + i, 0.1));
  }
  write_run(dir / "probe", {probe});
}

bool has_rule(const std::vector<Cause>& causes, std::string_view rule) {
  for (const auto& c : causes)
    if (rule_name(c.rule) == rule) return true;
  return false;
}

// Lines 1..n of a report.
std::string first_lines(const std::string& text, int n) {
  std::size_t at = 0;
  for (int i = 0; i < n && at != std::string::npos; ++i) at = text.find('\n', at + 1);
  return text.substr(0, at);
}

}  // namespace

TEST(FirstScreen, KindsOneRunNeverRecordedAreLeftOutAndTheOptimizerHeadlines) {
  auto dir = fresh_dir("first_screen_kinds");
  write_python_and_probe_runs(dir);
  const auto r = diff(dir / "py", dir / "probe");
  ASSERT_TRUE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(r.first_unexplained->kind, Kind::param);
  EXPECT_EQ(r.first_unexplained->step, 2);
  ASSERT_TRUE(r.unexplained_cause);
  EXPECT_EQ(r.unexplained_cause->rule, Rule::optimizer) << text_of(r);
  EXPECT_TRUE(r.kinds_left_out);
  const std::vector<Kind> left_out = {Kind::rng, Kind::input, Kind::mb_grad, Kind::scalar,
                                      Kind::optim};
  EXPECT_EQ(r.kinds_only_test, left_out);
  for (Kind k : left_out) {
    SCOPED_TRACE(std::string(kind_name(k)));
    for (int c = 0; c < kPairClassCount; ++c)
      EXPECT_EQ(r.counts[static_cast<std::size_t>(k)][static_cast<std::size_t>(c)], 0);
  }
  EXPECT_FALSE(has_rule(r.causes, "missing_record"));
  const std::string text = text_of(r);
  EXPECT_TRUE(
      says(text,
           "KINDS IN ONE RUN ONLY the base run recorded no rng, input, mb_grad, scalar, optim "
           "(PROBE_KINDS?): left out of the comparison; --kinds all compares them"))
      << text;
  EXPECT_EQ(nlohmann::json::parse(to_json(r, {}))["kinds_left_out"], true);

  // Chosen explicitly, they are compared, and the records the Python run lacks head the report.
  DiffOptions all;
  all.kinds_mask = parse_kinds("all");
  const auto explicit_kinds = diff(dir / "py", dir / "probe", all);
  EXPECT_FALSE(explicit_kinds.kinds_left_out);
  ASSERT_TRUE(explicit_kinds.first_unexplained);
  EXPECT_EQ(explicit_kinds.first_unexplained->why.rule, Rule::missing_record);
}

TEST(FirstScreen, AKindMissingOnlyWhereTheOtherRunRecordsItIsStillAMissingRecord) {
  auto dir = fresh_dir("first_screen_missing");
  // Both runs log the loss; the test run's step 1 lacks it.
  write_run(dir / "a", {{scalar(0, "loss", 1.0), scalar(1, "loss", 0.5),
                         tensor(1, Kind::tap, "t", 1, 1.0, 0)}});
  write_run(dir / "b", {{scalar(0, "loss", 1.0), tensor(1, Kind::tap, "t", 1, 1.0, 0)}});
  const auto r = diff(dir / "a", dir / "b");
  EXPECT_FALSE(r.kinds_left_out);
  ASSERT_TRUE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::missing_record);
  EXPECT_EQ(r.first_unexplained->name, "loss");
}

TEST(FirstScreen, NoTraceHintForAnOptimizerDivergenceAfterNoise) {
  // Step 0: the embedding's grad differs by summation order (noise), the weights agree. Step 1:
  // the weights differ beyond what the update of agreeing inputs allows: the optimizer.
  auto dir = fresh_dir("first_screen_hint_optimizer");
  auto step0 = [](std::uint64_t grad_hash, double grad_norm) {
    std::vector<Record> r;
    for (int mb = 0; mb < 2; ++mb)
      r.push_back(tensor(0, Kind::mb_grad, "tok_embeddings.weight",
                         10 + static_cast<std::uint64_t>(mb), 1.0, mb));
    r.push_back(tensor(0, Kind::grad, "tok_embeddings.weight", grad_hash, grad_norm));
    r.push_back(tensor(0, Kind::param, "tok_embeddings.weight", 5, 1.0));
    return r;
  };
  auto a = step0(1, 2.0), b = step0(2, 2.0 * (1 + 1e-8));
  a.push_back(tensor(1, Kind::param, "tok_embeddings.weight", 7, 0.9));
  b.push_back(tensor(1, Kind::param, "tok_embeddings.weight", 8, 0.95));
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  const auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->why.rule, Rule::summation_order);
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::optimizer);
  EXPECT_FALSE(r.ops.trace_hint) << *r.ops.trace_hint;
  EXPECT_FALSE(says(text_of(r), "OP TRACE")) << text_of(r);
  // --strict headlines the first divergence, and the hint follows it.
  DiffOptions strict;
  strict.strict = true;
  const auto s = diff(dir / "a", dir / "b", strict);
  ASSERT_TRUE(s.ops.trace_hint);
  EXPECT_EQ(*s.ops.trace_hint, "steps=0;scopes=^tok_embeddings(\\..*)?$");
}

TEST(FirstScreen, TheTraceHintFollowsTheFirstUnexplainedDivergenceNotTheNoiseBeforeIt) {
  // Step 0: a grad differs by summation order. Step 1: layers.3's tap differs far beyond what
  // that noise could grow into: unexplained, inside a module, where ops can name the op.
  auto dir = fresh_dir("first_screen_hint_tap");
  auto run = [](std::uint64_t grad_hash, double grad_norm, std::uint64_t tap_hash,
                double tap_norm) {
    std::vector<Record> r;
    for (int mb = 0; mb < 2; ++mb)
      r.push_back(tensor(0, Kind::mb_grad, "tok_embeddings.weight",
                         10 + static_cast<std::uint64_t>(mb), 1.0, mb));
    r.push_back(tensor(0, Kind::grad, "tok_embeddings.weight", grad_hash, grad_norm));
    r.push_back(tensor(1, Kind::tap, "layers.3", tap_hash, tap_norm, 0));
    return r;
  };
  write_run(dir / "a", {run(1, 2.0, 20, 1.0)});
  write_run(dir / "b", {run(2, 2.0 * (1 + 1e-8), 21, 2.0)});
  const auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::unexplained);
  ASSERT_TRUE(r.ops.trace_hint) << text_of(r);
  EXPECT_EQ(*r.ops.trace_hint, "steps=1;scopes=^layers\\.3(\\.|$);mb=0");
}

TEST(FirstScreen, TheFirst40LinesHoldTheResultTheHeadlineItsCauseAndTheNoise) {
  // A grad that differs by summation order (noise), forty tap series that differ, a loss, and a
  // grad that is never computed in the test run.
  auto dir = fresh_dir("first_screen_text");
  std::vector<Record> a, b;
  for (int mb = 0; mb < 2; ++mb) {
    a.push_back(tensor(0, Kind::mb_grad, "v", 10 + static_cast<std::uint64_t>(mb), 1.0, mb));
    b.push_back(tensor(0, Kind::mb_grad, "v", 10 + static_cast<std::uint64_t>(mb), 1.0, mb));
  }
  a.push_back(tensor(0, Kind::grad, "v", 1, 2.0));
  b.push_back(tensor(0, Kind::grad, "v", 2, 2.0 * (1 + 1e-8)));
  for (int s = 0; s < 2; ++s) {
    for (int t = 0; t < 40; ++t) {
      const std::string name = "layers." + std::to_string(t);
      a.push_back(tensor(s, Kind::tap, name, 1, 1.0, 0));
      b.push_back(tensor(s, Kind::tap, name, s == 0 ? 1u : 2u, s == 0 ? 1.0 : 2.0, 0));
    }
    a.push_back(tensor(s, Kind::grad, "w", 3, 1.0));
    b.push_back(none(s, Kind::grad, "w"));
    a.push_back(scalar(s, "loss", 1.0));
    b.push_back(scalar(s, "loss", 1.0));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  const auto r = diff(dir / "a", dir / "b");
  const std::string text = text_of(r);
  const std::string top = first_lines(text, 40);
  EXPECT_TRUE(says(top, "RESULT: differences found (exit 1)")) << top;
  EXPECT_TRUE(says(top, "FIRST UNEXPLAINED DIVERGENCE step 0 step end grad w [none_one_side]"))
      << top;
  EXPECT_TRUE(says(top, "[none_gradient]")) << top;
  EXPECT_TRUE(says(top, "NOISE 1 divergent pair(s) explained as noise (summation_order 1)")) << top;
  // The statistics: the loss and the headline's series; the 40 taps are counted, not listed.
  EXPECT_TRUE(
      says(text,
           "PAIRED STATISTICS (d = test - base; the scalar series and the headline's; 41 more "
           "mismatching tensor norm series of 44 left out: --all-series lists them"))
      << text;
  EXPECT_TRUE(says(text, "\nscalar loss\n")) << text;
  EXPECT_TRUE(says(text, "\ngrad w\n")) << text;
  EXPECT_FALSE(says(text, "\ntap layers.7 mb=0\n")) << text;
  TextOptions all_series;
  all_series.all_series = true;
  std::ostringstream out;
  print_text(r, out, all_series);
  EXPECT_TRUE(says(out.str(), "\ntap layers.7 mb=0\n")) << out.str();
  // The result is said again last, where a scrolled terminal ends.
  EXPECT_EQ(text.substr(text.rfind("RESULT:")), "RESULT: differences found (exit 1)\n");
}

TEST(FirstScreen, NumericsLoggerHashesPrintInHexBesideTheProbesHashes) {
  auto dir = fresh_dir("first_screen_hex");
  write_file(dir / "py" / "diff.log", "[grad w] hash=9272920252755214336, norm=1.5\n");
  write_run(dir / "probe", {{with_torch_hash(tensor(0, Kind::grad, "w", 0xabc, 1.25), 5)}});
  const std::string text = text_of(diff(dir / "py", dir / "probe"));
  EXPECT_TRUE(says(text, "base: hash=80b007d700000000 norm=1.5")) << text;
  EXPECT_TRUE(says(text, "test: hash=0000000000000abc norm=1.25 torch_hash=0000000000000005"))
      << text;
}

TEST(FirstScreen, RunsThatShareNoKindSaySoInsteadOfHoldingNoRecords) {
  auto dir = fresh_dir("first_screen_no_shared_kind");
  write_file(dir / "a" / "weights.log", "name='w' hash=11\nname='w' hash=21\n");
  write_file(dir / "b" / "diff.log", "[grad w] hash=7, norm=1.5\n[grad w] hash=8, norm=1.25\n");
  const auto r = diff(dir / "a", dir / "b");
  EXPECT_TRUE(r.kinds_left_out);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_TRUE(says(text_of(r),
                   "RESULT: nothing compared: the runs share no kind (KINDS IN ONE RUN ONLY); "
                   "--kinds all compares them"))
      << text_of(r);
}

TEST(FirstScreen, StepAndNameFiltersDoNotTurnAMissingRecordIntoAKindNeverRecorded) {
  // Both runs record grads; the test run's last step lacks its one: --steps 2:2 and --name must
  // not read that as a kind the test run never recorded.
  auto dir = fresh_dir("first_screen_filters");
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 1, 1.0), tensor(1, Kind::grad, "w", 1, 1.0),
                         tensor(2, Kind::grad, "w", 1, 1.0), scalar(2, "loss", 1.0)}});
  write_run(dir / "b", {{tensor(0, Kind::grad, "w", 1, 1.0), tensor(1, Kind::grad, "w", 1, 1.0),
                         scalar(2, "loss", 1.0)}});
  DiffOptions step2;
  step2.step_min = step2.step_max = 2;
  const auto r = diff(dir / "a", dir / "b", step2);
  EXPECT_FALSE(r.kinds_left_out);
  ASSERT_TRUE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::missing_record);
  DiffOptions named;
  named.name_filter = parse_name_filter("^w$");
  named.name_filter_text = "^w$";
  const auto n = diff(dir / "a", dir / "b", named);
  EXPECT_FALSE(n.kinds_left_out);
  ASSERT_TRUE(n.first_unexplained) << text_of(n);
  EXPECT_EQ(n.first_unexplained->why.rule, Rule::missing_record);
}

TEST(FirstScreen, StrictGivesNoTraceHintForACauseOpsCannotLocate) {
  // An unreduced gradient (its replicas disagree, its mb_grads agree) is the first divergence:
  // --strict headlines it, and an op trace has nothing to show there.
  auto dir = fresh_dir("first_screen_strict_hint");
  auto rank = [](std::uint64_t grad_hash) {
    return std::vector<Record>{tensor(0, Kind::mb_grad, "layers.2.w", 10, 1.0, 0),
                               tensor(0, Kind::grad, "layers.2.w", grad_hash, 1.0)};
  };
  write_run(dir / "a", {rank(1), rank(1)});
  write_run(dir / "b", {rank(2), rank(3)});
  DiffOptions strict;
  strict.strict = true;
  const auto r = diff(dir / "a", dir / "b", strict);
  ASSERT_TRUE(r.first_divergence) << text_of(r);
  EXPECT_EQ(r.first_divergence->why.rule, Rule::unreduced_gradient);
  EXPECT_FALSE(r.ops.trace_hint) << *r.ops.trace_hint;
}
