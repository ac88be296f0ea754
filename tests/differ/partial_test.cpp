// Partial records (docs/log-format.md, "Partial records"; docs/diff-logs.md, "Partial sums"):
// summands merged into one partial sum, partial sums set aside against whole records and
// compared against partial sums of the same count, the partial_sum noise rule, and grads whose
// mb_grads are partial sums (sequence parallelism).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <nlohmann/json.hpp>

#include "differ/report.h"
#include "differ_test_util.h"
#include "probe/log_format.h"

using namespace differ_test;
using namespace probe::differ;
namespace lf = probe::log_format;

namespace {

Record summand(Record r, std::int64_t index, std::int64_t count) {
  r.stats.partial = {index, count};
  return r;
}

// A tensor-parallel attention block of microbatch `mb` on one rank of `tp` (tp = 1: one rank
// holds it all): the query projection (replicated), the output projection's partial product
// of each rank before the row-parallel all-reduce (tp > 1 only), the block's output after it,
// and the next layer's output.
std::vector<Record> attention(std::int64_t step, std::int64_t mb, int rank, int tp,
                              double out_rel = 0, double next_rel = 0) {
  std::vector<Record> r;
  r.push_back(tensor(step, Kind::tap, "layers.0.attention.wq", 1, 2.0, mb));
  if (tp > 1)
    r.push_back(summand(tensor(step, Kind::tap, "layers.0.attention.wo",
                               100 + static_cast<std::uint64_t>(rank), 1.5, mb),
                        rank, tp));
  r.push_back(tensor(step, Kind::tap, "layers.0.attention", out_rel == 0 ? 10 : 11,
                     3.0 * (1 + out_rel), mb));
  r.push_back(tensor(step, Kind::tap, "layers.1.attention", next_rel == 0 ? 20 : 21,
                     4.0 * (1 + next_rel), mb));
  return r;
}

// Base: one rank. Test: two tensor-parallel ranks with the partial products of wo.
Result single_vs_tp(const std::string& name, double out_rel, double next_rel,
                    DiffOptions opt = {}) {
  auto dir = fresh_dir(name);
  write_run(dir / "a", {attention(0, 0, 0, 1)});
  write_run(dir / "b",
            {attention(0, 0, 0, 2, out_rel, next_rel), attention(0, 0, 1, 2, out_rel, next_rel)});
  return diff(dir / "a", dir / "b", opt);
}

// The root a sum of 2 float32 summands of norm 1.5 each adds: 2 * n * u * c, c = 3 / sqrt(4.5).
const double kRoot2 = 2.0 * 2 * 0x1p-24 * (3.0 / std::sqrt(4.5));

// A norm weight under sequence parallelism, microbatches 0 and 1: each rank of `tp` sees its
// sequence shard, so its mb_grads are partial sums until the tensor-parallel all-reduce; the
// grad (after it) is replicated. tp = 1: whole mb_grads. `grad_hash` / `grad_norm` per rank.
std::vector<Record> norm_step(int rank, int tp, std::uint64_t grad_hash, double grad_norm) {
  std::vector<Record> r;
  for (std::int64_t mb = 0; mb < 2; ++mb) {
    r.push_back(tensor(0, Kind::tap, "layers.0.attention_norm", 5 + static_cast<std::uint64_t>(mb),
                       2.0, mb));
    if (tp == 1)
      r.push_back(tensor(0, Kind::mb_grad, "layers.0.attention_norm.weight",
                         30 + static_cast<std::uint64_t>(mb), 1.0, mb));
    else
      r.push_back(summand(tensor(0, Kind::mb_grad, "layers.0.attention_norm.weight",
                                 50 + static_cast<std::uint64_t>(2 * mb + rank), 0.7, mb),
                          rank, tp));
  }
  r.push_back(tensor(0, Kind::grad, "layers.0.attention_norm.weight", grad_hash, grad_norm));
  return r;
}

}  // namespace

