// Op records of a split scope against a run that computes the whole (docs/diff-logs.md, "Split
// ops"): the ranks' pieces composed along the dim the other run's shape asks for, ops aligned by
// what they compute where the layouts run other ops, a row-parallel op's summands set aside, and
// pieces of another arrangement or inputs of other ops never read as a divergence.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "differ_test_util.h"

using namespace differ_test;
using probe::Kind;
using probe::Phase;
using probe::Record;

namespace {

Record whole_op(const std::string& name, std::uint64_t out,
                std::vector<std::optional<std::uint64_t>> in, double norm,
                Phase phase = Phase::forward) {
  Record r = tensor(0, Kind::op, name, out, norm, 0);
  r.phase = phase;
  r.inputs = std::move(in);
  return r;
}

// Rank `rank` of 2's record: its own output hash and shape, the hashes its output has as the
// piece along each dim (cand), and each input's (incand).
Record piece_op(const std::string& name, int rank, std::uint64_t local,
                std::vector<std::int64_t> shape, std::vector<std::uint64_t> cand,
                std::vector<std::optional<std::uint64_t>> in,
                std::vector<std::vector<std::uint64_t>> incand, double norm,
                Phase phase = Phase::forward) {
  Record r = whole_op(name, local, std::move(in), norm, phase);
  r.stats.shape = std::move(shape);
  r.split.rank = rank;
  r.split.size = 2;
  r.split.output = std::move(cand);
  r.split.inputs = std::move(incand);
  return r;
}

}  // namespace

// The column-parallel op's pieces compose to the whole op's output along dim 0 and the softmax's
// input pieces to its input: the softmax, whose output differs, is the root cause, although a
// re-layout of one run only shifted the op numbers.
TEST(SplitOp, PiecesComposeAndTheRootCauseIsNamedAcrossAnotherOpSequence) {
  auto dir = fresh_dir("split_root");
  const double half = std::sqrt(2.0);
  write_run(dir / "a", {{whole_op("s/aten::mm#0", 100, {1}, 2.0),
                         whole_op("s/aten::softmax#0", 200, {100}, 1.0)}});
  std::vector<std::vector<Record>> test(2);
  for (int r = 0; r < 2; ++r) {
    const std::uint64_t u = static_cast<std::uint64_t>(r);
    // a re-layout
    test[u] = {piece_op("s/aten::mm#0", r, 7 + u, {3, 3}, {8 + u, 9 + u}, {1}, {{1, 1}}, 1.0),
               piece_op("s/aten::mm#1", r, 50 + u, {2, 2}, {r == 0 ? 60u : 40u, 30 + u}, {1},
                        {{1, 1}}, half),
               piece_op("s/aten::softmax#0", r, 70 + u, {2, 2}, {r == 0 ? 80u : 130u, 90 + u},
                        {50 + u}, {{r == 0 ? 60u : 40u, 30 + u}}, 1.01 / half)};
  }
  write_run(dir / "b", test);
  const auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.ops.root_cause) << text_of(r);
  EXPECT_EQ(r.ops.root_cause->name, "s/aten::softmax#0");
  EXPECT_EQ(count(r, Kind::op, probe::differ::PairClass::equal), 1);  // mm#1 is base's mm#0
  EXPECT_EQ(r.ops.only_test_count, 1);
  EXPECT_EQ(r.ops.only_base_count, 0);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->name, "s/aten::softmax#0");
  EXPECT_EQ(r.exit_code(), 1);
}

