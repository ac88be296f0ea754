// Reading one run: rank discovery, step-by-step k-way merge of its ranks, replica check and
// shard composition, and autoparallel NumericsLogger lines.
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <tuple>

#include "differ/diff.h"
#include "probe/log_format.h"

namespace probe::differ {
namespace fs = std::filesystem;
namespace lf = probe::log_format;

// ---------------------------------------------------------------------------------------
// Names

std::string format_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(ranks[i]);
    if (j > i) s += "-" + std::to_string(ranks[j]);
    i = j;
  }
  return s;
}

namespace {
constexpr std::array<std::string_view, 4> kWrappers = {
    "module.", "_fsdp_wrapped_module.", "_orig_mod.", "_checkpoint_wrapped_module."};
}

std::string strip_wrapper_prefixes(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  std::size_t pos = 0;
  while (pos < name.size()) {  // at each component start, drop wrapper components
    bool dropped = false;
    for (auto w : kWrappers) {
      if (name.compare(pos, w.size(), w) == 0) {
        pos += w.size();
        dropped = true;
        break;
      }
    }
    if (dropped) continue;
    auto dot = name.find('.', pos);
    auto end = dot == std::string::npos ? name.size() : dot + 1;
    out.append(name, pos, end - pos);
    pos = end;
  }
  return out;
}

namespace {
std::vector<std::pair<int, int>> parse_rank_list(const std::string& text, const std::string& rule) {
  std::vector<std::pair<int, int>> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    const auto dash = item.find('-');
    try {
      std::size_t used = 0;
      const int lo = std::stoi(item.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? item.size() : dash)) throw std::invalid_argument("");
      int hi = lo;
      if (dash != std::string::npos) {
        hi = std::stoi(item.substr(dash + 1), &used);
        if (used != item.size() - dash - 1) throw std::invalid_argument("");
      }
      if (lo < 0 || hi < lo) throw std::invalid_argument("");
      out.emplace_back(lo, hi);
    } catch (const std::exception&) {
      throw InputError("--map rule '" + rule + "': bad rank list '" + text +
                       "' (expected e.g. @4-7: or @1,3:)");
    }
    pos = comma + 1;
  }
  return out;
}
}  // namespace

std::string expand_replacement(const std::smatch& m, const std::string& repl) {
  std::string out;
  for (std::size_t i = 0; i < repl.size(); ++i) {
    if (repl[i] != '$' || i + 1 == repl.size()) {
      out += repl[i];
      continue;
    }
    const char c = repl[i + 1];
    if (c == '$') {
      out += '$';
      ++i;
    } else if (c == '&') {
      out += m.str(0);
      ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i + 1, g = 0;
      while (j < repl.size() && std::isdigit(static_cast<unsigned char>(repl[j]))) g = g * 10 + static_cast<std::size_t>(repl[j++] - '0');
      if (g < m.size()) out += m.str(g);
      i = j - 1;
    } else if (c == '{') {
      const auto close = repl.find('}', i);
      if (close == std::string::npos) throw InputError("--map replacement '" + repl + "': unclosed ${");
      const std::string body = repl.substr(i + 2, close - i - 2);
      std::size_t used = 0;
      long long delta = 0;
      std::size_t g = 0;
      try {
        g = std::stoul(body, &used);
        if (used < body.size()) {
          if (body[used] != '+' && body[used] != '-') throw std::invalid_argument("");
          std::size_t used2 = 0;
          delta = std::stoll(body.substr(used + 1), &used2);
          if (used + 1 + used2 != body.size()) throw std::invalid_argument("");
          if (body[used] == '-') delta = -delta;
        }
      } catch (const std::exception&) {
        throw InputError("--map replacement '" + repl + "': bad ${" + body + "}");
      }
      const std::string group = g < m.size() ? m.str(g) : std::string();
      if (used < body.size()) {
        long long v = 0;
        auto [p, ec] = std::from_chars(group.data(), group.data() + group.size(), v);
        if (ec != std::errc() || p != group.data() + group.size())
          throw InputError("--map replacement '" + repl + "': group " + std::to_string(g) +
                           " ('" + group + "') is not a number");
        out += std::to_string(v + delta);
      } else {
        out += group;
      }
      i = close;
    } else {
      out += '$';
    }
  }
  return out;
}

