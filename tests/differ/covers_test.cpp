// Records covering several microbatches (docs/log-format.md, "Covered microbatches";
// docs/diff-logs.md, "Covered microbatches"): an expert's gradient from one expert-parallel
// dispatch. Its shards compose and must agree on what they cover; against a run that groups the
// microbatches otherwise its pairs are set aside, and the expert's grad is judged by the
// summation bound over every microbatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "differ/report.h"
#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {

const std::string kExperts = "layers.0.moe.experts.w1";

Record covering(Record r, std::vector<std::int64_t> covers) {
  r.covers = std::move(covers);
  return r;
}

// A record hash made of small numbers.
std::uint64_t id(std::int64_t n) { return static_cast<std::uint64_t>(n); }

// The norm of microbatch m's contribution to the experts' gradient.
double mb_norm(std::int64_t mb) { return 0.5 + 0.125 * static_cast<double>(mb); }

// A float32[4,2] expert weight (4 experts of one row each) over `mbs` global microbatches, as one
// rank computes it: a tap per microbatch, an mb_grad per microbatch, the grad.
std::vector<Record> single_rank(int mbs, double grad_norm) {
  std::vector<Record> r;
  for (int mb = 0; mb < mbs; ++mb)
    r.push_back(tensor(0, Kind::tap, "layers.0", 5 + id(mb), 2.0, mb));
  for (int mb = 0; mb < mbs; ++mb)
    r.push_back(tensor(0, Kind::mb_grad, kExperts, 100 + id(mb), mb_norm(mb), mb));
  r.push_back(tensor(0, Kind::grad, kExperts, 300, grad_norm));
  return r;
}

// The same under expert parallelism over `ep` ranks (every rank one expert-parallel rank, each
// holding 4/ep experts' rows): rank r runs global microbatches r*k .. r*k+k-1 (k = mbs/ep); the
// backward of its i-th covers microbatch i of every rank, {i, k+i, 2k+i, ...}, and is recorded as
// the rank's shard under the smallest. `grad_hash` / `grad_norm` of the composed grad.
std::vector<std::vector<Record>> expert_parallel(int ep, int mbs, std::uint64_t grad_hash,
                                                 double grad_norm) {
  const int k = mbs / ep, rows = 4 / ep;
  std::vector<std::vector<Record>> ranks(static_cast<std::size_t>(ep));
  for (int r = 0; r < ep; ++r) {
    auto& rank = ranks[static_cast<std::size_t>(r)];
    for (int i = 0; i < k; ++i) {
      const std::int64_t mb = r * k + i;
      rank.push_back(tensor(0, Kind::tap, "layers.0", 5 + id(mb), 2.0, mb));
    }
    for (int i = 0; i < k; ++i) {
      std::vector<std::int64_t> covers;
      double sum_sq = 0;
      for (int q = 0; q < ep; ++q) {
        covers.push_back(q * k + i);
        sum_sq += mb_norm(q * k + i) * mb_norm(q * k + i);
      }
      // Each rank's rows of the dispatch's gradient (norms: the whole spread over the shards).
      Record g =
          tensor(0, Kind::mb_grad, kExperts, 200 + 10 * id(i) + id(r), std::sqrt(sum_sq / ep), i);
      rank.push_back(covering(sharded(g, r * rows, rows), covers));
    }
    const Record grad =
        tensor(0, Kind::grad, kExperts, grad_hash + id(r), grad_norm / std::sqrt(ep));
    rank.push_back(sharded(grad, r * rows, rows));
  }
  return ranks;
}

// The summation-order bound of a float32 grad of norm `g` over `n` microbatches' contributions of
// norms summing to `norms`.
double bound(int n, double norms, double g) { return 2.0 * n * 0x1p-24 * std::max(1.0, norms / g); }

double mb_norms(int mbs) {
  double s = 0;
  for (int mb = 0; mb < mbs; ++mb) s += mb_norm(mb);
  return s;
}

