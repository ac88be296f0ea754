#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {
bool has_cause(const Result& r, std::string_view rule) {
  for (const auto& c : r.causes)
    if (rule_name(c.rule) == rule) return true;
  return false;
}
std::string cause_text(const Result& r, std::string_view rule) {
  for (const auto& c : r.causes)
    if (rule_name(c.rule) == rule) return c.message;
  return "(no [" + std::string(rule) + "] cause)";
}
}  // namespace

TEST(Merge, ShardsOnFourRanksComposeToTheSingleProcessTensor) {
  auto dir = fresh_dir("compose");
  // Single process: whole tensor, hash 10 = 1+2+3+4, norm 2 = sqrt(4 * 1^2).
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 10, 2.0)}});
  std::vector<std::vector<Record>> zero3(4);
  for (int r = 0; r < 4; ++r)
    zero3[static_cast<std::size_t>(r)] = {
        sharded(tensor(0, Kind::grad, "module.w", 1 + r, 1.0), r, 1)};
  write_run(dir / "b", zero3);
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(count(res, Kind::grad, PairClass::equal), 1);
  EXPECT_FALSE(res.first_divergence);
  EXPECT_EQ(res.exit_code(), 0);
}

TEST(Merge, ReplicaMismatchNamesTheRanks) {
  auto dir = fresh_dir("replica");
  write_run(dir / "a",
            {{scalar(0, "loss", 1.0)}, {scalar(0, "loss", 1.0)}, {scalar(0, "loss", 1.5)}});
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
  EXPECT_EQ(count(res, Kind::grad, PairClass::unsupported), 1);
  EXPECT_EQ(res.exit_code(), 1);
}

