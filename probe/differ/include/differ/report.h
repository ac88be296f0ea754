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
  std::size_t max_series = 20;  // tensor series lines on the terminal (all go to JSON)
};
void print_text(const Result& r, std::ostream& out, const TextOptions& opt);
std::string to_json(const Result& r, const DiffOptions& opt);

}  // namespace probe::differ
