// autoparallel's NumericsLogger logs: one line per tensor, read whole into records.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "differ/result.h"
#include "probe/record.h"

namespace probe::differ {

// "[prefix] hash=H, norm=N" or "[prefix] None". Returns nullopt for lines that are not of that
// shape; throws log_format::ParseError for a bracketed line whose fields cannot be read.
struct PythonLine {
  std::string prefix;
  bool none = false;
  std::optional<std::uint64_t> hash;  // torch.hash_tensor value
  std::string hash_text;  // when not one integer (complex tensors): hash is FNV-1a of it
  double norm = 0;
};
std::optional<PythonLine> parse_python_line(std::string_view line);

// Every record of a NumericsLogger log, sorted by step (the k-th time a prefix is logged is
// step k). "[mb<N> fwd out]" is the output record `model_name` of microbatch N. Bad lines
// throw InputError, or are counted in `issues` when lenient.
std::vector<Record> load_python_log(const std::filesystem::path& p, bool lenient, IssueLog& issues,
                                    const std::string& label, const std::string& model_name);

}  // namespace probe::differ
