// Each rank's log parsed on a worker thread (RunOptions::read_ahead) gives what reading on the
// calling thread gives: the same report, the same issues, the same errors naming file and line.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;
namespace lf = probe::log_format;

namespace {

// The whole outcome of comparing a and b: the report text and JSON, or the error.
std::string outcome(const std::filesystem::path& a, const std::filesystem::path& b, bool read_ahead,
                    bool lenient) {
  try {
    RunOptions base_options{lenient, true, {}, "base"}, test_options{lenient, true, {}, "test"};
    base_options.read_ahead = test_options.read_ahead = read_ahead;
    Run base(a, base_options), test(b, test_options);
    Result r = diff_runs(base, test, {});
    std::ostringstream text;
    print_text(r, text, {});
    return text.str() + to_json(r, {});
  } catch (const InputError& e) {
    return std::string("InputError: ") + e.what();
  }
}

void expect_same_outcome(const std::filesystem::path& a, const std::filesystem::path& b,
                         bool lenient, const std::string& expected) {
  const std::string on_workers = outcome(a, b, true, lenient);
  EXPECT_EQ(on_workers, outcome(a, b, false, lenient));
  EXPECT_NE(on_workers.find(expected), std::string::npos) << on_workers.substr(0, 2000);
}

// world ranks, each holding a row shard of every parameter's mb_grad and grad: enough records
// per rank that the worker fills its queue and waits for the merge.
std::vector<std::vector<Record>> sharded_run(int world, int steps, int params, bool perturb) {
  std::vector<std::vector<Record>> ranks(static_cast<std::size_t>(world));
  for (int s = 0; s < steps; ++s)
    for (int p = 0; p < params; ++p)
      for (int r = 0; r < world; ++r) {
        const std::string name = "layers." + std::to_string(p) + ".weight";
        const std::uint64_t hash = 1000003u * static_cast<std::uint64_t>(s * params + p) + r;
        const bool changed = perturb && s >= steps / 2 && p == 3;
        Record mb =
            sharded(tensor(s, Kind::mb_grad, name, hash + (changed ? 7 : 0), 1.0 + p, r), 4 * r, 4);
        mb.stats.shape = {4, 2};
        mb.stats.shard = probe::Shard{{4 * world, 2}, {4 * r, 0}};
        Record grad = mb;
        grad.kind = Kind::grad;
        grad.microbatch.reset();
        ranks[static_cast<std::size_t>(r)].push_back(mb);
        ranks[static_cast<std::size_t>(r)].push_back(grad);
      }
  return ranks;
}

// world ranks holding the same whole grads, params_at(s) of them at step s; with `perturb`,
// the first one (each step's first record) changes from step 6 on.
std::vector<std::vector<Record>> replicated_run(int world, int steps,
                                                const std::function<int(int)>& params_at,
                                                bool perturb) {
  std::vector<std::vector<Record>> ranks(static_cast<std::size_t>(world));
  for (int s = 0; s < steps; ++s)
    for (int p = 0; p < params_at(s); ++p) {
      const std::uint64_t hash = 1000003u * static_cast<std::uint64_t>(s) +
                                 7919u * static_cast<std::uint64_t>(p) +
                                 (perturb && s >= 6 && p == 0 ? 1 : 0);
      Record grad = tensor(s, Kind::grad, "layers." + std::to_string(p) + ".weight", hash, 1.0 + p);
      for (auto& rank : ranks) rank.push_back(grad);
    }
  return ranks;
}

void append_line(const std::filesystem::path& log, const std::string& line) {
  std::ofstream(log, std::ios::binary | std::ios::app) << line;
}

}  // namespace

TEST(ReadAhead, WorkersGiveTheSameReportAsReadingInline) {
  auto dir = fresh_dir("readahead_same");
  write_run(dir / "a", sharded_run(4, 30, 60, false));
  write_run(dir / "b", sharded_run(4, 30, 60, true));
  expect_same_outcome(dir / "a", dir / "b", false, "DIVERGENCE  step");
}

// Read inline, a step's records stay where they were read until it is merged, and the next
// step's first record, read before that, must survive the reuse of their places when a step
// holds more records than the one before (or fewer). Each step's first record is the one that
// differs.
TEST(ReadAhead, StepsOfChangingSizeGiveTheSameReportInlineAndOnWorkers) {
  auto dir = fresh_dir("readahead_step_sizes");
  const std::function<int(int)> growing = [](int s) { return 3 + 4 * s; };
  const std::function<int(int)> shrinking = [](int s) { return 50 - 4 * s; };
  const std::function<int(int)> alternating = [](int s) { return s % 2 ? 20 : 5; };
  for (const auto* params_at : {&growing, &shrinking, &alternating}) {
    const auto a = dir / "a", b = dir / "b";
    std::filesystem::remove_all(a);
    std::filesystem::remove_all(b);
    write_run(a, replicated_run(2, 12, *params_at, false));
    write_run(b, replicated_run(2, 12, *params_at, true));
    expect_same_outcome(a, b, false, "DIVERGENCE  step 6  step end  grad layers.0.weight");
  }
}

TEST(ReadAhead, BadLinesAreNamedByFileAndLineAsWhenReadingInline) {
  auto dir = fresh_dir("readahead_bad");
  write_run(dir / "a", sharded_run(2, 20, 40, false));
  write_run(dir / "b", sharded_run(2, 20, 40, false));
  // A garbled line deep in rank 1 (beyond the worker's first batches), then a truncated tail.
  const auto log = dir / "b" / "rank1" / "diff.log";
  std::string text = read_all(log);
  std::size_t at = 0;
  for (int line = 0; line < 1500; ++line) at = text.find('\n', at) + 1;
  text.insert(at, "step=12 kind=grad name=garbled hash=zz\n");
  std::ofstream(log, std::ios::binary | std::ios::trunc) << text;
  expect_same_outcome(dir / "a", dir / "b", false, log.string() + ":1501:");
  expect_same_outcome(dir / "a", dir / "b", true, "skipped_line");
  append_line(log, "step=20 kind=gr");
  expect_same_outcome(dir / "a", dir / "b", true, "last line has no newline");
}

TEST(ReadAhead, DuplicatesAndStepsOutOfOrderNameTheirLineAsWhenReadingInline) {
  auto dir = fresh_dir("readahead_order");
  write_run(dir / "a", sharded_run(2, 3, 5, false));
  auto b = sharded_run(2, 3, 5, false);
  b[0].insert(b[0].begin() + 3, b[0][2]);  // a duplicate record, line 5 of rank 0's log
  write_run(dir / "b", b);
  expect_same_outcome(dir / "a", dir / "b", false, "diff.log:5: duplicate record");
  expect_same_outcome(dir / "a", dir / "b", true, "duplicate_record");

  auto c = dir / "c" / "rank0" / "diff.log";
  write_run(dir / "c", {{scalar(1, "loss", 1)}});
  // no step end: format 2 keeps it open
  append_line(c, lf::format_record(scalar(0, "loss", 1)) + "\n");
  expect_same_outcome(dir / "a", c, false, "out of step order");
}