TEST(PartialMerge, SummandsMergeIntoOnePartialSumWithAFingerprintOfTheirHashes) {
  auto dir = fresh_dir("partial_merge");
  Record s0 = summand(tensor(0, Kind::tap, "wo", 100, 3.0, 0), 0, 2);
  Record s1 = summand(tensor(0, Kind::tap, "wo", 200, 4.0, 0), 1, 2);
  s0.stats.mean = 0.25;
  s1.stats.mean = 0.5;
  // Ranks 0 and 2 hold summand 0 (replicas), ranks 1 and 3 summand 1.
  write_run(dir / "a", {{s0}, {s1}, {s0}, {s1}});
  const FirstStep a = first_step(dir / "a");
  EXPECT_EQ(a.issues.errors, 0);
  const Merged& m = a.at(Kind::tap, "wo");
  EXPECT_EQ(m.partial.count, 2);
  EXPECT_EQ(m.partial.index, -1);
  EXPECT_DOUBLE_EQ(m.partial.summand_norms, 7.0);
  EXPECT_DOUBLE_EQ(m.record.stats.norm, 5.0);  // sqrt(3^2 + 4^2): the norm of uncorrelated summands
  EXPECT_DOUBLE_EQ(m.record.stats.mean, 0.75);
  EXPECT_FALSE(m.record.stats.unsupported);
  EXPECT_FALSE(m.replicas_disagree);
  EXPECT_EQ(m.ranks, (std::vector<int>{0, 1, 2, 3}));

  // The same summands on other ranks: the same fingerprint. Summands in another order: another.
  write_run(dir / "b", {{s1}, {s0}});
  EXPECT_EQ(first_step(dir / "b").at(Kind::tap, "wo").record.stats.hash, m.record.stats.hash);
  write_run(dir / "c", {{summand(s0, 1, 2)}, {summand(s1, 0, 2)}});
  EXPECT_NE(first_step(dir / "c").at(Kind::tap, "wo").record.stats.hash, m.record.stats.hash);
  // One summand changed: another fingerprint.
  Record s1_changed = s1;
  s1_changed.stats.hash = 201;
  write_run(dir / "d", {{s0}, {s1_changed}});
  EXPECT_NE(first_step(dir / "d").at(Kind::tap, "wo").record.stats.hash, m.record.stats.hash);
}

TEST(PartialMerge, ReplicasOfOneSummandMustAgree) {
  auto dir = fresh_dir("partial_replicas");
  Record s0 = summand(tensor(0, Kind::tap, "wo", 100, 3.0, 0), 0, 2);
  Record s1 = summand(tensor(0, Kind::tap, "wo", 200, 4.0, 0), 1, 2);
  Record s0_other = s0;
  s0_other.stats.hash = 101;
  write_run(dir / "a", {{s0}, {s1}, {s0_other}, {s1}});
  const FirstStep a = first_step(dir / "a");
  EXPECT_EQ(a.issues.count_by_type.count("replica_mismatch"), 1u);
  EXPECT_TRUE(a.at(Kind::tap, "wo").replicas_disagree);
}

