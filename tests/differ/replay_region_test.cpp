// The replay region of an op finding and numprobe_replay's verdict file as diff_logs reads it
// (docs/diff-logs.md, "Replay verdict").
#include <gtest/gtest.h>

#include <fstream>

#include "differ/replay_verdict.h"
#include "differ_test_util.h"

using namespace differ_test;
using probe::Kind;
using probe::Phase;
using probe::Record;
namespace differ = probe::differ;

namespace {

Record op(const std::string& name, std::uint64_t out, std::vector<std::optional<std::uint64_t>> in,
          int dump) {
  Record r = tensor(0, Kind::op, name, out, static_cast<double>(out % 97) + 1, 0);
  r.phase = Phase::forward;
  r.inputs = std::move(in);
  if (dump >= 0) r.dump = "dumps/step0/" + std::to_string(dump) + ".pt";
  return r;
}

std::vector<std::string> names(const std::vector<differ::ReplayOp>& ops) {
  std::vector<std::string> out;
  for (const auto& o : ops) out.push_back(o.name);
  return out;
}

Record with_norm(Record r, double norm) {
  r.stats.norm = norm;
  return r;
}

// base: matmul -> softmax -> matmul; test: the softmax differs (in the last bits: the same
// norm) and a cast follows it.
void write_softmax_runs(const std::filesystem::path& dir, bool dumped) {
  const int k = dumped ? 0 : -1000;
  write_run(dir / "a", {{op("s/aten::matmul#0", 10, {1, 2}, k + 0),
                         with_norm(op("s/aten::softmax#0", 11, {10}, k + 1), 5),
                         op("s/aten::matmul#1", 12, {11, 3}, k + 2)}});
  write_run(dir / "b", {{op("s/aten::matmul#0", 10, {1, 2}, k + 0),
                         with_norm(op("s/aten::softmax#0", 21, {10}, k + 1), 5),
                         with_norm(op("s/aten::to#0", 22, {21}, k + 2), 5),
                         op("s/aten::matmul#1", 23, {22, 3}, k + 3)}});
}

}  // namespace

TEST(ReplayRegion, AnAlignedRootCauseRunsToTheInputOfTheNextOpBothExecute) {
  auto dir = fresh_dir("region_aligned");
  write_softmax_runs(dir, true);
  auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.ops.region);
  const auto& g = *r.ops.region;
  EXPECT_EQ(g.root_cause, "s/aten::softmax#0");
  EXPECT_EQ(g.end, "s/aten::matmul#1");
  EXPECT_EQ(names(g.base), std::vector<std::string>({"s/aten::softmax#0"}));
  EXPECT_EQ(names(g.test), std::vector<std::string>({"s/aten::softmax#0", "s/aten::to#0"}));
  EXPECT_EQ(g.base_inputs, std::vector<std::uint64_t>({10}));
  EXPECT_EQ(g.test_inputs, std::vector<std::uint64_t>({10}));
  EXPECT_EQ(g.base_output, 11u);
  EXPECT_EQ(g.test_output, 22u);
  // Dump files resolved in the rank's directory.
  EXPECT_EQ(g.test[1].dump, (dir / "b" / "rank0" / "dumps/step0/2.pt").string());
  ASSERT_TRUE(g.dumped());
  differ::attach_replay_verdict(r);
  ASSERT_TRUE(r.replay_command);
  EXPECT_EQ(*r.replay_command,
            "numprobe_replay " + (dir / "a").string() + " " + (dir / "b").string());
  EXPECT_NE(text_of(r).find("REPLAY  the ops where the runs part were dumped"), std::string::npos)
      << text_of(r);
  EXPECT_NE(differ::to_json(r, {}).find("\"replay_command\": \"numprobe_replay "),
            std::string::npos);
}

TEST(ReplayRegion, OpsOfOneRunOnlyAreTheirRunsRegionAndTheOtherHandsOnItsValue) {
  auto dir = fresh_dir("region_inserted");
  write_run(dir / "a",
            {{op("s/aten::softmax#0", 11, {10}, 0), op("s/aten::matmul#4", 12, {11, 3}, 1)}});
  write_run(dir / "b", {{op("s/aten::softmax#0", 11, {10}, 0),
                         with_norm(op("s/aten::mul#8", 21, {11}, 1), 12.0012),
                         op("s/aten::matmul#4", 22, {21, 3}, 2)}});
  const auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.ops.root_cause);
  ASSERT_TRUE(r.ops.region);
  EXPECT_EQ(r.ops.region->root_cause, "s/aten::mul#8");
  EXPECT_TRUE(r.ops.region->base.empty());
  EXPECT_EQ(names(r.ops.region->test), std::vector<std::string>({"s/aten::mul#8"}));
  EXPECT_EQ(r.ops.region->base_inputs, std::vector<std::uint64_t>({11}));
  EXPECT_EQ(r.ops.region->test_inputs, std::vector<std::uint64_t>({11}));
  EXPECT_EQ(r.ops.region->base_output, 11u);
}

