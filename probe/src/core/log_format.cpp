#include "probe/log_format.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace probe::log_format {
namespace {

constexpr std::array<std::string_view, kKindCount> kKindNames = {
    "rng", "input", "output", "tap", "output_grad", "mb_grad", "grad", "scalar", "param", "optim", "op"};
constexpr std::array<std::string_view, 4> kPhaseNames = {"step_begin", "forward", "backward", "step_end"};

// "rng,input,...": every kind's name, for error messages.
std::string kind_list() {
  std::string out;
  for (auto name : kKindNames) (out += out.empty() ? "" : ",") += name;
  return out;
}

[[noreturn]] void fail(const std::string& message) { throw ParseError(message); }

// Decimal, an optional '-', within int64 (what std::from_chars accepts), by hand: records hold
// several integers each and from_chars' generality costs more than the digits.
std::int64_t parse_int(std::string_view text, std::string_view field) {
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
  const std::uint64_t limit = std::uint64_t{std::numeric_limits<std::int64_t>::max()} + (negative ? 1 : 0);
  if (!ok || v > limit)
    fail("field '" + std::string(field) + "' is not an integer: '" + std::string(text) + "'");
  return negative ? static_cast<std::int64_t>(std::uint64_t{0} - v) : static_cast<std::int64_t>(v);
}

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;  // 20 characters hold any int64
  out.append(buf, end);
}

void append_dims(std::string& out, const std::vector<std::int64_t>& dims) {
  out += '[';
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ',';
    append_int(out, dims[i]);
  }
  out += ']';
}

// Into `dims`, reusing its capacity (the differ parses millions of records into reused ones).
void parse_dims_into(std::string_view text, std::string_view field, std::vector<std::int64_t>& dims) {
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
    if (eq == std::string_view::npos)
      f(Field{token, {}, true});
    else
      f(Field{token.substr(0, eq), token.substr(eq + 1), false});
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
    if (list.empty()) fail("field '" + std::string(field) + "' ends with '" + std::string(1, sep) + "'");
  }
}

// The text between '[' and ']' of a list field.
std::string_view bracketed(std::string_view v, std::string_view field, std::string_view form) {
  if (v.size() < 2 || v.front() != '[' || v.back() != ']')
    fail("field '" + std::string(field) + "' is not " + std::string(form));
  return v.substr(1, v.size() - 2);
}

// "[h,h,-]": an op's input hashes (`field` in, or cand), '-' for an input without one.
std::vector<std::optional<std::uint64_t>> parse_input_hashes(std::string_view v, std::string_view field = "in") {
  std::vector<std::optional<std::uint64_t>> hashes;
  for_each_item(bracketed(v, field, "[hash,...]"), ',', field, [&](std::string_view item) {
    if (item == "-") hashes.emplace_back();
    else hashes.emplace_back(parse_hash(item));
  });
  return hashes;
}

std::vector<Field> split_fields(std::string_view line) {
  std::vector<Field> fields;
  for_each_field(line, [&](const Field& f) { fields.push_back(f); });
  return fields;
}

}  // namespace

}  // namespace probe::log_format