TEST(PartialMerge, AKeyMixingSummandsAndWholeRecordsIsARunError) {
  auto dir = fresh_dir("partial_mixed");
  write_run(dir / "a", {{summand(tensor(0, Kind::tap, "wo", 100, 3.0, 0), 0, 2)},
                        {tensor(0, Kind::tap, "wo", 200, 4.0, 0)}});
  const FirstStep a = first_step(dir / "a");
  ASSERT_EQ(a.issues.count_by_type.count("partial_sum"), 1u);
  EXPECT_EQ(a.issues.errors, 1);
  const std::string& msg = a.issues.detail.at(0).message;
  EXPECT_NE(msg.find("step 0 tap wo mb=0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("summands of a partial sum (ranks 0) next to records that are not (ranks 1)"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(a.at(Kind::tap, "wo").record.stats.unsupported);

  // A comparison with that run has run errors.
  write_run(dir / "b", {{tensor(0, Kind::tap, "wo", 200, 4.0, 0)}});
  auto r = diff(dir / "b", dir / "a");
  EXPECT_EQ(r.verdict(), Result::Verdict::run_errors);
}

TEST(PartialMerge, SummandsOfOtherCountsOrMissingAreRunErrorsUnlessARankLogIsMissing) {
  auto dir = fresh_dir("partial_counts");
  write_run(dir / "a", {{summand(tensor(0, Kind::tap, "wo", 100, 3.0, 0), 0, 2)},
                        {summand(tensor(0, Kind::tap, "wo", 200, 4.0, 0), 1, 3)}});
  const FirstStep a = first_step(dir / "a");
  ASSERT_EQ(a.issues.count_by_type.count("partial_sum"), 1u);
  EXPECT_NE(a.issues.detail.at(0).message.find("summands disagree on their count"),
            std::string::npos)
      << a.issues.detail.at(0).message;

  // Summand 1 of 2 never logged while both ranks' logs are there: a gap.
  write_run(dir / "b",
            {{summand(tensor(0, Kind::tap, "wo", 100, 3.0, 0), 0, 2)}, {scalar(0, "loss", 1)}});
  const FirstStep b = first_step(dir / "b");
  ASSERT_EQ(b.issues.count_by_type.count("partial_sum"), 1u);
  EXPECT_NE(
      b.issues.detail.at(0).message.find("summands 0 of 2 present (ranks 0): summands missing"),
      std::string::npos)
      << b.issues.detail.at(0).message;
  EXPECT_EQ(b.at(Kind::tap, "wo").partial.count, 2);  // still a partial sum: set aside

  // Rank 1's log is missing: that missing_rank error, not one per record.
  write_run(dir / "c", {{summand(tensor(0, Kind::tap, "wo", 100, 3.0, 0), 0, 2)}, {}},
            /*world_size=*/2);
  const FirstStep c = first_step(dir / "c");
  EXPECT_EQ(c.issues.count_by_type.count("partial_sum"), 0u);
  EXPECT_EQ(c.issues.count_by_type.count("missing_rank"), 1u);
  EXPECT_NE(c.at(Kind::tap, "wo").record.stats.unsupported->find("missing_rank"),
            std::string::npos);
}

TEST(PartialMerge, SummandsThatAreShardsAreComposedBeforeTheyAreSummed) {
  // An expert weight under expert and sequence parallelism: ranks 0-1 hold rows 0-1 and 2-3 of
  // summand 0, ranks 2-3 those of summand 1. The same as each summand logged whole.
  auto dir = fresh_dir("partial_shards");
  auto piece = [](std::uint64_t hash, double norm, std::int64_t row0, std::int64_t index) {
    Record r = sharded(tensor(0, Kind::mb_grad, "experts.w1", hash, norm, 0), row0, 2);
    r.stats.mean = 0.25 * static_cast<double>(index + 1);
    return summand(r, index, 2);
  };
  write_run(dir / "a", {{piece(10, 3.0, 0, 0)},
                        {piece(20, 4.0, 2, 0)},
                        {piece(30, 1.0, 0, 1)},
                        {piece(40, 2.0, 2, 1)}});
  const FirstStep a = first_step(dir / "a");
  EXPECT_EQ(a.issues.errors, 0);
  const Merged& m = a.at(Kind::mb_grad, "experts.w1");
  ASSERT_FALSE(m.record.stats.unsupported) << *m.record.stats.unsupported;
  EXPECT_EQ(m.partial.count, 2);
  EXPECT_EQ(m.record.stats.shape, (std::vector<std::int64_t>{4, 2}));
  // sqrt(3^2 + 4^2), sqrt(1^2 + 2^2)
  EXPECT_DOUBLE_EQ(m.partial.summand_norms, 5.0 + std::sqrt(5.0));
  EXPECT_DOUBLE_EQ(m.record.stats.norm, std::sqrt(30.0));  // sqrt(25 + 5)
  EXPECT_DOUBLE_EQ(m.record.stats.mean, 0.75);

  auto whole = [](std::uint64_t hash, double norm, std::int64_t index) {
    Record r = tensor(0, Kind::mb_grad, "experts.w1", hash, norm, 0);
    r.stats.mean = 0.25 * static_cast<double>(index + 1);
    return summand(r, index, 2);
  };
  write_run(dir / "b", {{whole(30, 5.0, 0)}, {whole(70, std::sqrt(5.0), 1)}});
  EXPECT_EQ(first_step(dir / "b").at(Kind::mb_grad, "experts.w1").record.stats.hash,
            m.record.stats.hash);
  EXPECT_EQ(diff(dir / "a", dir / "b").exit_code(), 0);

  // A summand's rows 2-3 never logged: a gap in that summand, not summed.
  write_run(dir / "c", {{piece(10, 3.0, 0, 0)},
                        {piece(20, 4.0, 2, 0)},
                        {piece(30, 1.0, 0, 1)},
                        {scalar(0, "loss", 1)}});
  const FirstStep c = first_step(dir / "c");
  ASSERT_EQ(c.issues.count_by_type.count("partial_sum"), 1u);
  EXPECT_NE(c.issues.detail.at(0).message.find(
                "summand 1: shards cover 4 of 8 elements (gap); not summed"),
            std::string::npos)
      << c.issues.detail.at(0).message;
  EXPECT_TRUE(c.at(Kind::mb_grad, "experts.w1").record.stats.unsupported);
}

TEST(PartialSum, PartialProductsOfOneRunAreSetAsideAndExplainTheNextTapAsNoise) {
  auto r = single_vs_tp("partial_noise", 1e-7, 1e-7);
  // The partial products: set aside, neither only_test nor counted nor the first divergence.
  EXPECT_EQ(r.partial.pairs, 1);
  EXPECT_EQ(r.partial.by_kind.at(Kind::tap), 1);
  EXPECT_EQ(count(r, Kind::tap, PairClass::only_test), 0);
  EXPECT_EQ(count(r, Kind::tap, PairClass::different), 2);
  EXPECT_EQ(count(r, Kind::tap, PairClass::equal), 1);
  EXPECT_EQ(r.records_compared, 3);
  EXPECT_TRUE(r.names_only_test.empty());
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->name, "layers.0.attention");
  EXPECT_FALSE(r.first_divergence->why.bug);
  EXPECT_EQ(r.first_divergence->why.rule, Rule::partial_sum);
  EXPECT_DOUBLE_EQ(r.first_divergence->why.roots, kRoot2);
  EXPECT_DOUBLE_EQ(r.first_divergence->why.bound, 10 * kRoot2);
  EXPECT_FALSE(r.first_unexplained);
  EXPECT_EQ(r.noise.by_rule.at(Rule::partial_sum), 1);
  EXPECT_EQ(r.noise.by_rule.at(Rule::inherited), 1);  // the next layer descends from the first
  EXPECT_EQ(r.verdict(), Result::Verdict::noise);
  EXPECT_EQ(r.exit_code(), 4);
  EXPECT_EQ(r.base_issues.errors + r.test_issues.errors, 0);

  const std::string text = text_of(r);
  EXPECT_TRUE(
      says(text,
           "noise: partial_sum (the sum of 2 partial products of tap layers.0.attention.wo mb 0 in "
           "the test run, added in another order than one rank's product; within"))
      << text;
  EXPECT_TRUE(says(text,
                   "PARTIAL RECORDS 1 tap record is a partial sum without a like counterpart in "
                   "the other run (a tensor-parallel rank's "
                   "summand): set aside, not compared"))
      << text;
  EXPECT_TRUE(says(text, "step 0 mb 0 tap layers.0.attention.wo (test: 2 summands)")) << text;
  EXPECT_TRUE(says(text, "explained as noise (inherited 1, partial_sum 1)")) << text;

  const auto j = nlohmann::json::parse(to_json(r, {}));
  EXPECT_EQ(j["partial_records"]["pairs"], 1);
  EXPECT_EQ(j["partial_records"]["by_kind"]["tap"], 1);
  EXPECT_EQ(j["first_divergence"]["explanation"]["rule"], "partial_sum");
  EXPECT_NE(
      j["first_divergence"]["explanation"]["detail"].get<std::string>().find("2 partial products"),
      std::string::npos);
}

TEST(PartialSum, ATapBeyondThePartialSumBoundIsUnexplained) {
  auto r = single_vs_tp("partial_beyond", 1e-1, 1e-1);
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->name, "layers.0.attention");
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::unexplained);
  EXPECT_DOUBLE_EQ(r.first_unexplained->why.roots, kRoot2);
  ASSERT_TRUE(r.unexplained_cause);
  EXPECT_NE(r.unexplained_cause->message.find("beyond what the noise it depends on explains"),
            std::string::npos)
      << r.unexplained_cause->message;
  EXPECT_EQ(r.verdict(), Result::Verdict::different);
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.partial.pairs, 1);
}