NameMapper::NameMapper(bool strip_wrappers, const std::vector<std::string>& rules)
    : strip_(strip_wrappers) {
  for (const auto& rule : rules) {
    std::string text = rule;
    Rule r;
    if (!text.empty() && text[0] == '@') {
      const auto colon = text.find(':');
      if (colon == std::string::npos)
        throw InputError("--map rule '" + rule + "': '@RANKS' must end with ':'");
      r.ranks = parse_rank_list(text.substr(1, colon - 1), rule);
      text = text.substr(colon + 1);
      rank_scoped_ = true;
    }
    auto eq = text.rfind('=');
    if (eq == std::string::npos || eq == 0)
      throw InputError("--map rule '" + rule + "' is not [@RANKS:]REGEX=REPLACEMENT");
    try {
      r.re = std::regex(text.substr(0, eq));
    } catch (const std::regex_error& e) {
      throw InputError("--map rule '" + rule + "': bad regular expression: " + e.what());
    }
    r.replacement = text.substr(eq + 1);
    rules_.push_back(std::move(r));
  }
}

const std::string& NameMapper::map(const std::string& name, int rank) {
  // Fast path: no rules and no wrapper component possible ("module." and "_orig_mod."
  // both contain "mod").
  if (rules_.empty() && (!strip_ || name.find("mod") == std::string::npos)) return name;
  std::string key;
  const std::string* lookup = &name;
  if (rank_scoped_) {
    key = std::to_string(rank) + '\0' + name;
    lookup = &key;
  }
  auto it = cache_.find(*lookup);
  if (it != cache_.end()) return it->second;
  std::string out = strip_ ? strip_wrapper_prefixes(name) : name;
  for (const auto& rule : rules_) {
    if (!rule.ranks.empty() &&
        std::none_of(rule.ranks.begin(), rule.ranks.end(),
                     [&](const auto& r) { return rank >= r.first && rank <= r.second; }))
      continue;
    std::string next;
    auto begin = out.cbegin();
    std::smatch m;
    bool any = false;
    while (std::regex_search(begin, out.cend(), m, rule.re)) {
      any = true;
      next.append(begin, m[0].first);
      next += expand_replacement(m, rule.replacement);
      begin = m[0].second;
      if (m[0].length() == 0) {  // an empty match: step past one character
        if (begin == out.cend()) break;
        next += *begin++;
      }
    }
    if (any) {
      next.append(begin, out.cend());
      out = std::move(next);
    }
  }
  return cache_.emplace(*lookup, std::move(out)).first->second;
}

// ---------------------------------------------------------------------------------------
// Issues

void IssueLog::add(Issue issue) {
  auto& n = count_by_type[issue.type];
  ++n;
  if (issue.severity == Issue::Severity::error) ++errors;
  if (static_cast<std::size_t>(n) <= kDetailPerType) detail.push_back(std::move(issue));
}

void IssueLog::hint(const std::string& text) {
  if (std::find(hints.begin(), hints.end(), text) == hints.end()) hints.push_back(text);
}

