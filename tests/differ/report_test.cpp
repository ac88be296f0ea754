// The terminal report and the --json document: what each section says about the result.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {
std::string line_starting(const std::string& text, const std::string& prefix) {
  const auto at = text.find("\n" + prefix);
  if (at == std::string::npos) return "(no line starting '" + prefix + "')";
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}
}  // namespace

TEST(Report, SideWhoseReplicasDisagreeSaysWhichRanksValueItShows) {
  auto dir = fresh_dir("replicalabel");
  write_run(dir / "a",
            {{tensor(0, Kind::grad, "w", 1, 2.0)}, {tensor(0, Kind::grad, "w", 1, 2.0)}});
  write_run(dir / "b",
            {{tensor(0, Kind::grad, "w", 2, 1.0)}, {tensor(0, Kind::grad, "w", 3, 1.1)}});
  auto res = diff(dir / "a", dir / "b");
  const std::string text = text_of(res);
  EXPECT_TRUE(says(text, "base: hash=0000000000000001 norm=2 float32[4,2] (rank 0-1)\n")) << text;
  EXPECT_TRUE(says(text,
                   "test: hash=0000000000000002 norm=1 float32[4,2] (rank 0; ranks 0-1 "
                   "disagree, see RUN ISSUES)\n"))
      << text;
  const auto j = nlohmann::json::parse(to_json(res, {}));
  const auto& base = j["first_divergence"]["base"];
  const auto& test = j["first_divergence"]["test"];
  EXPECT_FALSE(base.contains("replicas_disagree")) << base;
  EXPECT_EQ(base["ranks"], nlohmann::json({0, 1}));
  EXPECT_EQ(test["replicas_disagree"], true) << test;
  EXPECT_EQ(test["value_ranks"], nlohmann::json({0})) << test;
  EXPECT_EQ(test["hash"], "0000000000000002") << test;
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
  TextOptions every_series;
  every_series.all_series = true;
  const std::string text = text_of(res, every_series);
  EXPECT_TRUE(says(text,
                   "\nscalar aux_loss\nsteps base 2 test 0 paired 0 exact 0 first-divergent 0\n"
                   "MAE - RMSE - max|d| - final d -\n"))
      << text;
  // The three grad series are one line, not three lines of nothing.
  EXPECT_TRUE(says(text, "\n3 grad series: no value in the test run (first: grad w0)\n")) << text;
  EXPECT_FALSE(says(text, "\ngrad w1\n")) << text;
  EXPECT_TRUE(says(text,
                   "0 of 0 mismatching tensor norm series of 3, 3 more with values in one run "
                   "only grouped by kind"))
      << text;
  const auto j = nlohmann::json::parse(to_json(res, {}));
  std::map<std::string, nlohmann::json> series;
  for (const auto& s : j["series"])
    series[s["kind"].get<std::string>() + " " + s["name"].get<std::string>()] = s;
  ASSERT_EQ(series.size(), 5u) << j["series"];
  for (const char* name : {"scalar aux_loss", "grad w0", "grad w1", "grad w2"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(series[name]["paired_steps"], 0);
    // no difference to average
    for (const char* field : {"mae", "rmse", "max_abs_diff", "final_diff"})
      EXPECT_TRUE(series[name][field].is_null()) << field << ": " << series[name];
  }
  EXPECT_EQ(series["scalar loss"]["paired_steps"], 2);  // paired, no difference: zeros, not null
  EXPECT_EQ(series["scalar loss"]["mae"], 0.0);
  EXPECT_EQ(series["scalar loss"]["final_diff"], 0.0);
}

TEST(Report, NanNormHasNoRelativeDifference) {
  auto dir = fresh_dir("nanrel");
  Record bad = tensor(0, Kind::grad, "w", 2, NAN);
  bad.stats.nan = 1;
  write_run(dir / "a", {{tensor(0, Kind::grad, "w", 1, 1.0)}});
  write_run(dir / "b", {{bad}});
  const std::string text = text_of(diff(dir / "a", dir / "b"));
  EXPECT_TRUE(says(text, "relative norm difference: n/a (NaN in test)\n")) << text;
  EXPECT_TRUE(says(text, "\nn/a (NaN in test) step 0 step end grad w")) << text;
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
  EXPECT_TRUE(says(text,
                   "\nbase: hash=0000000000000007 uint8[4,2] (rank 0)\ntest: hash=0000000000000009 "
                   "uint8[4,2] (rank 0)\n"))
      << text;
  EXPECT_EQ(text.find("relative norm difference"), std::string::npos) << text;
  EXPECT_EQ(text.find("note: differs in"), std::string::npos) << text;
  EXPECT_TRUE(says(text,
                   "\nrng cuda mb=0\nsteps base 3 test 3 paired 3 exact 1 first-divergent 1\n"
                   "hash differs at 2 of 3 paired steps\n"))
      << text;
  EXPECT_TRUE(res.top.empty());  // no size of a difference to rank by
}

TEST(Report, SummaryColumnsLineUpForEveryKindName) {
  auto dir = fresh_dir("summarycols");
  std::vector<Record> recs = {tensor(0, Kind::output_grad, "y", 1, 1.0, 0),
                              tensor(0, Kind::grad, "w", 1, 1.0)};
  write_run(dir / "a", {recs});
  const std::string text = text_of(diff(dir / "a", dir / "a"));
  const std::string head = line_starting(text, "SUMMARY"),
                    og = line_starting(text, "  output_grad"), grad = line_starting(text, "  grad");
  EXPECT_EQ(og.size(), head.size()) << text;
  EXPECT_EQ(grad.size(), head.size()) << text;
  // The count sits under its column's name.
  EXPECT_EQ(og.find("1 "), head.find("equal ") + 4) << text;
}
