#include <gtest/gtest.h>

#include <iterator>

#include "small_file_system.h"
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
// A hand-written log's header: format 1 (no step ends) unless told.
std::string header(int rank = 0, int world = 1, int spec = 1, int format = 1) {
  lf::Header h;
  h.format_version = format;
  h.rank = rank;
  h.world_size = world;
  h.hash_spec_version = spec;
  return lf::format_header(h) + "\n";
}
// A format 1 log of `records` (no step ends).
std::string format1_log(const std::vector<Record>& records, int rank = 0, int world = 1) {
  std::string text = header(rank, world);
  for (const auto& r : records) text += lf::format_record(r) + "\n";
  return text;
}
}  // namespace

TEST(BadInput, TruncatedLastLineWarnsAndUsesEveryCompletedStep) {
  auto dir = fresh_dir("trunc");
  write_file(dir / "a" / "rank0" / "diff.log", header() + lf::format_record(scalar(0, "loss", 1)) +
                                                   "\n" + lf::format_record(scalar(1, "loss", 1)) +
                                                   "\nstep=2 kind=sca");
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
  write_file(dir / "a" / "rank0" / "diff.log",
             "#numprobe format=11 hash_spec=1 rank=0 world_size=1\n");
  write_run(dir / "b", {{scalar(0, "loss", 1)}});
  EXPECT_NE(
      error_of([&] { diff(dir / "a", dir / "b"); }).find("log format version 11 is not supported"),
      std::string::npos);
}

TEST(BadInput, StepWithoutEndMarkerIsATruncationNotADivergence) {
  // Rank 1 was killed while writing step 1, and the write was cut at a line boundary: the
  // step's first record is there, its second and its end marker are not.
  auto dir = fresh_dir("noend");
  std::vector<std::vector<Record>> ranks(2);
  for (int s = 0; s < 3; ++s) {
    ranks[0].push_back(tensor(s, Kind::grad, "w0", 1, 1.0));
    ranks[0].push_back(scalar(s, "loss", 1));
    ranks[1].push_back(tensor(s, Kind::grad, "w1", 2, 1.0));
    ranks[1].push_back(scalar(s, "aux", 2));
  }
  write_run(dir / "a", ranks);
  write_run(dir / "b", ranks);
  const auto log = dir / "a" / "rank1" / "diff.log";
  std::string text = read_all(log);
  text.resize(text.find('\n', text.find("\nstep=1 ") + 1) + 1);
  ASSERT_EQ(text.substr(text.rfind('\n', text.size() - 2) + 1, 16), "step=1 kind=grad");
  write_file(log, text);

  auto res = diff(dir / "a", dir / "b");
  EXPECT_FALSE(res.first_divergence);  // not "only_test: scalar aux"
  EXPECT_EQ(res.truncated_at, 1);
  EXPECT_EQ(res.paired_steps, 1);
  EXPECT_EQ(res.verdict(), Result::Verdict::incomplete);
  EXPECT_EQ(res.exit_code(), 1);
  ASSERT_EQ(res.base_issues.count_by_type["truncated"], 1);
  EXPECT_NE(res.base_issues.detail[0].message.find(
                log.string() + ":5: step 1 has no end marker (rank killed while writing it?)"),
            std::string::npos)
      << res.base_issues.detail[0].message;
  DiffOptions complete_steps;
  complete_steps.step_max = 0;
  EXPECT_EQ(diff(dir / "a", dir / "b", complete_steps).exit_code(), 0);

  // The same cut in a format 1 log (no end markers) looks like a whole step 1: the record the
  // kill lost shows as a divergence there, and only step 2 is seen as missing.
  std::string v1;
  for (std::size_t pos = text.find('\n') + 1; pos < text.size();) {
    const auto eol = text.find('\n', pos) + 1;
    if (!lf::is_step_end(text.substr(pos, eol - pos))) v1 += text.substr(pos, eol - pos);
    pos = eol;
  }
  write_file(log, header(1, 2) + v1);
  auto old = diff(dir / "a", dir / "b");
  ASSERT_TRUE(old.first_divergence);
  EXPECT_EQ(old.first_divergence->step, 1);
  EXPECT_EQ(old.first_divergence->name, "aux");
  EXPECT_EQ(old.truncated_at, 2);
}

TEST(BadInput, KilledShardedRankLeavesAnIncompleteStepNotAShardGap) {
  // Two ranks hold half of "w" each; rank 1 was killed while writing step 1, after its first
  // record. Step 1 is read, its missing shard is not a tiling error, and the run is incomplete.
  auto dir = fresh_dir("noend_sharded");
  std::vector<std::vector<Record>> ranks(2);
  for (int s = 0; s < 3; ++s)
    for (std::size_t r = 0; r < 2; ++r) {
      ranks[r].push_back(scalar(s, "loss", 1));
      ranks[r].push_back(
          sharded(tensor(s, Kind::grad, "w", 1 + r, 1.0), 2 * static_cast<std::int64_t>(r), 2));
    }
  write_run(dir / "a", ranks);
  write_run(dir / "b", ranks);
  const auto log = dir / "a" / "rank1" / "diff.log";
  std::string text = read_all(log);
  text.resize(text.find('\n', text.find("\nstep=1 ") + 1) + 1);
  write_file(log, text);
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.truncated_at, 1);
  EXPECT_EQ(res.base_issues.count_by_type["shard_tiling"], 0);
  EXPECT_EQ(res.base_issues.errors, 0);
  EXPECT_EQ(res.verdict(), Result::Verdict::incomplete);
}