TEST(Merge, PipelineStagesOnDifferentRanksSimplyMerge) {
  auto dir = fresh_dir("pp");
  write_run(dir / "a", {{tensor(0, Kind::grad, "layers.0.w", 1, 1.0),
                         tensor(0, Kind::grad, "layers.1.w", 2, 1.0)}});
  write_run(dir / "b", {{tensor(0, Kind::grad, "layers.0.w", 1, 1.0)},
                        {tensor(0, Kind::grad, "layers.1.w", 2, 1.0)}});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(count(res, Kind::grad, PairClass::equal), 2);
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
  EXPECT_EQ(res.first_divergence->pair_class, PairClass::none_one_side);
  EXPECT_EQ(count(res, Kind::grad, PairClass::none_one_side), 9);
  ASSERT_TRUE(has_cause(res, "none_gradient"));
  EXPECT_NE(res.causes.back().message.find("all 3 grads of step 0 are none there"),
            std::string::npos)
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
  EXPECT_EQ(res.exit_code(), 4);  // one ulp of a loss, nothing before it differs: noise
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

// Runs a and b under `dir`: equal mb_grads of w, and w's grad differing at summation-order size.
// Returns b's records.
static std::vector<Record> write_summation_order_runs(const std::filesystem::path& dir) {
  std::vector<Record> a, b;
  for (int mb = 0; mb < 2; ++mb) {
    a.push_back(tensor(0, Kind::mb_grad, "w", 10 + mb, 1.0, mb));
    b.push_back(tensor(0, Kind::mb_grad, "w", 10 + mb, 1.0, mb));
  }
  a.push_back(tensor(0, Kind::grad, "w", 1, 2.0));
  // Two float32 summands of norm 1 each: the bound is 2 * 2 * 2^-24 = 2.4e-7.
  b.push_back(tensor(0, Kind::grad, "w", 2, 2.0 * (1 + 1e-7)));
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  return b;
}

// Another seed: the RNG state and the data differ from the first microbatch on.
TEST(Causes, InputsThatDifferWhereTheRunDivergesAreDifferentData) {
  auto dir = fresh_dir("data");
  std::vector<Record> a, b;
  for (int mb = 0; mb < 2; ++mb) {
    a.push_back(tensor(0, Kind::rng, "cpu", 50 + mb, 1.0, mb));
    b.push_back(tensor(0, Kind::rng, "cpu", 80 + mb, 1.0, mb));
    a.push_back(tensor(0, Kind::input, "x", 60 + mb, 1.0, mb));
    b.push_back(tensor(0, Kind::input, "x", 90 + mb, 1.2, mb));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::rng);
  EXPECT_NE(cause_text(res, "data")
                .find("input x mb=0 differs at step 0: the runs were fed different data"),
            std::string::npos)
      << cause_text(res, "data");
  EXPECT_NE(cause_text(res, "data").find("a different seed would explain both"), std::string::npos);
  EXPECT_FALSE(has_cause(res, "rng"));  // the rng rule needs equal inputs
}

TEST(Causes, GradDifferingAtSummationOrderSizeWithEqualMbGradsIsReductionOrder) {
  auto dir = fresh_dir("sumorder");
  write_summation_order_runs(dir);
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::grad);
  EXPECT_TRUE(has_cause(res, "summation_order"));
  EXPECT_EQ(res.summation_order_grads, 1);

  DiffOptions strict;
  strict.sum_order_rtol = 1e-8;  // the flag's bound is honoured
  strict.sum_order_fixed = true;
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
    if (c.rule == Rule::unreduced_gradient) {
      EXPECT_NE(c.message.find(
                    "grad w differs between data-parallel replicas of the test run (ranks 0-1)"),
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
  write_run(dir / "a",
            {{tensor(0, Kind::tap, "embed", 1, 1.0), tensor(0, Kind::tap, "attn.scores", 1, 1.0)}});
  write_run(dir / "b", {{tensor(0, Kind::tap, "embed", 1, 1.0), bad}});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(has_cause(res, "nonfinite"));
  EXPECT_NE(res.causes[0].message.find("attn.scores"), std::string::npos);
  EXPECT_NE(res.causes[0].message.find("test run: nan=3"), std::string::npos)
      << res.causes[0].message;
}

TEST(Align, FirstDivergenceFollowsExecutionOrderNotFileOrder) {
  auto dir = fresh_dir("order");
  // Rank 1 (last pipeline stage) runs its backward first: its mb_grad precedes rank 0's.
  write_run(dir / "a",
            {{tensor(0, Kind::mb_grad, "l0", 1, 1, 0), tensor(0, Kind::grad, "l0", 1, 1)},
             {tensor(0, Kind::mb_grad, "l1", 1, 1, 0), tensor(0, Kind::grad, "l1", 1, 1)}});
  write_run(dir / "b",
            {{tensor(0, Kind::mb_grad, "l0", 2, 1, 0), tensor(0, Kind::grad, "l0", 2, 1)},
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
  EXPECT_EQ(count(mapped, Kind::grad, PairClass::equal), 1);
  EXPECT_EQ(mapped.exit_code(), 0);
}

TEST(Align, ToleranceTurnsSmallDifferencesIntoWithinToleranceAndExitZero) {
  auto dir = fresh_dir("tol");
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 1, 1.0), scalar(0, "loss", 2.0)}});
  write_run(dir / "b",
            {{tensor(0, Kind::grad, "w", 2, 1.0 + 1e-9), scalar(0, "loss", 2.0 + 1e-9)}});
  auto exact = diff(dir / "a", dir / "b");
  EXPECT_EQ(exact.exit_code(), 4);  // a grad and a loss at summation-order size: noise
  DiffOptions strict;
  strict.strict = true;
  EXPECT_EQ(diff(dir / "a", dir / "b", strict).exit_code(), 1);
  DiffOptions opt;
  opt.cmp = {1e-6, 0};
  auto tol = diff(dir / "a", dir / "b", opt);
  EXPECT_EQ(count(tol, Kind::grad, PairClass::within_tol), 1);
  EXPECT_EQ(count(tol, Kind::scalar, PairClass::within_tol), 1);
  EXPECT_EQ(tol.exit_code(), 0);
  EXPECT_GT(tol.series[1].second.mae(), 0.0);  // the statistics still see the difference
}

