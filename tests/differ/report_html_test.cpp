// diff_logs --html's data: the pair grid (one cell per series and step, binned past its
// budget), the heat map's row order, the curves' series and the page's JSON.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
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
  opt.on_restart = [&] { g.grid = PairGrid(max_cells, max_columns); };  // as diff_logs does
  g.result = diff(a, b, opt);
  return g;
}

std::size_t series_index(const Result& r, Kind kind, const std::string& name,
                         std::optional<std::int64_t> mb = std::nullopt) {
  for (std::size_t i = 0; i < r.series.size(); ++i)
    if (r.series[i].first.kind == kind && r.series[i].first.name == name &&
        r.series[i].first.mb == mb)
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
  const auto aux = series_index(r, Kind::scalar, "aux"),
             loss = series_index(r, Kind::scalar, "loss");
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
    for (std::size_t s = 0; s < g.grid.series(); ++s)
      cells += g.grid.cell(s, x).code != GridCell::kAbsent;
  EXPECT_EQ(cells, r.records_compared);
}

TEST(PairGrid, PastItsColumnBudgetMergesStepsKeepingTheMostSeverePair) {
  auto dir = fresh_dir("grid_bins");
  std::vector<Record> a, b;
  for (int s = 0; s < 10; ++s) {
    a.push_back(tensor(s, Kind::grad, "w", 7, 2.0));
    // Step 5 differs a little, step 6 a lot, step 9 is none in the test run.
    const double norm = s == 5 ? 2.0001 : s == 6 ? 3.0 : 2.0;
    b.push_back(s == 9 ? none(s, Kind::grad, "w")
                       : tensor(s, Kind::grad, "w", s == 5 || s == 6 ? 8 : 7, norm));
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

namespace {

// A float32 grad "w" over 8 bitwise-equal mb_grads of norm 1: its norm `grad_norm` and hash
// say whether the runs' reductions differ by summation order (noise) or otherwise.
std::vector<Record> reduction_step(std::int64_t step, double grad_norm, std::uint64_t grad_hash) {
  std::vector<Record> r;
  for (int mb = 0; mb < 8; ++mb)
    r.push_back(tensor(step, Kind::mb_grad, "w", 10 + static_cast<std::uint64_t>(mb), 1.0, mb));
  r.push_back(tensor(step, Kind::grad, "w", grad_hash, grad_norm));
  return r;
}

// Within the summation-order bound of 8 float32 mb_grads (2 * 8 * 2^-24): noise.
constexpr double kNoiseNorm = 8.0 * (1 + 0.9 * 2.0 * 8 * 0x1p-24);

std::string decode_base64(const std::string& text) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t bits = 0;
  int have = 0;
  for (char c : text) {
    if (c == '=') break;
    bits = bits << 6 | static_cast<std::uint32_t>(kAlphabet.find(c));
    if ((have += 6) >= 8) out += static_cast<char>(bits >> (have -= 8) & 0xff);
  }
  return out;
}

}  // namespace

TEST(PairGrid, EachCellCarriesItsPairsVerdictAndRule) {
  auto dir = fresh_dir("grid_verdict");
  std::vector<Record> a, b;
  for (int s = 0; s < 3; ++s) {
    const auto ra = reduction_step(s, 8.0, 1);
    const auto rb = reduction_step(s, s == 0 ? kNoiseNorm : 8.0, s == 0 ? 2 : 1);  // step 0: noise
    a.insert(a.end(), ra.begin(), ra.end());
    b.insert(b.end(), rb.begin(), rb.end());
    a.push_back(tensor(s, Kind::grad, "v", 5, 1.0));
    // step 1: a bug
    b.push_back(s == 1 ? none(s, Kind::grad, "v") : tensor(s, Kind::grad, "v", 5, 1.0));
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto g = diff_with_grid(dir / "a", dir / "b");
  const Result& r = g.result;
  const auto w = series_index(r, Kind::grad, "w"), v = series_index(r, Kind::grad, "v");
  const auto& rules = g.grid.rules();
  auto rule_of = [&](const GridCell& c) { return rules.at(c.why - 1); };

  const GridCell& noise = g.grid.cell(w, 0);
  EXPECT_EQ(noise.code, static_cast<std::uint8_t>(PairClass::different));
  EXPECT_EQ(noise.verdict, GridCell::Verdict::noise);
  ASSERT_GT(noise.why, 0);
  EXPECT_EQ(rule_of(noise).rule, Rule::summation_order);
  EXPECT_FALSE(rule_of(noise).bug);

  const GridCell& bug = g.grid.cell(v, 1);
  EXPECT_EQ(bug.code, static_cast<std::uint8_t>(PairClass::none_one_side));
  EXPECT_EQ(bug.verdict, GridCell::Verdict::bug);
  ASSERT_GT(bug.why, 0);
  EXPECT_EQ(rule_of(bug).rule, Rule::none_gradient);
  EXPECT_TRUE(rule_of(bug).bug);

  // equal: no verdict
  for (const auto& [series, step] : {std::pair{w, 1}, {w, 2}, {v, 0}, {v, 2}}) {
    EXPECT_EQ(g.grid.cell(series, step).verdict, GridCell::Verdict::none) << series << " " << step;
    EXPECT_EQ(g.grid.cell(series, step).why, 0);
  }
  EXPECT_EQ(rules.size(), 2u);  // each explanation once, however many cells name it

  // On the page: the class in the code byte's low 3 bits, 1 + the rule's index above them.
  const auto j = nlohmann::json::parse(html_data_json(r, {}, g.grid));
  const auto& grid = j["grid"];
  const std::string code = decode_base64(grid["code"].get<std::string>());
  const auto rows = grid["rows"].get<std::vector<std::size_t>>();
  const std::size_t ncols = grid["columns"].get<std::size_t>();
  auto page_code = [&](std::size_t series, std::size_t col) {
    const auto row =
        static_cast<std::size_t>(std::find(rows.begin(), rows.end(), series) - rows.begin());
    return static_cast<std::uint8_t>(code.at(row * ncols + col));
  };
  auto page_rule = [&](std::uint8_t c) { return grid["rules"].at((c >> 3) - 1); };
  EXPECT_EQ(page_code(w, 0) & 7, static_cast<int>(PairClass::different));
  EXPECT_EQ(page_rule(page_code(w, 0)),
            (nlohmann::json{{"rule", "summation_order"}, {"category", "noise"}}));
  EXPECT_EQ(page_code(v, 1) & 7, static_cast<int>(PairClass::none_one_side));
  EXPECT_EQ(page_rule(page_code(v, 1)),
            (nlohmann::json{{"rule", "none_gradient"}, {"category", "bug"}}));
  EXPECT_EQ(page_code(w, 1), static_cast<std::uint8_t>(PairClass::equal));  // no explanation bits
  EXPECT_EQ(grid["first_unexplained"],
            (nlohmann::json{{"row", std::find(rows.begin(), rows.end(), v) - rows.begin()},
                            {"column", 1}}));
}

TEST(PairGrid, AMergedColumnShowsABugBeforeLargerNoise) {
  // Step 0: noise (relative difference ~1e-7); step 1: the same elements in other places, a
  // bug of relative difference 0. Merged into one column, the bug is what the column shows.
  auto dir = fresh_dir("grid_verdict_merge");
  std::vector<Record> a, b;
  for (int s = 0; s < 4; ++s) {
    const auto ra = reduction_step(s, 8.0, 1);
    const auto rb = reduction_step(s, s == 0 ? kNoiseNorm : 8.0, s <= 1 ? 2 : 1);
    a.insert(a.end(), ra.begin(), ra.end());
    b.insert(b.end(), rb.begin(), rb.end());
  }
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  auto g = diff_with_grid(dir / "a", dir / "b", 1000, 2);
  const auto w = series_index(g.result, Kind::grad, "w");
  ASSERT_EQ(g.grid.columns().front().steps, 2);
  const GridCell& shown = g.grid.cell(w, 0);
  EXPECT_EQ(shown.step, 1);
  EXPECT_EQ(shown.verdict, GridCell::Verdict::bug);
  EXPECT_EQ(g.grid.rules().at(shown.why - 1).rule, Rule::elements_moved);
}

TEST(HtmlData, HeatMapRowsPutParametersInModelOrderThenForwardRecordsByNameAndMicrobatch) {
  auto dir = fresh_dir("rows");
  std::vector<Record> a;
  for (int mb = 0; mb < 2; ++mb) {
    a.push_back(tensor(0, Kind::rng, "cuda_rng", 1, 1.0, mb));
    a.push_back(tensor(0, Kind::input, "tokens", 1, 1.0, mb));
    a.push_back(tensor(0, Kind::output, "logits", 1, 1.0, mb));
    // backward order
    for (const char* p : {"b", "a"}) a.push_back(tensor(0, Kind::mb_grad, p, 1, 1.0, mb));
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
      "grad a",          "mb_grad a 0",     "mb_grad a 1",    "grad b",         "mb_grad b 0",
      "mb_grad b 1",     "rng cuda_rng 0",  "rng cuda_rng 1", "input tokens 0", "input tokens 1",
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
