#include <gtest/gtest.h>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;
namespace lf = probe::log_format;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}
void write_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}
std::string header(int rank = 0, int world = 1, int spec = 1) {
  lf::Header h;
  h.rank = rank;
  h.world_size = world;
  h.hash_spec_version = spec;
  return lf::format_header(h) + "\n";
}
}  // namespace

TEST(BadInput, TruncatedLastLineWarnsAndUsesEveryCompletedStep) {
  auto dir = fresh_dir("trunc");
  write_file(dir / "a" / "rank0" / "diff.log",
             header() + lf::format_record(scalar(0, "loss", 1)) + "\n" +
                 lf::format_record(scalar(1, "loss", 1)) + "\nstep=2 kind=sca");
  write_run(dir / "b", {{scalar(0, "loss", 1), scalar(1, "loss", 1)}});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.base_issues.count_by_type["truncated"], 1);
  EXPECT_EQ(res.base.steps, 2);
  EXPECT_EQ(res.exit_code(), 0);
}

TEST(BadInput, KilledRankEndsTheComparisonAtItsIncompleteStep) {
  auto dir = fresh_dir("killed");
  // Rank 1 died while writing step 1; rank 0 and the other run went on to step 3.
  std::vector<Record> r0, other;
  for (int s = 0; s < 4; ++s) {
    r0.push_back(scalar(s, "loss", 1));
    other.push_back(scalar(s, "loss", 1));
    other.push_back(tensor(s, Kind::grad, "w", 1, 1.0));
  }
  write_run(dir / "a", {r0, {}}, /*world_size=*/2);
  write_file(dir / "a" / "rank1" / "diff.log",
             header(1, 2) + lf::format_record(tensor(0, Kind::grad, "w", 1, 1.0)) + "\n" +
                 lf::format_record(scalar(0, "loss", 1)) + "\n" +
                 lf::format_record(tensor(1, Kind::grad, "w", 1, 1.0)).substr(0, 30));
  write_run(dir / "b", {other});
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.truncated_at, 1);
  EXPECT_EQ(res.paired_steps, 1);
  EXPECT_EQ(res.base.steps, 4);  // every step is read; those from 1 on are not compared
  // Every completed step agrees, but the run is not complete: not "equal".
  EXPECT_EQ(res.verdict(), Result::Verdict::incomplete);
  EXPECT_EQ(res.exit_code(), 1);
  // Restricted to the complete steps, the comparison is whole.
  DiffOptions complete_steps;
  complete_steps.step_max = 0;
  auto restricted = diff(dir / "a", dir / "b", complete_steps);
  EXPECT_FALSE(restricted.truncated_at);
  EXPECT_EQ(restricted.exit_code(), 0);
}

TEST(BadInput, GarbageLineIsAnErrorWithFileAndLineOrSkippedWithLenient) {
  auto dir = fresh_dir("garbage");
  auto path = dir / "a" / "rank0" / "diff.log";
  write_file(path, header() + lf::format_record(scalar(0, "loss", 1)) + "\nthis is garbage\n" +
                       lf::format_record(scalar(1, "loss", 1)) + "\n");
  write_run(dir / "b", {{scalar(0, "loss", 1), scalar(1, "loss", 1)}});
  EXPECT_EQ(error_of([&] { diff(dir / "a", dir / "b"); }),
            path.string() + ":3: unexpected token 'this'");
  auto res = diff(dir / "a", dir / "b", {}, /*lenient=*/true);
  EXPECT_EQ(res.base_issues.count_by_type["skipped_line"], 1);
  EXPECT_EQ(res.exit_code(), 0);
}

TEST(BadInput, MissingRankIsReported) {
  auto dir = fresh_dir("missing");
  write_run(dir / "a", {{scalar(0, "loss", 1)}, {}, {scalar(0, "loss", 1)}}, /*world_size=*/3);
  write_run(dir / "b", {{scalar(0, "loss", 1)}});
  auto res = diff(dir / "a", dir / "b");
  ASSERT_EQ(res.base_issues.count_by_type["missing_rank"], 1);
  EXPECT_NE(res.base_issues.detail[0].message.find("rank1/diff.log is missing"), std::string::npos);
  EXPECT_EQ(res.exit_code(), 1);
}

TEST(BadInput, DifferentHashSpecVersionsAreAClearError) {
  auto dir = fresh_dir("spec");
  write_run(dir / "a", {{scalar(0, "loss", 1)}}, -1, 1);
  write_run(dir / "b", {{scalar(0, "loss", 1)}}, -1, 2);
  EXPECT_NE(error_of([&] { diff(dir / "a", dir / "b"); }).find("different hash spec versions"),
            std::string::npos);
}

TEST(BadInput, OtherFormatVersionIsAClearError) {
  auto dir = fresh_dir("format");
  write_file(dir / "a" / "rank0" / "diff.log", "#numprobe format=2 hash_spec=1 rank=0 world_size=1\n");
  write_run(dir / "b", {{scalar(0, "loss", 1)}});
  EXPECT_NE(error_of([&] { diff(dir / "a", dir / "b"); }).find("log format version 2 is not supported"),
            std::string::npos);
}

TEST(BadInput, EmptyDirectoryUnreadableAndEmptyFilesAreClearErrors) {
  auto dir = fresh_dir("empty");
  std::filesystem::create_directories(dir / "empty");
  EXPECT_NE(error_of([&] { probe::differ::Run r(dir / "empty", {}); }).find("holds no logs"), std::string::npos);
  EXPECT_NE(error_of([&] { probe::differ::Run r(dir / "absent", {}); }).find("does not exist"), std::string::npos);
  write_file(dir / "zero.log", "");
  EXPECT_NE(error_of([&] { probe::differ::Run r(dir / "zero.log", {}); }).find("empty file"), std::string::npos);
  write_file(dir / "junk.log", "hello\n");
  EXPECT_NE(error_of([&] { probe::differ::Run r(dir / "junk.log", {}); }).find("not a numprobe log"), std::string::npos);
}

TEST(BadInput, DuplicateRecordsAreAnErrorOrCountedWithLenient) {
  auto dir = fresh_dir("dup");
  write_file(dir / "a" / "diff.log", header() + lf::format_record(scalar(0, "loss", 1)) + "\n" +
                                         lf::format_record(scalar(0, "loss", 1)) + "\n");
  write_run(dir / "b", {{scalar(0, "loss", 1)}});
  EXPECT_NE(error_of([&] { diff(dir / "a", dir / "b"); }).find("duplicate record scalar loss at step 0"),
            std::string::npos);
  auto res = diff(dir / "a", dir / "b", {}, true);
  EXPECT_EQ(res.base_issues.count_by_type["duplicate_record"], 1);
}

TEST(BadInput, StepsGoingBackwardsInOneRankAreAnError) {
  auto dir = fresh_dir("backwards");
  write_file(dir / "a.log", header() + lf::format_record(scalar(1, "loss", 1)) + "\n" +
                                lf::format_record(scalar(0, "loss", 1)) + "\n");
  EXPECT_NE(error_of([&] { diff(dir / "a.log", dir / "a.log"); }).find("out of step order"),
            std::string::npos);
}

TEST(BadInput, SingleLogFileIsAcceptedAsARun) {
  auto dir = fresh_dir("single");
  write_run(dir / "a", {{scalar(0, "loss", 1)}});
  auto res = diff(dir / "a" / "rank0" / "diff.log", dir / "a");
  EXPECT_EQ(res.exit_code(), 0);
}