// Expert and sequence parallelism: 4 ranks, 2 expert-parallel ranks x 2 tensor-parallel ranks.
// Rank (e, t) = rank 2e + t runs global microbatch e with its tensor-parallel peer; the backward's
// experts' gradient covers microbatches 0 and 1, is rank e's rows of the experts, and its sequence
// shard's summand t of 2 (norm 0.3); the composed grad has norm g (1 + 1e-8).
std::vector<std::vector<Record>> expert_sequence_parallel(double g) {
  std::vector<std::vector<Record>> ranks(4);
  for (int e = 0; e < 2; ++e)
    for (int t = 0; t < 2; ++t) {
      auto& rank = ranks[static_cast<std::size_t>(2 * e + t)];
      rank.push_back(tensor(0, Kind::tap, "layers.0", 5 + id(e), 2.0, e));
      Record mb_grad = tensor(0, Kind::mb_grad, kExperts, 200 + id(2 * e + t), 0.3, 0);
      mb_grad = covering(sharded(mb_grad, 2 * e, 2), {0, 1});
      mb_grad.stats.partial = {t, 2};
      rank.push_back(mb_grad);
      const double shard_norm = g * (1 + 1e-8) / std::sqrt(2.0);
      rank.push_back(sharded(tensor(0, Kind::grad, kExperts, 400 + id(e), shard_norm), 2 * e, 2));
    }
  return ranks;
}

// The rank's mb_grad records of microbatch `mb` removed: what it logs when its experts receive
// no token in that dispatch.
void drop_mb_grad(std::vector<Record>& rank, std::int64_t mb) {
  rank.erase(std::remove_if(
                 rank.begin(), rank.end(),
                 [mb](const Record& r) { return r.kind == Kind::mb_grad && r.microbatch == mb; }),
             rank.end());
}

}  // namespace

TEST(CoversMerge, ShardsOfOneDispatchComposeAndKeepWhatTheyCover) {
  auto dir = fresh_dir("covers_merge");
  write_run(dir / "a", expert_parallel(4, 8, 400, 3.0));
  const FirstStep a = first_step(dir / "a");
  EXPECT_EQ(a.issues.errors, 0);
  std::size_t expert_mb_grads = 0;
  for (const auto& m : a.records) {
    if (m.record.kind != Kind::mb_grad) continue;
    ++expert_mb_grads;
    EXPECT_EQ(m.record.stats.shape, (std::vector<std::int64_t>{4, 2}));  // composed
    EXPECT_FALSE(m.record.stats.unsupported);
    const std::int64_t i = *m.record.microbatch;
    EXPECT_EQ(m.record.covers, (std::vector<std::int64_t>{i, 2 + i, 4 + i, 6 + i}));
    EXPECT_EQ(m.ranks, (std::vector<int>{0, 1, 2, 3}));
  }
  EXPECT_EQ(expert_mb_grads, 2u);
  EXPECT_TRUE(a.at(Kind::grad, kExperts).record.covers.empty());
}

TEST(CoversMerge, RanksCoveringOtherMicrobatchesUnderOneKeyAreAnIssueNamingThem) {
  auto dir = fresh_dir("covers_disagree");
  const Record g = tensor(0, Kind::mb_grad, kExperts, 1, 1.0, 0);
  write_run(dir / "a", {{covering(sharded(g, 0, 1), {0, 2})},
                        {covering(sharded(g, 1, 1), {0, 2})},
                        {covering(sharded(g, 2, 1), {0, 4})},
                        {sharded(g, 3, 1)}});
  const FirstStep a = first_step(dir / "a");
  ASSERT_EQ(a.issues.count_by_type.count("covers_mismatch"), 1u);
  EXPECT_EQ(a.issues.errors, 1);
  EXPECT_EQ(a.issues.detail.at(0).message, "step 0 mb_grad " + kExperts +
                                               " mb=0: ranks 0-1 cover microbatches 0,2, ranks 2 "
                                               "cover microbatches 0,4, ranks 3 cover microbatch 0 "
                                               "alone; not merged");
  const Merged& m = a.at(Kind::mb_grad, kExperts);
  ASSERT_TRUE(m.record.stats.unsupported);
  EXPECT_NE(m.record.stats.unsupported->find("its ranks cover different microbatches"),
            std::string::npos);

  // A comparison with that run has run errors.
  EXPECT_EQ(diff(dir / "a", dir / "a").verdict(), Result::Verdict::run_errors);
}