TEST(BadInput, StepEndDisagreeingWithItsRecordsIsAnErrorOrSkippedWithLenient) {
  auto dir = fresh_dir("badend");
  const auto log = dir / "a" / "diff.log";
  write_file(log, header(0, 1, 1, 2) + lf::format_record(scalar(0, "loss", 1)) + "\n" +
                      lf::format_step_end(0, 1) + "\n" + lf::format_record(scalar(1, "loss", 1)) +
                      "\n" + lf::format_step_end(1, 2) + "\n");
  write_run(dir / "b", {{scalar(0, "loss", 1), scalar(1, "loss", 1)}});
  EXPECT_EQ(error_of([&] { diff(dir / "a", dir / "b"); }),
            log.string() + ":5: step end says 2 records of step 1, read 1");
  auto res = diff(dir / "a", dir / "b", {}, /*lenient=*/true);
  EXPECT_EQ(res.base_issues.count_by_type["skipped_line"], 1);
  EXPECT_FALSE(res.truncated_at);
  EXPECT_EQ(res.exit_code(), 0);
}

TEST(BadInput, FormatOneLogsWithoutEndMarkersStillCompare) {
  auto dir = fresh_dir("format1");
  const std::vector<Record> records = {tensor(0, Kind::grad, "w", 1, 1.0), scalar(0, "loss", 1),
                                       tensor(1, Kind::grad, "w", 1, 1.0), scalar(1, "loss", 1)};
  write_file(dir / "a" / "rank0" / "diff.log", format1_log(records));
  write_file(dir / "b" / "rank0" / "diff.log", format1_log(records));
  auto res = diff(dir / "a", dir / "b");
  EXPECT_EQ(res.exit_code(), 0);
  EXPECT_EQ(res.paired_steps, 2);
  EXPECT_EQ(res.base_issues.count_by_type.size(), 0u);
  auto changed = records;
  changed[3].value = 2;
  write_file(dir / "b" / "rank0" / "diff.log", format1_log(changed));
  res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->step, 1);
}

TEST(BadInput, OlderFormatRunsCompareWithACurrentFormatRun) {
  auto dir = fresh_dir("format12345");
  std::vector<std::vector<Record>> ranks(2);
  for (int s = 0; s < 3; ++s)
    for (std::size_t r = 0; r < 2; ++r) {
      ranks[r].push_back(
          sharded(tensor(s, Kind::grad, "w", 1 + r, 1.0), 2 * static_cast<std::int64_t>(r), 2));
      ranks[r].push_back(scalar(s, "loss", 1));
    }
  for (int r = 0; r < 2; ++r) {
    const auto& records = ranks[static_cast<std::size_t>(r)];
    write_file(dir / "v1" / ("rank" + std::to_string(r)) / "diff.log", format1_log(records, r, 2));
    // Versions 2 (step ends, no nnz or stop line), 3 (no op records), 4 (no partial records), 5
    // (no covers), 6 (no split op records), 7 (no l1 or mhash), 8 (no compiled steps) and 9 (no
    // tied names) hold these records alike.
    for (int version : {2, 3, 4, 5, 6, 7, 8, 9}) {
      std::string text = header(r, 2, 1, version);
      for (int s = 0; s < 3; ++s) {
        for (const auto& rec : records)
          if (rec.step == s) text += lf::format_record(rec) + "\n";
        text += lf::format_step_end(s, 2) + "\n";
      }
      write_file(dir / ("v" + std::to_string(version)) / ("rank" + std::to_string(r)) / "diff.log",
                 text);
    }
  }
  write_run(dir / "v10", ranks);
  ASSERT_EQ(read_all(dir / "v10" / "rank0" / "diff.log").substr(0, 20), "#numprobe format=10 ");
  for (auto [a, b] : {std::pair{"v1", "v10"}, std::pair{"v10", "v1"}, std::pair{"v2", "v10"},
                      std::pair{"v3", "v10"}, std::pair{"v4", "v10"}, std::pair{"v5", "v10"},
                      std::pair{"v6", "v10"}, std::pair{"v7", "v10"}, std::pair{"v8", "v10"},
                      std::pair{"v9", "v10"}}) {
    auto res = diff(dir / a, dir / b);
    EXPECT_EQ(res.exit_code(), 0) << a << " vs " << b;
    EXPECT_EQ(res.paired_steps, 3);
  }
}

