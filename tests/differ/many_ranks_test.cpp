// Runs of more ranks than the process may hold files open: the ranks beyond the open-file
// budget are read step by step (opened, read, closed), with the result of reading them all at once.
#include <gtest/gtest.h>

#include <sstream>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {

// A data-parallel run of `world` ranks: replicated input/output per microbatch, grads
// sharded along rows over the ranks, a replicated loss. `perturb` changes one shard at step 1.
std::vector<std::vector<Record>> ranks_of(int world, bool perturb) {
  std::vector<std::vector<Record>> ranks(static_cast<std::size_t>(world));
  for (int s = 0; s < 3; ++s) {
    for (int r = 0; r < world; ++r) {
      auto& v = ranks[static_cast<std::size_t>(r)];
      v.push_back(tensor(s, Kind::output, "model", 10 + static_cast<std::uint64_t>(s), 1.0, r));
      auto g = tensor(s, Kind::grad, "w", 100 + static_cast<std::uint64_t>(s * world + r), 0.5);
      g.stats.shape = {static_cast<std::int64_t>(world), 2};
      g = sharded(g, r, 1);
      if (perturb && s == 1 && r == world - 2) g.stats.hash ^= 1;
      v.push_back(g);
      v.push_back(scalar(s, "loss", 1.0 / (s + 1)));
    }
  }
  return ranks;
}

std::string compare(const std::filesystem::path& a, const std::filesystem::path& b, int max_open,
                    int* pooled = nullptr) {
  RunOptions base_opt, test_opt;
  base_opt.label = "base";
  test_opt.label = "test";
  base_opt.max_open_files = test_opt.max_open_files = max_open;
  Run base(a, base_opt), test(b, test_opt);
  if (pooled) *pooled = base.pooled_ranks() + test.pooled_ranks();
  Result r = diff_runs(base, test, {});
  std::ostringstream text;
  print_text(r, text, {});
  return text.str() + to_json(r, {});
}

}  // namespace

TEST(ManyRanks, RanksBeyondTheOpenFileBudgetGiveTheSameResult) {
  constexpr int kWorld = 12;
  auto dir = fresh_dir("manyranks");
  write_run(dir / "a", ranks_of(kWorld, false));
  write_run(dir / "b", ranks_of(kWorld, true));
  // The test run's last rank was killed mid-line in its last step: a pooled rank at its end.
  {
    const auto log = dir / "b" / ("rank" + std::to_string(kWorld - 1)) / "diff.log";
    std::string text = read_all(log);
    text.resize(text.rfind("#end") - 7);
    std::ofstream(log, std::ios::binary | std::ios::trunc) << text;
  }
  int pooled = 0;
  const std::string all_open = compare(dir / "a", dir / "b", 0, &pooled);
  EXPECT_EQ(pooled, 0);
  // The grad's elements moved (hash alone differs): a bug-class explanation, the headline.
  ASSERT_TRUE(says(all_open, "FIRST UNEXPLAINED DIVERGENCE step 1 step end grad w")) << all_open;
  ASSERT_TRUE(says(all_open, "rank11/diff.log:10: step 2 has no end marker")) << all_open;
  for (int max_open : {kWorld, kWorld - 1, 4, 2, 1}) {
    SCOPED_TRACE(max_open);
    EXPECT_EQ(compare(dir / "a", dir / "b", max_open, &pooled), all_open);
    EXPECT_EQ(pooled, max_open >= kWorld ? 0 : 2 * (kWorld - std::max(max_open - 1, 0)));
  }
}