TEST(Align, StepsPresentInOneRunOnlyAreOnlyInOneRun) {
  auto dir = fresh_dir("steps");
  write_run(dir / "a", {{scalar(0, "loss", 1), scalar(1, "loss", 1), scalar(2, "loss", 1)}});
  write_run(dir / "b", {{scalar(0, "loss", 1), scalar(1, "loss", 1)}});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.paired_steps, 2);
  EXPECT_EQ(count(res, Kind::scalar, PairClass::only_base), 1);
  EXPECT_EQ(res.series[0].second.base_steps, 3);
  EXPECT_EQ(res.series[0].second.test_steps, 2);
}

TEST(Filters, KindsStepsAndNameRestrictTheComparison) {
  auto dir = fresh_dir("filters");
  write_run(dir / "a",
            {{tensor(0, Kind::grad, "w", 1, 1), scalar(0, "loss", 1), scalar(1, "loss", 1)}});
  write_run(dir / "b",
            {{tensor(0, Kind::grad, "w", 2, 1), scalar(0, "loss", 1), scalar(1, "loss", 5)}});
  DiffOptions only_scalars;
  only_scalars.kinds_mask = parse_kinds("scalar");
  only_scalars.step_max = 0;
  EXPECT_EQ(diff(dir / "a", dir / "b", only_scalars).exit_code(), 0);
  DiffOptions by_name;
  by_name.name_filter = std::regex("^lo");
  EXPECT_EQ(diff(dir / "a", dir / "b", by_name).first_divergence->step, 1);
  EXPECT_THROW(parse_kinds("grad,bogus"), InputError);
  EXPECT_EQ(parse_step_range("3:"),
            std::make_pair(std::optional<std::int64_t>(3), std::optional<std::int64_t>()));
  EXPECT_THROW(parse_step_range("5:2"), InputError);
}

TEST(Report, JsonHoldsSummaryFirstDivergenceAndSeries) {
  auto dir = fresh_dir("json");
  write_run(dir / "a", {{scalar(0, "loss", 1)}});
  write_run(dir / "b", {{scalar(0, "loss", 2)}});
  auto res = diff(dir / "a", dir / "b");
  const auto j = nlohmann::json::parse(to_json(res, {}));
  EXPECT_EQ(j["schema"], "numprobe.diff_logs/1");
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_EQ(j["result"], "different");
  EXPECT_EQ(j["summary"]["scalar"]["different"], 1);
  EXPECT_EQ(j["first_divergence"]["name"], "loss");
  EXPECT_EQ(j["first_divergence"]["base"]["value"], 1.0);
  EXPECT_EQ(j["first_divergence"]["test"]["value"], 2.0);
  ASSERT_EQ(j["series"].size(), 1u);
  EXPECT_EQ(j["series"][0]["first_divergent_step"], 0);
}

TEST(Align, ToleranceOnAMeanScalesWithItsElementsNotWithTheMeanItself) {
  auto dir = fresh_dir("tolmean");
  // A gradient's mean is a cancelling sum near 0: relative to itself it moves by 7% when the
  // elements move by 1e-9. Relative to the elements' RMS (norm / sqrt(8)) it does not.
  Record a = tensor(0, Kind::grad, "w", 1, 1.0), b = tensor(0, Kind::grad, "w", 2, 1.0 + 1e-9);
  a.stats.mean = 2.662647879958513e-12;
  b.stats.mean = 2.4777957463584244e-12;
  Record c = b;  // a mean that moved by 10% of the RMS
  c.stats.mean = 0.1 / std::sqrt(8.0);
  write_run(dir / "a", {{a}});
  write_run(dir / "b", {{b}});
  write_run(dir / "c", {{c}});
  DiffOptions opt;
  opt.cmp = {1e-2, 0};
  auto close = diff(dir / "a", dir / "b", opt);
  EXPECT_EQ(count(close, Kind::grad, PairClass::within_tol), 1);
  EXPECT_EQ(close.verdict(), Result::Verdict::within_tolerance);
  auto far = diff(dir / "a", dir / "c", opt);
  EXPECT_EQ(count(far, Kind::grad, PairClass::different), 1);
  ASSERT_TRUE(far.first_divergence);
  EXPECT_EQ(far.first_divergence->note, "beyond tolerance: mean");
}