namespace {

// Why ranks that logged the same key with different values most likely did, by kind.
std::string replica_mismatch_hint(Kind kind) {
  if (kind == Kind::scalar)
    return "a scalar logged under one name on several ranks must be the same on each: a "
           "rank's local value (its own loss) needs the reduced value, or a name per rank";
  if (kind == Kind::grad)
    return "data-parallel replicas of a gradient must agree after the reduction: an unreduced "
           "gradient, or pipeline stages reusing names (align them with a rank-scoped rule: "
           "--map '@RANKS:REGEX=REPLACEMENT')";
  return "records of one microbatch id on several ranks are read as replicas: microbatch ids "
         "must be global across data-parallel ranks (rank r's k-th of M local microbatches is "
         "r * M + k), and pipeline stages reusing names need a rank-scoped rule: --map "
         "'@RANKS:REGEX=REPLACEMENT'";
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Python (autoparallel NumericsLogger) lines

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

// ---------------------------------------------------------------------------------------
// Composition and replica checks

bool same_record(const Record& a, const Record& b) {
  if (a.state != b.state) return false;
  switch (a.state) {
    case Record::State::none:
      return true;
    case Record::State::scalar:
      return a.value == b.value || (std::isnan(a.value) && std::isnan(b.value));
    case Record::State::tensor:
      break;
  }
  const auto &x = a.stats, &y = b.stats;
  if (x.unsupported != y.unsupported || x.dtype != y.dtype || x.shape != y.shape) return false;
  if (x.torch_hash && y.torch_hash && *x.torch_hash != *y.torch_hash) return false;
  if (x.unsupported) return true;
  return x.hash == y.hash && x.nan == y.nan && x.inf == y.inf;
}

ComposeResult compose_shards(const std::vector<const TensorStats*>& shards) {
  ComposeResult res;
  if (shards.empty()) {
    res.error = "no shards";
    return res;
  }
  const auto& g = shards[0]->shard.global_shape;
  std::int64_t global_numel = 1;
  for (auto d : g) {
    if (d < 0 || __builtin_mul_overflow(global_numel, d, &global_numel)) {
      res.error = "bad global shape";
      return res;
    }
  }
  std::int64_t total = 0;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& s = *shards[i];
    if (s.shard.global_shape != g) {
      res.error = "shards disagree on the global shape";
      return res;
    }
    if (s.dtype != shards[0]->dtype) {
      res.error = "shards disagree on dtype (" + shards[0]->dtype + " vs " + s.dtype + ")";
      return res;
    }
    try {
      s.shard.check_fits(s.shape, "shard");
    } catch (const std::invalid_argument& e) {
      res.error = e.what();
      return res;
    }
    if (__builtin_add_overflow(total, s.numel(), &total)) {  // fits: inside the global shape
      res.error = "shards overlap";
      return res;
    }
    for (std::size_t j = 0; j < i; ++j) {  // overlap: boxes intersect in every dim
      const auto& t = *shards[j];
      bool overlap = true;
      for (std::size_t d = 0; d < g.size() && overlap; ++d) {
        auto a0 = s.shard.offset[d], a1 = a0 + s.shape[d];
        auto b0 = t.shard.offset[d], b1 = b0 + t.shape[d];
        overlap = std::max(a0, b0) < std::min(a1, b1);
      }
      if (overlap && s.numel() > 0 && t.numel() > 0) {
        res.error = "shards overlap";
        return res;
      }
    }
  }
  if (total != global_numel) {
    res.error = "shards cover " + std::to_string(total) + " of " +
                std::to_string(global_numel) + " elements (gap)";
    res.gap = true;
    return res;
  }
  TensorStats out;
  out.dtype = shards[0]->dtype;
  out.shape = g;
  double sum_sq = 0, weighted_mean = 0;
  std::int64_t non_nan = 0;
  bool all_torch_hash = true;
  std::uint64_t torch_hash = 0;
  for (const TensorStats* s : shards) {
    if (s->unsupported) {
      out.unsupported = *s->unsupported;
      res.stats = out;
      return res;
    }
    out.hash += s->hash;
    sum_sq += s->norm * s->norm;
    if (!std::isnan(s->min) && !(s->min >= out.min)) out.min = std::isnan(out.min) ? s->min : std::min(out.min, s->min);
    if (!std::isnan(s->max) && !(s->max <= out.max)) out.max = std::isnan(out.max) ? s->max : std::max(out.max, s->max);
    out.nan += s->nan;
    out.inf += s->inf;
    const std::int64_t n = s->numel() - s->nan;
    if (n > 0) {
      weighted_mean += s->mean * static_cast<double>(n);
      non_nan += n;
    }
    if (s->torch_hash)
      torch_hash ^= *s->torch_hash;
    else
      all_torch_hash = false;
  }
  out.norm = out.nan > 0 ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(sum_sq);
  out.mean = non_nan > 0 ? weighted_mean / static_cast<double>(non_nan)
                         : std::numeric_limits<double>::quiet_NaN();
  if (all_torch_hash) out.torch_hash = torch_hash;
  res.stats = std::move(out);
  return res;
}

// ---------------------------------------------------------------------------------------
// Rank sources

struct Run::RankSource {
  int rank = 0;
  std::unique_ptr<LogReader> reader;       // numprobe logs
  std::vector<Record> python;              // NumericsLogger logs (loaded whole, sorted)
  std::size_t python_pos = 0;
  std::optional<Record> ahead;
  std::int64_t last_step = -1;
  bool reported_early_end = false;
  bool pooled = false;  // the log is closed between steps (more ranks than files to hold open)
  void release() {
    if (pooled && reader) reader->release();
  }
};

std::uint64_t raise_open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? std::numeric_limits<std::uint64_t>::max()
                                       : static_cast<std::uint64_t>(lim.rlim_cur);
}

