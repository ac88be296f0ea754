// Names across layouts: wrapper prefixes, --map rules (rank-scoped, with arithmetic on
// groups), and the rank lists reports print.
#include "differ/detail/read/names.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <string_view>

#include "differ/options.h"

namespace probe::differ {

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
constexpr std::array<std::string_view, 4> kWrappers = {"module.", "_fsdp_wrapped_module.",
                                                       "_orig_mod.", "_checkpoint_wrapped_module."};
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
      while (j < repl.size() && std::isdigit(static_cast<unsigned char>(repl[j])))
        g = g * 10 + static_cast<std::size_t>(repl[j++] - '0');
      if (g < m.size()) out += m.str(g);
      i = j - 1;
    } else if (c == '{') {
      const auto close = repl.find('}', i);
      if (close == std::string::npos)
        throw InputError("--map replacement '" + repl + "': unclosed ${");
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
          throw InputError("--map replacement '" + repl + "': group " + std::to_string(g) + " ('" +
                           group + "') is not a number");
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
  std::string out = apply_rules(strip_ ? strip_wrapper_prefixes(name) : name, rank);
  return cache_.emplace(*lookup, std::move(out)).first->second;
}

std::string NameMapper::apply_rules(std::string out, int rank) const {
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
  return out;
}

}  // namespace probe::differ
