// diff_logs --html: one self-contained HTML page (docs/diff-logs.md, "HTML report").
//
// The page's data is the --json document plus what the JSON leaves out: every pair's figures
// per series and step (the heat map and the curves), gathered by a PairGrid while diff_runs
// compares (DiffOptions::on_pair). The page's script, its stylesheet and the plotting libraries
// (Chart.js, D3; Debian's packages) are embedded at build time, so the file opens offline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "differ/diff.h"

namespace probe::differ {

// One heat map cell: the pair of one series at one step (or, once steps are binned, the most
// severe pair of the bin).
struct GridCell {
  // The pair's class (its PairClass value), kNonfinite where a side holds NaN/Inf, kAbsent
  // where neither run has the record at that step.
  static constexpr std::uint8_t kNonfinite = kPairClassCount;
  static constexpr std::uint8_t kAbsent = 255;
  std::uint8_t code = kAbsent;
  // The pair's verdict (docs/diff-logs.md, "Noise or bug"): none where it is no divergence or
  // has no explanation; `why` is 1 + the index of its explanation in PairGrid::rules(),
  // 0 for none. Two bytes beside `code`: a cell stays 32 bytes.
  enum class Verdict : std::uint8_t { none, noise, bug };
  Verdict verdict = Verdict::none;
  std::uint8_t why = 0;
  float rel = 0;  // the pair's relative norm (value) difference
  // The series' value (a tensor's norm, a scalar's value) on each side; NaN where that side
  // has none (absent, `none`, unsupported).
  double base = std::numeric_limits<double>::quiet_NaN();
  double test = std::numeric_limits<double>::quiet_NaN();
  std::int64_t step = -1;  // the step the figures are from
};

// Every pair's cell by series and step, in bounded memory: past `max_cells` cells (or
// `max_columns` columns) neighbouring columns are merged pairwise, so a column then spans
// several steps and shows its most severe pair. Defaults keep a --html file near 20 MB.
class PairGrid {
 public:
  static constexpr std::size_t kDefaultMaxCells = 1'100'000;
  static constexpr std::size_t kDefaultMaxColumns = 1000;
  explicit PairGrid(std::size_t max_cells = kDefaultMaxCells,
                    std::size_t max_columns = kDefaultMaxColumns);

  // Steps must come in ascending order (diff_runs' order).
  void add(const Pair& p, std::size_t series);

  // The explanations the cells name (rule and category), first-seen order. The rule table
  // holds fewer than 31 (rule, category) pairs, so the page packs `why` into 5 bits of the
  // cell's code byte.
  struct Explained {
    Rule rule;
    bool bug = false;
    friend bool operator==(const Explained&, const Explained&) = default;
  };
  const std::vector<Explained>& rules() const { return rules_; }

  struct Column {
    std::int64_t first_step = 0, last_step = 0;
    std::int64_t steps = 0;       // compared steps it spans
    std::vector<GridCell> cells;  // by series index; shorter where later series are absent
  };
  const std::vector<Column>& columns() const { return columns_; }
  std::size_t series() const { return series_; }
  std::int64_t steps_per_column() const { return bin_; }
  const GridCell& cell(std::size_t series, std::size_t column) const;

 private:
  void start_column(std::int64_t step);
  void merge_columns();
  std::uint8_t rule_index(const Explanation& why);
  std::size_t max_cells_, max_columns_;
  std::vector<Explained> rules_;
  std::vector<Column> columns_;
  std::size_t series_ = 0;
  std::int64_t bin_ = 1;  // steps per column
  std::int64_t current_step_ = std::numeric_limits<std::int64_t>::min();
};

// Which of two cells a merged column shows: NaN/Inf, then `none` on one side, a record in one
// run only, different, within tolerance, unsupported, equal, absent; within a class a bug
// before an unexplained pair before noise; then the larger difference.
bool more_severe(const GridCell& a, const GridCell& b);

// Heat map rows as series indices: parameters in model order (grad, then each parameter's
// mb_grads by microbatch), then forward records (rng, input, output, tap) and output_grad by
// name in first-seen order and microbatch, then scalars.
std::vector<std::size_t> heat_map_rows(const Result& r);

// The series the curves panel plots: the first divergence's, every scalar (up to
// max_scalars), then the mismatching tensor series, earliest first divergence first (up to
// max_tensors).
std::vector<std::size_t> curve_series(const Result& r, std::size_t max_scalars = 16,
                                      std::size_t max_tensors = 12);

// The data the page renders (a JSON text): {"report": the --json document, "grid": the heat
// map, "curves": full-precision series}. docs/diff-logs.md describes it.
std::string html_data_json(const Result& r, const DiffOptions& opt, const PairGrid& grid);

// Whether this build embedded the plotting libraries (found at configure time).
bool html_report_available();
// Why not, naming the packages to install.
std::string html_report_unavailable_reason();

// Writes the page. Throws InputError when the libraries were not embedded.
void write_html(const Result& r, const DiffOptions& opt, const PairGrid& grid, std::ostream& out);

}  // namespace probe::differ