TEST(PartialSum, TheFirstTapAfterTheReductionIsHeldToTheReductionBoundNotTheNetworks) {
  // 1e-4: within the network's 1e4 x r0 = 3.4e-3, beyond the reduction's 10 x r0 = 3.4e-6 (a
  // dropout mask drawn for the wrong shard, right after the reduction, is this size).
  auto r = single_vs_tp("partial_reduction_bound", 1e-4, 1e-4);
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->name, "layers.0.attention");
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::unexplained);
  EXPECT_DOUBLE_EQ(r.first_unexplained->why.bound, 10 * kRoot2);
  ASSERT_TRUE(r.unexplained_cause);
  EXPECT_NE(r.unexplained_cause->message.find("at most 10 x "), std::string::npos)
      << r.unexplained_cause->message;
}

TEST(PartialSum, PartialRecordsAreNeverADivergenceOfAnOtherwiseEqualComparison) {
  // Every record both runs hold is equal: the partial products alone differ from the single
  // rank (which has none). Counted as divergences (only_test), they would fail this.
  auto r = single_vs_tp("partial_clean", 0, 0);
  EXPECT_FALSE(r.first_divergence);
  EXPECT_FALSE(r.any_divergence());
  EXPECT_EQ(r.verdict(), Result::Verdict::equal);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.partial.pairs, 1);
  EXPECT_TRUE(r.causes.empty());
  const std::string text = text_of(r);
  EXPECT_EQ(text.find("error"), std::string::npos) << text;
  EXPECT_TRUE(says(text, "RESULT: equal")) << text;

  // The same the other way round: the partial sums in the base run.
  auto dir = fresh_dir("partial_clean_reversed");
  write_run(dir / "a", {attention(0, 0, 0, 2), attention(0, 0, 1, 2)});
  write_run(dir / "b", {attention(0, 0, 0, 1)});
  auto reversed = diff(dir / "a", dir / "b");
  EXPECT_EQ(reversed.exit_code(), 0) << text_of(reversed);
  EXPECT_EQ(reversed.partial.pairs, 1);
}