TEST(CoveredMicrobatches, ACleanExpertParallelComparisonIsNoise) {
  // One rank against 4 expert-parallel ranks: the experts' gradient sums the same per-token
  // contributions grouped 4 microbatches at a time, its grad differs by a rounding.
  auto dir = fresh_dir("covers_clean");
  const double g = 3.0, rel = 1e-8;
  write_run(dir / "a", {single_rank(8, g)});
  write_run(dir / "b", expert_parallel(4, 8, 400, g * (1 + rel)));
  auto r = diff(dir / "a", dir / "b");
  // mb 0 and 1 against the dispatches under them; mb 2-7 lie within those: all set aside.
  EXPECT_EQ(r.covered.pairs, 8);
  EXPECT_EQ(r.covered.by_kind.at(Kind::mb_grad), 8);
  EXPECT_EQ(r.partial.pairs, 0);
  for (auto c :
       {PairClass::equal, PairClass::different, PairClass::only_base, PairClass::only_test})
    EXPECT_EQ(count(r, Kind::mb_grad, c), 0) << pair_class_name(c);
  EXPECT_EQ(count(r, Kind::tap, PairClass::equal), 8);
  EXPECT_TRUE(r.names_only_base.empty());
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->kind, Kind::grad);
  EXPECT_EQ(r.first_divergence->why.rule, Rule::summation_order);
  // Every microbatch counts: 8 contributions, their norms from the run that has them one by one.
  EXPECT_DOUBLE_EQ(r.first_divergence->why.bound, bound(8, mb_norms(8), g));
  EXPECT_FALSE(r.first_unexplained);
  EXPECT_EQ(r.verdict(), Result::Verdict::noise);
  EXPECT_EQ(r.exit_code(), 4);
  EXPECT_EQ(r.base_issues.errors + r.test_issues.errors, 0);

  const std::string text = text_of(r);
  EXPECT_TRUE(says(
      text,
      "COVERED MICROBATCHES 8 mb_grad records cover other microbatches than the other run's (an "
      "expert's gradient from one expert-parallel dispatch over several microbatches): set aside, "
      "not compared"))
      << text;
  EXPECT_TRUE(
      says(text, "step 0 mb_grad " + kExperts +
                     " mb 0: test covers microbatches 0,2,4,6 (one expert-parallel dispatch), base "
                     "microbatch 0 alone"))
      << text;
  EXPECT_TRUE(says(
      text,
      "step 0 mb_grad " + kExperts +
          " mb 2: test covers it within a record of several microbatches, base microbatch 2 alone"))
      << text;
  const auto j = nlohmann::json::parse(to_json(r, {}));
  EXPECT_EQ(j["covered_records"]["pairs"], 8);
  EXPECT_EQ(j["covered_records"]["by_kind"]["mb_grad"], 8);
  EXPECT_EQ(j["covered_records"]["examples"].size(), 8u);

  // The other way round: the expert-parallel run as the base.
  auto reversed = diff(dir / "b", dir / "a");
  EXPECT_EQ(reversed.covered.pairs, 8);
  ASSERT_TRUE(reversed.first_divergence);
  EXPECT_EQ(reversed.first_divergence->why.rule, Rule::summation_order);
  EXPECT_EQ(reversed.exit_code(), 4) << text_of(reversed);
}

TEST(CoveredMicrobatches, AnExpertGradBeyondTheBoundWithNothingUpstreamIsAWrongReduction) {
  auto dir = fresh_dir("covers_beyond");
  write_run(dir / "a", {single_rank(8, 3.0)});
  write_run(dir / "b", expert_parallel(4, 8, 400, 3.0 * (1 + 1e-3)));
  auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->kind, Kind::grad);
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::wrong_reduction);
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(CoveredMicrobatches, AnExpertGradDividedByTheExpertParallelDegreeIsAConstantFactor) {
  auto dir = fresh_dir("covers_scaled");
  write_run(dir / "a", {single_rank(8, 3.0)});
  auto ep = expert_parallel(4, 8, 400, 3.0 / 4);
  for (auto& rank : ep) {
    Record& grad = rank.back();
    grad.stats.min /= 4;
    grad.stats.max /= 4;
  }
  write_run(dir / "b", ep);
  auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::constant_factor);
  ASSERT_TRUE(r.unexplained_cause);
  EXPECT_NE(r.unexplained_cause->message.find(
                "test = 0.25 x base (norm ratio 0.25, min/max/mean in the same "
                "ratio): a gradient scaled by the wrong degree (divided by 4 more)"),
            std::string::npos)
      << r.unexplained_cause->message;
}

