// Runs of trainers as they ship (docs/diff-logs.md, "Conventions" and "Microbatches matched by
// their samples"): microbatches paired by the samples they hold, not by their ids; microbatches the
// runs fill with other groups of the same samples set aside; every microbatch's backward scaled by
// one factor that the step's reduction undoes read as the trainer's convention, and factors that
// differ between microbatches as the bug they are.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "differ/report.h"
#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {

// A sample record: row `row` of microbatch `mb`, the hash standing for its bytes.
Record sample(std::int64_t mb, int row, std::uint64_t hash) {
  Record r = tensor(0, Kind::input,
                    row == 0 ? "numprobe.sample" : "numprobe.sample#" + std::to_string(row), hash,
                    1.0, mb);
  r.stats.dtype = "uint8";
  r.stats.shape = {16};
  return r;
}

// `r` times f by every figure, with another hash.
Record times(Record r, double f) {
  r.stats.hash += 1000;
  r.stats.norm *= std::fabs(f);
  const double lo = r.stats.min * f, hi = r.stats.max * f;
  r.stats.min = std::min(lo, hi);
  r.stats.max = std::max(lo, hi);
  r.stats.mean *= f;
  r.stats.mhash = *r.stats.mhash + 1;
  return r;
}

// The gradient of a loss output: one element, its value `v` (1 where nothing scales the loss).
Record loss_grad(std::int64_t mb, double v) {
  Record r = tensor(0, Kind::output_grad, "loss", 60, v, mb);
  r.stats.shape = {};
  r.stats.min = r.stats.max = r.stats.mean = v;
  r.stats.hash = 60 + static_cast<std::uint64_t>(v * 8);
  return r;
}

// One microbatch as a trainer attached by numprobe.attach records it: its samples, its input, its
// loss and the loss's gradient times `factor`, one parameter's contribution times `factor`.
std::vector<Record> microbatch(std::int64_t mb, const std::vector<std::uint64_t>& samples,
                               double factor = 1) {
  std::vector<Record> r;
  std::uint64_t content = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    r.push_back(sample(mb, static_cast<int>(i), samples[i]));
    content = content * 31 + samples[i];
  }
  r.push_back(tensor(0, Kind::input, "input_ids", 100 + content, 3.0, mb));
  Record loss = tensor(0, Kind::output, "loss", 200 + content, 2.5, mb);
  loss.stats.shape = {};
  loss.stats.min = loss.stats.max = loss.stats.mean = 2.5;
  r.push_back(loss);
  r.push_back(loss_grad(mb, factor));
  const Record g = tensor(0, Kind::mb_grad, "w", 300 + content,
                          1.0 + 0.25 * static_cast<double>(samples.size()), mb);
  r.push_back(factor == 1 ? g : times(g, factor));
  return r;
}