TEST(PartialSum, PartialSumsOfTheSameCountAreComparedByTheirSummands) {
  auto dir = fresh_dir("partial_both");
  const std::vector<std::vector<Record>> tp = {attention(0, 0, 0, 2), attention(0, 0, 1, 2)};
  write_run(dir / "a", tp);
  write_run(dir / "b", tp);
  auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.verdict(), Result::Verdict::equal);
  EXPECT_EQ(r.partial.pairs, 0);
  EXPECT_EQ(count(r, Kind::tap, PairClass::equal), 4);  // wo compared

  // A summand differs: the partial sum differs, and nothing before it explains it.
  auto changed = tp;
  changed[1][1].stats.hash = 999;
  write_run(dir / "c", changed);
  auto d = diff(dir / "a", dir / "c");
  ASSERT_TRUE(d.first_divergence);
  EXPECT_EQ(d.first_divergence->name, "layers.0.attention.wo");
  EXPECT_EQ(d.first_divergence->pair_class, PairClass::different);
  EXPECT_EQ(d.exit_code(), 1);

  // Against 4 tensor-parallel ranks: other counts, set aside.
  std::vector<std::vector<Record>> tp4;
  for (int rank = 0; rank < 4; ++rank) tp4.push_back(attention(0, 0, rank, 4));
  write_run(dir / "e", tp4);
  auto e = diff(dir / "a", dir / "e");
  EXPECT_EQ(e.partial.pairs, 1);
  EXPECT_EQ(e.exit_code(), 0) << text_of(e);
}