TEST(BadInput, EmptyDirectoryUnreadableAndEmptyFilesAreClearErrors) {
  auto dir = fresh_dir("empty");
  std::filesystem::create_directories(dir / "empty");
  EXPECT_NE(error_of([&] { probe::differ::Run r(dir / "empty", {}); }).find("holds no logs"),
            std::string::npos);
  EXPECT_NE(error_of([&] { probe::differ::Run r(dir / "absent", {}); }).find("does not exist"),
            std::string::npos);
  write_file(dir / "zero.log", "");
  EXPECT_NE(error_of([&] { probe::differ::Run r(dir / "zero.log", {}); }).find("empty file"),
            std::string::npos);
  write_file(dir / "junk.log", "hello\n");
  EXPECT_NE(
      error_of([&] { probe::differ::Run r(dir / "junk.log", {}); }).find("not a numprobe log"),
      std::string::npos);
}

TEST(BadInput, DuplicateRecordsAreAnErrorOrCountedWithLenient) {
  auto dir = fresh_dir("dup");
  write_file(dir / "a" / "diff.log", header() + lf::format_record(scalar(0, "loss", 1)) + "\n" +
                                         lf::format_record(scalar(0, "loss", 1)) + "\n");
  write_run(dir / "b", {{scalar(0, "loss", 1)}});
  EXPECT_NE(
      error_of([&] { diff(dir / "a", dir / "b"); }).find("duplicate record scalar loss at step 0"),
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

// A run whose log filled its disk (the probe's stop line ends it): truncated at the step the
// probe could not write, with the probe's reason, and every step before it compared.
TEST(BadInput, LogThatFilledItsDiskIsTruncatedAtTheStepThatFailedWithTheReason) {
  for (auto kind : test_support::SmallFileSystem::kinds()) {
    const std::string what = test_support::SmallFileSystem::name(kind);
    auto dir = fresh_dir("full_disk");
    std::vector<Record> records;
    for (int s = 0; s < 30; ++s)
      for (int i = 0; i < 8; ++i)
        records.push_back(tensor(s, Kind::grad, "w" + std::to_string(i), 100 + i, 1.0));
    write_run(dir / "a", {records});
    test_support::SmallFileSystem fs("differ", kind, 8 * 1024);
    ASSERT_TRUE(fs.ready()) << what;
    std::int64_t failed = -1;
    {
      lf::Header h;
      h.setup = "test";
      probe::LogWriter w(fs.dir() / "rank0" / "diff.log", h);
      for (int s = 0; s < 30 && failed < 0; ++s) {
        std::vector<std::string> lines;
        for (const auto& r : records)
          if (r.step == s) lines.push_back(lf::format_record(r));
        try {
          w.write_step(s, lines);
        } catch (const probe::LogWriteError&) {
          failed = s;
        }
      }
    }
    ASSERT_GT(failed, 0) << what;
    auto res = diff(dir / "a", fs.dir());
    EXPECT_EQ(res.truncated_at, failed) << what;
    EXPECT_EQ(res.paired_steps, failed) << what;
    EXPECT_FALSE(res.first_divergence) << what;
    EXPECT_EQ(res.verdict(), Result::Verdict::incomplete) << what;
    ASSERT_EQ(res.test_issues.count_by_type["truncated"], 1) << what;
    const std::string& message = res.test_issues.detail[0].message;
    EXPECT_NE(message.find("the probe stopped recording at step " + std::to_string(failed) + ": "),
              std::string::npos)
        << what << ": " << message;
    EXPECT_NE(message.find(fs.expected_reason()), std::string::npos) << what << ": " << message;
    EXPECT_NE(message.find("steps before " + std::to_string(failed) + " are used"),
              std::string::npos)
        << what << ": " << message;
  }
}

TEST(BadInput, ABadCoversFieldIsAnErrorNamingTheLine) {
  auto dir = fresh_dir("bad_covers");
  write_run(dir / "b", {{tensor(0, Kind::mb_grad, "experts.w1", 1, 1.0, 0)}});
  Record r = tensor(0, Kind::mb_grad, "experts.w1", 1, 1.0, 0);
  r.covers = {0, 2};
  const std::string good = lf::format_record(r);
  for (auto [covers, message] :
       {std::pair{"[0,0]", "field 'covers' is not ascending without duplicates: '[0,0]'"},
        std::pair{"[2,4]", "field 'covers' does not start at the record's mb=0: '[2,4]'"},
        std::pair{"[0]", "field 'covers' needs at least 2 microbatches: '[0]'"}}) {
    std::string line = good;
    line.replace(line.find("covers=[0,2]") + 7, 5, covers);
    const auto path = dir / "a" / "rank0" / "diff.log";
    write_file(path,
               header(0, 1, 1, lf::kVersion) + line + "\n" + lf::format_step_end(0, 1) + "\n");
    EXPECT_EQ(error_of([&] { diff(dir / "a", dir / "b"); }), path.string() + ":2: " + message)
        << line;
  }
}
