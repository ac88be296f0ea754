// diff_logs --html's data: the pair grid (one cell per series and step, binned past its
// budget), the heat map's row order, the curves' series and the page's JSON.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

#include "differ/report_html.h"
#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {

struct Gathered {
  Result result;
  PairGrid grid;
};

Gathered diff_with_grid(const std::filesystem::path& a, const std::filesystem::path& b,
                        std::size_t max_cells = PairGrid::kDefaultMaxCells,
                        std::size_t max_columns = PairGrid::kDefaultMaxColumns) {
  Gathered g{{}, PairGrid(max_cells, max_columns)};
  DiffOptions opt;
  opt.on_pair = [&](const Pair& p, std::size_t s) { g.grid.add(p, s); };
  g.result = diff(a, b, opt);
  return g;
}

std::size_t series_index(const Result& r, Kind kind, const std::string& name,
                         std::optional<std::int64_t> mb = std::nullopt) {
  for (std::size_t i = 0; i < r.series.size(); ++i)
    if (r.series[i].first.kind == kind && r.series[i].first.name == name && r.series[i].first.mb == mb)
      return i;
  ADD_FAILURE() << "no series " << name;
  return 0;
}

}  // namespace

TEST(PairGrid, OneCellPerSeriesAndStepWithClassFiguresAndAbsence) {
  auto dir = fresh_dir("grid_cells");
  std::vector<Record> a, b;
  for (int s = 0; s < 3; ++s) {
    a.push_back(tensor(s, Kind::grad, "w", 7, 2.0));
    b.push_back(s == 1 ? tensor(s, Kind::grad, "w", 8, 2.5) : tensor(s, Kind::grad, "w", 7, 2.0));
    a.push_back(tensor(s, Kind::grad, "v", 1, 1.0));
    b.push_back(s == 2 ? none(s, Kind::grad, "v") : tensor(s, Kind::grad, "v", 1, 1.0));
    if (s == 0) a.push_back(scalar(s, "aux", 1.0));  // one step of one run only
    a.push_back(scalar(s, "loss", 1.0));
    b.push_back(scalar(s, "loss", s == 2 ? NAN : 1.0));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto g = diff_with_grid(dir / "a", dir / "b");
  const Result& r = g.result;
  ASSERT_EQ(g.grid.columns().size(), 3u);
  EXPECT_EQ(g.grid.steps_per_column(), 1);
  const auto w = series_index(r, Kind::grad, "w"), v = series_index(r, Kind::grad, "v");
  const auto aux = series_index(r, Kind::scalar, "aux"), loss = series_index(r, Kind::scalar, "loss");
  EXPECT_EQ(g.grid.cell(w, 0).code, static_cast<std::uint8_t>(PairClass::equal));
  const GridCell& diff1 = g.grid.cell(w, 1);
  EXPECT_EQ(diff1.code, static_cast<std::uint8_t>(PairClass::different));
  EXPECT_EQ(diff1.base, 2.0);
  EXPECT_EQ(diff1.test, 2.5);
  EXPECT_FLOAT_EQ(diff1.rel, 0.2f);
  EXPECT_EQ(diff1.step, 1);
  EXPECT_EQ(g.grid.cell(v, 2).code, static_cast<std::uint8_t>(PairClass::none_one_side));
  EXPECT_TRUE(std::isnan(g.grid.cell(v, 2).test));
  EXPECT_EQ(g.grid.cell(aux, 0).code, static_cast<std::uint8_t>(PairClass::only_base));
  EXPECT_EQ(g.grid.cell(aux, 1).code, GridCell::kAbsent);
  EXPECT_EQ(g.grid.cell(loss, 2).code, GridCell::kNonfinite);
  // Every compared pair is one cell.
  std::int64_t cells = 0;
  for (std::size_t x = 0; x < g.grid.columns().size(); ++x)
    for (std::size_t s = 0; s < g.grid.series(); ++s) cells += g.grid.cell(s, x).code != GridCell::kAbsent;
  EXPECT_EQ(cells, r.records_compared);
}

TEST(PairGrid, PastItsColumnBudgetMergesStepsKeepingTheMostSeverePair) {
  auto dir = fresh_dir("grid_bins");
  std::vector<Record> a, b;
  for (int s = 0; s < 10; ++s) {
    a.push_back(tensor(s, Kind::grad, "w", 7, 2.0));
    // Step 5 differs a little, step 6 a lot, step 9 is none in the test run.
    const double norm = s == 5 ? 2.0001 : s == 6 ? 3.0 : 2.0;
    b.push_back(s == 9 ? none(s, Kind::grad, "w") : tensor(s, Kind::grad, "w", s == 5 || s == 6 ? 8 : 7, norm));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto g = diff_with_grid(dir / "a", dir / "b", 1000, 4);
  const auto& cols = g.grid.columns();
  ASSERT_LE(cols.size(), 4u);
  EXPECT_EQ(g.grid.steps_per_column(), 4);
  std::int64_t steps = 0;
  for (const auto& c : cols) steps += c.steps;
  EXPECT_EQ(steps, 10);
  EXPECT_EQ(cols[0].first_step, 0);
  EXPECT_EQ(cols[0].last_step, 3);
  EXPECT_EQ(g.grid.cell(0, 0).code, static_cast<std::uint8_t>(PairClass::equal));
  EXPECT_EQ(g.grid.cell(0, 1).step, 6);  // steps 4..7: the larger difference wins
  EXPECT_EQ(g.grid.cell(0, 1).test, 3.0);
  EXPECT_EQ(g.grid.cell(0, 2).code, static_cast<std::uint8_t>(PairClass::none_one_side));
}

TEST(PairGrid, CellBudgetBoundsColumnsTimesSeries) {
  auto dir = fresh_dir("grid_cellbudget");
  std::vector<Record> a;
  for (int s = 0; s < 64; ++s)
    for (int p = 0; p < 8; ++p) a.push_back(tensor(s, Kind::grad, "w" + std::to_string(p), 1, 1.0));
  write_run(dir / "a", {a});
  write_run(dir / "b", {a});
  auto g = diff_with_grid(dir / "a", dir / "b", 8 * 20, 1000);
  EXPECT_LE(g.grid.columns().size() * g.grid.series(), 8u * 20u);
  EXPECT_EQ(g.grid.columns().back().last_step, 63);
}

TEST(HtmlData, HeatMapRowsPutParametersInModelOrderThenForwardRecordsByNameAndMicrobatch) {
  auto dir = fresh_dir("rows");
  std::vector<Record> a;
  for (int mb = 0; mb < 2; ++mb) {
    a.push_back(tensor(0, Kind::rng, "cuda_rng", 1, 1.0, mb));
    a.push_back(tensor(0, Kind::input, "tokens", 1, 1.0, mb));
    a.push_back(tensor(0, Kind::output, "logits", 1, 1.0, mb));
    for (const char* p : {"b", "a"}) a.push_back(tensor(0, Kind::mb_grad, p, 1, 1.0, mb));  // backward order
  }
  for (const char* p : {"a", "b"}) a.push_back(tensor(0, Kind::grad, p, 1, 1.0));  // model order
  a.push_back(scalar(0, "loss", 1.0));
  write_run(dir / "a", {a});
  write_run(dir / "b", {a});
  auto res = diff(dir / "a", dir / "b");
  std::vector<std::string> titles;
  for (std::size_t i : heat_map_rows(res)) {
    const auto& k = res.series[i].first;
    titles.push_back(std::string(probe::kind_name(k.kind)) + " " + k.name +
                     (k.mb ? " " + std::to_string(*k.mb) : ""));
  }
  const std::vector<std::string> expected = {
      "grad a", "mb_grad a 0", "mb_grad a 1", "grad b", "mb_grad b 0", "mb_grad b 1",
      "rng cuda_rng 0", "rng cuda_rng 1", "input tokens 0", "input tokens 1",
      "output logits 0", "output logits 1", "scalar loss"};
  EXPECT_EQ(titles, expected);
}

TEST(HtmlData, PageDataCarriesTheJsonReportTheGridAndFullPrecisionCurves) {
  auto dir = fresh_dir("pagedata");
  std::vector<Record> a, b;
  for (int s = 0; s < 4; ++s) {
    a.push_back(tensor(s, Kind::grad, "w", 7, 2.0));
    b.push_back(tensor(s, Kind::grad, "w", s >= 2 ? 8 : 7, s >= 2 ? 2.0000000000000004 : 2.0));
    a.push_back(scalar(s, "loss", 0.1 * s));
    b.push_back(scalar(s, "loss", 0.1 * s));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto g = diff_with_grid(dir / "a", dir / "b");
  const auto j = nlohmann::json::parse(html_data_json(g.result, {}, g.grid));
  EXPECT_EQ(j["report"], nlohmann::json::parse(to_json(g.result, {})));  // the --json, unchanged
  EXPECT_EQ(j["grid"]["columns"], 4);
  EXPECT_EQ(j["grid"]["rows"].size(), 2u);
  EXPECT_EQ(j["grid"]["first_divergence"]["column"], 2);
  // 2 rows x 4 columns: 8 code bytes, 8 float32 per figure, base64.
  EXPECT_EQ(j["grid"]["code"].get<std::string>().size(), 12u);
  EXPECT_EQ(j["grid"]["rel"].get<std::string>().size(), 44u);
  // The curves: the first divergence's series first, full precision (float32 would round it).
  ASSERT_GE(j["curves"].size(), 2u);
  EXPECT_EQ(j["report"]["series"][j["curves"][0]["series"].get<std::size_t>()]["name"], "w");
  EXPECT_EQ(j["curves"][0]["test"][2].get<double>(), 2.0000000000000004);
  EXPECT_EQ(j["curves"][0]["steps"], nlohmann::json({0, 1, 2, 3}));
}

TEST(HtmlData, NamesCannotCloseThePagesScriptElement) {
  auto dir = fresh_dir("scriptsafe");
  write_run(dir / "a", {{tensor(0, Kind::grad, "</script><script>alert(1)</script>", 1, 1.0)}});
  write_run(dir / "b", {{tensor(0, Kind::grad, "</script><script>alert(1)</script>", 2, 1.0)}});
  auto g = diff_with_grid(dir / "a", dir / "b");
  if (!html_report_available()) GTEST_SKIP() << html_report_unavailable_reason();
  std::ostringstream page;
  write_html(g.result, {}, g.grid, page);
  const std::string html = page.str();
  const auto data = html.find("id=\"numprobe-data\">");
  ASSERT_NE(data, std::string::npos);
  EXPECT_EQ(html.find("<script>alert(1)"), std::string::npos);
  EXPECT_NE(html.find("\\u003c/script>\\u003cscript>alert(1)"), std::string::npos);
}