std::vector<Record> joined(std::vector<std::vector<Record>> parts) {
  std::vector<Record> all;
  for (auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

Record grad(std::uint64_t hash, double norm) { return tensor(0, Kind::grad, "w", hash, norm); }

std::int64_t rule_count(const Result& r, Rule rule) {
  const auto it = r.noise.by_rule.find(rule);
  return it == r.noise.by_rule.end() ? 0 : it->second;
}

}  // namespace

TEST(SampleMatch, MicrobatchesOfOtherIdsHoldingTheSameSamplesArePairedByThem) {
  const auto dir = fresh_dir("samples_renamed");
  // One process: microbatch 0 holds samples 1,2, microbatch 1 samples 3,4. Two ranks: rank 0's
  // microbatch (id 0) holds 3,4 and rank 1's (id 1) holds 1,2: a sampler that deals otherwise.
  write_run(dir / "a", {joined({microbatch(0, {1, 2}), microbatch(1, {3, 4}), {grad(30, 2.0)}})});
  write_run(dir / "b", {joined({microbatch(0, {3, 4}), {grad(30, 2.0)}}),
                        joined({microbatch(1, {1, 2}), {grad(30, 2.0)}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 0) << text_of(r);
  EXPECT_EQ(count(r, Kind::mb_grad, PairClass::equal), 2);
  EXPECT_EQ(r.regrouped.pairs, 0);
}

TEST(SampleMatch, MicrobatchesGroupedOtherwiseAreSetAsideAndTheStepJudges) {
  const auto dir = fresh_dir("samples_regrouped");
  // Gradient accumulation 1 x 4 against 2 x 2: the same four samples, grouped otherwise; the
  // grad within the summation order of its pieces.
  write_run(dir / "a", {joined({microbatch(0, {1, 2, 3, 4}), {grad(30, 2.0)}})});
  write_run(dir / "b",
            {joined({microbatch(0, {1, 2}), microbatch(1, {3, 4}), {grad(31, 2.0 * (1 + 1e-8))}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 4) << text_of(r);
  EXPECT_FALSE(r.first_unexplained) << text_of(r);
  EXPECT_GT(r.regrouped.pairs, 0);
  EXPECT_TRUE(says(text_of(r),
                   "base microbatch 0 and test microbatches 0,1 hold the same 4 samples, "
                   "grouped otherwise"))
      << text_of(r);
  const auto j = nlohmann::json::parse(to_json(r, DiffOptions{}));
  EXPECT_EQ(j["regrouped_records"]["pairs"], r.regrouped.pairs);
}

TEST(SampleMatch, SamplesThatDifferAreTheData) {
  const auto dir = fresh_dir("samples_differ");
  write_run(dir / "a", {joined({microbatch(0, {1, 2}), microbatch(1, {3, 4}), {grad(30, 2.0)}})});
  write_run(dir / "b", {joined({microbatch(0, {1, 2}), microbatch(1, {3, 5}), {grad(31, 2.1)}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 1);
  ASSERT_TRUE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(*r.first_unexplained->why.rule, Rule::data) << text_of(r);
}

// A number the loop passes to the forward (the Trainer's num_items_in_batch), as attach records it.
Record count_input(std::int64_t mb, double value) {
  Record r = tensor(0, Kind::input, "num_items_in_batch", 500 + static_cast<std::uint64_t>(value),
                    value, mb);
  r.stats.dtype = "int64";
  r.stats.shape = {};
  r.stats.min = r.stats.max = r.stats.mean = value;
  return r;
}

// The microbatch's loss divided by another count: its value and its parameter's contribution
// times `f`, the loss's own gradient (1) unchanged.
std::vector<Record> normalized_by(std::vector<Record> mb, double f) {
  for (auto& r : mb)
    if (r.kind == Kind::mb_grad || (r.kind == Kind::output && r.name == "loss")) r = times(r, f);
  return mb;
}

TEST(SampleMatch, ANumberArgumentThatDiffersOverTheSameSamplesIsNamedWithBothValues) {
  const auto dir = fresh_dir("number_argument");
  // Each rank normalizing by its own tokens (22) where one process counts the window's (45).
  auto a = joined({{count_input(0, 45)}, microbatch(0, {1, 2}), {grad(30, 2.0)}});
  auto b = joined(
      {{count_input(0, 22)}, normalized_by(microbatch(0, {1, 2}), 45.0 / 22), {grad(31, 2.2)}});
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 1);
  ASSERT_TRUE(r.first_unexplained && r.unexplained_cause) << text_of(r);
  EXPECT_EQ(r.first_unexplained->name, "num_items_in_batch") << text_of(r);
  EXPECT_EQ(r.unexplained_cause->rule, Rule::data);
  EXPECT_TRUE(says(r.unexplained_cause->message,
                   "(base 45, test 22) while every other input of the microbatch, its samples "
                   "among them, is equal"))
      << r.unexplained_cause->message;
  // Where a sample differs too, it is the data, said as before.
  auto c = joined({{count_input(0, 22)}, microbatch(0, {1, 5}), {grad(31, 2.2)}});
  write_run(dir / "c", {c});
  const Result other = diff(dir / "a", dir / "c");
  ASSERT_TRUE(other.unexplained_cause) << text_of(other);
  EXPECT_TRUE(says(other.unexplained_cause->message, "the runs were fed different data"))
      << other.unexplained_cause->message;
}

TEST(Convention, EveryMicrobatchScaledByOneFactorTheStepUndoesIsTheTrainersConvention) {
  const auto dir = fresh_dir("convention_ddp");
  // The Trainer under DDP over 2 ranks: each rank's loss times 2, DDP averages: every backward
  // record of every microbatch twice the single process's, the step's grad the same.
  write_run(dir / "a", {joined({microbatch(0, {1, 2}), microbatch(1, {3, 4}), {grad(30, 2.0)}})});
  write_run(dir / "b", {joined({microbatch(0, {1, 2}, 2.0), {grad(30, 2.0)}}),
                        joined({microbatch(1, {3, 4}, 2.0), {grad(30, 2.0)}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 4) << text_of(r);
  EXPECT_FALSE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(rule_count(r, Rule::convention), 4) << text_of(r);
  EXPECT_TRUE(says(text_of(r), "is the base run's times 2 (test = 2 x base")) << text_of(r);
}

TEST(Convention, FactorsThatDifferBetweenMicrobatchesAreABug) {
  const auto dir = fresh_dir("convention_differs");
  // One rank's loss not scaled as the other's: microbatch 0 twice the single process's,
  // microbatch 1 equal; the step's grad no longer agrees.
  write_run(dir / "a", {joined({microbatch(0, {1, 2}), microbatch(1, {3, 4}), {grad(30, 2.0)}})});
  write_run(dir / "b", {joined({microbatch(0, {1, 2}, 2.0), {grad(31, 1.5)}}),
                        joined({microbatch(1, {3, 4}, 1.0), {grad(31, 1.5)}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 1) << text_of(r);
  ASSERT_TRUE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(*r.first_unexplained->why.rule, Rule::constant_factor) << text_of(r);
  EXPECT_EQ(rule_count(r, Rule::convention), 0);
}

TEST(Convention, AStepThatDoesNotAgreeUnderTheConventionIsABug) {
  const auto dir = fresh_dir("convention_step_differs");
  // Every microbatch twice the single process's, but the grad is not averaged back: 2x.
  write_run(dir / "a", {joined({microbatch(0, {1, 2}), microbatch(1, {3, 4}), {grad(30, 2.0)}})});
  write_run(dir / "b", {joined({microbatch(0, {1, 2}, 2.0), {times(grad(30, 2.0), 2.0)}}),
                        joined({microbatch(1, {3, 4}, 2.0), {times(grad(30, 2.0), 2.0)}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 1) << text_of(r);
  ASSERT_TRUE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(r.first_unexplained->kind, Kind::grad) << text_of(r);
}

TEST(Convention, ALossComputedScaledIsTheConventionAndTheStepsReductionIsJudged) {
  const auto dir = fresh_dir("convention_loss_scaled");
  // A pipeline schedule's loss divided by the accumulation steps only (the schedule divides the
  // gradients by its microbatches afterwards): each microbatch's loss value and every backward
  // record twice the single process's. A step whose reduction does not undo it is the bug.
  const auto scaled = [](std::vector<Record> mb) {
    for (auto& r : mb)
      if (r.kind == Kind::output && r.name == "loss") r = times(r, 2.0);
    return mb;
  };
  Record wrong = grad(31, 1.6);  // neither the step's gradient nor a constant factor of it
  wrong.stats.min = -0.9;
  write_run(dir / "a", {joined({microbatch(0, {1, 2}), microbatch(1, {3, 4}), {grad(30, 2.0)}})});
  write_run(
      dir / "b",
      {joined({scaled(microbatch(0, {1, 2}, 2.0)), scaled(microbatch(1, {3, 4}, 2.0)), {wrong}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 1) << text_of(r);
  ASSERT_TRUE(r.first_unexplained && r.unexplained_cause) << text_of(r);
  EXPECT_EQ(r.first_unexplained->kind, Kind::grad) << text_of(r);
  EXPECT_EQ(r.unexplained_cause->rule, Rule::wrong_reduction) << text_of(r);
  EXPECT_TRUE(says(r.unexplained_cause->message,
                   "every mb_grad of w is the base run's times 2 bit for bit, the step's loss "
                   "convention"))
      << r.unexplained_cause->message;
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->name, "loss");
  EXPECT_EQ(r.first_divergence->why.rule, Rule::convention) << text_of(r);
  // The step's gradient undone as the other run's: noise only.
  write_run(dir / "c", {joined({scaled(microbatch(0, {1, 2}, 2.0)),
                                scaled(microbatch(1, {3, 4}, 2.0)),
                                {grad(30, 2.0)}})});
  EXPECT_EQ(diff(dir / "a", dir / "c").exit_code(), 4) << text_of(diff(dir / "a", dir / "c"));
}

TEST(SampleMatch, AStepGradientThatIsOneMicrobatchsContributionAloneIsToldAsLostAccumulation) {
  const auto dir = fresh_dir("lost_accumulation");
  // One microbatch of 4 samples against two of 2 whose step gradient is, bit for bit, the second
  // microbatch's contribution: the first was zeroed inside the accumulation window.
  write_run(dir / "a", {joined({microbatch(0, {1, 2, 3, 4}), {grad(30, 2.0)}})});
  const auto second = microbatch(1, {3, 4});
  Record lone = second.back();  // the mb_grad of w
  lone.kind = Kind::grad;
  lone.microbatch.reset();
  write_run(dir / "b", {joined({microbatch(0, {1, 2}), second, {lone}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 1) << text_of(r);
  ASSERT_TRUE(r.first_unexplained && r.unexplained_cause) << text_of(r);
  EXPECT_EQ(r.first_unexplained->kind, Kind::grad) << text_of(r);
  EXPECT_TRUE(says(r.unexplained_cause->message,
                   "grad w at step 0 of the test run is, bit for bit, the contribution of one "
                   "microbatch alone (number 2 of the 2"))
      << r.unexplained_cause->message;
  // The sum of both contributions (another value) is no lone contribution: the regrouping is.
  Record summed = lone;
  summed.stats.hash = 31;
  summed.stats.norm = 2.2;
  write_run(dir / "c", {joined({microbatch(0, {1, 2}), second, {summed}})});
  const Result grouped = diff(dir / "a", dir / "c");
  ASSERT_TRUE(grouped.unexplained_cause) << text_of(grouped);
  EXPECT_FALSE(says(grouped.unexplained_cause->message, "alone")) << text_of(grouped);
  // Nor is a grad equal to the one contribution that is not zero (the other adds nothing).
  auto first = microbatch(0, {1, 2});
  first.back().stats.norm = first.back().stats.min = first.back().stats.max = 0;
  first.back().stats.mean = 0;
  write_run(dir / "d", {joined({first, second, {lone}})});
  const Result zero = diff(dir / "a", dir / "d");
  ASSERT_TRUE(zero.unexplained_cause) << text_of(zero);
  EXPECT_FALSE(says(zero.unexplained_cause->message, "alone")) << text_of(zero);
}

TEST(SampleMatch, AStepHoldingSomeOfTheOtherStepsSamplesIsToldAsSmallerSteps) {
  const auto dir = fresh_dir("smaller_steps");
  // One step of 4 samples against a run whose optimizer stepped after 2 of them: its step 0
  // holds samples 1 and 2 only (its step 1, the other two). numprobe.attach records a
  // microbatch's inputs before its samples.
  const auto inputs_first = [](std::vector<Record> mb) {
    std::stable_partition(mb.begin(), mb.end(),
                          [](const Record& r) { return r.name == "input_ids"; });
    return mb;
  };
  write_run(dir / "a", {joined({inputs_first(microbatch(0, {1, 2, 3, 4})), {grad(30, 2.0)}})});
  write_run(dir / "b", {joined({inputs_first(microbatch(0, {1, 2})), {grad(31, 1.5)}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 1) << text_of(r);
  ASSERT_TRUE(r.unexplained_cause) << text_of(r);
  EXPECT_EQ(r.unexplained_cause->rule, Rule::optimizer) << text_of(r);
  EXPECT_TRUE(says(r.unexplained_cause->message,
                   "step 0 of the test run holds 2 of the 4 samples of the base run's step 0 and "
                   "no other: the same data, cut into smaller steps"))
      << r.unexplained_cause->message;
  // A sample of its own is other data, as before.
  write_run(dir / "c", {joined({inputs_first(microbatch(0, {1, 9})), {grad(31, 1.5)}})});
  const Result other = diff(dir / "a", dir / "c");
  ASSERT_TRUE(other.unexplained_cause) << text_of(other);
  EXPECT_EQ(other.unexplained_cause->rule, Rule::data) << text_of(other);
}

TEST(SampleMatch, AStepHoldingASampleTwiceIsToldAsOverlappingShards) {
  const auto dir = fresh_dir("overlapping_shards");
  // One process's step of samples 1-4 against two ranks whose samplers shuffled with seeds of
  // their own: rank 0 holds 1 and 2, rank 1 holds 2 and 3 (sample 2 twice, sample 4 nowhere).
  const auto inputs_first = [](std::vector<Record> mb) {
    std::stable_partition(mb.begin(), mb.end(),
                          [](const Record& r) { return r.name == "input_ids"; });
    return mb;
  };
  write_run(dir / "a", {joined({inputs_first(microbatch(0, {1, 2, 3, 4})), {grad(30, 2.0)}})});
  write_run(dir / "b", {joined({inputs_first(microbatch(0, {1, 2})), {grad(31, 1.5)}}),
                        joined({inputs_first(microbatch(1, {2, 3})), {grad(31, 1.5)}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 1) << text_of(r);
  ASSERT_TRUE(r.unexplained_cause) << text_of(r);
  EXPECT_EQ(r.unexplained_cause->rule, Rule::data) << text_of(r);
  EXPECT_TRUE(says(r.unexplained_cause->message,
                   "step 0 of the test run holds 1 of its 4 sample rows a second time and lacks 1 "
                   "sample(s) of the base run's step: its ranks' shards (or its microbatches) "
                   "overlap"))
      << r.unexplained_cause->message;
}

TEST(TiedWeights, AParameterOfOneRunThatCopiesAnotherIsToldAsUntied) {
  const auto dir = fresh_dir("untied_head");
  // One run ties the head to the embedding (one parameter, recorded once); the other holds the
  // head as a copy of it, a parameter of its own.
  const Record embed = tensor(0, Kind::param, "embed.weight", 10, 3.0);
  Record head = embed;
  head.name = "head.weight";
  write_run(dir / "a", {joined({{embed}, microbatch(0, {1, 2}), {grad(30, 2.0)}})});
  write_run(dir / "b", {joined({{embed, head}, microbatch(0, {1, 2}), {grad(31, 1.5)}})});
  const Result r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 1);
  ASSERT_TRUE(r.first_unexplained && r.unexplained_cause) << text_of(r);
  EXPECT_EQ(r.first_unexplained->name, "head.weight") << text_of(r);
  EXPECT_TRUE(says(r.unexplained_cause->message,
                   "where it holds bit for bit the values of param embed.weight: tied weights "
                   "untied"))
      << r.unexplained_cause->message;
  ASSERT_FALSE(r.causes.empty());
  EXPECT_EQ(r.causes.front().rule, Rule::untied);
  EXPECT_TRUE(says(r.causes.front().message,
                   "param head.weight is in the test run only, where head.weight is a parameter "
                   "of its own; at step 0 it holds bit for bit the values of param embed.weight, "
                   "which both runs record: the test run holds as two parameters what the base "
                   "run holds as one"))
      << r.causes.front().message;
  // A parameter of one run that copies nothing is a name the runs do not share, as before.
  Record other = head;
  other.stats.hash = 11;
  write_run(dir / "c", {joined({{embed, other}, microbatch(0, {1, 2}), {grad(31, 1.5)}})});
  const Result renamed = diff(dir / "a", dir / "c");
  ASSERT_TRUE(renamed.unexplained_cause && !renamed.causes.empty()) << text_of(renamed);
  EXPECT_FALSE(says(renamed.unexplained_cause->message, "untied")) << text_of(renamed);
  EXPECT_TRUE(says(renamed.causes.front().message, "the runs name it differently"))
      << renamed.causes.front().message;
  // Nor is a constant one (a new norm's ones) a copy of another constant of its shape.
  Record ones = tensor(0, Kind::param, "norm.weight", 12, 2.0);
  ones.stats.min = ones.stats.max = ones.stats.mean = 1;
  Record new_norm = ones;
  new_norm.name = "q_norm.weight";
  write_run(dir / "d", {joined({{embed, ones}, microbatch(0, {1, 2}), {grad(30, 2.0)}})});
  write_run(dir / "e", {joined({{embed, ones, new_norm}, microbatch(0, {1, 2}), {grad(31, 2.2)}})});
  const Result added = diff(dir / "d", dir / "e");
  ASSERT_TRUE(added.first_unexplained && added.unexplained_cause) << text_of(added);
  EXPECT_EQ(added.first_unexplained->name, "q_norm.weight") << text_of(added);
  EXPECT_FALSE(says(added.unexplained_cause->message, "untied")) << text_of(added);
}

TEST(TiedWeights, ANameTheOtherRunListsAsTiedIsToldAsUntiedInWhicheverRunUntiesIt) {
  const auto dir = fresh_dir("untied_named");
  // The tied run's log lists the head as the embedding's other name (tied=); the untied run's
  // head has an initialization of its own, so no value says "copy": the name alone tells.
  Record tied_embed = tensor(0, Kind::param, "embed.weight", 10, 3.0);
  tied_embed.tied = {"head.weight"};
  Record embed = tied_embed;
  embed.tied.clear();
  const Record head = tensor(0, Kind::param, "head.weight", 11, 1.5);
  write_run(dir / "tied", {joined({{tied_embed}, microbatch(0, {1, 2}), {grad(30, 2.0)}})});
  write_run(dir / "untied", {joined({{embed, head}, microbatch(0, {1, 2}), {grad(31, 1.5)}})});
  for (const bool tied_is_base : {true, false}) {
    const Result r =
        tied_is_base ? diff(dir / "tied", dir / "untied") : diff(dir / "untied", dir / "tied");
    const std::string untying = tied_is_base ? "test" : "base",
                      tying = tied_is_base ? "base" : "test";
    EXPECT_EQ(r.exit_code(), 1) << text_of(r);
    ASSERT_TRUE(r.first_unexplained && r.unexplained_cause && !r.causes.empty()) << text_of(r);
    EXPECT_EQ(r.first_unexplained->name, "head.weight") << text_of(r);
    ASSERT_TRUE(r.first_unexplained->untied) << text_of(r);
    EXPECT_TRUE(r.first_unexplained->untied->named);
    EXPECT_FALSE(r.first_unexplained->untied->copy);
    EXPECT_TRUE(says(r.unexplained_cause->message,
                     "where the other run ties it to param embed.weight: tied weights untied"))
        << r.unexplained_cause->message;
    EXPECT_EQ(r.causes.front().rule, Rule::untied) << text_of(r);
    EXPECT_TRUE(
        says(r.causes.front().message, "the " + tying +
                                           " run's log lists head.weight as another name of param "
                                           "embed.weight (tied=): the " +
                                           untying + " run holds as two parameters"))
        << r.causes.front().message;
    const auto json = nlohmann::json::parse(to_json(r, DiffOptions{}));
    EXPECT_EQ(json["first_unexplained_divergence"]["untied"]["param"], "embed.weight") << json;
  }
}