TEST(Align, ExactModeIsBitwiseForScalarsToo) {
  auto dir = fresh_dir("signedzero");
  write_run(dir / "a", {{scalar(0, "loss", 0.0)}});
  write_run(dir / "b", {{scalar(0, "loss", -0.0)}});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(count(res, Kind::scalar, PairClass::different), 1);
  EXPECT_EQ(count(res, Kind::scalar, PairClass::within_tol), 0);
  EXPECT_EQ(res.exit_code(), 4);  // a scalar with nothing before it that differs: summation order
  DiffOptions strict;
  strict.strict = true;
  EXPECT_EQ(diff(dir / "a", dir / "b", strict).exit_code(), 1);
}

TEST(Align, DifferentHashNamesTheFiguresThatDifferToo) {
  auto dir = fresh_dir("figures");
  Record b = tensor(0, Kind::grad, "w", 2, 1.0);
  b.stats.max = 2;
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 1, 1.0)}});
  write_run(dir / "b", {{b}});
  write_run(dir / "c", {{tensor(0, Kind::grad, "w", 3, 1.0)}});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->note, "differs in: hash, max");
  auto hash_only = diff(dir / "a", dir / "c");  // e.g. two elements swapped
  ASSERT_TRUE(hash_only.first_divergence);
  EXPECT_EQ(hash_only.first_divergence->note,
            "differs in the hash alone; norm, min, max and mean are bitwise equal");
}

TEST(Filters, NothingComparedIsNotEqual) {
  auto dir = fresh_dir("nothing");
  write_run(dir / "a", {{scalar(0, "loss", 1)}});
  write_run(dir / "b", {{scalar(0, "loss", 1)}});
  DiffOptions no_match;
  no_match.name_filter = std::regex("typo");
  auto res = diff(dir / "a", dir / "b", no_match);
  EXPECT_EQ(res.records_compared, 0);
  EXPECT_EQ(res.verdict(), Result::Verdict::nothing_compared);
  EXPECT_EQ(res.exit_code(), 2);
  EXPECT_NE(
      text_of(res).find("RESULT: nothing compared: no record passes --kinds, --steps and --name"),
      std::string::npos)
      << text_of(res);
  DiffOptions past_the_end;
  past_the_end.step_min = 99;
  EXPECT_EQ(diff(dir / "a", dir / "b", past_the_end).exit_code(), 2);
  const auto j = nlohmann::json::parse(to_json(res, no_match));
  EXPECT_EQ(j["result"], "nothing_compared");
  EXPECT_EQ(j["options"]["steps"], nlohmann::json::parse("[null, null]"));
}

TEST(Filters, KindsTakeTheProbesSyntaxWithMinusToDropAKind) {
  EXPECT_EQ(parse_kinds("-mb_grad"),
            probe::kAllKinds & ~(1u << static_cast<unsigned>(Kind::mb_grad)));
  EXPECT_EQ(parse_kinds("grad,scalar"), (1u << static_cast<unsigned>(Kind::grad)) |
                                            (1u << static_cast<unsigned>(Kind::scalar)));
  EXPECT_THROW(parse_kinds("-grad,grads"), InputError);
}

