// The format's values as text: doubles, hashes, %-escaped strings (docs/log-format.md, "Records").
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "log_fields.h"

namespace probe::log_format {

std::string format_double(double v) {
  std::string out;
  append_double(out, v);
  return out;
}

double parse_double(std::string_view text) {
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    fail("not a number: '" + std::string(text) + "'");
  return v;
}

std::string format_hash(std::uint64_t h) {
  std::string out;
  append_hash(out, h);
  return out;
}

std::optional<std::uint64_t> read_hash(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  static constexpr auto kHex = [] {
    std::array<std::int8_t, 256> t{};
    t.fill(-1);
    for (int c = '0'; c <= '9'; ++c)
      t[static_cast<std::size_t>(c)] = static_cast<std::int8_t>(c - '0');
    for (int c = 'a'; c <= 'f'; ++c)
      t[static_cast<std::size_t>(c)] = static_cast<std::int8_t>(c - 'a' + 10);
    return t;
  }();
  std::uint64_t h = 0;
  int bad = 0;
  for (char c : text) {
    const int d = kHex[static_cast<unsigned char>(c)];
    bad |= d;  // negative once any digit is not lowercase hex
    h = (h << 4) | static_cast<std::uint64_t>(d & 0xf);
  }
  if (bad < 0) return std::nullopt;
  return h;
}

std::uint64_t parse_hash(std::string_view text) {
  if (text.size() != 16) fail("hash is not 16 hex digits: '" + std::string(text) + "'");
  const auto h = read_hash(text);
  if (!h) fail("hash is not lowercase hex: '" + std::string(text) + "'");
  return *h;
}

std::string escape_value(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  append_escaped(out, raw);
  return out;
}

std::string unescape_value(std::string_view escaped) {
  std::string out;
  unescape_value_into(escaped, out);
  return out;
}

void unescape_value_into(std::string_view escaped, std::string& out) {
  if (escaped.find('%') == std::string_view::npos) {  // the common case
    out.assign(escaped);
    return;
  }
  out.clear();
  out.reserve(escaped.size());
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '%') {
      out += escaped[i];
      continue;
    }
    auto hex = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    if (i + 2 >= escaped.size()) fail("truncated %-escape in '" + std::string(escaped) + "'");
    int hi = hex(escaped[i + 1]), lo = hex(escaped[i + 2]);
    if (hi < 0 || lo < 0) fail("bad %-escape in '" + std::string(escaped) + "'");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
}

}  // namespace probe::log_format