namespace probe {

std::string_view kind_name(Kind kind) {
  return log_format::kKindNames[static_cast<std::size_t>(kind)];
}

std::optional<Kind> parse_kind(std::string_view name) {
  // Length and first letter before the bytes: this runs for every record read.
  for (std::size_t i = 0; i < log_format::kKindNames.size(); ++i) {
    const std::string_view k = log_format::kKindNames[i];
    if (k.size() == name.size() && k[0] == name[0] && k == name) return static_cast<Kind>(i);
  }
  return std::nullopt;
}

std::uint32_t parse_kind_mask(std::string_view text) {
  if (text.empty() || text == "all") return kAllKinds;
  std::uint32_t mask = text[0] == '-' ? kAllKinds : 0;
  while (true) {
    const std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    const bool remove = !item.empty() && item[0] == '-';
    if (remove) item.remove_prefix(1);
    if (!item.empty()) {
      const auto kind = parse_kind(item);
      if (!kind)
        throw std::invalid_argument("unknown record kind '" + std::string(item) +
                                    "' (kinds: " + log_format::kind_list() + ")");
      const std::uint32_t bit = 1u << static_cast<unsigned>(*kind);
      mask = remove ? mask & ~bit : mask | bit;
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (mask == 0) throw std::invalid_argument("the kind list selects no kind");
  return mask;
}

Phase phase_of(Kind kind) {
  switch (kind) {
    case Kind::param:
      return Phase::step_begin;
    case Kind::rng:
    case Kind::input:
    case Kind::output:
    case Kind::tap:
      return Phase::forward;
    case Kind::output_grad:
    case Kind::mb_grad:
      return Phase::backward;
    case Kind::grad:
    case Kind::scalar:
    case Kind::optim:
      return Phase::step_end;
    case Kind::op:
      return Phase::forward;  // unless the record says otherwise (phase_of(Record))
  }
  return Phase::step_end;
}

Phase phase_of(const Record& record) {
  return record.kind == Kind::op && record.phase ? *record.phase : phase_of(record.kind);
}

std::string_view phase_name(Phase phase) { return log_format::kPhaseNames[static_cast<std::size_t>(phase)]; }

std::optional<Phase> parse_phase(std::string_view name) {
  for (std::size_t i = 0; i < log_format::kPhaseNames.size(); ++i)
    if (log_format::kPhaseNames[i] == name) return static_cast<Phase>(i);
  return std::nullopt;
}

}  // namespace probe

namespace probe::log_format {

namespace {

void append_double(std::string& out, double v) {
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

void append_hash(std::string& out, std::uint64_t h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char buf[16];
  for (int i = 15; i >= 0; --i, h >>= 4) buf[i] = kDigits[h & 0xf];
  out.append(buf, sizeof buf);
}

bool needs_escape(unsigned char c) { return c <= 0x20 || c == '%' || c == '=' || c == 0x7f; }

void append_escaped(std::string& out, std::string_view raw) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  if (std::none_of(raw.begin(), raw.end(), [](char c) { return needs_escape(static_cast<unsigned char>(c)); })) {
    out += raw;  // the common case: a name as it was given
    return;
  }
  for (unsigned char c : raw) {
    if (needs_escape(c)) {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
}

}  // namespace

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
    for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = static_cast<std::int8_t>(c - '0');
    for (int c = 'a'; c <= 'f'; ++c) t[static_cast<std::size_t>(c)] = static_cast<std::int8_t>(c - 'a' + 10);
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
    if (i + 2 >= escaped.size())
      fail("truncated %-escape in '" + std::string(escaped) + "'");
    int hi = hex(escaped[i + 1]), lo = hex(escaped[i + 2]);
    if (hi < 0 || lo < 0) fail("bad %-escape in '" + std::string(escaped) + "'");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
}

std::string format_header(const Header& header) {
  std::string out(kHeaderTag);
  out += " format=" + std::to_string(header.format_version);
  out += " hash_spec=" + std::to_string(header.hash_spec_version);
  out += " rank=" + std::to_string(header.rank);
  out += " world_size=" + std::to_string(header.world_size);
  out += " torch=" + escape_value(header.torch_version);
  out += " setup=" + escape_value(header.setup);
  return out;
}

Header parse_header(std::string_view line) {
  auto fields = split_fields(line);
  if (fields.empty() || !fields[0].bare || fields[0].key != kHeaderTag)
    fail("not a numprobe log: the first line does not start with '" + std::string(kHeaderTag) +
         "'");
  Header header;
  bool has_format = false, has_spec = false;
  for (std::size_t i = 1; i < fields.size(); ++i) {
    const auto& f = fields[i];
    if (f.bare) fail("unexpected token '" + std::string(f.key) + "' in header");
    if (f.key == "format") {
      header.format_version = static_cast<int>(parse_int(f.value, f.key));
      has_format = true;
    } else if (f.key == "hash_spec") {
      header.hash_spec_version = static_cast<int>(parse_int(f.value, f.key));
      has_spec = true;
    } else if (f.key == "rank") {
      header.rank = static_cast<int>(parse_int(f.value, f.key));
    } else if (f.key == "world_size") {
      header.world_size = static_cast<int>(parse_int(f.value, f.key));
    } else if (f.key == "torch") {
      header.torch_version = unescape_value(f.value);
    } else if (f.key == "setup") {
      header.setup = unescape_value(f.value);
    }  // unknown header fields are ignored: later minor additions stay readable
  }
  if (!has_format || !has_spec) fail("header lacks format= or hash_spec=");
  if (header.format_version < kOldestVersion || header.format_version > kVersion)
    fail("log format version " + std::to_string(header.format_version) +
         " is not supported (this build reads versions " + std::to_string(kOldestVersion) +
         " to " + std::to_string(kVersion) + ")");
  if (header.rank < 0 || header.world_size < 1 || header.rank >= header.world_size)
    fail("header has rank " + std::to_string(header.rank) + " outside world_size " +
         std::to_string(header.world_size));
  return header;
}

std::string format_step_end(std::int64_t step, std::size_t records, bool compiled) {
  std::string out(kStepEndTag);
  out += " step=" + std::to_string(step);
  out += " records=" + std::to_string(records);
  if (compiled) out += " compiled=1";
  return out;
}

StepEnd parse_step_end(std::string_view line) {
  StepEnd end;
  bool has_step = false, has_records = false, first = true;
  for_each_field(line, [&](const Field& f) {
    if (first) {  // the tag
      first = false;
      if (!f.bare || f.key != kStepEndTag)
        fail("step end does not start with '" + std::string(kStepEndTag) + "'");
      return;
    }
    if (f.bare) fail("unexpected token '" + std::string(f.key) + "' in step end");
    if (f.key == "step") {
      end.step = parse_int(f.value, f.key);
      has_step = true;
    } else if (f.key == "records") {
      end.records = parse_int(f.value, f.key);
      has_records = true;
    } else if (f.key == "compiled") {
      if (f.value != "0" && f.value != "1") fail("compiled=" + std::string(f.value) + " in step end is not 0 or 1");
      end.compiled = f.value == "1";
    } else {
      fail("unknown field '" + std::string(f.key) + "' in step end");
    }
  });
  if (!has_step || !has_records) fail("step end lacks step= or records=");
  if (end.step < 0 || end.records < 0) fail("negative step or records in step end");
  return end;
}

std::string format_stopped(const Stopped& stopped) {
  std::string out(kStoppedTag);
  out += " step=" + std::to_string(stopped.step);
  out += " reason=" + escape_value(stopped.reason);
  return out;
}

Stopped parse_stopped(std::string_view line) {
  Stopped stopped;
  bool has_step = false, has_reason = false, first = true;
  for_each_field(line, [&](const Field& f) {
    if (first) {  // the tag
      first = false;
      if (!f.bare || f.key != kStoppedTag)
        fail("stop line does not start with '" + std::string(kStoppedTag) + "'");
      return;
    }
    if (f.bare) fail("unexpected token '" + std::string(f.key) + "' in stop line");
    if (f.key == "step") {
      stopped.step = parse_int(f.value, f.key);
      has_step = true;
    } else if (f.key == "reason") {
      stopped.reason = unescape_value(f.value);
      has_reason = true;
    }  // other fields are ignored: later additions stay readable
  });
  if (!has_step || !has_reason) fail("stop line lacks step= or reason=");
  if (stopped.step < 0) fail("negative step in stop line");
  return stopped;
}

namespace {

// " split=r/n cand=[h,...] incand=[h:h:...,-,...]" for an op record of a split scope (format 7).
void append_split(std::string& out, const OpSplit& split) {
  if (split.empty()) return;
  out += " split=";
  append_int(out, split.rank);
  out += '/';
  append_int(out, split.size);
  out += " cand=[";
  for (std::size_t d = 0; d < split.output.size(); ++d) {
    if (d) out += ',';
    append_hash(out, split.output[d]);
  }
  out += "] incand=[";
  for (std::size_t i = 0; i < split.inputs.size(); ++i) {
    if (i) out += ',';
    if (split.inputs[i].empty()) out += '-';
    for (std::size_t d = 0; d < split.inputs[i].size(); ++d) {
      if (d) out += ':';
      append_hash(out, split.inputs[i][d]);
    }
  }
  out += ']';
}

void append_op_fields(std::string& out, const Record& record) {
  out += " phase=";
  out += phase_name(record.phase.value_or(Phase::forward));
  out += " in=[";
  for (std::size_t i = 0; i < record.inputs.size(); ++i) {
    if (i) out += ',';
    if (record.inputs[i]) append_hash(out, *record.inputs[i]);
    else out += '-';
  }
  out += ']';
  append_split(out, record.split);
  if (!record.dump.empty()) {
    out += " dump=";
    append_escaped(out, record.dump);
  }
}

// " covers=[a,b,...]" where the record covers several microbatches (format 6).
void append_covers(std::string& out, const std::vector<std::int64_t>& covers) {
  if (covers.empty()) return;
  out += " covers=";
  append_dims(out, covers);
}

// The figures, then (after `partial`) the covered microbatches, then torch_hash.
void append_tensor_fields(std::string& out, const TensorStats& s, const std::vector<std::int64_t>& covers) {
  if (s.unsupported) {
    out += " unsupported=";
    append_escaped(out, *s.unsupported);
  } else {
    out += " hash=";
    append_hash(out, s.hash);
    out += " norm=";
    append_double(out, s.norm);
    out += " min=";
    append_double(out, s.min);
    out += " max=";
    append_double(out, s.max);
    out += " mean=";
    append_double(out, s.mean);
    out += " nan=";
    append_int(out, s.nan);
    out += " inf=";
    append_int(out, s.inf);
    if (s.l1) {
      out += " l1=";
      append_double(out, *s.l1);
    }
    if (s.mhash) {
      out += " mhash=";
      append_hash(out, *s.mhash);
    }
  }
  out += " dtype=";
  append_escaped(out, s.dtype);
  out += " shape=";
  append_dims(out, s.shape);
  if (s.nnz) {
    out += " nnz=";
    append_int(out, *s.nnz);
  }
  if (!s.shard.empty()) {
    out += " shard=";
    append_dims(out, s.shard.global_shape);
    out += '@';
    append_dims(out, s.shard.offset);
  }
  if (!s.partial.empty()) {
    out += " partial=";
    append_int(out, s.partial.index);
    out += '/';
    append_int(out, s.partial.count);
  }
  append_covers(out, covers);
  if (s.torch_hash) {
    out += " torch_hash=";
    append_hash(out, *s.torch_hash);
  }
}

}  // namespace

std::string format_record(const Record& record) {
  std::string out;
  out.reserve(192 + record.name.size());  // a tensor record's line, without growing
  append_record(out, record);
  return out;
}

void append_record(std::string& out, const Record& record) {
  out += "step=";
  append_int(out, record.step);
  out += " kind=";
  out += kind_name(record.kind);
  out += " name=";
  append_escaped(out, record.name);
  if (record.microbatch) {
    out += " mb=";
    append_int(out, *record.microbatch);
  }
  if (record.kind == Kind::op) append_op_fields(out, record);
  switch (record.state) {
    case Record::State::none:
      out += " none";
      append_covers(out, record.covers);
      return;
    case Record::State::scalar:
      out += " value=";
      append_double(out, record.value);
      append_covers(out, record.covers);
      return;
    case Record::State::tensor:
      break;
  }
  append_tensor_fields(out, record.stats, record.covers);
}

Record parse_record(std::string_view line) {
  Record r;
  parse_record_into(line, r);
  return r;
}

namespace {

enum class RecordField {
  step, kind, name, mb, phase, in, value, hash, norm, min, max, mean, nan, inf, l1, mhash, dtype,
  shape, nnz, shard, partial, covers, unsupported, torch_hash, split, cand, incand, dump, unknown
};

// By length first: a field name costs one or two short comparisons, not a chain of twenty
// (the differ parses millions of records).
RecordField record_field(std::string_view k) {
  using F = RecordField;
  switch (k.size()) {
    case 2: return k == "mb" ? F::mb : k == "in" ? F::in : k == "l1" ? F::l1 : F::unknown;
    case 3:
      return k == "min" ? F::min : k == "max" ? F::max : k == "nan" ? F::nan
           : k == "inf" ? F::inf : k == "nnz" ? F::nnz : F::unknown;
    case 4:
      return k == "step" ? F::step : k == "kind" ? F::kind : k == "name" ? F::name
           : k == "hash" ? F::hash : k == "norm" ? F::norm : k == "mean" ? F::mean
           : k == "cand" ? F::cand : k == "dump" ? F::dump : F::unknown;
    case 5:
      return k == "phase" ? F::phase : k == "value" ? F::value : k == "dtype" ? F::dtype
           : k == "shape" ? F::shape : k == "shard" ? F::shard : k == "split" ? F::split
           : k == "mhash" ? F::mhash : F::unknown;
    case 6: return k == "covers" ? F::covers : k == "incand" ? F::incand : F::unknown;
    case 7: return k == "partial" ? F::partial : F::unknown;
    case 10: return k == "torch_hash" ? F::torch_hash : F::unknown;
    case 11: return k == "unsupported" ? F::unsupported : F::unknown;
    default: return F::unknown;
  }
}

// Which fields a record line held: what checking the record needs beyond the record itself.
struct FieldsSeen {
  bool step = false, kind = false, name = false, value = false, hash = false, dtype = false;
  bool shape = false, none = false, inputs = false, split = false, cand = false, incand = false, dump = false;
};

// A tensor's field (hash= to torch_hash=) into `s`; false when `field` is not one.
bool read_stats_field(RecordField field, std::string_view k, std::string_view v, TensorStats& s,
                      FieldsSeen& seen) {
  using F = RecordField;
  switch (field) {
    case F::hash: s.hash = parse_hash(v); seen.hash = true; return true;
    case F::norm: s.norm = parse_double(v); return true;
    case F::min: s.min = parse_double(v); return true;
    case F::max: s.max = parse_double(v); return true;
    case F::mean: s.mean = parse_double(v); return true;
    case F::nan: s.nan = parse_int(v, k); return true;
    case F::inf: s.inf = parse_int(v, k); return true;
    case F::l1: s.l1 = parse_double(v); return true;
    case F::mhash: s.mhash = parse_hash(v); return true;
    case F::dtype: unescape_value_into(v, s.dtype); seen.dtype = true; return true;
    case F::shape: parse_dims_into(v, k, s.shape); seen.shape = true; return true;
    case F::nnz:
      s.nnz = parse_int(v, k);
      if (*s.nnz < 0) fail("negative nnz");
      return true;
    case F::shard: {
      auto at = v.find('@');
      if (at == std::string_view::npos) fail("field 'shard' is not [global]@[offset]");
      parse_dims_into(v.substr(0, at), k, s.shard.global_shape);
      parse_dims_into(v.substr(at + 1), k, s.shard.offset);
      if (s.shard.global_shape.size() != s.shard.offset.size())
        fail("field 'shard' has global shape and offset of different ranks");
      return true;
    }
    case F::partial: {
      auto slash = v.find('/');
      if (slash == std::string_view::npos) fail("field 'partial' is not <index>/<count>: '" + std::string(v) + "'");
      const auto index = parse_int(v.substr(0, slash), k), count = parse_int(v.substr(slash + 1), k);
      if (count < 1 || index < 0 || index >= count)
        fail("field 'partial' needs 0 <= index < count: '" + std::string(v) + "'");
      s.partial = Partial{index, count};
      return true;
    }
    case F::unsupported: s.unsupported = unescape_value(v); return true;
    case F::torch_hash: s.torch_hash = parse_hash(v); return true;
    default: return false;
  }
}

// "[a,b,...]": the microbatches a record covers, at least two, ascending without duplicates (its
// own microbatch first: check_record).
void read_covers(std::string_view v, std::vector<std::int64_t>& covers) {
  parse_dims_into(v, "covers", covers);
  if (covers.size() < 2) fail("field 'covers' needs at least 2 microbatches: '" + std::string(v) + "'");
  for (std::size_t i = 1; i < covers.size(); ++i)
    if (covers[i] <= covers[i - 1])
      fail("field 'covers' is not ascending without duplicates: '" + std::string(v) + "'");
}

// "r/n": a split op's rank of its ranks, 0 <= r < n, n >= 2.
void read_split(std::string_view v, OpSplit& split) {
  const auto slash = v.find('/');
  if (slash == std::string_view::npos) fail("field 'split' is not <rank>/<size>: '" + std::string(v) + "'");
  split.rank = parse_int(v.substr(0, slash), "split");
  split.size = parse_int(v.substr(slash + 1), "split");
  if (split.size < 2 || split.rank < 0 || split.rank >= split.size)
    fail("field 'split' needs 0 <= rank < size and size >= 2: '" + std::string(v) + "'");
}

// "[h:h:...,-,...]" (incand): each input's hashes as shards, '-' for none.
std::vector<std::vector<std::uint64_t>> parse_shard_hashes(std::string_view v) {
  std::vector<std::vector<std::uint64_t>> inputs;
  for_each_item(bracketed(v, "incand", "[hash:hash,...]"), ',', "incand", [&](std::string_view item) {
    auto& hashes = inputs.emplace_back();
    if (item != "-") for_each_item(item, ':', "incand", [&](std::string_view h) { hashes.push_back(parse_hash(h)); });
  });
  return inputs;
}

// cand: the output's hashes as shards, one per dim.
std::vector<std::uint64_t> parse_output_shard_hashes(std::string_view v) {
  std::vector<std::uint64_t> hashes;
  for (const auto& h : parse_input_hashes(v, "cand")) {
    if (!h) fail("field 'cand' holds '-'");
    hashes.push_back(*h);
  }
  return hashes;
}

// An op record's split=, cand=, incand= or dump= into `r`; false when `field` is none of them.
bool read_op_field(RecordField field, std::string_view v, Record& r, FieldsSeen& seen) {
  switch (field) {
    case RecordField::dump:
      unescape_value_into(v, r.dump);
      if (r.dump.empty()) fail("field 'dump' is empty");
      seen.dump = true;
      return true;
    case RecordField::split:
      read_split(v, r.split);
      seen.split = true;
      return true;
    case RecordField::cand:
      r.split.output = parse_output_shard_hashes(v);
      seen.cand = true;
      return true;
    case RecordField::incand:
      r.split.inputs = parse_shard_hashes(v);
      seen.incand = true;
      return true;
    default:
      return false;
  }
}


// One field of a record line, in any order, into `r`.
void read_field(const Field& f, Record& r, FieldsSeen& seen) {
  if (f.bare) {
    if (f.key != "none") fail("unexpected token '" + std::string(f.key) + "'");
    seen.none = true;
    return;
  }
  const std::string_view k = f.key, v = f.value;
  using F = RecordField;
  const F field = record_field(k);
  if (read_stats_field(field, k, v, r.stats, seen)) return;
  switch (field) {
    case F::step:
      r.step = parse_int(v, k);
      seen.step = true;
      return;
    case F::kind: {
      auto kind = parse_kind(v);
      if (!kind) fail("unknown kind '" + std::string(v) + "'");
      r.kind = *kind;
      seen.kind = true;
      return;
    }
    case F::name:
      unescape_value_into(v, r.name);
      seen.name = !r.name.empty();
      return;
    case F::mb: r.microbatch = parse_int(v, k); return;
    case F::phase:
      r.phase = parse_phase(v);
      if (!r.phase || (*r.phase != Phase::forward && *r.phase != Phase::backward))
        fail("field 'phase' is not forward or backward");
      return;
    case F::in:
      r.inputs = parse_input_hashes(v);
      seen.inputs = true;
      return;
    case F::value:
      r.value = parse_double(v);
      seen.value = true;
      return;
    case F::covers: read_covers(v, r.covers); return;
    default:
      if (read_op_field(field, v, r, seen)) return;
      fail("unknown field '" + std::string(k) + "'");
  }
}

// split=, cand= and incand= come together, on op records, one cand per dim of the output (none
// where it has no hash) and one incand per input.
void check_split(const Record& r, const FieldsSeen& seen) {
  if (!seen.split && !seen.cand && !seen.incand) return;
  if (!(seen.split && seen.cand && seen.incand)) fail("split=, cand= and incand= go together");
  if (r.kind != Kind::op) fail("split= belongs to op records");
  if (!r.split.output.empty() && r.split.output.size() != r.stats.shape.size())
    fail("field 'cand' has " + std::to_string(r.split.output.size()) + " hashes for a " +
         std::to_string(r.stats.shape.size()) + "-dim output");
  if (r.split.inputs.size() != r.inputs.size())
    fail("field 'incand' has " + std::to_string(r.split.inputs.size()) + " inputs where in= has " +
         std::to_string(r.inputs.size()));
}

// What makes a record: its key, exactly one state (none, a value, a tensor), an op's phase and
// inputs, a tensor's dtype, shape and hash. Sets r.state.
void check_record(Record& r, const FieldsSeen& seen) {
  if (!seen.step) fail("record lacks step=");
  if (!seen.kind) fail("record lacks kind=");
  if (!seen.name) fail("record lacks name=");
  if (r.step < 0) fail("negative step");
  if (r.microbatch && *r.microbatch < 0) fail("negative mb");
  if (!r.covers.empty() && r.covers.front() != r.microbatch.value_or(-1)) {
    std::string covers;
    append_dims(covers, r.covers);
    fail(r.microbatch ? "field 'covers' does not start at the record's mb=" + std::to_string(*r.microbatch) + ": '" +
                            covers + "'"
                      : "field 'covers' belongs to records with an mb: '" + covers + "'");
  }
  if ((r.phase || seen.inputs) != (r.kind == Kind::op)) fail("phase= and in= belong to op records, and only to them");
  if (r.kind == Kind::op && !(r.phase && seen.inputs)) fail("op record lacks phase= or in=");
  if (seen.dump && r.kind != Kind::op) fail("dump= belongs to op records");
  check_split(r, seen);
  const int states = int(seen.none) + int(seen.value) + int(seen.hash || seen.dtype);
  if (states != 1)
    fail("record must have exactly one of: 'none', value=, or tensor fields (hash=/dtype=)");
  if (seen.none) {
    r.state = Record::State::none;
  } else if (seen.value) {
    r.state = Record::State::scalar;
  } else {
    if (!seen.dtype || !seen.shape) fail("tensor record lacks dtype= or shape=");
    if (!seen.hash && !r.stats.unsupported) fail("tensor record lacks hash= (or unsupported=)");
    if (!r.stats.shard.empty() && r.stats.shard.offset.size() != r.stats.shape.size())
      fail("field 'shard' rank differs from shape's");
  }
}

}  // namespace

void reset_record(Record& r) {
  r.step = 0;
  r.kind = Kind::scalar;
  r.name.clear();
  r.microbatch.reset();
  r.covers.clear();
  r.state = Record::State::tensor;
  r.value = 0;
  r.phase.reset();
  r.inputs.clear();
  r.split.rank = r.split.size = 0;
  r.split.output.clear();
  r.split.inputs.clear();
  r.dump.clear();
  TensorStats& s = r.stats;
  s.hash = 0;
  s.norm = 0;
  s.min = s.max = s.mean = TensorStats::kNaN;
  s.nan = s.inf = 0;
  s.l1.reset();
  s.mhash.reset();
  s.dtype.clear();
  s.shape.clear();
  s.nnz.reset();
  s.shard.global_shape.clear();
  s.shard.offset.clear();
  s.partial = Partial{};
  s.unsupported.reset();
  s.torch_hash.reset();
}

void parse_record_into(std::string_view line, Record& r) {
  if (!parse_in_writer_order(line, r)) parse_any_order_into(line, r);
}

void parse_any_order_into(std::string_view line, Record& r) {
  reset_record(r);
  FieldsSeen seen;
  for_each_field(line, [&](const Field& f) { read_field(f, r, seen); });
  check_record(r, seen);
}

}  // namespace probe::log_format