TEST(Causes, NanAfterTheFirstDivergenceIsStillNamed) {
  auto dir = fresh_dir("latenan");
  // Step 0 differs at summation-order size; a NaN appears in step 1 (test run only).
  Record nan_grad = tensor(1, Kind::grad, "w", 3, NAN);
  nan_grad.stats.nan = 2;
  write_run(dir / "a",
            {{tensor(0, Kind::mb_grad, "w", 1, 1.0, 0), tensor(0, Kind::grad, "w", 1, 1.0),
              tensor(1, Kind::mb_grad, "w", 1, 1.0, 0), tensor(1, Kind::grad, "w", 1, 1.0)}});
  write_run(dir / "b",
            {{tensor(0, Kind::mb_grad, "w", 1, 1.0, 0), tensor(0, Kind::grad, "w", 2, 1.0 + 1e-7),
              tensor(1, Kind::mb_grad, "w", 1, 1.0, 0), nan_grad}});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->step, 0);
  ASSERT_TRUE(has_cause(res, "summation_order"));
  ASSERT_TRUE(has_cause(res, "nonfinite"));
  EXPECT_EQ(res.causes.back().rule, Rule::nonfinite);  // after the first divergence's causes
  EXPECT_NE(res.causes.back().message.find("(step 1, test run: nan=2"), std::string::npos)
      << res.causes.back().message;
}

TEST(Causes, RngRuleSaysSoWhenNoInputWasCompared) {
  auto dir = fresh_dir("rngonly");
  write_run(dir / "a",
            {{tensor(0, Kind::rng, "cpu", 1, 1.0, 0), tensor(0, Kind::input, "x", 1, 1.0, 0)}});
  write_run(dir / "b",
            {{tensor(0, Kind::rng, "cpu", 2, 1.0, 0), tensor(0, Kind::input, "x", 2, 1.0, 0)}});
  DiffOptions rng_only;
  rng_only.kinds_mask = parse_kinds("rng");
  auto res = diff(dir / "a", dir / "b", rng_only);
  ASSERT_EQ(res.causes.size(), 1u);
  EXPECT_NE(res.causes[0].message.find("no input was compared"), std::string::npos)
      << res.causes[0].message;
}

TEST(Report, MismatchingSeriesAreListedEarliestDivergenceFirst) {
  auto dir = fresh_dir("seriesorder");
  // Taps of step 1 differ (knock-on effects) and come first in execution order; the culprit
  // grad differs from step 0.
  std::vector<Record> a, b;
  for (int s = 0; s < 2; ++s) {
    for (int t = 0; t < 3; ++t) {
      const std::string name = "tap" + std::to_string(t);
      a.push_back(tensor(s, Kind::tap, name, 1, 1.0, 0));
      b.push_back(tensor(s, Kind::tap, name, s == 0 ? 1 : 2, s == 0 ? 1.0 : 2.0, 0));
    }
    a.push_back(tensor(s, Kind::grad, "culprit", 1, 1.0));
    b.push_back(tensor(s, Kind::grad, "culprit", 2, 3.0));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto res = diff(dir / "a", dir / "b");
  TextOptions one;
  one.all_series = true;
  one.max_series = 1;
  std::ostringstream out;
  print_text(res, out, one);
  EXPECT_TRUE(
      says(out.str(), "\ngrad culprit\nsteps base 2 test 2 paired 2 exact 0 first-divergent 0"))
      << out.str();
  EXPECT_FALSE(says(out.str(), "\ntap tap0\n")) << out.str();
}

TEST(Merge, PerRankScalarsUnderOneNameGetAHintAboutLocalValues) {
  auto dir = fresh_dir("localloss");
  write_run(dir / "a", {{scalar(0, "loss", 1.0)}, {scalar(0, "loss", 1.5)}});
  auto res = diff(dir / "a", dir / "a");
  EXPECT_EQ(res.verdict(), Result::Verdict::run_errors);
  ASSERT_EQ(res.base_issues.hints.size(), 1u);
  EXPECT_NE(res.base_issues.hints[0].find("a rank's local value"), std::string::npos);
  EXPECT_NE(text_of(res).find("RESULT: the runs agree, but a run has errors"), std::string::npos)
      << text_of(res);
}

TEST(Merge, OneRanksLogOfAMultiRankRunIsThatRanksView) {
  auto dir = fresh_dir("onerank");
  write_run(dir / "a", {{scalar(0, "loss", 1.0)}, {scalar(0, "loss", 1.0)}});
  const auto file = dir / "a" / "rank1" / "diff.log";
  auto res = diff(file, file);
  EXPECT_EQ(res.base_issues.count_by_type["partial_run"], 1);
  EXPECT_EQ(res.base_issues.count_by_type.count("missing_rank"), 0u);
  EXPECT_EQ(res.exit_code(), 0);
  // A directory missing a rank names the file it expected.
  std::filesystem::remove_all(dir / "a" / "rank1");
  auto missing = diff(dir / "a", dir / "a");
  ASSERT_FALSE(missing.base_issues.detail.empty());
  EXPECT_NE(missing.base_issues.detail[0].message.find((dir / "a" / "rank1" / "diff.log").string()),
            std::string::npos)
      << missing.base_issues.detail[0].message;
}

TEST(Merge, RankWithNoRecordsIsNamed) {
  auto dir = fresh_dir("emptyrank");
  write_run(dir / "a", {{scalar(0, "loss", 1.0), tensor(0, Kind::grad, "w", 1, 1.0)},
                        {tensor(0, Kind::grad, "w", 1, 1.0)}});
  write_run(dir / "b", {{scalar(0, "loss", 1.0), tensor(0, Kind::grad, "w", 1, 1.0)}, {}});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.test_issues.count_by_type["empty_rank"], 1);
  EXPECT_NE(res.test_issues.detail[0].message.find("rank 1's log has no records"),
            std::string::npos)
      << res.test_issues.detail[0].message;
}

