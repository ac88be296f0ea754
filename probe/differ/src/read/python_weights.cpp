// autoparallel NumericsLogger's weights.log: `log_model_weights` appends one block per call,
// a line `name='<param>' hash=<torch.hash_tensor>` per parameter (then per buffer). The k-th
// block is read as step k's `param` records: call it once per step, before the forward.
#include <charconv>
#include <fstream>
#include <unordered_map>

#include "differ/detail/read/python_weights.h"
#include "differ/run.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace lf = probe::log_format;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Python's repr of a str: '...' (or "..." when it holds a single quote), backslash escapes.
// Returns the string and the rest of the line after the closing quote.
std::pair<std::string, std::string_view> parse_repr(std::string_view s) {
  if (s.empty() || (s.front() != '\'' && s.front() != '"'))
    throw lf::ParseError("name= is not a quoted string");
  const char quote = s.front();
  std::string out;
  for (std::size_t i = 1; i < s.size(); ++i) {
    if (s[i] == quote) return {out, s.substr(i + 1)};
    if (s[i] == '\\' && i + 1 < s.size()) ++i;
    out += s[i];
  }
  throw lf::ParseError("name= has no closing quote");
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// `hash=` as NumericsLogger's hash_tensor prints it: an integer, `DTensor(<integer>)` (the
// local shard's), or for complex tensors `real=..., imag=...)`, kept as text.
void parse_hash(std::string_view text, PythonWeightLine& out) {
  text = trim(text);
  std::string_view value = text;
  while (value.substr(0, 8) == "DTensor(" && value.back() == ')')
    value = value.substr(8, value.size() - 9);
  std::uint64_t u = 0;
  std::int64_t i = 0;
  const char* end = value.data() + value.size();
  if (auto [p, ec] = std::from_chars(value.data(), end, u);
      ec == std::errc() && p == end && !value.empty()) {
    out.hash = u;
  } else if (auto [p2, ec2] = std::from_chars(value.data(), end, i);
             ec2 == std::errc() && p2 == end && !value.empty()) {
    out.hash = static_cast<std::uint64_t>(i);
  } else {
    if (text.empty()) throw lf::ParseError("empty hash=");
    out.hash_text = std::string(text);
    out.hash = fnv1a(text);
  }
}

}  // namespace

std::optional<PythonWeightLine> parse_python_weight_line(std::string_view line) {
  line = trim(line);
  if (line.substr(0, 5) != "name=") return std::nullopt;
  auto [name, rest] = parse_repr(line.substr(5));
  if (name.empty()) throw lf::ParseError("empty name=");
  rest = trim(rest);
  if (rest.substr(0, 5) != "hash=") throw lf::ParseError("expected ' hash=' after the name");
  PythonWeightLine out;
  out.name = std::move(name);
  parse_hash(rest.substr(5), out);
  return out;
}

bool is_python_weights_line(std::string_view line) { return trim(line).substr(0, 5) == "name="; }

std::vector<Record> load_python_weights(const std::filesystem::path& path, bool lenient,
                                        IssueLog& issues, const std::string& label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open log file '" + path.string() + "'");
  std::vector<Record> out;
  std::unordered_map<std::string, std::int64_t> blocks;  // per name: blocks seen so far
  std::string line;
  std::int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = path.string() + ":" + std::to_string(line_no);
    if (in.eof() && !line.empty()) {
      issues.add({Issue::Severity::warning, "truncated", label, -1,
                  where + ": last line has no newline (writer killed?); ignored"});
      break;
    }
    if (trim(line).empty()) continue;
    std::optional<PythonWeightLine> w;
    std::string error;
    try {
      w = parse_python_weight_line(line);
      if (!w) error = "not a NumericsLogger weights line (\"name='<param>' hash=<H>\")";
    } catch (const lf::ParseError& e) {
      error = e.what();
    }
    if (!w) {
      if (!lenient) throw InputError(where + ": " + error);
      issues.add({Issue::Severity::warning, "skipped_line", label, -1, where + ": " + error});
      continue;
    }
    Record r;
    r.kind = Kind::param;
    r.step = blocks[w->name]++;  // the k-th block is step k
    r.name = std::move(w->name);
    r.state = Record::State::tensor;
    r.stats.torch_hash = w->hash;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace probe::differ
