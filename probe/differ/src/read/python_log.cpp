// autoparallel NumericsLogger logs: "[prefix] hash=H, norm=N" / "[prefix] None" lines, read
// whole and numbered into steps by how often each prefix was logged.
#include "differ/detail/read/python_log.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include "differ/options.h"
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

// Strips "DTensor(" / "tensor(" wrappers and returns the first value token.
std::string_view unwrap_value(std::string_view s) {
  s = trim(s);
  for (bool again = true; again;) {
    again = false;
    for (std::string_view w : {std::string_view("DTensor("), std::string_view("tensor(")}) {
      if (s.substr(0, w.size()) == w) {
        s.remove_prefix(w.size());
        again = true;
      }
    }
  }
  auto end = s.find_first_of(",)");
  return trim(s.substr(0, end));
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace

std::optional<PythonLine> parse_python_line(std::string_view line) {
  line = trim(line);
  if (line.empty() || line.front() != '[') return std::nullopt;
  auto close = line.find("] ");
  if (close == std::string_view::npos) {
    if (line.back() != ']') return std::nullopt;
    close = line.size() - 1;
  }
  PythonLine out;
  out.prefix = std::string(line.substr(1, close - 1));
  std::string_view rest = close + 1 < line.size() ? trim(line.substr(close + 2)) : "";
  if (rest == "None") {
    out.none = true;
    return out;
  }
  if (rest.substr(0, 5) != "hash=") throw lf::ParseError("expected 'hash=' or 'None' after ']'");
  auto norm_at = rest.rfind(", norm=");
  if (norm_at == std::string_view::npos) throw lf::ParseError("expected ', norm=' after hash=");
  std::string_view hash_text = rest.substr(5, norm_at - 5);
  std::string_view norm_text = rest.substr(norm_at + 7);
  std::string_view hv = unwrap_value(hash_text);
  std::int64_t signed_v = 0;
  std::uint64_t v = 0;
  if (auto [p, ec] = std::from_chars(hv.data(), hv.data() + hv.size(), v);
      ec == std::errc() && p == hv.data() + hv.size() && !hv.empty()) {
    out.hash = v;
  } else if (auto [p2, ec2] = std::from_chars(hv.data(), hv.data() + hv.size(), signed_v);
             ec2 == std::errc() && p2 == hv.data() + hv.size() && !hv.empty()) {
    out.hash = static_cast<std::uint64_t>(signed_v);
  } else {
    out.hash_text = std::string(trim(hash_text));  // complex "real=..., imag=..." and such
    if (out.hash_text.empty()) throw lf::ParseError("empty hash=");
    out.hash = fnv1a(out.hash_text);
  }
  std::string_view nv = unwrap_value(norm_text);
  try {
    out.norm = lf::parse_double(nv);
  } catch (const lf::ParseError&) {
    throw lf::ParseError("norm is not a number: '" + std::string(norm_text) + "'");
  }
  return out;
}

namespace {

// "mb<N> <what>" (how NumericsLogger's callers name what they log of microbatch N): N and what.
std::optional<std::pair<std::int64_t, std::string_view>> microbatch_prefix(
    std::string_view prefix) {
  if (prefix.substr(0, 2) != "mb") return std::nullopt;
  const char* digits = prefix.data() + 2;
  const char* end = prefix.data() + prefix.size();
  std::int64_t mb = -1;
  auto [p, ec] = std::from_chars(digits, end, mb);
  if (ec != std::errc() || p == digits || mb < 0 || p == end || *p != ' ') return std::nullopt;
  std::string_view what = trim(std::string_view(p + 1, static_cast<std::size_t>(end - p - 1)));
  if (what.empty()) return std::nullopt;
  return std::make_pair(mb, what);
}

// A NumericsLogger prefix names the record: "grad NAME", the "full batch input", "mb<N> fwd
// out" (the model's forward output of microbatch N: the record the probe names after
// ProbeOptions::model_name), "mb<N> WHAT" (a tap of microbatch N), or a tap.
void set_kind_and_name(Record& r, const std::string& prefix, const std::string& model_name) {
  if (prefix.rfind("grad ", 0) == 0) {
    r.kind = Kind::grad;
    r.name = prefix.substr(5);
  } else if (prefix == "full batch input") {
    r.kind = Kind::input;
    r.name = prefix;
  } else if (auto mb = microbatch_prefix(prefix)) {
    r.microbatch = mb->first;
    const bool output = mb->second == "fwd out";
    r.kind = output ? Kind::output : Kind::tap;
    r.name = output ? model_name : std::string(mb->second);
  } else {
    r.kind = Kind::tap;
    r.name = prefix;
  }
}

// The line's fields, or why it is not a NumericsLogger line.
std::optional<PythonLine> read_line(const std::string& line, std::string& error) {
  std::optional<PythonLine> pl;
  try {
    pl = parse_python_line(line);
    if (!pl) error = "not a NumericsLogger line ('[prefix] hash=H, norm=N' or '[prefix] None')";
  } catch (const lf::ParseError& e) {
    error = e.what();
  }
  return pl;
}

}  // namespace

std::vector<Record> load_python_log(const std::filesystem::path& p, bool lenient, IssueLog& issues,
                                    const std::string& label, const std::string& model_name) {
  errno = 0;
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw InputError("cannot open log file '" + p.string() +
                     "': " + (err ? std::strerror(err) : "unknown reason"));
  }
  std::vector<Record> out;
  std::unordered_map<std::string, std::int64_t> occurrences;
  std::string line;
  std::int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (in.eof() && !line.empty()) {
      issues.add({Issue::Severity::warning, "truncated", label, -1,
                  p.string() + ":" + std::to_string(line_no) +
                      ": last line has no newline (writer killed?); ignored"});
      break;
    }
    if (trim(line).empty()) continue;
    std::string error;
    const std::optional<PythonLine> pl = read_line(line, error);
    if (!pl) {
      std::string msg = p.string() + ":" + std::to_string(line_no) + ": " + error;
      if (!lenient) throw InputError(msg);
      issues.add({Issue::Severity::warning, "skipped_line", label, -1, msg});
      continue;
    }
    Record r;
    set_kind_and_name(r, pl->prefix, model_name);
    r.step = occurrences[pl->prefix]++;  // the k-th time a prefix is logged is step k
    if (pl->none) {
      r.state = Record::State::none;
    } else {
      r.state = Record::State::tensor;
      r.stats.torch_hash = pl->hash;
      r.stats.norm = pl->norm;
    }
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Record& a, const Record& b) { return a.step < b.step; });
  return out;
}

}  // namespace probe::differ
