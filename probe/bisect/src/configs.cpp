#include "configs.h"

#include "differ/replay_verdict.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace probe::bisect {
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  for (;;) {
    const auto end = text.find(sep, begin);
    parts.push_back(text.substr(begin, end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

bool is_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

std::int64_t Config::get(const std::string& name) const {
  for (const auto& [n, v] : degrees)
    if (n == name) return v;
  throw BadInput("no degree '" + name + "' in " + text());
}

void Config::set(const std::string& name, std::int64_t value) {
  for (auto& [n, v] : degrees)
    if (n == name) {
      v = value;
      return;
    }
  degrees.emplace_back(name, value);
}

std::string Config::text() const {
  std::string s;
  for (const auto& [n, v] : degrees) s += (s.empty() ? "" : ",") + n + "=" + std::to_string(v);
  return s;
}

std::string Config::dir_name() const {
  std::string s;
  for (const auto& [n, v] : degrees) s += (s.empty() ? "" : "-") + n + std::to_string(v);
  return s;
}

Config parse_config(const std::string& text, const std::string& flag) {
  Config c;
  for (const auto& part : split(text, ',')) {
    const auto eq = part.find('=');
    const std::string name = part.substr(0, eq);
    std::int64_t value = 0;
    const char* first = part.data() + (eq == std::string::npos ? part.size() : eq + 1);
    const auto [ptr, ec] = std::from_chars(first, part.data() + part.size(), value);
    if (eq == std::string::npos || !is_name(name) || ec != std::errc() ||
        ptr != part.data() + part.size() || first == part.data() + part.size())
      throw BadInput(flag + " '" + text + "': '" + part + "' is no name=integer pair");
    if (std::any_of(c.degrees.begin(), c.degrees.end(),
                    [&](const auto& d) { return d.first == name; }))
      throw BadInput(flag + " '" + text + "' names " + name + " twice");
    c.degrees.emplace_back(name, value);
  }
  return c;
}

std::vector<std::string> parse_world(const std::string& text) {
  std::vector<std::string> names;
  if (text.empty()) return names;
  for (const auto& n : split(text, ',')) {
    if (!is_name(n)) throw BadInput("--world '" + text + "': '" + n + "' is no degree name");
    names.push_back(n);
  }
  return names;
}

namespace {

// Each {NAME} of the template in order, with where it is; a shell ${VAR} is the shell's.
struct Placeholder {
  std::size_t at, size;
  std::string name;
};

std::vector<Placeholder> parse_placeholders(const std::string& t) {
  std::vector<Placeholder> found;
  for (std::size_t at = t.find('{'); at != std::string::npos; at = t.find('{', at + 1)) {
    if (at > 0 && t[at - 1] == '$') continue;
    const auto close = t.find('}', at);
    if (close == std::string::npos) break;
    const std::string name = t.substr(at + 1, close - at - 1);
    if (is_name(name)) found.push_back({at, close - at + 1, name});
  }
  return found;
}

}  // namespace

std::vector<std::string> Launch::placeholders() const {
  std::vector<std::string> names;
  for (const auto& p : parse_placeholders(command_template))
    if (std::find(names.begin(), names.end(), p.name) == names.end()) names.push_back(p.name);
  return names;
}

std::int64_t Launch::world_size(const Config& c) const {
  std::int64_t w = 1;
  for (const auto& n : world) w *= c.get(n);
  return w;
}

std::string Launch::command(const Config& c, const std::string& out) const {
  // One pass: a value is never read again as a template (an --out holding "{world}").
  std::string cmd;
  std::size_t from = 0;
  for (const auto& p : parse_placeholders(command_template)) {
    cmd += command_template.substr(from, p.at - from);
    if (p.name == "out") cmd += differ::shell_quoted(out);
    else if (p.name == "world") cmd += std::to_string(world_size(c));
    else cmd += std::to_string(c.get(p.name));
    from = p.at + p.size;
  }
  return cmd + command_template.substr(from);
}

void check(const Launch& launch, const Config& base, const Config& test) {
  const auto used = launch.placeholders();
  const auto in_template = [&](const std::string& n) {
    return std::find(used.begin(), used.end(), n) != used.end();
  };
  const auto in_world = [&](const std::string& n) {
    return std::find(launch.world.begin(), launch.world.end(), n) != launch.world.end();
  };
  if (!in_template("out"))
    throw BadInput(
        "--launch has no {out}: each run needs a directory of its own for its logs (the template's "
        "'--out {out}')");
  if (in_template("world") && launch.world.empty())
    throw BadInput("--launch uses {world} but --world does not say which degrees multiply to it");
  for (const Config* c : {&base, &test})
    for (const auto& [n, v] : c->degrees) {
      const std::string flag = c == &base ? "--base" : "--test";
      if (n == "out" || n == "world")
        throw BadInput(flag + " names a degree '" + n + "': {" + n + "} is the tool's");
      if (v < 0)
        throw BadInput(flag + " " + n + "=" + std::to_string(v) +
                       ": a degree is no negative number");
      const bool multiplies =
          std::find(launch.world.begin(), launch.world.end(), n) != launch.world.end();
      if (multiplies && v < 1)
        throw BadInput(flag + " " + n + "=0: a degree --world multiplies is at least 1");
    }
  for (const auto& [n, v] : base.degrees) {
    bool in_test = false;
    for (const auto& d : test.degrees) in_test |= d.first == n;
    if (!in_test)
      throw BadInput("--base names " + n + ", --test does not: both name the same degrees");
    if (!in_template(n) && !in_world(n))
      throw BadInput("--base and --test name " + n + ", which neither --launch ({" + n +
                     "}) nor --world uses");
  }
  for (const auto& [n, v] : test.degrees) {
    bool in_base = false;
    for (const auto& d : base.degrees) in_base |= d.first == n;
    if (!in_base)
      throw BadInput("--test names " + n + ", --base does not: both name the same degrees");
  }
  for (const auto& n : used) {
    if (n == "out" || n == "world") continue;
    bool named = false;
    for (const auto& d : base.degrees) named |= d.first == n;
    if (!named) throw BadInput("--launch uses {" + n + "}, which --base and --test do not name");
  }
  for (const auto& n : launch.world) {
    bool named = false;
    for (const auto& d : base.degrees) named |= d.first == n;
    if (!named) throw BadInput("--world names " + n + ", which --base and --test do not name");
  }
}

Config in_order_of(const Config& c, const Config& order) {
  Config out;
  for (const auto& [n, v] : order.degrees) out.degrees.emplace_back(n, c.get(n));
  return out;
}

std::string change_text(const std::string& degree, const Config& from, const Config& to) {
  return degree + " " + std::to_string(from.get(degree)) + " -> " + std::to_string(to.get(degree));
}

}  // namespace probe::bisect
