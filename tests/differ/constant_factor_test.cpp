// The constant_factor rule (docs/diff-logs.md, "Noise or bug"): two tensors whose norm, min, max
// and mean are all in one ratio, found from the figures alone and named in the headline.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "differ/detail/judge/constant_factor.h"
#include "differ/report.h"
#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {

// A float32[4,2] grad "w" of norm 2, min -0.75, max 1.5, mean 0.125.
Record base_grad(std::uint64_t hash = 1) {
  Record r = tensor(0, Kind::grad, "w", hash, 2.0);
  r.stats.min = -0.75;
  r.stats.max = 1.5;
  r.stats.mean = 0.125;
  return r;
}

// The same tensor times `f` (min and max swap where f < 0), each figure then moved by `wobble`
// (relative): a factor that rounds each element.
Record scaled(const Record& b, double f, double wobble = 0) {
  Record r = b;
  r.stats.hash = b.stats.hash + 1;
  r.stats.norm = std::fabs(f) * b.stats.norm * (1 + wobble);
  r.stats.min = f * (f > 0 ? b.stats.min : b.stats.max) * (1 + wobble);
  r.stats.max = f * (f > 0 ? b.stats.max : b.stats.min) * (1 - wobble);
  r.stats.mean = f * b.stats.mean * (1 + wobble);
  return r;
}

Pair pair_of(const Record& base, const Record& test) {
  Pair p;
  p.kind = base.kind;
  p.name = base.name;
  p.mb = base.microbatch;
  p.pair_class = PairClass::different;
  p.base.present = p.test.present = true;
  p.base.merged.record = base;
  p.test.merged.record = test;
  return p;
}

std::optional<double> factor_of(const Record& base, const Record& test) {
  return constant_factor(pair_of(base, test));
}

// A 2-rank data-parallel step of two parameters, each with an mb_grad per rank (global
// microbatches 0 and 1) and a replicated grad.
std::vector<std::vector<Record>> ddp_step(std::int64_t step, double w_grad_factor) {
  std::vector<std::vector<Record>> ranks(2);
  for (int r = 0; r < 2; ++r) {
    auto& rank = ranks[static_cast<std::size_t>(r)];
    rank.push_back(tensor(step, Kind::output, "model", 70 + static_cast<std::uint64_t>(r), 3.0, r));
    rank.push_back(tensor(step, Kind::mb_grad, "w", 10 + static_cast<std::uint64_t>(r), 1.0, r));
    rank.push_back(tensor(step, Kind::mb_grad, "v", 20 + static_cast<std::uint64_t>(r), 1.0, r));
    Record g = base_grad(30);
    g.step = step;
    rank.push_back(w_grad_factor == 1 ? g : scaled(g, w_grad_factor));
    rank.push_back(tensor(step, Kind::grad, "v", 40, 1.5));
  }
  return ranks;
}

}  // namespace

TEST(ConstantFactor, TensorsInOneRatioByEveryFigureDifferByThatFactor) {
  const Record b = base_grad();
  for (double f : {0.5, 2.0, 0.25, -0.5, -4.0}) {
    const auto found = factor_of(b, scaled(b, f));
    ASSERT_TRUE(found) << f;
    EXPECT_DOUBLE_EQ(*found, f);
  }
  // A factor that rounds each float32 element (1/3): the figures move by a rounding, well within
  // 64 of them.
  const auto third = factor_of(b, scaled(b, 1.0 / 3, 0x1p-24));
  ASSERT_TRUE(third);
  EXPECT_NEAR(*third, 1.0 / 3, 1e-7);
}

