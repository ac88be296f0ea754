#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {
std::int64_t count(const Result& r, Kind k, Class c) {
  return r.counts[static_cast<std::size_t>(k)][static_cast<std::size_t>(c)];
}
std::string text_of(const Result& r) {
  std::ostringstream out;
  print_text(r, out, {});
  return out.str();
}
bool has_cause(const Result& r, const std::string& rule) {
  for (const auto& c : r.causes)
    if (c.rule == rule) return true;
  return false;
}
}  // namespace

TEST(Merge, ShardsOnFourRanksComposeToTheSingleProcessTensor) {
  auto dir = fresh_dir("compose");
  // Single process: whole tensor, hash 10 = 1+2+3+4, norm 2 = sqrt(4 * 1^2).
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 10, 2.0)}});
  std::vector<std::vector<Record>> zero3(4);
  for (int r = 0; r < 4; ++r)
    zero3[static_cast<std::size_t>(r)] = {sharded(tensor(0, Kind::grad, "module.w", 1 + r, 1.0), r, 1)};
  write_run(dir / "b", zero3);
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(count(res, Kind::grad, Class::equal), 1);
  EXPECT_FALSE(res.first_divergence);
  EXPECT_EQ(res.exit_code(), 0);
}

TEST(Merge, ReplicaMismatchNamesTheRanks) {
  auto dir = fresh_dir("replica");
  write_run(dir / "a", {{scalar(0, "loss", 1.0)}, {scalar(0, "loss", 1.0)}, {scalar(0, "loss", 1.5)}});
  write_run(dir / "b", {{scalar(0, "loss", 1.0)}});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_EQ(res.base_issues.count_by_type["replica_mismatch"], 1);
  const auto& msg = res.base_issues.detail[0].message;
  EXPECT_NE(msg.find("rank 0 has value=1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 2 has value=1.5"), std::string::npos) << msg;
  EXPECT_EQ(res.exit_code(), 1);  // a run that disagrees with itself is not "equal"
}

TEST(Merge, TilingGapIsReportedAndTheRecordIsNotComparedAsEqual) {
  auto dir = fresh_dir("gap");
  write_run(dir / "a", {{sharded(tensor(0, Kind::grad, "w", 1, 1.0), 0, 2)},
                        {sharded(tensor(0, Kind::grad, "w", 2, 1.0), 3, 1)}});
  write_run(dir / "b", {{tensor(0, Kind::grad, "w", 3, 1.0)}});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.base_issues.count_by_type["shard_tiling"], 1);
  EXPECT_EQ(count(res, Kind::grad, Class::unsupported), 1);
  EXPECT_EQ(res.exit_code(), 1);
}

TEST(Merge, PipelineStagesOnDifferentRanksSimplyMerge) {
  auto dir = fresh_dir("pp");
  write_run(dir / "a", {{tensor(0, Kind::grad, "layers.0.w", 1, 1.0), tensor(0, Kind::grad, "layers.1.w", 2, 1.0)}});
  write_run(dir / "b", {{tensor(0, Kind::grad, "layers.0.w", 1, 1.0)}, {tensor(0, Kind::grad, "layers.1.w", 2, 1.0)}});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(count(res, Kind::grad, Class::equal), 2);
  EXPECT_EQ(res.exit_code(), 0);
}

