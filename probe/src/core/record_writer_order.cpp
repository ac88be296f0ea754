// Records in the order the writer puts their fields (format_record), read in one pass: each
// key is checked where the writer puts it and each value read up to where it ends, without
// splitting the line into tokens first. The differ reads millions of records; nearly all are
// in this order. Whatever departs from it (another order, a field left to the general parser,
// a value the general parser would reject or word an error for) makes it return false, and
// the general parser reads the line: a record read here is the record the general parser
// gives (tests/core/log_format_test.cpp checks that on mutated lines).
#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>

#include "probe/log_format.h"
#include "probe/detail/record_parse_paths.h"

namespace probe::log_format {
namespace {

bool is_digit(char c) { return static_cast<unsigned char>(c - '0') < 10; }

class Cursor {
 public:
  explicit Cursor(std::string_view line) : p_(line.data()), end_(line.data() + line.size()) {}

  bool at_end() const { return p_ == end_; }

  // `text` at the cursor (a key with its leading space and '='), stepped over. Its length is
  // known at compile time: compared byte by byte inline, not by a call.
  template <std::size_t N>
  [[gnu::always_inline]] bool skip(const char (&text)[N]) {
    constexpr std::size_t n = N - 1;
    if (static_cast<std::size_t>(end_ - p_) < n) return false;
#pragma GCC unroll 16
    for (std::size_t i = 0; i < n; ++i)
      if (p_[i] != text[i]) return false;
    p_ += n;
    return true;
  }

  bool skip(char c) {
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }

  // Up to the next space or the end; false when empty or when it holds a %-escape (left to
  // the general parser's unescaping).
  bool word(std::string_view& out) {
    const void* space = std::memchr(p_, ' ', static_cast<std::size_t>(end_ - p_));
    const char* stop = space ? static_cast<const char*>(space) : end_;
    out = std::string_view(p_, static_cast<std::size_t>(stop - p_));
    p_ = stop;
    return !out.empty() && out.find('%') == std::string_view::npos;
  }

  // Decimal, an optional '-', at most 18 digits: 10^18 - 1 fits in int64 with room to spare,
  // so accumulating never overflows. Longer numbers are the general parser's.
  bool integer(std::int64_t& out) {
    constexpr std::ptrdiff_t kMaxDigits = 18;
    const bool negative = p_ < end_ && *p_ == '-';
    const char* digits = p_ + (negative ? 1 : 0);
    const char* q = digits;
    std::int64_t v = 0;
    while (q < end_ && q - digits < kMaxDigits && is_digit(*q)) v = v * 10 + (*q++ - '0');
    if (q == digits || (q < end_ && is_digit(*q))) return false;
    p_ = q;
    out = negative ? -v : v;
    return true;
  }

  // " key=" then a non-negative integer, when the key is there; false only when the key is
  // there and its value is not such an integer.
  template <std::size_t N>
  bool optional_count(const char (&key)[N], std::optional<std::int64_t>& out) {
    if (!skip(key)) return true;
    std::int64_t v = 0;
    if (!integer(v) || v < 0) return false;
    out = v;
    return true;
  }

  // A finite number (NaN and infinities are the general parser's).
  bool real(double& out) {
    auto [q, ec] = std::from_chars(p_, end_, out);
    if (ec != std::errc() || !std::isfinite(out)) return false;
    p_ = q;
    return true;
  }

  bool hash(std::uint64_t& out) {
    if (end_ - p_ < 16) return false;
    const auto h = read_hash(std::string_view(p_, 16));
    if (!h) return false;
    out = *h;
    p_ += 16;
    return true;
  }

  // "[d0,d1,...]" into `dims` (its capacity reused; a fresh one gets room for the usual
  // ranks at once rather than growing 1, 2, 4).
  bool dims(std::vector<std::int64_t>& out) {
    out.clear();
    if (out.capacity() == 0) out.reserve(4);
    if (!skip('[')) return false;
    if (skip(']')) return true;
    for (;;) {
      std::int64_t d = 0;
      if (!integer(d)) return false;
      out.push_back(d);
      if (skip(']')) return true;
      if (!skip(',')) return false;
    }
  }