TEST(ConstantFactor, UnrelatedTensorsAndFactorsNearOneAreNone) {
  const Record b = base_grad();
  // Equal norms, other elements.
  Record other = b;
  other.stats.hash = 2;
  other.stats.min = -1.25;
  other.stats.max = 0.5;
  other.stats.mean = -0.03;
  EXPECT_FALSE(factor_of(b, other));
  // The same figures (factor 1), another hash: elements moved, no factor.
  Record moved = b;
  moved.stats.hash = 3;
  EXPECT_FALSE(factor_of(b, moved));
  // Half the norm, but min and max not halved: not one factor.
  Record half_norm = other;
  half_norm.stats.norm = 1.0;
  EXPECT_FALSE(factor_of(b, half_norm));
  // The norm ratio holds and max too, but the mean is off by far more than a rounding.
  Record mean_off = scaled(b, 0.5);
  mean_off.stats.mean = 0.5 * 0.125 + 1e-3;
  EXPECT_FALSE(factor_of(b, mean_off));
  // Within 1% of one: left to the noise rules, even where every figure scales alike; a sign flip
  // alone is not told apart from a tensor with symmetric extremes (min -1, max 1, mean 0) that
  // moved by noise.
  EXPECT_FALSE(factor_of(b, scaled(b, 1.005)));
  EXPECT_FALSE(factor_of(b, scaled(b, -1)));
  Record symmetric = tensor(0, Kind::grad, "w", 1, 2.0);
  EXPECT_FALSE(factor_of(symmetric, tensor(0, Kind::grad, "w", 2, 2.0 * (1 + 1e-8))));
  // Beyond the float32 tolerance (64 roundings).
  EXPECT_FALSE(factor_of(b, scaled(b, 1.0 / 3, 1e-5)));
  // bfloat16: only factors that scale the elements (nearly) exactly.
  Record bf = b;
  bf.stats.dtype = "bfloat16";
  EXPECT_TRUE(factor_of(bf, scaled(bf, 0.5)));
  EXPECT_FALSE(factor_of(bf, scaled(bf, 1.0 / 3, 0x1p-9)));
  // Kinds other rules explain (an update), a zero norm, a NaN.
  Record param = b;
  param.kind = Kind::param;
  EXPECT_FALSE(factor_of(param, scaled(param, 0.5)));
  Record nan = scaled(b, 0.5);
  nan.stats.nan = 1;
  EXPECT_FALSE(factor_of(b, nan));
  // One element (a loss), or all elements equal: every figure is the value, so any two such
  // tensors are "in one ratio"; nothing tells a factor from another value.
  Record one = tensor(0, Kind::output, "loss", 1, 2.0);
  one.stats.shape = {};
  one.stats.min = one.stats.max = one.stats.mean = 2.0;
  EXPECT_FALSE(factor_of(one, scaled(one, 1.5)));
  Record flat = b;
  flat.stats.min = flat.stats.max = flat.stats.mean = 0.7071067811865476;
  EXPECT_FALSE(factor_of(flat, scaled(flat, 0.5)));
}

TEST(ConstantFactor, TheFactorReadsAsKOrOneOverK) {
  const double tol = constant_factor_tolerance("float32");
  EXPECT_DOUBLE_EQ(tol, 64 * 0x1p-24);
  EXPECT_DOUBLE_EQ(constant_factor_tolerance("float64"), 1e-9);
  EXPECT_DOUBLE_EQ(constant_factor_tolerance("bfloat16"), 1e-6);
  EXPECT_EQ(factor_text(0.5, tol), "0.5");
  EXPECT_EQ(factor_text(0.25, tol), "0.25");
  EXPECT_EQ(factor_text(2, tol), "2");
  EXPECT_EQ(factor_text(4.0000001, tol), "4");
  EXPECT_EQ(factor_text(1.0 / 3 * (1 + 0x1p-24), tol), "1/3");
  EXPECT_EQ(factor_text(1.0 / 64, tol), "1/64");
  EXPECT_EQ(factor_text(-1, tol), "-1");
  EXPECT_EQ(factor_text(-0.5, tol), "-0.5");
  EXPECT_EQ(factor_text(0.7071067, tol), "0.707107");
}

