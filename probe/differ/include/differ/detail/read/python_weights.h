// autoparallel NumericsLogger's weights.log (log_model_weights): "name='<param>' hash=H" lines,
// one block per call, read as `param` records, the k-th block step k.
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

struct PythonWeightLine {
  std::string name;
  std::uint64_t hash = 0;  // torch.hash_tensor value; FNV-1a of hash_text when not one integer
  std::string hash_text;
};
// Returns nullopt for lines that do not start with "name="; throws log_format::ParseError for
// one whose fields cannot be read.
std::optional<PythonWeightLine> parse_python_weight_line(std::string_view line);
bool is_python_weights_line(std::string_view line);
// The whole file as `param` records. Bad lines: InputError naming file:line, or (lenient) a
// skipped_line issue.
std::vector<Record> load_python_weights(const std::filesystem::path& path, bool lenient,
                                        IssueLog& issues, const std::string& label);

}  // namespace probe::differ
