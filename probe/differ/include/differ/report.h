// The two reports of a comparison: the terminal text and the --json document
// (schema numprobe.diff_logs/1, docs/diff-logs.md).
#pragma once

#include <cstddef>
#include <ostream>
#include <string>

#include "differ/options.h"
#include "differ/result.h"

namespace probe::differ {

struct TextOptions {
  bool color = false;
  // PAIRED STATISTICS shows the scalar series and the headline's; all_series (--all-series)
  // adds the mismatching tensor norm series, at most max_series of them. JSON holds every one.
  bool all_series = false;
  std::size_t max_series = 20;
};
void print_text(const Result& r, std::ostream& out, const TextOptions& opt);
// The headline alone, as print_text prints it: FIRST UNEXPLAINED DIVERGENCE with its cause (or
// that every difference is noise).
void print_headline(const Result& r, std::ostream& out, const TextOptions& opt);
std::string to_json(const Result& r, const DiffOptions& opt);

}  // namespace probe::differ