// A row-parallel op's ranks hold summands of the whole op's output: set aside as a partial sum,
// and the op after the (untraced) reduction differs by its rounding alone.
TEST(SplitOp, SummandsAreSetAsideAndTheOpAfterTheReductionInheritsTheirNoise) {
  auto dir = fresh_dir("split_partial");
  write_run(dir / "a", {{whole_op("s/aten::mm#0", 300, {1}, 2.0),
                         whole_op("s/aten::add#0", 400, {300, 5}, 3.0)}});
  std::vector<std::vector<Record>> test(2);
  for (int r = 0; r < 2; ++r) {
    const std::uint64_t u = static_cast<std::uint64_t>(r);
    test[u] = {piece_op("s/aten::mm#0", r, 301 + u, {4, 2}, {310 + u, 320 + u}, {1}, {{1, 1}},
                        1.4 + 0.1 * r),
               piece_op("s/aten::add#0", r, 401, {4, 2}, {410 + u, 420 + u}, {303, 5},
                        {{330 + u, 340 + u}, {5, 5}}, 3.0000001)};
  }
  write_run(dir / "b", test);
  const auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.partial.by_kind.count(Kind::op) ? r.partial.by_kind.at(Kind::op) : 0, 1)
      << text_of(r);
  EXPECT_FALSE(r.ops.root_cause) << r.ops.root_cause->message;
  EXPECT_EQ(r.exit_code(), 4) << text_of(r);
}

// Pieces along a dim that flattens a split dim with a whole one hold the whole's elements in
// another order: no pair (each an op of one run), never elements_moved.
TEST(SplitOp, PiecesOfAnotherArrangementAreNoPair) {
  auto dir = fresh_dir("split_relayout");
  write_run(dir / "a", {{whole_op("s/aten::bmm#0", 500, {1}, 2.0), scalar(0, "loss", 1)}});
  std::vector<std::vector<Record>> test(2);
  for (int r = 0; r < 2; ++r) {
    const std::uint64_t u = static_cast<std::uint64_t>(r);
    test[u] = {piece_op("s/aten::bmm#0", r, 501 + u, {2, 2}, {r == 0 ? 700u : 77u, 60 + u}, {1},
                        {{1, 1}}, std::sqrt(2.0)),
               scalar(0, "loss", 1)};
  }
  write_run(dir / "b", test);
  const auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.ops.only_base_count, 1) << text_of(r);
  EXPECT_EQ(r.ops.only_test_count, 1);
  EXPECT_EQ(r.exit_code(), 0) << text_of(r);
}

// Gradients added as they arrive: where the test run's backward adds another gradient first, the
// add aligned with base's by type and shape reads a sum made by other ops (of another norm): no
// pair, so no difference is read into it. (The test run's records are of a split scope,
// replicated on its two ranks: runs with the same op names in the same order and no split
// record pair by name, unchecked.)
TEST(SplitOp, AnAddOfOtherGradientsIsNoPair) {
  auto dir = fresh_dir("split_accumulate");
  const auto bwd = Phase::backward;
  write_run(dir / "a", {{whole_op("s/aten::mm#0/aten::mm#0", 10, {1}, 1.0, bwd),
                         whole_op("s/aten::mm#1/aten::mm#0", 11, {2}, 2.0, bwd),
                         whole_op("s/aten::mm#2/aten::mm#0", 12, {3}, 3.0, bwd),
                         whole_op("s/aten::mm#2/aten::add_#0", 13, {10, 12}, 3.2, bwd)}});
  std::vector<std::vector<Record>> test(2);
  for (int r = 0; r < 2; ++r) {
    const auto replicated = [&](const std::string& name, std::uint64_t out,
                                std::vector<std::optional<std::uint64_t>> in, double norm) {
      std::vector<std::vector<std::uint64_t>> incand;
      for (std::size_t i = 0; i < in.size(); ++i) incand.push_back({100 + out + i, 200 + out + i});
      return piece_op(name, r, out, {4, 2}, {300 + out + r, 400 + out + r}, std::move(in),
                      std::move(incand), norm, bwd);
    };
    test[static_cast<std::size_t>(r)] = {
        replicated("s/aten::mm#0/aten::mm#0", 10, {1}, 1.0),
        replicated("s/aten::mm#1/aten::mm#0", 11, {2}, 2.0),
        replicated("s/aten::mm#2/aten::mm#0", 12, {3}, 3.0),
        replicated("s/aten::mm#2/aten::add_#0", 14, {11, 12}, 3.6)};
  }
  write_run(dir / "b", test);
  const auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(count(r, Kind::op, probe::differ::PairClass::equal), 3) << text_of(r);
  EXPECT_EQ(r.ops.only_base_count, 1) << text_of(r);
  EXPECT_EQ(r.ops.only_test_count, 1);
  EXPECT_EQ(r.exit_code(), 0) << text_of(r);
}