namespace {
// A 2-rank ZeRO-3 step: w's mb_grad per microbatch (global ids), and w's grad as two row shards.
std::vector<std::vector<Record>> zero3_step(double grad_norm_per_shard, double mb_norm = 1.0) {
  std::vector<std::vector<Record>> ranks(2);
  for (int r = 0; r < 2; ++r) {
    auto& rank = ranks[static_cast<std::size_t>(r)];
    rank.push_back(tensor(0, Kind::mb_grad, "w", mb_norm == 1.0 ? 10 + r : 40 + r, mb_norm, r));
    rank.push_back(sharded(tensor(0, Kind::grad, "w", grad_norm_per_shard == 1.0 ? 20 + r : 30 + r,
                                  grad_norm_per_shard),
                           2 * r, 2));
  }
  return ranks;
}
}  // namespace

TEST(Causes, GradFarBeyondSummationOrderWithEqualMbGradsIsAWrongReduction) {
  // ZeRO-3 with one gradient's reduce-scatter skipped: no replicas to disagree, every mb_grad
  // equal, the grad off by a third.
  auto dir = fresh_dir("wrongreduce");
  write_run(dir / "a", zero3_step(1.0));
  write_run(dir / "b", zero3_step(2.0 / 3.0));
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::grad);
  EXPECT_NE(cause_text(res, "wrong_reduction")
                .find("every mb_grad of w is bitwise equal but its grad differs by relative norm "
                      "0.33333333333333337, far beyond summation-order size (at most "
                      "3.371747880871522e-07): the "
                      "reduction or accumulation of this gradient is wrong"),
            std::string::npos)
      << cause_text(res, "wrong_reduction");
  EXPECT_FALSE(has_cause(res, "summation_order"));
  EXPECT_FALSE(has_cause(res, "unreduced_gradient"));

  // Contributions that differ explain the grad themselves: no reduction is blamed.
  write_run(dir / "c", zero3_step(2.0 / 3.0, 0.5));
  EXPECT_FALSE(has_cause(diff(dir / "a", dir / "c"), "wrong_reduction"));
  // A NaN in the grad is the nonfinite rule's, not a norm difference.
  auto nan_run = zero3_step(1.0);
  nan_run[1][1].stats.norm = NAN;
  nan_run[1][1].stats.nan = 1;
  nan_run[1][1].stats.hash = 99;
  write_run(dir / "d", nan_run);
  auto nan_res = diff(dir / "a", dir / "d");
  EXPECT_FALSE(has_cause(nan_res, "wrong_reduction"));
  EXPECT_TRUE(has_cause(nan_res, "nonfinite"));
}