int default_max_open_files() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY)
    return std::numeric_limits<int>::max();
  // Descriptors in use now (stdio, a --json file, ...), counted where the system lists them.
  std::int64_t in_use = 16;
  std::error_code ec;
  fs::directory_iterator fds("/proc/self/fd", ec);
  if (!ec) {
    in_use = 0;
    for (auto it = fds; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      ++in_use;
    }
  }
  constexpr std::int64_t kReserve = 32;  // the other run's transient opens, the --json file
  const std::int64_t free = static_cast<std::int64_t>(std::min<rlim_t>(lim.rlim_cur, 1 << 30)) -
                            in_use - kReserve;
  return static_cast<int>(std::max<std::int64_t>(free / 2, 2));
}

namespace {

std::string record_brief(const Record& r) {
  switch (r.state) {
    case Record::State::none:
      return "none";
    case Record::State::scalar:
      return "value=" + lf::format_double(r.value);
    case Record::State::tensor:
      break;
  }
  if (r.stats.unsupported) return "unsupported=" + *r.stats.unsupported;
  std::string s = "hash=" + lf::format_hash(r.stats.hash) + " norm=" + lf::format_double(r.stats.norm);
  if (r.stats.nan || r.stats.inf)
    s += " nan=" + std::to_string(r.stats.nan) + " inf=" + std::to_string(r.stats.inf);
  return s;
}

std::string key_text(Kind kind, const std::string& name, std::optional<std::int64_t> mb) {
  std::string s(kind_name(kind));
  s += ' ';
  s += name;
  if (mb) s += " mb=" + std::to_string(*mb);
  return s;
}

// After a failed std::ifstream::open: the path and why (errno, which open(2) set).
std::string open_error(const fs::path& p) {
  const int err = errno;
  return "cannot open log file '" + p.string() + "': " + (err ? std::strerror(err) : "unknown reason");
}

bool is_numprobe_log(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string first(lf::kHeaderTag.size(), '\0');
  in.read(first.data(), static_cast<std::streamsize>(first.size()));
  return in.gcount() == static_cast<std::streamsize>(first.size()) && first == lf::kHeaderTag;
}

// "mb<N> <what>" (how NumericsLogger's callers name what they log of microbatch N): N and what.
std::optional<std::pair<std::int64_t, std::string_view>> microbatch_prefix(std::string_view prefix) {
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

std::vector<Record> load_python_log(const fs::path& p, const RunOptions& options,
                                    IssueLog& issues) {
  const bool lenient = options.lenient;
  const std::string& label = options.label;
  errno = 0;
  std::ifstream in(p, std::ios::binary);
  if (!in) throw InputError(open_error(p));
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
    std::optional<PythonLine> pl;
    std::string error;
    try {
      pl = parse_python_line(line);
      if (!pl) error = "not a NumericsLogger line ('[prefix] hash=H, norm=N' or '[prefix] None')";
    } catch (const lf::ParseError& e) {
      error = e.what();
    }
    if (!pl) {
      std::string msg = p.string() + ":" + std::to_string(line_no) + ": " + error;
      if (!lenient) throw InputError(msg);
      issues.add({Issue::Severity::warning, "skipped_line", label, -1, msg});
      continue;
    }
    Record r;
    std::string prefix = pl->prefix;
    if (prefix.rfind("grad ", 0) == 0) {
      r.kind = Kind::grad;
      r.name = prefix.substr(5);
    } else if (prefix == "full batch input") {
      r.kind = Kind::input;
      r.name = prefix;
    } else if (auto mb = microbatch_prefix(prefix)) {
      // "[mb3 fwd out]" is the model's forward output of microbatch 3: the record the probe
      // names after ProbeOptions::model_name; anything else of a microbatch is a tap of it.
      r.microbatch = mb->first;
      const bool output = mb->second == "fwd out";
      r.kind = output ? Kind::output : Kind::tap;
      r.name = output ? options.model_name : std::string(mb->second);
    } else {
      r.kind = Kind::tap;
      r.name = prefix;
    }
    r.step = occurrences[prefix]++;  // the k-th time a prefix is logged is step k
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

}  // namespace

Run::Run(const fs::path& path, RunOptions options)
    : path_(path), options_(std::move(options)), mapper_(options_.strip_wrappers, options_.map_rules) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError("'" + path.string() + "' does not exist");
  std::vector<std::pair<int, fs::path>> files;  // (rank from the directory name, path)
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const std::string dir = entry.path().filename().string();
      if (!entry.is_directory() || dir.rfind("rank", 0) != 0) continue;
      int r = -1;
      auto digits = std::string_view(dir).substr(4);
      auto [p, e] = std::from_chars(digits.data(), digits.data() + digits.size(), r);
      if (e != std::errc() || p != digits.data() + digits.size() || r < 0) continue;
      if (fs::exists(entry.path() / "diff.log")) files.emplace_back(r, entry.path() / "diff.log");
    }
    if (ec) throw InputError("cannot list '" + path.string() + "': " + ec.message());
    if (files.empty() && fs::is_regular_file(path / "diff.log")) files.emplace_back(-1, path / "diff.log");
    if (files.empty())
      throw InputError("'" + path.string() +
                       "' holds no logs (expected rank<R>/diff.log files or a diff.log)");
    std::sort(files.begin(), files.end());
  } else {
    files.emplace_back(-1, path);
  }

  if (files.size() == 1 && !is_numprobe_log(files[0].second)) {
    errno = 0;
    std::ifstream probe_in(files[0].second);
    if (!probe_in) throw InputError(open_error(files[0].second));
    std::string first;
    std::getline(probe_in, first);
    if (first.empty() && probe_in.eof())
      throw InputError(files[0].second.string() + ":1: empty file (no numprobe header)");
    if (!first.empty() && first[0] == '[') {
      python_ = true;
      auto src = std::make_unique<RankSource>();
      src->python = load_python_log(files[0].second, options_, issues_);
      ranks_.push_back(std::move(src));
      advance(*ranks_.back());
      return;
    }
  }

  // More ranks than files to hold open: the first max_open - 1 stay open, the others are opened
  // for each step and closed again, one at a time (that one descriptor is the last of the budget).
  const int max_open = options_.max_open_files > 0 ? options_.max_open_files : default_max_open_files();
  const std::size_t keep_open = files.size() <= static_cast<std::size_t>(max_open)
                                    ? files.size()
                                    : static_cast<std::size_t>(std::max(max_open - 1, 0));
  bool first = true;
  std::vector<bool> seen;
  for (auto& [dir_rank, file] : files) {
    auto src = std::make_unique<RankSource>();
    try {
      src->reader = std::make_unique<LogReader>(file);
    } catch (const lf::ParseError& e) {
      throw InputError(e.what());
    } catch (const std::runtime_error& e) {
      throw InputError(e.what());
    }
    if (ranks_.size() >= keep_open) {
      src->pooled = true;
      ++pooled_ranks_;
      src->release();
    }
    const auto& h = src->reader->header();
    if (first) {
      header_file_ = file;
      world_size_ = h.world_size;
      format_version_ = h.format_version;
      hash_spec_version_ = h.hash_spec_version;
      setup_ = h.setup;
      torch_version_ = h.torch_version;
      seen.assign(static_cast<std::size_t>(world_size_), false);
      first = false;
    } else {
      if (h.world_size != world_size_)
        throw InputError(file.string() + ":1: header says world_size=" + std::to_string(h.world_size) +
                         " but " + files[0].second.string() + " says " + std::to_string(world_size_));
      if (h.hash_spec_version != hash_spec_version_)
        throw InputError(file.string() + ":1: hash spec version " + std::to_string(h.hash_spec_version) +
                         " differs from the run's other ranks (" + std::to_string(hash_spec_version_) + ")");
    }
    if (dir_rank >= 0 && dir_rank != h.rank)
      throw InputError(file.string() + ":1: header says rank=" + std::to_string(h.rank) +
                       " but the directory says rank" + std::to_string(dir_rank));
    if (seen[static_cast<std::size_t>(h.rank)])
      throw InputError(file.string() + ":1: rank " + std::to_string(h.rank) + " appears twice in the run");
    seen[static_cast<std::size_t>(h.rank)] = true;
    src->rank = h.rank;
    ranks_.push_back(std::move(src));
  }
  if (files.size() == 1 && files[0].first < 0 && world_size_ > 1) {
    // One log named on its own: that rank's view of the run, by request.
    partial_view_ = true;
    issues_.add({Issue::Severity::warning, "partial_run", options_.label, -1,
                 files[0].second.string() + " is rank " + std::to_string(ranks_[0]->rank) +
                     " of a " + std::to_string(world_size_) +
                     "-rank run: only that rank's records are compared (name the run's "
                     "directory to merge every rank)"});
  } else {
    for (int r = 0; r < world_size_; ++r) {
      if (seen[static_cast<std::size_t>(r)]) continue;
      ++missing_ranks_;
      issues_.add({Issue::Severity::error, "missing_rank", options_.label, -1,
                   path_.string() + ": world_size is " + std::to_string(world_size_) + " but " +
                       (path_ / ("rank" + std::to_string(r)) / "diff.log").string() +
                       " is missing (records that lack its shards are unsupported, not "
                       "compared)"});
    }
  }
  for (auto& src : ranks_) {
    advance(*src);
    src->release();
  }
}