TEST(CoveredMicrobatches, RunsCoveringTheSameMicrobatchesCompareAsUsual) {
  auto dir = fresh_dir("covers_same");
  write_run(dir / "a", expert_parallel(4, 8, 400, 3.0));
  write_run(dir / "b", expert_parallel(4, 8, 400, 3.0));
  auto same = diff(dir / "a", dir / "b");
  EXPECT_EQ(same.covered.pairs, 0);
  EXPECT_EQ(count(same, Kind::mb_grad, PairClass::equal), 2);
  EXPECT_EQ(same.exit_code(), 0);

  // One dispatch's gradient differs on a rank: a divergence like any other.
  auto changed = expert_parallel(4, 8, 400, 3.0);
  changed[2][2].stats.hash = 999;  // rank 2's rows of the first dispatch (after its 2 taps)
  write_run(dir / "c", changed);
  auto r = diff(dir / "a", dir / "c");
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->kind, Kind::mb_grad);
  EXPECT_EQ(r.first_divergence->mb, 0);
  EXPECT_EQ(r.first_divergence->pair_class, PairClass::different);
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(CoveredMicrobatches, ARecordCoveringWhatTheOtherRunDoesNotRecordIsARecordOfOneRun) {
  // The base run records no mb_grad of the experts at all: the test run's are records of one
  // run only, like any other.
  auto dir = fresh_dir("covers_one_run");
  auto base = single_rank(8, 3.0);
  base.erase(std::remove_if(base.begin(), base.end(),
                            [](const Record& r) { return r.kind == Kind::mb_grad; }),
             base.end());
  base.push_back(tensor(0, Kind::mb_grad, "layers.0.attention.wq.weight", 9, 1.0, 0));
  write_run(dir / "a", {base});
  auto test = expert_parallel(4, 8, 400, 3.0);
  test[0].push_back(tensor(0, Kind::mb_grad, "layers.0.attention.wq.weight", 9, 1.0, 0));
  write_run(dir / "b", test);
  auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.covered.pairs, 0);
  EXPECT_EQ(count(r, Kind::mb_grad, PairClass::only_test), 2);
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::missing_record);
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(CoveredMicrobatches, TwoCoarseGroupingsAreSetAsideAndCountEveryMicrobatch) {
  // 2 expert-parallel ranks ({i, 4+i}) against 4 ({i, 2+i, 4+i, 6+i}), 8 microbatches.
  auto dir = fresh_dir("covers_coarse");
  const double g = 3.0;
  write_run(dir / "a", expert_parallel(2, 8, 400, g));
  write_run(dir / "b", expert_parallel(4, 8, 500, g * (1 + 1e-8)));
  auto r = diff(dir / "a", dir / "b");
  // mb 0 and 1 in both runs, mb 2 and 3 in the base run alone, within the test run's dispatches.
  EXPECT_EQ(r.covered.pairs, 4);
  EXPECT_EQ(count(r, Kind::mb_grad, PairClass::only_base), 0);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->why.rule, Rule::summation_order);
  // 8 microbatches in either run; the norms of the finer grouping's records (4 of 2 microbatches).
  double norms = 0;
  for (int i = 0; i < 4; ++i) norms += std::hypot(mb_norm(i), mb_norm(4 + i));
  EXPECT_DOUBLE_EQ(r.first_divergence->why.bound, bound(8, norms, g));
  EXPECT_EQ(r.exit_code(), 4);
}

