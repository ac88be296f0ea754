// Record lines (docs/log-format.md, "Records"): the writer, and the reader that takes fields in
// any order (record_writer_order.cpp reads the writer's order in one pass).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "log_fields.h"
#include "probe/detail/record_parse_paths.h"

namespace probe::log_format {

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
void append_tensor_fields(std::string& out, const TensorStats& s,
                          const std::vector<std::int64_t>& covers) {
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

// " tied=[a,b,...]": a parameter's other names (format 10), each %-escaped with ',' too.
void append_tied(std::string& out, const std::vector<std::string>& tied) {
  if (tied.empty()) return;
  out += " tied=[";
  for (std::size_t i = 0; i < tied.size(); ++i) {
    if (i) out += ',';
    append_escaped_item(out, tied[i]);
  }
  out += ']';
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
    case Record::State::tensor: break;
  }
  append_tensor_fields(out, record.stats, record.covers);
  append_tied(out, record.tied);
}

Record parse_record(std::string_view line) {
  Record r;
  parse_record_into(line, r);
  return r;
}

namespace {

enum class RecordField {
  step,
  kind,
  name,
  mb,
  phase,
  in,
  value,
  hash,
  norm,
  min,
  max,
  mean,
  nan,
  inf,
  l1,
  mhash,
  dtype,
  shape,
  nnz,
  shard,
  partial,
  covers,
  unsupported,
  torch_hash,
  split,
  cand,
  incand,
  dump,
  tied,
  unknown
};

// By length first: a field name costs one or two short comparisons, not a chain of twenty
// (the differ parses millions of records).
RecordField record_field(std::string_view k) {
  using F = RecordField;
  switch (k.size()) {
    case 2: return k == "mb" ? F::mb : k == "in" ? F::in : k == "l1" ? F::l1 : F::unknown;
    case 3:
      return k == "min"   ? F::min
             : k == "max" ? F::max
             : k == "nan" ? F::nan
             : k == "inf" ? F::inf
             : k == "nnz" ? F::nnz
                          : F::unknown;
    case 4:
      return k == "step"   ? F::step
             : k == "kind" ? F::kind
             : k == "name" ? F::name
             : k == "hash" ? F::hash
             : k == "norm" ? F::norm
             : k == "mean" ? F::mean
             : k == "cand" ? F::cand
             : k == "dump" ? F::dump
             : k == "tied" ? F::tied
                           : F::unknown;
    case 5:
      return k == "phase"   ? F::phase
             : k == "value" ? F::value
             : k == "dtype" ? F::dtype
             : k == "shape" ? F::shape
             : k == "shard" ? F::shard
             : k == "split" ? F::split
             : k == "mhash" ? F::mhash
                            : F::unknown;
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
  bool shape = false, none = false, inputs = false, split = false, cand = false, incand = false,
       dump = false, tied = false;
};

// A tensor's field (hash= to torch_hash=) into `s`; false when `field` is not one.
bool read_stats_field(RecordField field, std::string_view k, std::string_view v, TensorStats& s,
                      FieldsSeen& seen) {
  using F = RecordField;
  switch (field) {
    case F::hash:
      s.hash = parse_hash(v);
      seen.hash = true;
      return true;
    case F::norm: s.norm = parse_double(v); return true;
    case F::min: s.min = parse_double(v); return true;
    case F::max: s.max = parse_double(v); return true;
    case F::mean: s.mean = parse_double(v); return true;
    case F::nan: s.nan = parse_int(v, k); return true;
    case F::inf: s.inf = parse_int(v, k); return true;
    case F::l1: s.l1 = parse_double(v); return true;
    case F::mhash: s.mhash = parse_hash(v); return true;
    case F::dtype:
      unescape_value_into(v, s.dtype);
      seen.dtype = true;
      return true;
    case F::shape:
      parse_dims_into(v, k, s.shape);
      seen.shape = true;
      return true;
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
      if (slash == std::string_view::npos)
        fail("field 'partial' is not <index>/<count>: '" + std::string(v) + "'");
      const auto index = parse_int(v.substr(0, slash), k),
                 count = parse_int(v.substr(slash + 1), k);
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
  if (covers.size() < 2)
    fail("field 'covers' needs at least 2 microbatches: '" + std::string(v) + "'");
  for (std::size_t i = 1; i < covers.size(); ++i)
    if (covers[i] <= covers[i - 1])
      fail("field 'covers' is not ascending without duplicates: '" + std::string(v) + "'");
}

// "[a,b,...]": a parameter's other names, ascending without duplicates (append_tied).
void read_tied(std::string_view v, std::vector<std::string>& tied) {
  tied.clear();
  for_each_item(bracketed(v, "tied", "[name,...]"), ',', "tied",
                [&](std::string_view item) { tied.push_back(unescape_value(item)); });
  if (tied.empty()) fail("field 'tied' holds no name");
  for (std::size_t i = 1; i < tied.size(); ++i)
    if (tied[i] <= tied[i - 1])
      fail("field 'tied' is not ascending without duplicates: '" + std::string(v) + "'");
}

// "r/n": a split op's rank of its ranks, 0 <= r < n, n >= 2.
void read_split(std::string_view v, OpSplit& split) {
  const auto slash = v.find('/');
  if (slash == std::string_view::npos)
    fail("field 'split' is not <rank>/<size>: '" + std::string(v) + "'");
  split.rank = parse_int(v.substr(0, slash), "split");
  split.size = parse_int(v.substr(slash + 1), "split");
  if (split.size < 2 || split.rank < 0 || split.rank >= split.size)
    fail("field 'split' needs 0 <= rank < size and size >= 2: '" + std::string(v) + "'");
}

// "[h:h:...,-,...]" (incand): each input's hashes as shards, '-' for none.
std::vector<std::vector<std::uint64_t>> parse_shard_hashes(std::string_view v) {
  std::vector<std::vector<std::uint64_t>> inputs;
  for_each_item(bracketed(v, "incand", "[hash:hash,...]"), ',', "incand",
                [&](std::string_view item) {
                  auto& hashes = inputs.emplace_back();
                  if (item != "-")
                    for_each_item(item, ':', "incand",
                                  [&](std::string_view h) { hashes.push_back(parse_hash(h)); });
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
    default: return false;
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
    case F::tied:
      read_tied(v, r.tied);
      seen.tied = true;
      return;
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
    fail(r.microbatch ? "field 'covers' does not start at the record's mb=" +
                            std::to_string(*r.microbatch) + ": '" + covers + "'"
                      : "field 'covers' belongs to records with an mb: '" + covers + "'");
  }
  if ((r.phase || seen.inputs) != (r.kind == Kind::op))
    fail("phase= and in= belong to op records, and only to them");
  if (r.kind == Kind::op && !(r.phase && seen.inputs)) fail("op record lacks phase= or in=");
  if (seen.dump && r.kind != Kind::op) fail("dump= belongs to op records");
  if (seen.tied && r.kind != Kind::param) fail("tied= belongs to param records");
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
  r.tied.clear();
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