  bool dims_then_end_of_value(std::vector<std::int64_t>& out) {
    return dims(out) && (at_end() || *p_ == ' ');
  }

 private:
  const char* p_;
  const char* end_;
};

// What the general parser accepts as covers= of a record of microbatch `mb`: at least two
// microbatches, ascending without duplicates, `mb` first.
bool valid_covers(const std::vector<std::int64_t>& covers, const std::optional<std::int64_t>& mb) {
  if (covers.size() < 2 || !mb || covers.front() != *mb) return false;
  for (std::size_t i = 1; i < covers.size(); ++i)
    if (covers[i] <= covers[i - 1]) return false;
  return true;
}

// hash norm min max mean nan inf [l1] [mhash] dtype shape [nnz] [shard] [partial] [covers]
// [torch_hash], after the name.
bool read_tensor_fields(Cursor& c, Record& r) {
  TensorStats& s = r.stats;
  std::string_view dtype;
  if (!(c.skip(" hash=") && c.hash(s.hash) && c.skip(" norm=") && c.real(s.norm) &&
        c.skip(" min=") && c.real(s.min) && c.skip(" max=") && c.real(s.max) && c.skip(" mean=") &&
        c.real(s.mean) && c.skip(" nan=") && c.integer(s.nan) && c.skip(" inf=") &&
        c.integer(s.inf)))
    return false;
  if (c.skip(" l1=")) {
    double l1 = 0;
    if (!c.real(l1)) return false;
    s.l1 = l1;
  }
  if (c.skip(" mhash=")) {
    std::uint64_t h = 0;
    if (!c.hash(h)) return false;
    s.mhash = h;
  }
  if (!(c.skip(" dtype=") && c.word(dtype) && c.skip(" shape=") &&
        c.dims_then_end_of_value(s.shape)))
    return false;
  s.dtype.assign(dtype);
  if (!c.optional_count(" nnz=", s.nnz)) return false;
  if (c.skip(" shard=")) {
    if (!(c.dims(s.shard.global_shape) && c.skip('@') && c.dims_then_end_of_value(s.shard.offset)))
      return false;
    if (s.shard.global_shape.size() != s.shard.offset.size() ||
        s.shard.offset.size() != s.shape.size())
      return false;
  }
  if (c.skip(" partial=")) {
    std::int64_t index = 0, count = 0;
    if (!(c.integer(index) && c.skip('/') && c.integer(count)) || count < 1 || index < 0 ||
        index >= count)
      return false;
    s.partial = Partial{index, count};
  }
  if (c.skip(" covers=") &&
      !(c.dims_then_end_of_value(r.covers) && valid_covers(r.covers, r.microbatch)))
    return false;
  if (c.skip(" torch_hash=")) {
    std::uint64_t h = 0;
    if (!c.hash(h)) return false;
    s.torch_hash = h;
  }
  return c.at_end();
}

}  // namespace

bool parse_in_writer_order(std::string_view line, Record& r) {
  reset_record(r);
  Cursor c(line);
  std::string_view kind, name;
  if (!(c.skip("step=") && c.integer(r.step) && r.step >= 0 && c.skip(" kind=") && c.word(kind) &&
        c.skip(" name=") && c.word(name)))
    return false;
  const auto k = parse_kind(kind);
  if (!k || *k == Kind::op) return false;  // op records carry phase= and in=
  r.kind = *k;
  r.name.assign(name);
  if (!c.optional_count(" mb=", r.microbatch)) return false;
  if (c.skip(" value=")) {
    r.state = Record::State::scalar;
    return c.real(r.value) && c.at_end();
  }
  r.state = Record::State::tensor;
  return read_tensor_fields(c, r);
}

}  // namespace probe::log_format
