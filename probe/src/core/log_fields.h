// The pieces every line of the log format is made of (docs/log-format.md): space-separated
// `key=value` fields, integers, [d0,d1,...] lists, hashes, %-escaped text. Shared by the
// files that read and write the format's lines (tag lines, records); inline because the differ
// reads millions of records through them.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "probe/log_format.h"

namespace probe::log_format {

[[noreturn]] inline void fail(const std::string& message) { throw ParseError(message); }

// Decimal, an optional '-', within int64 (what std::from_chars accepts), by hand: records hold
// several integers each and from_chars' generality costs more than the digits.
inline std::int64_t parse_int(std::string_view text, std::string_view field) {
  const bool negative = !text.empty() && text[0] == '-';
  std::string_view digits = text.substr(negative ? 1 : 0);
  while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
  bool ok = !digits.empty() && digits.size() <= 19;  // 19 digits cannot overflow a uint64
  std::uint64_t v = 0;
  for (char c : digits) {
    const unsigned d = static_cast<unsigned char>(c) - unsigned{'0'};
    ok = ok && d < 10;
    v = v * 10 + d;
  }
  const std::uint64_t limit =
      std::uint64_t{std::numeric_limits<std::int64_t>::max()} + (negative ? 1 : 0);
  if (!ok || v > limit)
    fail("field '" + std::string(field) + "' is not an integer: '" + std::string(text) + "'");
  return negative ? static_cast<std::int64_t>(std::uint64_t{0} - v) : static_cast<std::int64_t>(v);
}

inline void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;  // 20 characters hold any int64
  out.append(buf, end);
}

inline void append_dims(std::string& out, const std::vector<std::int64_t>& dims) {
  out += '[';
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ',';
    append_int(out, dims[i]);
  }
  out += ']';
}

// Into `dims`, reusing its capacity (the differ parses millions of records into reused ones).
inline void parse_dims_into(std::string_view text, std::string_view field,
                            std::vector<std::int64_t>& dims) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']')
    fail("field '" + std::string(field) + "' is not a [d0,d1,...] list: '" + std::string(text) +
         "'");
  text = text.substr(1, text.size() - 2);
  dims.clear();
  while (!text.empty()) {
    auto comma = text.find(',');
    dims.push_back(parse_int(text.substr(0, comma), field));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) fail("field '" + std::string(field) + "' ends with a comma");
  }
}

struct Field {
  std::string_view key;
  std::string_view value;
  bool bare;  // a token without '='
};
// Calls f(Field) for each space-separated token, without allocating (records are parsed
// millions of times per second by the differ).
template <class F>
void for_each_field(std::string_view line, F&& f) {
  std::size_t pos = 0;
  while (pos < line.size()) {
    if (line[pos] == ' ') {
      ++pos;
      continue;
    }
    auto end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    std::string_view token = line.substr(pos, end - pos);
    auto eq = token.find('=');
    if (eq == std::string_view::npos) f(Field{token, {}, true});
    else f(Field{token.substr(0, eq), token.substr(eq + 1), false});
    pos = end;
  }
}

// Calls f on each `sep`-separated item of `list` ("" holds none); an empty item is an error
// naming `field`.
template <class F>
void for_each_item(std::string_view list, char sep, std::string_view field, F&& f) {
  while (!list.empty()) {
    const std::size_t end = list.find(sep);
    const std::string_view item = list.substr(0, end);
    if (item.empty()) fail("field '" + std::string(field) + "' has an empty item");
    f(item);
    if (end == std::string_view::npos) break;
    list.remove_prefix(end + 1);
    if (list.empty())
      fail("field '" + std::string(field) + "' ends with '" + std::string(1, sep) + "'");
  }
}

// The text between '[' and ']' of a list field.
inline std::string_view bracketed(std::string_view v, std::string_view field,
                                  std::string_view form) {
  if (v.size() < 2 || v.front() != '[' || v.back() != ']')
    fail("field '" + std::string(field) + "' is not " + std::string(form));
  return v.substr(1, v.size() - 2);
}

// "[h,h,-]": an op's input hashes (`field` in, or cand), '-' for an input without one.
inline std::vector<std::optional<std::uint64_t>> parse_input_hashes(std::string_view v,
                                                                    std::string_view field = "in") {
  std::vector<std::optional<std::uint64_t>> hashes;
  for_each_item(bracketed(v, field, "[hash,...]"), ',', field, [&](std::string_view item) {
    if (item == "-") hashes.emplace_back();
    else hashes.emplace_back(parse_hash(item));
  });
  return hashes;
}

// The writer's pieces: a double's shortest round-trip text, 16 hex digits, %-escaped text,
// appended to `out`.
inline bool needs_escape(unsigned char c) { return c <= 0x20 || c == '%' || c == '=' || c == 0x7f; }

// %-escapes the bytes `escape` names.
template <class Escape>
void append_escaped_if(std::string& out, std::string_view raw, Escape escape) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  if (std::none_of(raw.begin(), raw.end(),
                   [&](char c) { return escape(static_cast<unsigned char>(c)); })) {
    out += raw;  // the common case: a name as it was given
    return;
  }
  for (unsigned char c : raw) {
    if (escape(c)) {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
}

inline void append_escaped(std::string& out, std::string_view raw) {
  append_escaped_if(out, raw, [](unsigned char c) { return needs_escape(c); });
}

// An item of a "[a,b,...]" list of names: its separator and brackets escaped too.
inline void append_escaped_item(std::string& out, std::string_view raw) {
  append_escaped_if(out, raw, [](unsigned char c) {
    return needs_escape(c) || c == ',' || c == '[' || c == ']';
  });
}

inline void append_double(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "nan";
  } else if (std::isinf(v)) {
    out += v > 0 ? "inf" : "-inf";
  } else {
    char buf[32];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    (void)ec;  // 32 chars always suffice for the shortest round-trip form
    out.append(buf, end);
  }
}

inline void append_hash(std::string& out, std::uint64_t h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char buf[16];
  for (int i = 15; i >= 0; --i, h >>= 4) buf[i] = kDigits[h & 0xf];
  out.append(buf, sizeof buf);
}

}  // namespace probe::log_format