// A split op that not every rank of its split logged has no whole: a warning names it, and the
// record is one rank's, never a partial sum of the ranks that are there.
TEST(SplitOp, ASplitOpMissingARankIsAWarningAndOneRanksRecord) {
  auto dir = fresh_dir("split_incomplete");
  write_run(dir / "a", {{whole_op("s/aten::mm#0", 300, {1}, 2.0), scalar(0, "loss", 1)}});
  write_run(dir / "b", {{piece_op("s/aten::mm#0", 0, 301, {4, 2}, {310, 320}, {1}, {{1, 1}}, 1.4),
                         scalar(0, "loss", 1)},
                        {scalar(0, "loss", 1)}});
  auto r = diff(dir / "a", dir / "b");
  EXPECT_EQ(r.test_issues.count_by_type["split_incomplete"], 1) << text_of(r);
  EXPECT_EQ(r.partial.pairs, 0);
  EXPECT_EQ(count(r, Kind::op, probe::differ::PairClass::different), 1);
}

// After a row-parallel sum no op's inputs agree: the first op whose output differs beyond the
// noise its inputs carry is named instead of a root cause.
TEST(SplitOp, TheFirstOpBeyondTheNoiseItsInputsCarryIsNamed) {
  auto dir = fresh_dir("split_beyond");
  write_run(dir / "a", {{whole_op("s/aten::mm#0", 300, {1}, 2.0),
                         whole_op("s/aten::add#0", 400, {300, 5}, 3.0),
                         whole_op("s/aten::mul#0", 500, {400, 6}, 4.0)}});
  std::vector<std::vector<Record>> test(2);
  for (int r = 0; r < 2; ++r) {
    const std::uint64_t u = static_cast<std::uint64_t>(r);
    test[u] = {piece_op("s/aten::mm#0", r, 301 + u, {4, 2}, {310 + u, 320 + u}, {1}, {{1, 1}},
                        1.4 + 0.1 * r),
               piece_op("s/aten::add#0", r, 401, {4, 2}, {410 + u, 420 + u}, {303, 5},
                        {{330 + u, 340 + u}, {5, 5}}, 3.0000001),
               piece_op("s/aten::mul#0", r, 501, {4, 2}, {510 + u, 520 + u}, {401, 6},
                        {{430 + u, 440 + u}, {6, 6}}, 4.4)};
  }
  write_run(dir / "b", test);
  const auto r = diff(dir / "a", dir / "b");
  EXPECT_FALSE(r.ops.root_cause) << r.ops.root_cause->message;
  ASSERT_TRUE(r.ops.beyond_noise) << text_of(r);
  EXPECT_EQ(r.ops.beyond_noise->name, "s/aten::mul#0");
  ASSERT_TRUE(r.ops.inherited);
  EXPECT_EQ(r.ops.inherited->name, "s/aten::add#0");
  EXPECT_NE(text_of(r).find("[op_beyond_noise] s/aten::mul#0"), std::string::npos) << text_of(r);
  const auto json = nlohmann::json::parse(probe::differ::to_json(r, {}));
  // the page's #op-beyond-noise
  EXPECT_EQ(json["op_trace"]["beyond_noise"]["name"], "s/aten::mul#0");
  EXPECT_EQ(r.exit_code(), 1);
}