Run::~Run() = default;
Run::Run(Run&&) noexcept = default;

void Run::advance(RankSource& src) {
  src.ahead.reset();
  if (!src.reader) {
    if (src.python_pos < src.python.size()) src.ahead = std::move(src.python[src.python_pos++]);
    return;
  }
  for (;;) {
    try {
      auto r = src.reader->next();
      if (!r) {
        if (src.reader->truncated()) {
          const LogReader& reader = *src.reader;
          std::int64_t from = 0;
          std::string where, what;
          if (auto open = reader.unterminated()) {
            // Format 2: the step without its end is the incomplete one (when none of its lines
            // parsed, the step after the last complete one).
            from = open->step ? *open->step : src.last_step + 1;
            where = reader.path().string() + ":" + std::to_string(open->line);
            what = "step " + std::to_string(from) +
                   " has no end marker (rank killed while writing it?)";
          } else {
            // Cut mid-line. The fragment's step (when readable) is the incomplete one;
            // otherwise the step after the last one a step end closed (format 2), or the
            // rank's last step, which may be missing records too (format 1).
            from = reader.header().format_version >= 2 ? src.last_step + 1
                                                       : std::max<std::int64_t>(src.last_step, 0);
            std::string_view frag = reader.truncated_fragment();
            if (frag.substr(0, 5) == "step=") {
              frag.remove_prefix(5);
              std::int64_t s = -1;
              auto [p, ec] = std::from_chars(frag.data(), frag.data() + frag.size(), s);
              if (ec == std::errc() && p < frag.data() + frag.size() && *p == ' ' && s > src.last_step)
                from = s;
            }
            where = reader.path().string() + ":" + std::to_string(reader.line_number());
            what = "last line has no newline (rank killed?)";
          }
          if (!incomplete_from_ || from < *incomplete_from_) incomplete_from_ = from;
          issues_.add({Issue::Severity::warning, "truncated", options_.label, from,
                       where + ": " + what + ": steps before " + std::to_string(from) +
                           " are used, later ones are not compared"});
        }
        return;
      }
      if (r->step < src.last_step) {
        std::string msg = src.reader->path().string() + ":" +
                          std::to_string(src.reader->line_number()) + ": step " +
                          std::to_string(r->step) + " after step " +
                          std::to_string(src.last_step) + " (records out of step order)";
        if (!options_.lenient) throw InputError(msg);
        issues_.add({Issue::Severity::warning, "skipped_line", options_.label, r->step, msg});
        continue;
      }
      src.last_step = r->step;
      src.ahead = std::move(r);
      return;
    } catch (const lf::ParseError& e) {
      if (!options_.lenient) throw InputError(e.what());
      issues_.add({Issue::Severity::warning, "skipped_line", options_.label, -1, e.what()});
    } catch (const std::runtime_error& e) {  // a pooled log that cannot be reopened
      throw InputError(e.what());
    }
  }
}