TEST(Align, AllGradsNoneInOneRunIsFirstDivergence) {
  auto dir = fresh_dir("none");
  std::vector<Record> a, b;
  for (int s = 0; s < 3; ++s) {
    a.push_back(tensor(s, Kind::input, "x", 7, 1.0, 0));
    b.push_back(tensor(s, Kind::input, "x", 7, 1.0, 0));
    for (int p = 0; p < 3; ++p) {
      a.push_back(tensor(s, Kind::grad, "w" + std::to_string(p), 100 + p, 1.0));
      b.push_back(none(s, Kind::grad, "w" + std::to_string(p)));
    }
    a.push_back(scalar(s, "loss", 1.0));
    b.push_back(scalar(s, "loss", 1.0));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->step, 0);
  EXPECT_EQ(res.first_divergence->name, "w0");
  EXPECT_EQ(res.first_divergence->cls, Class::none_one_side);
  EXPECT_EQ(count(res, Kind::grad, Class::none_one_side), 9);
  ASSERT_TRUE(has_cause(res, "none_gradient"));
  EXPECT_NE(res.causes.back().message.find("all 3 grads of step 0 are none there"), std::string::npos)
      << res.causes.back().message;
  EXPECT_EQ(res.exit_code(), 1);
  // The grad series have no paired values, but their first divergent step is still named.
  for (const auto& [key, stats] : res.series)
    if (key.kind == Kind::grad) {
      EXPECT_EQ(stats.paired, 0) << key.name;
      EXPECT_EQ(stats.first_divergent_step, 0) << key.name;
    }
}

TEST(Statistics, AverageThatPrintsAsZeroDoesNotHideAMismatchingStep) {
  auto dir = fresh_dir("tiny");
  std::vector<Record> a, b;
  for (int s = 0; s < 1000; ++s) {
    a.push_back(scalar(s, "loss", 2.0));
    b.push_back(scalar(s, "loss", s == 617 ? std::nextafter(2.0, 3.0) : 2.0));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_EQ(res.series.size(), 1u);
  const auto& s = res.series[0].second;
  EXPECT_EQ(s.paired, 1000);
  EXPECT_EQ(s.exact, 999);
  EXPECT_EQ(s.first_divergent_step, 617);
  EXPECT_EQ(s.max_abs_step, 617);
  EXPECT_GT(s.mae(), 0.0);
  EXPECT_LT(s.mae(), 1e-18);  // "%.6f" would print 0.000000
  const std::string text = text_of(res);
  EXPECT_NE(text.find("exact 999 first-divergent 617"), std::string::npos) << text;
  EXPECT_NE(text.find("MAE 4.440892098500626e-19"), std::string::npos) << text;
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->step, 617);
  EXPECT_EQ(res.exit_code(), 1);
}

TEST(Causes, RngOnlyDivergenceIsBlamedOnRngState) {
  auto dir = fresh_dir("rng");
  std::vector<Record> a, b;
  for (int mb = 0; mb < 2; ++mb) {
    a.push_back(tensor(0, Kind::rng, "cuda", 50 + mb, 1.0, mb));
    b.push_back(tensor(0, Kind::rng, "cuda", mb == 1 ? 999 : 50 + mb, 1.0, mb));
    a.push_back(tensor(0, Kind::input, "x", 60 + mb, 1.0, mb));
    b.push_back(tensor(0, Kind::input, "x", 60 + mb, 1.0, mb));
    a.push_back(tensor(0, Kind::output, "y", 70 + mb, 1.0, mb));
    b.push_back(tensor(0, Kind::output, "y", mb == 1 ? 71717 : 70 + mb, 1.5, mb));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::rng);
  EXPECT_EQ(res.first_divergence->mb, 1);
  EXPECT_TRUE(has_cause(res, "rng"));
}

TEST(Causes, GradDifferingAtSummationOrderSizeWithEqualMbGradsIsReductionOrder) {
  auto dir = fresh_dir("sumorder");
  std::vector<Record> a, b;
  for (int mb = 0; mb < 2; ++mb) {
    a.push_back(tensor(0, Kind::mb_grad, "w", 10 + mb, 1.0, mb));
    b.push_back(tensor(0, Kind::mb_grad, "w", 10 + mb, 1.0, mb));
  }
  a.push_back(tensor(0, Kind::grad, "w", 1, 2.0));
  b.push_back(tensor(0, Kind::grad, "w", 2, 2.0 * (1 + 3e-7)));
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::grad);
  EXPECT_TRUE(has_cause(res, "summation_order"));
  EXPECT_EQ(res.summation_order_grads, 1);

  DiffOptions strict;
  strict.sum_order_rtol = 1e-7;  // the flag's bound is honoured
  EXPECT_FALSE(has_cause(diff(dir / "a", dir / "b", strict), "summation_order"));
}