TEST(Causes, SummationOrderWithMbGradsLeftOutByKindsSaysTheyWereNotCompared) {
  auto dir = fresh_dir("sumorder_kinds");
  auto b = write_summation_order_runs(dir);
  DiffOptions grads_only;
  grads_only.kinds_mask = parse_kinds("grad");
  auto res = diff(dir / "a", dir / "b", grads_only);
  EXPECT_NE(cause_text(res, "summation_order")
                .find("summation order likely, but mb_grad not compared (--kinds leaves it out)"),
            std::string::npos)
      << cause_text(res, "summation_order");
  EXPECT_EQ(res.summation_order_grads, 0);  // the count keeps to grads with equal mb_grads
  // Far beyond summation-order size nothing is likely without the mb_grads.
  b.back().stats.norm = 3.0;
  write_run(dir / "c", {b});
  EXPECT_TRUE(diff(dir / "a", dir / "c", grads_only).causes.empty());
}

TEST(Causes, RngFingerprintInOneRunOnlyIsNoRngCauseButNamesThatDiffer) {
  // A pipeline stage numbering its layers from 0: its dropout fingerprints are named
  // differently, so they are absent from one run, not different.
  auto dir = fresh_dir("rngnames");
  write_run(dir / "a", {{tensor(0, Kind::input, "x", 1, 1.0, 0),
                         tensor(0, Kind::rng, "layers.2.dropout", 5, 1.0, 0)}});
  write_run(dir / "b", {{tensor(0, Kind::input, "x", 1, 1.0, 0),
                         tensor(0, Kind::rng, "layers.0.dropout", 5, 1.0, 0)}});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->pair_class, PairClass::only_base);
  EXPECT_FALSE(has_cause(res, "rng"));
  EXPECT_NE(cause_text(res, "names_differ")
                .find("rng layers.2.dropout is in the base run only, at every step: the runs name "
                      "it differently (a pipeline stage numbering its layers from 0?)"),
            std::string::npos)
      << cause_text(res, "names_differ");
  EXPECT_NE(cause_text(res, "names_differ").find("--map REGEX=REPLACEMENT"), std::string::npos);
  // Mapped, they are equal.
  EXPECT_EQ(diff(dir / "a", dir / "b", {}, false, {R"(^layers\.0\.=layers.2.)"}).exit_code(), 0);
}

TEST(Causes, RunsOfDifferentLengthsNameTheStepsToCompare) {
  auto dir = fresh_dir("lengths");
  auto steps = [](int n) {
    std::vector<Record> records;
    for (int s = 0; s < n; ++s) {
      records.push_back(tensor(s, Kind::grad, "w", 5, 1.0));
      records.push_back(scalar(s, "loss", 1.0));
    }
    return records;
  };
  write_run(dir / "a", {steps(2)});
  write_run(dir / "b", {steps(3)});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->pair_class, PairClass::only_test);
  ASSERT_FALSE(res.causes.empty());
  EXPECT_EQ(res.causes[0].rule, Rule::step_range);
  EXPECT_EQ(res.causes[0].message,
            "the test run goes on to step 2, the base run ends at step 1: compare --steps :1");
  DiffOptions common;
  common.step_max = 1;
  EXPECT_EQ(diff(dir / "a", dir / "b", common).exit_code(), 0);
  // Starting later: the other end.
  std::vector<Record> late = steps(3);
  late.erase(late.begin(), late.begin() + 2);  // steps 1 and 2
  write_run(dir / "c", {late});
  auto starts = diff(dir / "b", dir / "c");
  EXPECT_EQ(cause_text(starts, "step_range"),
            "the base run starts at step 0, the test run at step 1: compare --steps 1:");
}

