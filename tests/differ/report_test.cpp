// The terminal report and the --json document: what each section says about the result.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {
std::string text_of(const Result& r, std::size_t max_series = 20) {
  std::ostringstream out;
  TextOptions opt;
  opt.max_series = max_series;
  print_text(r, out, opt);
  return out.str();
}

std::string line_starting(const std::string& text, const std::string& prefix) {
  const auto at = text.find("\n" + prefix);
  if (at == std::string::npos) return "(no line starting '" + prefix + "')";
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}
}  // namespace

TEST(Report, SideWhoseReplicasDisagreeSaysWhichRanksValueItShows) {
  auto dir = fresh_dir("replicalabel");
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 1, 2.0)}, {tensor(0, Kind::grad, "w", 1, 2.0)}});
  write_run(dir / "b", {{tensor(0, Kind::grad, "w", 2, 1.0)}, {tensor(0, Kind::grad, "w", 3, 1.1)}});
  auto res = diff(dir / "a", dir / "b");
  const std::string text = text_of(res);
  EXPECT_NE(text.find("  base: hash=0000000000000001 norm=2 float32[4,2]  (rank 0-1)\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("  test: hash=0000000000000002 norm=1 float32[4,2]  (rank 0; ranks 0-1 "
                      "disagree, see RUN ISSUES)\n"),
            std::string::npos)
      << text;
  const std::string j = to_json(res, {});
  EXPECT_NE(j.find("\"replicas_disagree\": true"), std::string::npos) << j;
  EXPECT_NE(j.find("\"value_ranks\": [\n     0\n    ]"), std::string::npos) << j;
}

TEST(Report, SeriesWithoutPairedStepsShowNoStatisticsInsteadOfZeros) {
  auto dir = fresh_dir("nopairs");
  std::vector<Record> a, b;
  for (int s = 0; s < 2; ++s) {
    a.push_back(scalar(s, "loss", 1.0));
    b.push_back(scalar(s, "loss", 1.0));
    a.push_back(scalar(s, "aux_loss", 0.5));  // the test run does not log it
    for (int p = 0; p < 3; ++p) {
      a.push_back(tensor(s, Kind::grad, "w" + std::to_string(p), 1, 1.0));
      b.push_back(none(s, Kind::grad, "w" + std::to_string(p)));
    }
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto res = diff(dir / "a", dir / "b");
  const std::string text = text_of(res);
  EXPECT_NE(text.find("  scalar aux_loss\n    steps base 2 test 0 paired 0 exact 0 first-divergent 0\n"
                      "    MAE -  RMSE -  max|d| -  final d -\n"),
            std::string::npos)
      << text;
  // The three grad series are one line, not three lines of nothing.
  EXPECT_NE(text.find("\n  3 grad series: no value in the test run (first: grad w0)\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("  grad w1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("0 of 0 mismatching tensor norm series of 3, 3 more with values in one run "
                      "only grouped by kind"),
            std::string::npos)
      << text;
  const std::string j = to_json(res, {});
  EXPECT_NE(j.find("\"mae\": null"), std::string::npos) << j;
  EXPECT_NE(j.find("\"final_diff\": null"), std::string::npos) << j;
  EXPECT_NE(j.find("\"mae\": 0.0"), std::string::npos) << j;  // loss: paired, no difference
}

TEST(Report, NanNormHasNoRelativeDifference) {
  auto dir = fresh_dir("nanrel");
  Record bad = tensor(0, Kind::grad, "w", 2, NAN);
  bad.stats.nan = 1;
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 1, 1.0)}});
  write_run(dir / "b", {{bad}});
  const std::string text = text_of(diff(dir / "a", dir / "b"));
  EXPECT_NE(text.find("  relative norm difference: n/a (NaN in test)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  n/a (NaN in test)        step 0  step end  grad w"), std::string::npos) << text;
}

TEST(Report, RngRecordsShowTheirHashNotStatisticsOfStateBytes) {
  auto dir = fresh_dir("rngtext");
  std::vector<Record> a, b;
  for (int s = 0; s < 3; ++s) {
    Record ra = tensor(s, Kind::rng, "cuda", 7, 3000.0, 0), rb = ra;
    ra.stats.dtype = rb.stats.dtype = "uint8";
    if (s > 0) {
      rb.stats.hash = 8 + static_cast<std::uint64_t>(s);
      rb.stats.norm = 2000.0;
    }
    a.push_back(ra);
    b.push_back(rb);
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto res = diff(dir / "a", dir / "b");
  const std::string text = text_of(res);
  EXPECT_NE(text.find("  base: hash=0000000000000007 uint8[4,2]  (rank 0)\n  test: hash=0000000000000009 "
                      "uint8[4,2]  (rank 0)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("relative norm difference"), std::string::npos) << text;
  EXPECT_EQ(text.find("note: differs in"), std::string::npos) << text;
  EXPECT_NE(text.find("  rng cuda mb=0\n    steps base 3 test 3 paired 3 exact 1 first-divergent 1\n"
                      "    hash differs at 2 of 3 paired steps\n"),
            std::string::npos)
      << text;
  EXPECT_TRUE(res.top.empty());  // no size of a difference to rank by
}

TEST(Report, SummaryColumnsLineUpForEveryKindName) {
  auto dir = fresh_dir("summarycols");
  std::vector<Record> recs = {tensor(0, Kind::output_grad, "y", 1, 1.0, 0), tensor(0, Kind::grad, "w", 1, 1.0)};
  write_run(dir / "a", {recs});
  const std::string text = text_of(diff(dir / "a", dir / "a"));
  const std::string head = line_starting(text, "SUMMARY"), og = line_starting(text, "  output_grad"),
                    grad = line_starting(text, "  grad");
  EXPECT_EQ(og.size(), head.size()) << text;
  EXPECT_EQ(grad.size(), head.size()) << text;
  // The count sits under its column's name.
  EXPECT_EQ(og.find("1 "), head.find("equal ") + 4) << text;
}