TEST(Causes, GradThatReplicasDisagreeOnWithEqualMbGradsIsAnUnreducedGradient) {
  auto dir = fresh_dir("unreduced");
  auto rank = [](std::uint64_t grad_hash, double grad_norm, int mb) {
    return std::vector<Record>{tensor(0, Kind::mb_grad, "w", 10 + mb, 1.0, mb),
                               tensor(0, Kind::grad, "w", grad_hash, grad_norm)};
  };
  write_run(dir / "a", {rank(1, 2.0, 0), rank(1, 2.0, 1)});  // all-reduced: replicas agree
  write_run(dir / "b", {rank(2, 1.0, 0), rank(3, 1.1, 1)});  // each rank kept its own
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::grad);
  ASSERT_TRUE(has_cause(res, "unreduced_gradient"));
  for (const auto& c : res.causes) {
    if (c.rule == "unreduced_gradient") {
      EXPECT_NE(c.message.find("grad w differs between data-parallel replicas of the test run (ranks 0-1)"),
                std::string::npos)
          << c.message;
    }
  }
  EXPECT_FALSE(has_cause(res, "summation_order"));
}

TEST(Merge, RankWhoseLogStopsEarlyIsReportedAsTruncation) {
  auto dir = fresh_dir("stopped");
  auto steps = [](int n) {
    std::vector<Record> records;
    for (int s = 0; s < n; ++s) records.push_back(tensor(s, Kind::grad, "w", 5, 1.0));
    return records;
  };
  write_run(dir / "a", {steps(3), steps(3)});
  write_run(dir / "b", {steps(3), steps(2)});  // rank 1 killed after step 1
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.truncated_at, 2);
  EXPECT_FALSE(res.first_divergence);
  EXPECT_EQ(res.test_issues.count_by_type["truncated"], 1);
  EXPECT_NE(text_of(res).find("rank 1's log ends after step 1 while other ranks go on to step 2"),
            std::string::npos)
      << text_of(res);
}

TEST(Causes, NanAppearingFirstIsNamed) {
  auto dir = fresh_dir("nan");
  Record bad = tensor(0, Kind::tap, "attn.scores", 2, NAN);
  bad.stats.nan = 3;
  write_run(dir / "a", {{tensor(0, Kind::tap, "embed", 1, 1.0), tensor(0, Kind::tap, "attn.scores", 1, 1.0)}});
  write_run(dir / "b", {{tensor(0, Kind::tap, "embed", 1, 1.0), bad}});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(has_cause(res, "nonfinite"));
  EXPECT_NE(res.causes[0].message.find("attn.scores"), std::string::npos);
  EXPECT_NE(res.causes[0].message.find("test run: nan=3"), std::string::npos) << res.causes[0].message;
}

TEST(Align, FirstDivergenceFollowsExecutionOrderNotFileOrder) {
  auto dir = fresh_dir("order");
  // Rank 1 (last pipeline stage) runs its backward first: its mb_grad precedes rank 0's.
  write_run(dir / "a", {{tensor(0, Kind::mb_grad, "l0", 1, 1, 0), tensor(0, Kind::grad, "l0", 1, 1)},
                        {tensor(0, Kind::mb_grad, "l1", 1, 1, 0), tensor(0, Kind::grad, "l1", 1, 1)}});
  write_run(dir / "b", {{tensor(0, Kind::mb_grad, "l0", 2, 1, 0), tensor(0, Kind::grad, "l0", 2, 1)},
                        {tensor(0, Kind::mb_grad, "l1", 2, 1, 0), tensor(0, Kind::grad, "l1", 2, 1)}});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::mb_grad);
  EXPECT_EQ(res.first_divergence->name, "l1");
}