TEST(Causes, KindOneRunNeverRecordedIsNoNameToMap) {
  // PROBE_KINDS=-mb_grad in the test run.
  auto dir = fresh_dir("nokind");
  std::vector<Record> a, b;
  for (int s = 0; s < 2; ++s) {
    for (const char* p : {"w0", "w1"}) {
      a.push_back(tensor(s, Kind::mb_grad, p, 1, 1.0, 0));
      a.push_back(tensor(s, Kind::grad, p, 1, 1.0));
      b.push_back(tensor(s, Kind::grad, p, 1, 1.0));
    }
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  // By default the kind is left out: the rest is equal.
  auto res = diff(dir / "a", dir / "b");
  EXPECT_FALSE(res.first_divergence) << text_of(res);
  EXPECT_EQ(res.exit_code(), 0);
  EXPECT_TRUE(res.kinds_left_out);
  EXPECT_EQ(res.kinds_only_base, std::vector<Kind>{Kind::mb_grad});
  EXPECT_TRUE(res.names_only_base.empty());  // not names for --map
  const std::string text = text_of(res);
  EXPECT_EQ(text.find("NAMES IN ONE RUN ONLY"), std::string::npos) << text;
  EXPECT_TRUE(
      says(text, "KINDS IN ONE RUN ONLY the test run recorded no mb_grad (PROBE_KINDS?): left out"))
      << text;
  const auto j = nlohmann::json::parse(to_json(res, {}));
  EXPECT_EQ(j["kinds_only_base"], nlohmann::json({"mb_grad"}));
  EXPECT_EQ(j["kinds_only_test"], nlohmann::json::array());
  // Asked for with --kinds, it is compared, and the cause says what is going on.
  DiffOptions all;
  all.kinds_mask = parse_kinds("all");
  auto compared = diff(dir / "a", dir / "b", all);
  ASSERT_TRUE(compared.first_divergence);
  EXPECT_EQ(compared.first_divergence->kind, Kind::mb_grad);
  EXPECT_EQ(
      cause_text(compared, "kind_not_recorded"),
      "the test run recorded no mb_grad at all (PROBE_KINDS?); --kinds -mb_grad compares the rest");
  EXPECT_TRUE(says(text_of(compared),
                   "KINDS IN ONE RUN ONLY the test run recorded no mb_grad (PROBE_KINDS?); --kinds "
                   "can leave them out"));
  DiffOptions rest;
  rest.kinds_mask = parse_kinds("-mb_grad");
  EXPECT_EQ(diff(dir / "a", dir / "b", rest).exit_code(), 0);
  // Under --kinds, the advice keeps to the kinds asked for.
  DiffOptions two;
  two.kinds_mask = parse_kinds("mb_grad,grad");
  EXPECT_NE(cause_text(diff(dir / "a", dir / "b", two), "kind_not_recorded")
                .find("--kinds grad compares"),
            std::string::npos);
}

TEST(Merge, MissingRankIsOneErrorNotATilingErrorPerRecordItShards) {
  auto dir = fresh_dir("missingshards");
  write_run(dir / "a", zero3_step(1.0));
  auto b = zero3_step(1.0);
  b[1].clear();
  write_run(dir / "b", b, /*world_size=*/2);
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.test_issues.count_by_type["missing_rank"], 1);
  EXPECT_EQ(res.test_issues.count_by_type.count("shard_tiling"), 0u);
  EXPECT_EQ(count(res, Kind::grad, PairClass::unsupported), 1);
  EXPECT_NE(
      cause_text(res, "missing_record").find("the test run holds the logs of 1 of its 2 ranks"),
      std::string::npos)
      << cause_text(res, "missing_record");
}
