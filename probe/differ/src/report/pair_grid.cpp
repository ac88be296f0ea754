// PairGrid: every pair's figures by series and step for --html, in bounded memory.
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string_view>

#include "differ/report_html.h"

namespace probe::differ {

namespace {

// The number a series follows on one side: a scalar's value, a tensor's norm; NaN for none.
double side_value(const Side& s) {
  if (!s.present) return std::numeric_limits<double>::quiet_NaN();
  const Record& r = s.merged.record;
  if (r.state == Record::State::scalar) return r.value;
  if (r.state == Record::State::tensor && !r.stats.unsupported) return r.stats.norm;
  return std::numeric_limits<double>::quiet_NaN();
}

bool holds_nonfinite(const Side& s) {
  if (!s.present) return false;
  const Record& r = s.merged.record;
  if (r.state == Record::State::scalar) return !std::isfinite(r.value);
  if (r.state != Record::State::tensor || r.stats.unsupported) return false;
  return r.stats.nan > 0 || r.stats.inf > 0 || !std::isfinite(r.stats.norm);
}

GridCell::Verdict verdict_of(const Pair& p) {
  if (!p.why.rule) return GridCell::Verdict::none;
  return p.why.bug ? GridCell::Verdict::bug : GridCell::Verdict::noise;
}

// Within a class: noise, then a pair without explanation, then a bug.
int verdict_rank(GridCell::Verdict v) {
  switch (v) {
    case GridCell::Verdict::noise: return 0;
    case GridCell::Verdict::none: return 1;
    case GridCell::Verdict::bug: return 2;
  }
  return 1;
}

int severity(std::uint8_t code) {
  // Index: the code (PairClass values, kNonfinite); kAbsent below all.
  static constexpr std::array<int, kPairClassCount + 1> kRank = {
      /*equal*/ 1,         /*within_tol*/ 3,  /*different*/ 4,
      /*only_base*/ 5,     /*only_test*/ 5,
      /*none_one_side*/ 6, /*unsupported*/ 2, /*nonfinite*/ 7};
  return code < kRank.size() ? kRank[code] : 0;
}

}  // namespace

bool more_severe(const GridCell& a, const GridCell& b) {
  const int sa = severity(a.code), sb = severity(b.code);
  if (sa != sb) return sa > sb;
  const int va = verdict_rank(a.verdict), vb = verdict_rank(b.verdict);
  if (va != vb) return va > vb;
  return a.rel > b.rel;
}

PairGrid::PairGrid(std::size_t max_cells, std::size_t max_columns)
    : max_cells_(max_cells), max_columns_(max_columns < 2 ? 2 : max_columns) {}

void PairGrid::add(const Pair& p, std::size_t series) {
  if (p.step != current_step_) {
    if (p.step < current_step_) throw std::logic_error("PairGrid: steps must come in order");
    current_step_ = p.step;
    start_column(p.step);
  }
  if (series >= series_) series_ = series + 1;
  GridCell c;
  c.code = static_cast<std::uint8_t>(p.pair_class);
  if (holds_nonfinite(p.base) || holds_nonfinite(p.test)) c.code = GridCell::kNonfinite;
  c.verdict = verdict_of(p);
  if (c.verdict != GridCell::Verdict::none) c.why = rule_index(p.why);
  c.rel = static_cast<float>(p.rel_diff);
  c.base = side_value(p.base);
  c.test = side_value(p.test);
  c.step = p.step;
  auto& cells = columns_.back().cells;
  if (series >= cells.size()) cells.resize(series + 1);
  if (cells[series].code == GridCell::kAbsent || more_severe(c, cells[series])) cells[series] = c;
}

std::uint8_t PairGrid::rule_index(const Explanation& why) {
  const Explained e{*why.rule, why.bug};
  auto it = std::find(rules_.begin(), rules_.end(), e);
  if (it == rules_.end()) it = rules_.insert(rules_.end(), e);
  return static_cast<std::uint8_t>(1 + (it - rules_.begin()));
}

void PairGrid::start_column(std::int64_t step) {
  if (!columns_.empty() && columns_.back().steps < bin_) {
    auto& last = columns_.back();
    last.last_step = step;
    ++last.steps;
    return;
  }
  // A new column: merge first when it would exceed the budget, so that memory stays bounded.
  while (!columns_.empty() &&
         (columns_.size() + 1 > max_columns_ || (columns_.size() + 1) * series_ > max_cells_))
    merge_columns();
  if (!columns_.empty() && columns_.back().steps < bin_) {  // the merge left room in the last
    auto& last = columns_.back();
    last.last_step = step;
    ++last.steps;
    return;
  }
  columns_.push_back(Column{step, step, 1, {}});
}

void PairGrid::merge_columns() {
  std::vector<Column> merged;
  merged.reserve((columns_.size() + 1) / 2);
  for (std::size_t i = 0; i < columns_.size(); i += 2) {
    Column c = std::move(columns_[i]);
    if (i + 1 < columns_.size()) {
      Column& next = columns_[i + 1];
      c.last_step = next.last_step;
      c.steps += next.steps;
      if (next.cells.size() > c.cells.size()) c.cells.resize(next.cells.size());
      for (std::size_t s = 0; s < next.cells.size(); ++s)
        if (next.cells[s].code != GridCell::kAbsent &&
            (c.cells[s].code == GridCell::kAbsent || more_severe(next.cells[s], c.cells[s])))
          c.cells[s] = next.cells[s];
    }
    merged.push_back(std::move(c));
  }
  columns_ = std::move(merged);
  bin_ *= 2;
}

const GridCell& PairGrid::cell(std::size_t series, std::size_t column) const {
  static const GridCell kAbsentCell{};
  const auto& cells = columns_.at(column).cells;
  return series < cells.size() ? cells[series] : kAbsentCell;
}

}  // namespace probe::differ