TEST(Align, NamesOnOneSideAreListedAndMapRulesAlignThem) {
  auto dir = fresh_dir("names");
  write_run(dir / "a", {{tensor(0, Kind::grad, "_orig_mod.layers.4.w", 1, 1)}});
  write_run(dir / "b", {{tensor(0, Kind::grad, "module.stage1.layers.0.w", 1, 1)}});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.names_only_base, std::vector<std::string>{"grad layers.4.w"});
  EXPECT_EQ(res.names_only_test, std::vector<std::string>{"grad stage1.layers.0.w"});
  auto mapped = diff(dir / "a", dir / "b", {}, false, {R"(^stage1\.layers\.0\.=layers.4.)"});
  EXPECT_EQ(count(mapped, Kind::grad, Class::equal), 1);
  EXPECT_EQ(mapped.exit_code(), 0);
}

TEST(Align, ToleranceTurnsSmallDifferencesIntoWithinToleranceAndExitZero) {
  auto dir = fresh_dir("tol");
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 1, 1.0), scalar(0, "loss", 2.0)}});
  write_run(dir / "b", {{tensor(0, Kind::grad, "w", 2, 1.0 + 1e-9), scalar(0, "loss", 2.0 + 1e-9)}});
  auto exact = diff(dir / "a", dir / "b");
  EXPECT_EQ(exact.exit_code(), 1);
  DiffOptions opt;
  opt.cmp = {1e-6, 0};
  auto tol = diff(dir / "a", dir / "b", opt);
  EXPECT_EQ(count(tol, Kind::grad, Class::within_tol), 1);
  EXPECT_EQ(count(tol, Kind::scalar, Class::within_tol), 1);
  EXPECT_EQ(tol.exit_code(), 0);
  EXPECT_GT(tol.series[1].second.mae(), 0.0);  // the statistics still see the difference
}

TEST(Align, StepsPresentInOneRunOnlyAreOnlyInOneRun) {
  auto dir = fresh_dir("steps");
  write_run(dir / "a", {{scalar(0, "loss", 1), scalar(1, "loss", 1), scalar(2, "loss", 1)}});
  write_run(dir / "b", {{scalar(0, "loss", 1), scalar(1, "loss", 1)}});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.paired_steps, 2);
  EXPECT_EQ(count(res, Kind::scalar, Class::only_base), 1);
  EXPECT_EQ(res.series[0].second.base_steps, 3);
  EXPECT_EQ(res.series[0].second.test_steps, 2);
}

TEST(Filters, KindsStepsAndNameRestrictTheComparison) {
  auto dir = fresh_dir("filters");
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 1, 1), scalar(0, "loss", 1), scalar(1, "loss", 1)}});
  write_run(dir / "b", {{tensor(0, Kind::grad, "w", 2, 1), scalar(0, "loss", 1), scalar(1, "loss", 5)}});
  DiffOptions only_scalars;
  only_scalars.kinds_mask = parse_kinds("scalar");
  only_scalars.step_max = 0;
  EXPECT_EQ(diff(dir / "a", dir / "b", only_scalars).exit_code(), 0);
  DiffOptions by_name;
  by_name.name_filter = std::regex("^lo");
  EXPECT_EQ(diff(dir / "a", dir / "b", by_name).first_divergence->step, 1);
  EXPECT_THROW(parse_kinds("grad,bogus"), InputError);
  EXPECT_EQ(parse_step_range("3:"), std::make_pair(std::optional<std::int64_t>(3), std::optional<std::int64_t>()));
  EXPECT_THROW(parse_step_range("5:2"), InputError);
}

TEST(Report, JsonHoldsSummaryFirstDivergenceAndSeries) {
  auto dir = fresh_dir("json");
  write_run(dir / "a", {{scalar(0, "loss", 1)}});
  write_run(dir / "b", {{scalar(0, "loss", 2)}});
  auto res = diff(dir / "a", dir / "b");
  const std::string j = to_json(res, {});
  EXPECT_NE(j.find("\"schema\": \"numprobe.diff_logs/1\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"first_divergent_step\": 0"), std::string::npos) << j;
  EXPECT_NE(j.find("\"exit_code\": 1"), std::string::npos) << j;
}
