#include <gtest/gtest.h>

#include <cmath>

#include "differ/detail/merge/compose.h"
#include "differ/detail/read/names.h"
#include "differ/diff.h"

using namespace probe::differ;

namespace {
probe::TensorStats shard(std::uint64_t hash, double norm, double mn, double mx, double mean,
                         std::int64_t row0, std::int64_t rows, std::int64_t nan = 0,
                         std::int64_t inf = 0) {
  probe::TensorStats s;
  s.hash = hash;
  s.norm = norm;
  s.min = mn;
  s.max = mx;
  s.mean = mean;
  s.nan = nan;
  s.inf = inf;
  s.dtype = "float32";
  s.shape = {rows, 2};
  s.shard = probe::Shard{{4, 2}, {row0, 0}};
  return s;
}
}  // namespace

TEST(ComposeShards, HashesAddNormsCombineAndExtremaAndCountsAreExact) {
  auto a = shard(0xffffffffffffffffULL, 3, -1, 2, 1.0, 0, 1);      // 2 elements
  auto b = shard(2, 4, -5, 0.5, 4.0, 1, 3, /*nan=*/2, /*inf=*/1);  // 6 elements, 4 non-NaN
  a.torch_hash = 0b1100;
  b.torch_hash = 0b1010;
  auto c = compose_shards({&a, &b});
  ASSERT_TRUE(c.stats) << c.error;
  EXPECT_EQ(c.stats->hash, 1u);            // 2^64 - 1 + 2 wraps
  EXPECT_TRUE(std::isnan(c.stats->norm));  // a NaN in any shard makes the norm NaN
  EXPECT_EQ(c.stats->min, -5);
  EXPECT_EQ(c.stats->max, 2);
  EXPECT_EQ(c.stats->nan, 2);
  EXPECT_EQ(c.stats->inf, 1);
  EXPECT_DOUBLE_EQ(c.stats->mean, (1.0 * 2 + 4.0 * 4) / 6);
  EXPECT_EQ(c.stats->shape, (std::vector<std::int64_t>{4, 2}));
  EXPECT_TRUE(c.stats->shard.empty());
  EXPECT_EQ(c.stats->torch_hash, 0b0110u);  // XOR
  b.nan = 0;
  c = compose_shards({&a, &b});
  EXPECT_DOUBLE_EQ(c.stats->norm, 5.0);  // sqrt(3^2 + 4^2)
}

TEST(ComposeShards, GapIsReportedNotComposed) {
  auto a = shard(1, 1, 0, 0, 0, 0, 1);
  auto b = shard(1, 1, 0, 0, 0, 2, 2);  // row 1 missing
  auto c = compose_shards({&a, &b});
  EXPECT_FALSE(c.stats);
  EXPECT_NE(c.error.find("gap"), std::string::npos) << c.error;
}

TEST(ComposeShards, OverlapIsReportedNotComposed) {
  auto a = shard(1, 1, 0, 0, 0, 0, 2);
  auto b = shard(1, 1, 0, 0, 0, 1, 3);
  auto c = compose_shards({&a, &b});
  EXPECT_FALSE(c.stats);
  EXPECT_NE(c.error.find("overlap"), std::string::npos) << c.error;
}

TEST(Names, WrapperPrefixesAreStrippedAtAnyDepth) {
  EXPECT_EQ(strip_wrapper_prefixes("module._orig_mod.layers.0._fsdp_wrapped_module.attn.wq.weight"),
            "layers.0.attn.wq.weight");
  EXPECT_EQ(strip_wrapper_prefixes("layers.1._checkpoint_wrapped_module.mlp.w1"),
            "layers.1.mlp.w1");
  EXPECT_EQ(strip_wrapper_prefixes("submodule.w"), "submodule.w");  // only whole components
}

TEST(Names, MapRulesApplyAfterStripping) {
  NameMapper m(true, {R"(^stage1\.layers\.(\d+)=layers.4$1)"});
  EXPECT_EQ(m.map("module.stage1.layers.0.w"), "layers.40.w");
  EXPECT_THROW(NameMapper(true, {"no-equals-sign"}), InputError);
  EXPECT_THROW(NameMapper(true, {"@4-x:a=b"}), InputError);
  EXPECT_THROW(NameMapper(true, {"([=x"}), InputError);
}

TEST(SeriesStats, HandComputedMaeRmseMaxAndFinal) {
  SeriesStats s;
  Comparator exact;
  const double base[] = {1.0, 2.0, 3.0, 4.0};
  const double test[] = {1.0, 2.5, 2.0, 4.25};
  for (int i = 0; i < 4; ++i) s.add_pair(10 + i, base[i], test[i], exact.agree(base[i], test[i]));
  EXPECT_EQ(s.paired, 4);
  EXPECT_EQ(s.exact, 1);
  EXPECT_EQ(s.first_divergent_step, 11);
  EXPECT_DOUBLE_EQ(s.mae(), (0 + 0.5 + 1.0 + 0.25) / 4);
  EXPECT_DOUBLE_EQ(s.rmse(), std::sqrt((0.25 + 1.0 + 0.0625) / 4));
  EXPECT_EQ(s.max_abs, 1.0);
  EXPECT_EQ(s.max_abs_step, 12);
  EXPECT_EQ(s.final_diff, 0.25);
}

TEST(SeriesStats, OneSidedNanCountsAsMismatchAndKeepsAveragesFinite) {
  SeriesStats s;
  Comparator exact;
  s.add_pair(0, 1.0, 1.0, true);
  s.add_pair(1, 1.0, NAN, exact.agree(1.0, NAN));
  s.add_pair(2, NAN, NAN, exact.agree(NAN, NAN));
  EXPECT_EQ(s.exact, 2);
  EXPECT_EQ(s.first_divergent_step, 1);
  EXPECT_EQ(s.nonfinite_mismatch, 1);
  EXPECT_EQ(s.mae(), 0.0);
  EXPECT_TRUE(std::isinf(s.max_abs));
  EXPECT_EQ(s.max_abs_step, 1);
}

TEST(Comparator, ToleranceIsRelativeToBaseAndNanAgreesOnlyWithNan) {
  Comparator exact;
  EXPECT_TRUE(exact.agree(1.0, 1.0));
  EXPECT_FALSE(exact.agree(1.0, std::nextafter(1.0, 2.0)));
  Comparator tol{1e-3, 0};
  EXPECT_TRUE(tol.agree(1000.0, 1000.9));
  EXPECT_FALSE(tol.agree(1000.0, 1001.1));
  EXPECT_TRUE(tol.agree(NAN, NAN));
  EXPECT_FALSE(tol.agree(NAN, 1.0));
  EXPECT_FALSE(tol.agree(INFINITY, 1e308));
  EXPECT_TRUE((Comparator{0, 0.5}).agree(0.0, 0.4));
}

TEST(Names, RankScopedRuleWithArithmeticRenumbersPipelineStageLayers) {
  // Stage 1 (ranks 4-7) numbers its layers from 0; globally they start at 4.
  NameMapper m(true, {R"(@4-7:^layers\.(\d+)\.=layers.${1+4}.)"});
  EXPECT_EQ(m.map("layers.0.w", 5), "layers.4.w");
  EXPECT_EQ(m.map("layers.3.attn.wq", 7), "layers.7.attn.wq");
  EXPECT_EQ(m.map("layers.0.w", 1), "layers.0.w");  // stage 0: unchanged
  NameMapper n(false, {"(a)(b)=$2$1$$${1}", R"(x(\d)=${1-1})"});
  EXPECT_EQ(n.map("ab.x5"), "ba$a.4");
}