TEST(PartialSum, GradsWithPartialMbGradsAreJudgedByTheSummationBoundOfEverySummand) {
  auto dir = fresh_dir("partial_sp");
  write_run(dir / "a", {norm_step(0, 1, 40, 2.0)});
  const double rel = 1e-7;
  write_run(dir / "b",
            {norm_step(0, 2, 41, 2.0 * (1 + rel)), norm_step(1, 2, 41, 2.0 * (1 + rel))});
  auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.partial.pairs, 2);
  EXPECT_EQ(r.partial.by_kind.at(Kind::mb_grad), 2);
  EXPECT_EQ(count(r, Kind::mb_grad, PairClass::different), 0);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->kind, Kind::grad);
  EXPECT_EQ(r.first_divergence->why.rule, Rule::summation_order);
  // 4 summands (2 microbatches x 2 sequence shards) of norm 0.7 summing to norm 2.
  EXPECT_DOUBLE_EQ(r.first_divergence->why.bound, 2.0 * 4 * 0x1p-24 * (2.8 / 2.0));
  EXPECT_EQ(r.verdict(), Result::Verdict::noise);
  EXPECT_EQ(r.exit_code(), 4);
  EXPECT_EQ(r.summation_order_grads, 0);  // its mb_grads were not compared

  // Far beyond the bound with nothing it is computed from diverging: the reduction is wrong.
  write_run(dir / "c",
            {norm_step(0, 2, 41, 2.0 * (1 + 1e-3)), norm_step(1, 2, 41, 2.0 * (1 + 1e-3))});
  auto beyond = diff(dir / "a", dir / "c");
  ASSERT_TRUE(beyond.first_unexplained);
  EXPECT_EQ(beyond.first_unexplained->why.rule, Rule::wrong_reduction);
  EXPECT_EQ(beyond.exit_code(), 1);
}

TEST(PartialSum, AGradWhoseTensorParallelReplicasDisagreeIsAnUnreducedGradient) {
  // The norm weight's gradient never all-reduced over the tensor-parallel group: each rank
  // keeps its own sequence shard's part.
  auto dir = fresh_dir("partial_unreduced");
  write_run(dir / "a", {norm_step(0, 1, 40, 2.0)});
  write_run(dir / "b", {norm_step(0, 2, 41, 1.0), norm_step(1, 2, 42, 1.1)});
  auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->kind, Kind::grad);
  EXPECT_EQ(r.first_unexplained->why.rule, Rule::unreduced_gradient);
  ASSERT_TRUE(r.unexplained_cause);
  EXPECT_EQ(r.unexplained_cause->rule, Rule::unreduced_gradient);
  EXPECT_NE(r.unexplained_cause->message.find("tensor-parallel group"), std::string::npos)
      << r.unexplained_cause->message;
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(PartialSum, ABadPartialFieldIsAnErrorNamingTheLine) {
  auto dir = fresh_dir("partial_bad");
  const auto path = dir / "a" / "rank0" / "diff.log";
  lf::Header h;
  Record bad = summand(tensor(0, Kind::tap, "wo", 1, 1.0, 0), 1, 2);
  std::string line = lf::format_record(bad);
  line.replace(line.find("partial=1/2"), 11, "partial=2/2");
  write_file(path, lf::format_header(h) + "\n" + line + "\n" + lf::format_step_end(0, 1) + "\n");
  write_run(dir / "b", {{tensor(0, Kind::tap, "wo", 1, 1.0, 0)}});
  std::string error = "no error";
  try {
    diff(dir / "a", dir / "b");
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, path.string() + ":2: field 'partial' needs 0 <= index < count: '2/2'");
}

TEST(PartialSum, APartialSumIsTheRootOfItsOwnModuleWhereStagesInterleaveTheTestRunsOrder) {
  // Two pipeline stages x 2 tensor-parallel ranks: stage 1 logs layer 2's dropout state, its
  // partial products and its output; stage 0 the same of layer 0. The single run logs every
  // dropout state first. Layer 2's partial sum must not explain layer 0's output: it lies after.
  auto dir = fresh_dir("partial_pipeline_order");
  auto rng = [](const std::string& name) { return tensor(0, Kind::rng, name, 7, 1.0, 0); };
  auto out = [](const std::string& name, std::uint64_t hash, double norm) {
    return tensor(0, Kind::tap, name, hash, norm, 0);
  };
  write_run(dir / "a", {{rng("layers.0.dropout"), rng("layers.2.dropout"), out("layers.0", 10, 3.0),
                         out("layers.2", 20, 4.0)}});
  auto stage = [&](int layer, int rank, double summand_norm, std::uint64_t hash, double norm) {
    const std::string l = "layers." + std::to_string(layer);
    return std::vector<Record>{
        rng(l + ".dropout"),
        summand(tensor(0, Kind::tap, l + ".attention.wo", 100 + static_cast<std::uint64_t>(rank),
                       summand_norm, 0),
                rank % 2, 2),
        out(l, hash, norm)};
  };
  // Layer 0's summands of unequal norms (a smaller root than layer 2's equal ones).
  write_run(dir / "b",
            {stage(0, 0, 1.5, 11, 3.0 * (1 + 1e-7)), stage(0, 1, 0.1, 11, 3.0 * (1 + 1e-7)),
             stage(2, 2, 1.5, 21, 4.0 * (1 + 1e-7)), stage(2, 3, 1.5, 21, 4.0 * (1 + 1e-7))});
  auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->name, "layers.0");
  EXPECT_EQ(r.first_divergence->why.rule, Rule::partial_sum);
  EXPECT_NE(r.first_divergence->why.detail.find("layers.0.attention.wo"), std::string::npos)
      << r.first_divergence->why.detail;
  EXPECT_FALSE(r.first_unexplained);
}