TEST(ConstantFactor, TheCauseNamesTheFactorAndTheDegree) {
  const Record b = base_grad();
  auto c = constant_factor_cause(0, pair_of(b, scaled(b, 0.5)));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->rule, Rule::constant_factor);
  EXPECT_EQ(
      c->message,
      "grad w at step 0: the two gradients differ by one constant factor: test = 0.5 x base (norm "
      "ratio 0.5, "
      "min/max/mean in the same ratio): a gradient scaled by the wrong degree (divided by 2 more)");
  c = constant_factor_cause(0, pair_of(b, scaled(b, 4)));
  ASSERT_TRUE(c);
  EXPECT_NE(
      c->message.find(
          "test = 4 x base (norm ratio 4, min/max/mean in the same ratio): a gradient scaled by "
          "the wrong degree (divided by 4 less)"),
      std::string::npos)
      << c->message;
  c = constant_factor_cause(0, pair_of(b, scaled(b, -0.5)));
  ASSERT_TRUE(c);
  EXPECT_NE(
      c->message.find(
          "test = -0.5 x base (norm ratio 0.5, min and max swapped, mean in the same ratio): a "
          "gradient scaled by the wrong degree (divided by 2 more and its sign flipped)"),
      std::string::npos)
      << c->message;
  Record tap = b;
  tap.kind = Kind::tap;
  tap.microbatch = 3;
  c = constant_factor_cause(0, pair_of(tap, scaled(tap, 0.125)));
  ASSERT_TRUE(c);
  EXPECT_NE(
      c->message.find(
          "tap w mb 3 at step 0: the two tensors differ by one constant factor: test = 0.125 x "
          "base"),
      std::string::npos)
      << c->message;
  EXPECT_FALSE(constant_factor_cause(0, pair_of(b, b)));
}

TEST(ConstantFactor, AGradScaledByOneHalfIsTheHeadline) {
  // Two 2-rank data-parallel runs; the test run's grad of w is half the base run's at step 0 (a
  // reduction that divides by the degree twice), every mb_grad bitwise equal.
  auto dir = fresh_dir("constant_factor_headline");
  auto base = ddp_step(0, 1), test = ddp_step(0, 0.5);
  const auto next = ddp_step(1, 1);  // the step after agrees again
  for (std::size_t r = 0; r < 2; ++r) {
    base[r].insert(base[r].end(), next[r].begin(), next[r].end());
    test[r].insert(test[r].end(), next[r].begin(), next[r].end());
  }
  write_run(dir / "a", base);
  write_run(dir / "b", test);
  auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->step, 0);
  EXPECT_EQ(r.first_unexplained->kind, Kind::grad);
  EXPECT_EQ(r.first_unexplained->name, "w");
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::constant_factor);
  EXPECT_TRUE(r.first_unexplained->why.bug);
  ASSERT_TRUE(r.unexplained_cause);
  EXPECT_EQ(r.unexplained_cause->rule, Rule::constant_factor);
  EXPECT_EQ(r.exit_code(), 1);
  ASSERT_FALSE(r.causes.empty());
  // the first divergence's likely causes lead with it
  EXPECT_EQ(r.causes[0].rule, Rule::constant_factor);

  const std::string text = text_of(r);
  EXPECT_TRUE(says(text, "FIRST UNEXPLAINED DIVERGENCE step 0 step end grad w [different]"))
      << text;
  EXPECT_TRUE(
      says(text,
           "[constant_factor] grad w at step 0: the two gradients differ by one constant factor: "
           "test = 0.5 x base (norm ratio 0.5, min/max/mean in the same ratio): a gradient scaled "
           "by the wrong degree (divided by 2 more)"))
      << text;
  EXPECT_TRUE(says(text, "evidence: step=0 kind=grad name=w factor=0.5 norm_ratio=0.5")) << text;

  const auto j = nlohmann::json::parse(to_json(r, {}));
  EXPECT_EQ(j["first_unexplained_divergence"]["cause"]["rule"], "constant_factor");
  EXPECT_EQ(j["first_unexplained_divergence"]["cause"]["evidence"]["factor"], "0.5");
  EXPECT_EQ(j["first_unexplained_divergence"]["explanation"]["rule"], "constant_factor");
}
