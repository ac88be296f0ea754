// Randomized corruption of logs, and the checked-in corpus: reading bad input must end in a
// clear InputError (or, with --lenient, counted warnings), never a crash.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <regex>
#include <sstream>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {

// What became of the inputs: compared (a result, perhaps with warnings) or rejected with an
// InputError. A rejection must say where: a file and a line ("path:LINE: ...").
struct Outcomes {
  int compared = 0, rejected = 0;
  std::vector<std::string> unlocated;  // rejections that name no file and line
};

bool names_file_and_line(const std::string& message) {
  static const std::regex located(R"((^|[ '(])/[^ ':]+:[0-9]+: )");
  return std::regex_search(message, located);
}

// Runs the whole pipeline (both modes); fails the test on anything but InputError.
void survive(const std::filesystem::path& a, const std::filesystem::path& b, Outcomes& outcomes) {
  for (bool lenient : {false, true}) {
    try {
      probe::differ::Run base(a, {lenient, true, {}, "base"});
      probe::differ::Run test(b, {lenient, true, {}, "test"});
      Result r = diff_runs(base, test, {});
      std::ostringstream out;
      print_text(r, out, {});
      (void)to_json(r, {});
      ++outcomes.compared;
    } catch (const InputError& e) {
      ++outcomes.rejected;
      if (!names_file_and_line(e.what())) outcomes.unlocated.push_back(e.what());
    }
  }
}

std::string first_few(const std::vector<std::string>& messages) {
  std::string s;
  for (std::size_t i = 0; i < messages.size() && i < 5; ++i) s += "\n  " + messages[i];
  return s;
}

}  // namespace

TEST(Fuzz, RandomlyCorruptedLogsNeverCrash) {
  auto dir = fresh_dir("fuzz");
  std::vector<std::vector<Record>> ranks(2);
  for (int s = 0; s < 4; ++s) {
    for (int r = 0; r < 2; ++r) {
      auto& v = ranks[static_cast<std::size_t>(r)];
      v.push_back(tensor(s, Kind::input, "x", 5, 1.0, r));
      v.push_back(sharded(tensor(s, Kind::grad, "module.w", 1 + r, 1.0), 2 * r, 2));
      auto t = tensor(s, Kind::tap, "t", 9, 1.0, r);
      t.stats.torch_hash = 3;
      v.push_back(t);
      v.push_back(none(s, Kind::grad, "n"));
      v.push_back(scalar(s, "loss", 1.0 / (s + 1)));
    }
  }
  write_run(dir / "good", ranks);
  const std::string rank0 = read_all(dir / "good" / "rank0" / "diff.log");
  const std::string rank1 = read_all(dir / "good" / "rank1" / "diff.log");
  std::mt19937_64 rng(20240611);
  const std::string alphabet = "0123456789abcdef=[],@ \n%-.eE+kindstepnamehashnormnone#";
  // NUMPROBE_FUZZ_ITERATIONS raises the count for a longer local run (e.g. under ASan).
  const char* env = std::getenv("NUMPROBE_FUZZ_ITERATIONS");
  const int iterations = env ? std::atoi(env) : 400;
  Outcomes outcomes;
  for (int iter = 0; iter < iterations; ++iter) {
    std::string text = iter % 2 ? rank0 : rank1;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const std::size_t pos = rng() % text.size();
      switch (rng() % 4) {
        case 0: text[pos] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.erase(pos, 1 + rng() % 8); break;
        case 2: text.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        case 3: text.resize(pos); break;
      }
    }
    auto bad = dir / "bad";
    std::filesystem::remove_all(bad);
    std::filesystem::create_directories(bad / "rank0");
    std::filesystem::create_directories(bad / "rank1");
    std::ofstream(bad / "rank0" / "diff.log", std::ios::binary) << (iter % 2 ? text : rank0);
    std::ofstream(bad / "rank1" / "diff.log", std::ios::binary) << (iter % 2 ? rank1 : text);
    survive(dir / "good", bad, outcomes);
    std::ofstream(dir / "single.log", std::ios::binary) << text;
    survive(dir / "single.log", dir / "good", outcomes);
  }
  // Both outcomes occur: corruption that is caught, and corruption a run survives (--lenient,
  // or edits that leave a valid log).
  EXPECT_GT(outcomes.rejected, iterations / 10) << outcomes.compared << " compared";
  EXPECT_GT(outcomes.compared, iterations / 10) << outcomes.rejected << " rejected";
  EXPECT_TRUE(outcomes.unlocated.empty())
      << outcomes.unlocated.size() << " of " << outcomes.rejected
      << " rejections name no file and line:" << first_few(outcomes.unlocated);
}

TEST(Fuzz, CheckedInCorpusNeverCrashes) {
  int files = 0;
  Outcomes outcomes;
  for (const auto& entry : std::filesystem::directory_iterator(NUMPROBE_DIFFER_CORPUS)) {
    SCOPED_TRACE(entry.path().string());
    survive(entry.path(), entry.path(), outcomes);
    ++files;
  }
  EXPECT_GE(files, 5);
  EXPECT_GT(outcomes.rejected, 0);
  EXPECT_GT(outcomes.compared, 0);
  EXPECT_TRUE(outcomes.unlocated.empty()) << first_few(outcomes.unlocated);
}