TEST(ReplayRegion, AnOpAskedForByNameStartsItsRegionAndItsInputsDiffer) {
  auto dir = fresh_dir("region_named");
  write_softmax_runs(dir, true);
  differ::DiffOptions o;
  o.replay_op = "s/aten::matmul#1";
  const auto r = diff(dir / "a", dir / "b", o);
  ASSERT_TRUE(r.ops.region);
  EXPECT_EQ(r.ops.region->root_cause, "s/aten::matmul#1");
  EXPECT_EQ(names(r.ops.region->base), std::vector<std::string>({"s/aten::matmul#1"}));
  // numprobe_replay: inputs differ
  EXPECT_NE(r.ops.region->base_inputs, r.ops.region->test_inputs);
}

TEST(ReplayRegion, WithoutDumpsNoCommandIsOffered) {
  auto dir = fresh_dir("region_undumped");
  write_softmax_runs(dir, false);
  auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.ops.region);
  EXPECT_FALSE(r.ops.region->dumped());
  differ::attach_replay_verdict(r);
  EXPECT_FALSE(r.replay_command);
  EXPECT_EQ(text_of(r).find("REPLAY"), std::string::npos);
}

TEST(ReplayVerdictFile, DiffLogsShowsAVerdictAboutItsRegionAndSetsAsideOthers) {
  auto dir = fresh_dir("region_verdict");
  write_softmax_runs(dir, true);
  auto r = diff(dir / "a", dir / "b");
  ASSERT_TRUE(r.ops.region);
  differ::ReplayVerdict v;
  differ::describe_region(*r.ops.region, v);
  v.verdict = "precision: test";
  v.evidence = {
      "test: off its float64 reference by 6.5e+04 rounding units of float32 (tolerance 77.2)"};
  v.test = differ::ReplayRunFigures{
      "float32", 65000, 77.2, {1, 2}, 0.0315, 0.0314, true, "", {"cast", "softmax"}};
  const auto file = differ::default_replay_file(dir / "b");
  EXPECT_EQ(file, dir / "b" / "replay.json");
  write_file(file, differ::replay_verdict_json(v));
  // Read back whole.
  const auto back = differ::parse_replay_verdict(differ::replay_verdict_json(v), "x.json");
  EXPECT_EQ(back.verdict, v.verdict);
  EXPECT_EQ(back.test_ops, v.test_ops);
  ASSERT_TRUE(back.test);
  EXPECT_EQ(back.test->element, std::vector<std::int64_t>({1, 2}));
  EXPECT_FALSE(back.base);
  differ::attach_replay_verdict(r);
  ASSERT_TRUE(r.replay);
  EXPECT_FALSE(r.replay_command);
  const std::string text = text_of(r);
  EXPECT_NE(text.find("REPLAY VERDICT  precision: test  (" + file.string() + ")"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("6.5e+04 rounding units"), std::string::npos);
  EXPECT_NE(differ::to_json(r, {}).find("\"verdict\": \"precision: test\""), std::string::npos);
  // Runs made again since: the file's values are not these runs'.
  v.test_output ^= 1;
  write_file(file, differ::replay_verdict_json(v));
  auto again = diff(dir / "a", dir / "b");
  differ::attach_replay_verdict(again);
  EXPECT_FALSE(again.replay);
  EXPECT_NE(again.replay_note.find("left out: its runs' values differ"), std::string::npos)
      << again.replay_note;
  EXPECT_TRUE(again.replay_command);
  // Not a verdict file: said, and left out.
  write_file(file, "{\"schema\": \"something else\"}");
  auto bad = diff(dir / "a", dir / "b");
  differ::attach_replay_verdict(bad);
  EXPECT_FALSE(bad.replay);
  EXPECT_NE(bad.replay_note.find("not a numprobe.replay/1 document"), std::string::npos)
      << bad.replay_note;
}