TEST(PartialSum, EqualSummandsInBothRunsAreStillARoot) {
  // Both runs tensor parallel of the same degree, their partial products bitwise equal. Three
  // summands may be added in another order (a ring all-reduce against a reduce-scatter); two add
  // alike (a + b = b + a) but may meet the residual in another grouping ((x + a) + b against
  // x + (a + b): tensor against sequence parallelism). Either way the output after them differing
  // by rounding is partial_sum noise.
  for (int tp : {3, 2}) {
    auto dir = fresh_dir("partial_equal_" + std::to_string(tp));
    std::vector<std::vector<Record>> a, b;
    for (int rank = 0; rank < tp; ++rank) {
      a.push_back(attention(0, 0, rank, tp));
      b.push_back(attention(0, 0, rank, tp, 1e-7, 1e-7));
    }
    write_run(dir / "a", a);
    write_run(dir / "b", b);
    auto r = diff(dir / "a", dir / "b");
    ASSERT_TRUE(r.first_divergence) << tp;
    EXPECT_EQ(r.partial.pairs, 0) << tp;  // compared, not set aside
    EXPECT_EQ(r.first_divergence->why.rule, Rule::partial_sum) << tp;
    EXPECT_FALSE(r.first_unexplained) << tp;
  }
}

TEST(PartialSum, OptimizerStateUpdatedFromAPartialGradIsItsNoiseNotTheOptimizers) {
  // Tensor parallel with sequence parallel norms: the test run's norm weight grad stays a partial
  // sum of the 2 ranks' sequence shards (DTensor's Partial) until the optimizer reads it, so it is
  // set aside; the AdamW state updated from it differs by that reduction's rounding.
  auto dir = fresh_dir("partial_grad_optim");
  const std::string w = "layers.0.attention_norm.weight";
  auto base =
      std::vector<Record>{tensor(0, Kind::param, w, 1, 1.0), tensor(0, Kind::grad, w, 2, 1.0),
                          tensor(0, Kind::optim, w + ".exp_avg", 3, 0.1)};
  std::vector<std::vector<Record>> test(2);
  for (int rank = 0; rank < 2; ++rank)
    test[rank] = {
        tensor(0, Kind::param, w, 1, 1.0),
        summand(tensor(0, Kind::grad, w, 10 + static_cast<std::uint64_t>(rank), 0.7), rank, 2),
        tensor(0, Kind::optim, w + ".exp_avg", 4, 0.1 * (1 + 1e-8))};
  write_run(dir / "a", {base});
  write_run(dir / "b", test);
  auto r = diff(dir / "a", dir / "b");
  EXPECT_FALSE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(r.exit_code(), 4) << text_of(r);
  // Beyond what that rounding explains, the update itself differs.
  auto far = fresh_dir("partial_grad_optim_far");
  test[0][2] = test[1][2] = tensor(0, Kind::optim, w + ".exp_avg", 4, 0.1 * (1 + 1e-3));
  write_run(far / "a", {base});
  write_run(far / "b", test);
  auto f = diff(far / "a", far / "b");
  ASSERT_TRUE(f.first_unexplained) << text_of(f);
  EXPECT_EQ(f.first_unexplained->why.rule, Rule::optimizer);
}
