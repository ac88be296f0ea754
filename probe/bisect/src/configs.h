// The configurations numprobe_bisect runs (docs/bisect.md): degrees by name, and the launch
// template that turns one into a shell command.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace probe::bisect {

// Bad usage: the tool says so and exits 2.
struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Degree values by name, in the order --base names them.
struct Config {
  std::vector<std::pair<std::string, std::int64_t>> degrees;

  std::int64_t get(const std::string& name) const;
  void set(const std::string& name, std::int64_t value);
  std::string text() const;      // "dp=4,tp=1,pp=1"
  std::string dir_name() const;  // "dp4-tp1-pp1"
  friend bool operator==(const Config&, const Config&) = default;
};

// "dp=4,tp=1" (`flag` names the option in the error).
Config parse_config(const std::string& text, const std::string& flag);

// --launch with its {NAME}, {out} and {world} placeholders, and --world's degrees.
struct Launch {
  std::string command_template;
  std::vector<std::string> world;  // the degrees whose product {world} is

  std::vector<std::string> placeholders() const;   // every {NAME} in the template, in order, once
  std::int64_t world_size(const Config& c) const;  // their product (1 without --world)
  std::string command(const Config& c, const std::string& out) const;
};

// "dp,tp,pp" as --world's list.
std::vector<std::string> parse_world(const std::string& text);

// The template and the configurations fit together (throws BadInput saying how they do not):
// {out} is used; base and test name the same degrees, each used by the template or --world; every
// placeholder other than {out} and {world} is a degree they name; {world} comes with --world.
void check(const Launch& launch, const Config& base, const Config& test);

// `c`'s degrees in `order`'s order (the same names).
Config in_order_of(const Config& c, const Config& order);

// "tp 1 -> 2"
std::string change_text(const std::string& degree, const Config& from, const Config& to);

}  // namespace probe::bisect