TEST(CoveredMicrobatches, AnExpertGradWhoseReplicasDisagreeIsAnUnreducedGradient) {
  // 4 ranks, 2 expert-parallel groups of 2 (ranks 0-1 and 2-3), a microbatch per rank: each
  // dispatch covers its group's 2 microbatches; the groups' copies of an expert shard are
  // replicas that the all-reduce over the groups makes agree. Here it was skipped.
  auto dir = fresh_dir("covers_unreduced");
  write_run(dir / "a", {single_rank(4, 3.0)});
  std::vector<std::vector<Record>> ranks(4);
  for (int r = 0; r < 4; ++r) {
    const std::int64_t group = r / 2, mb = r;
    auto& rank = ranks[static_cast<std::size_t>(r)];
    rank.push_back(tensor(0, Kind::tap, "layers.0", 5 + id(mb), 2.0, mb));
    const Record mb_grad = tensor(0, Kind::mb_grad, kExperts, 200 + id(r), 0.5, 2 * group);
    rank.push_back(covering(sharded(mb_grad, 2 * (r % 2), 2), {2 * group, 2 * group + 1}));
    rank.push_back(sharded(tensor(0, Kind::grad, kExperts, 400 + id(r), 1.5), 2 * (r % 2), 2));
  }
  write_run(dir / "b", ranks);
  auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.covered.pairs, 4);
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->kind, Kind::grad);
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::unreduced_gradient);
  ASSERT_TRUE(r.unexplained_cause);
  EXPECT_NE(r.unexplained_cause->message.find("cover several microbatches each"), std::string::npos)
      << r.unexplained_cause->message;
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(CoveredMicrobatches, SummandsThatAreExpertShardsCoveringSeveralMicrobatchesAreSetAsideOnce) {
  // Expert and sequence parallelism (expert_sequence_parallel).
  auto dir = fresh_dir("covers_partial");
  const double g = 3.0;
  write_run(dir / "a", {single_rank(2, g)});
  write_run(dir / "b", expert_sequence_parallel(g));
  const FirstStep b = first_step(dir / "b");
  EXPECT_EQ(b.issues.errors, 0);
  const Merged& m = b.at(Kind::mb_grad, kExperts);
  EXPECT_EQ(m.partial.count, 2);
  EXPECT_EQ(m.record.covers, (std::vector<std::int64_t>{0, 1}));
  // Each summand composed of 2 shards of norm 0.3.
  EXPECT_DOUBLE_EQ(m.partial.summand_norms, 2 * std::sqrt(0.18));

  auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.covered.pairs, 2);  // mb 0 against the dispatch, mb 1 within it
  EXPECT_EQ(r.partial.pairs, 0);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->why.rule, Rule::summation_order);
  // 2 microbatches x 2 summands in the test run; the larger sum of norms of the two runs.
  EXPECT_DOUBLE_EQ(r.first_divergence->why.bound,
                   bound(4, std::max(mb_norm(0) + mb_norm(1), 2 * std::sqrt(0.18)), g));
  EXPECT_EQ(r.exit_code(), 4) << text_of(r);
}

TEST(CoveredMicrobatches, ASummandOfAnExpertThatReceivedNoTokenIsAWarningNotARunError) {
  // As above, but rank (1, 0)'s sequence shard routed no token to rank 1's experts in the
  // dispatch: their gradient was never computed there, so that shard of summand 0 is not logged.
  auto dir = fresh_dir("covers_partial_no_tokens");
  const double g = 3.0;
  write_run(dir / "a", {single_rank(2, g)});
  auto ranks = expert_sequence_parallel(g);
  drop_mb_grad(ranks[2], 0);  // rank (1, 0)
  write_run(dir / "b", ranks);
  const FirstStep b = first_step(dir / "b");
  EXPECT_EQ(b.issues.errors, 0);
  ASSERT_EQ(b.issues.count_by_type.count("expert_without_tokens"), 1u);
  EXPECT_EQ(b.issues.detail.at(0).severity, Issue::Severity::warning);
  EXPECT_NE(b.issues.detail.at(0).message.find("summand 0: shards cover 4 of 8 elements (gap)"),
            std::string::npos)
      << b.issues.detail.at(0).message;

  auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->kind, Kind::grad);
  EXPECT_EQ(r.exit_code(), 4) << text_of(r);
}

TEST(CoveredMicrobatches, AShardOfAnExpertThatReceivedNoTokenIsAWarningNotARunError) {
  // 2 expert-parallel ranks; in the backward of microbatch 1 no token went to rank 1's experts.
  auto dir = fresh_dir("covers_shard_no_tokens");
  auto ranks = expert_parallel(2, 4, 400, 3.0 * (1 + 1e-8));
  drop_mb_grad(ranks[1], 1);
  write_run(dir / "a", {single_rank(4, 3.0)});
  write_run(dir / "b", ranks);
  const FirstStep b = first_step(dir / "b");
  EXPECT_EQ(b.issues.errors, 0);
  ASSERT_EQ(b.issues.count_by_type.count("expert_without_tokens"), 1u);
  ASSERT_EQ(b.issues.count_by_type.count("shard_tiling"), 0u);

  // A shard missing from a record that covers no dispatch is still an error.
  auto plain = expert_parallel(2, 4, 400, 3.0);
  for (auto& rank : plain)
    for (auto& record : rank) record.covers.clear();
  drop_mb_grad(plain[1], 1);
  write_run(dir / "c", plain);
  EXPECT_EQ(first_step(dir / "c").issues.count_by_type.count("shard_tiling"), 1u);

  auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.exit_code(), 4) << text_of(r);
}