std::optional<std::int64_t> Run::peek_step() const {
  std::optional<std::int64_t> s;
  for (const auto& src : ranks_)
    if (src->ahead && (!s || src->ahead->step < *s)) s = src->ahead->step;
  return s;
}

namespace {

struct Part {
  int rank;
  Record rec;
};

struct Group {
  std::string key;
  Kind kind;
  std::string name;  // canonical
  std::optional<std::int64_t> mb;
  std::string raw_name;
  std::int64_t order = 0;  // execution-order position (see next_step)
  std::vector<Part> parts;
};


}  // namespace

bool Run::next_step(std::int64_t& step, std::vector<Merged>& records) {
  records.clear();
  auto s = peek_step();
  if (!s) return false;
  step = *s;

  // A rank whose log ended cleanly at a step boundary while others go on: the process stopped
  // (killed between steps). Its later records are missing, not different: stop comparing here.
  for (auto& src : ranks_) {
    if (!src->reader || src->ahead || src->reported_early_end || src->reader->truncated() ||
        src->last_step >= step)
      continue;
    src->reported_early_end = true;
    if (src->last_step < 0) {
      // No record at all. A rank may legitimately record nothing (PROBE_KINDS=scalar with the
      // loss logged on rank 0), so the comparison goes on; the warning explains the records
      // the other run has and this one lacks.
      issues_.add({Issue::Severity::warning, "empty_rank", options_.label, step,
                   src->reader->path().string() + ": rank " + std::to_string(src->rank) +
                       "'s log has no records while other ranks log step " + std::to_string(step) +
                       ": the rank was killed before its first step, or it records nothing"});
      continue;
    }
    if (!incomplete_from_ || step < *incomplete_from_) incomplete_from_ = step;
    issues_.add({Issue::Severity::warning, "truncated", options_.label, step,
                 src->reader->path().string() + ": rank " + std::to_string(src->rank) +
                     "'s log ends after step " + std::to_string(src->last_step) +
                     " while other ranks go on to step " + std::to_string(step) +
                     " (rank stopped early, killed?): steps before " + std::to_string(step) +
                     " are used, later ones are not compared"});
  }

  // Group this step's records of every rank by (kind, canonical name, mb).
  std::vector<Group> groups;
  std::unordered_map<std::string, std::size_t> index;
  index.reserve(last_step_groups_ * 2);
  std::string key;
  const std::int64_t world = std::max<std::int64_t>(world_size_, 1);
  for (auto& src : ranks_) {
    std::int64_t pos = 0;
    while (src->ahead && src->ahead->step == step) {
      Record& r = *src->ahead;
      ++records_read_;
      const std::string& canon = mapper_.map(r.name, src->rank);
      key.clear();
      key += static_cast<char>('0' + static_cast<int>(r.kind));
      if (r.microbatch) key += std::to_string(*r.microbatch);
      key += '|';
      key += canon;
      auto [it, inserted] = index.try_emplace(key, groups.size());
      // Execution order: ranks ascending in forward and step end, descending in backward
      // (pipeline stages run backward last stage first), then the rank's own line order.
      const std::int64_t rank_order =
          phase_of(r.kind) == Phase::backward ? world - 1 - src->rank : src->rank;
      const std::int64_t order = rank_order * (std::int64_t{1} << 40) + pos++;
      if (inserted) {
        Group g;
        g.key = key;
        g.kind = r.kind;
        g.name = canon;
        g.mb = r.microbatch;
        g.raw_name = r.name;
        g.order = order;
        groups.push_back(std::move(g));
      }
      Group& g = groups[it->second];
      g.order = std::min(g.order, order);
      // Ranks are read one after the other, so this rank's parts are the group's last ones:
      // looking at those alone keeps a key replicated on thousands of ranks linear.
      bool duplicate = false;
      for (auto p = g.parts.rbegin(); p != g.parts.rend() && p->rank == src->rank; ++p) {
        if (p->rec.stats.shard == r.stats.shard) {
          duplicate = true;
          break;
        }
      }
      if (duplicate) {
        std::string msg = src->reader ? src->reader->path().string() + ":" +
                                            std::to_string(src->reader->line_number()) + ": "
                                      : std::string();
        msg += "duplicate record " + key_text(r.kind, r.name, r.microbatch) + " at step " +
               std::to_string(step);
        if (!options_.lenient) throw InputError(msg);
        issues_.add({Issue::Severity::warning, "duplicate_record", options_.label, step, msg});
      } else {
        g.parts.push_back({src->rank, std::move(r)});
      }
      advance(*src);
    }
    src->release();  // its next step's first record is read: close it until then
  }

  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    return std::make_tuple(phase_of(a.kind), a.mb.value_or(-1), a.order) <
           std::make_tuple(phase_of(b.kind), b.mb.value_or(-1), b.order);
  });

  // From a killed rank's incomplete step on, steps are read but not compared (diff_runs): the
  // records the kill lost are no tiling or replica errors.
  const bool compared = !incomplete_from_ || step < *incomplete_from_;
  auto report = [&](const char* type, std::string message) {
    if (compared) issues_.add({Issue::Severity::error, type, options_.label, step, std::move(message)});
  };
  auto mismatch = [&](Merged& m, Kind kind, std::string message) {
    m.replicas_disagree = true;
    if (compared) issues_.hint(replica_mismatch_hint(kind));
    report("replica_mismatch", std::move(message));
  };

  last_step_groups_ = groups.size();
  records.reserve(groups.size());
  std::vector<const Part*> reps;
  std::vector<const TensorStats*> shards;
  reps.reserve(ranks_.size());
  shards.reserve(ranks_.size());
  for (auto& g : groups) {
    Merged m;
    m.raw_name = g.raw_name;
    m.hash_source = python_ ? HashSource::torch_only : HashSource::spec_v1;
    for (const auto& p : g.parts) m.ranks.push_back(p.rank);
    std::sort(m.ranks.begin(), m.ranks.end());
    m.ranks.erase(std::unique(m.ranks.begin(), m.ranks.end()), m.ranks.end());
    auto where = [&] { return key_text(g.kind, g.name, g.mb); };  // only for issues

    // Buckets of replicas: same shard (or whole). Each bucket's first part represents it;
    // every other member must agree with it.
    reps.clear();
    for (const auto& p : g.parts) {
      const Part* rep = nullptr;
      for (const Part* r : reps) {
        if (r->rec.stats.shard == p.rec.stats.shard) {
          rep = r;
          break;
        }
      }
      if (!rep) {
        reps.push_back(&p);
      } else if (!same_record(rep->rec, p.rec)) {
        mismatch(m, g.kind, "step " + std::to_string(step) + " " + where() + ": rank " +
                                std::to_string(rep->rank) + " has " + record_brief(rep->rec) +
                                ", rank " + std::to_string(p.rank) + " has " + record_brief(p.rec));
      }
    }
    const Part* whole = nullptr;
    shards.clear();
    for (const Part* b : reps) {
      if (b->rec.state == Record::State::tensor && !b->rec.stats.shard.empty())
        shards.push_back(&b->rec.stats);
      else if (!whole)
        whole = b;
      else  // e.g. `none` on one rank and a scalar on another
        mismatch(m, g.kind, "step " + std::to_string(step) + " " + where() + ": rank " +
                                std::to_string(whole->rank) + " has " + record_brief(whole->rec) +
                                ", rank " + std::to_string(b->rank) + " has " + record_brief(b->rec));
    }
    if (partial_view_ && reps.size() == 1 && !shards.empty()) {
      // One rank's view of the run: its shard is compared as logged, not composed into a
      // whole it does not hold.
      shards.clear();
      whole = reps[0];
    }
    if (!shards.empty()) {
      Record composed;  // only the key fields of a part: the figures come from composing
      composed.step = step;
      composed.kind = g.kind;
      composed.microbatch = g.mb;
      composed.state = Record::State::tensor;
      ComposeResult c = compose_shards(shards);
      if (c.stats) {
        composed.stats = std::move(*c.stats);
      } else {
        // A gap where a rank's log is missing is that missing_rank error, not one per record.
        const bool missing = c.gap && missing_ranks_;
        if (!missing)
          report("shard_tiling", "step " + std::to_string(step) + " " + where() + ": " + c.error +
                                     " (ranks " + format_ranks(m.ranks) + "); not composed");
        composed.stats = TensorStats{};
        composed.stats.dtype = shards[0]->dtype;
        composed.stats.shape = shards[0]->shard.global_shape;
        composed.stats.unsupported =
            missing ? "shards missing: a rank's log is missing (missing_rank)"
                    : "shards do not tile: " + c.error;
      }
      if (whole && !same_record(whole->rec, composed))
        mismatch(m, g.kind, "step " + std::to_string(step) + " " + where() + ": rank " +
                                std::to_string(whole->rank) + " has the whole tensor " +
                                record_brief(whole->rec) + ", the composed shards have " +
                                record_brief(composed));
      m.rec = std::move(composed);
      if (m.replicas_disagree)
        for (const Part* b : reps)
          if (!b->rec.stats.shard.empty()) m.value_ranks.push_back(b->rank);
    } else {
      if (m.replicas_disagree) m.value_ranks = {whole->rank};
      m.rec = std::move(const_cast<Part*>(whole)->rec);  // the group is discarded below
    }
    m.rec.name = std::move(g.name);
    m.key = std::move(g.key);
    records.push_back(std::move(m));
  }
  return true;
}

}  // namespace probe::differ
