#include "probe/log_format.h"
#include "probe/detail/record_parse_paths.h"
#include "probe/partial.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace lf = probe::log_format;
using probe::Kind;
using probe::Record;

namespace {

Record tensor_record() {
  Record r;
  r.step = 3;
  r.kind = Kind::mb_grad;
  r.name = "layers.0.attention.wq.weight";
  r.microbatch = 5;
  r.stats.hash = 0x0123456789abcdefULL;
  r.stats.norm = 0.1;
  r.stats.min = -2.5;
  r.stats.max = 1e-300;
  r.stats.mean = 2024.0000000000002;
  r.stats.nan = 1;
  r.stats.inf = 2;
  r.stats.dtype = "bfloat16";
  r.stats.shape = {4, 16};
  r.stats.shard = probe::Shard{{8, 16}, {4, 0}};
  return r;
}

void expect_same_record(const Record& a, const Record& b, const std::string& what) {
  EXPECT_EQ(a.step, b.step) << what;
  EXPECT_EQ(a.kind, b.kind) << what;
  EXPECT_EQ(a.name, b.name) << what;
  EXPECT_EQ(a.microbatch, b.microbatch) << what;
  EXPECT_EQ(a.covers, b.covers) << what;
  EXPECT_EQ(a.state, b.state) << what;
  EXPECT_EQ(a.value, b.value) << what;
  EXPECT_EQ(a.phase, b.phase) << what;
  EXPECT_EQ(a.inputs, b.inputs) << what;
  EXPECT_EQ(a.split.rank, b.split.rank) << what;
  EXPECT_EQ(a.split.size, b.split.size) << what;
  EXPECT_EQ(a.split.output, b.split.output) << what;
  EXPECT_EQ(a.split.inputs, b.split.inputs) << what;
  EXPECT_EQ(a.dump, b.dump) << what;
  EXPECT_EQ(a.tied, b.tied) << what;
  const auto &x = a.stats, &y = b.stats;
  EXPECT_EQ(x.hash, y.hash) << what;
  for (auto [u, v] : {std::pair{x.norm, y.norm}, {x.min, y.min}, {x.max, y.max}, {x.mean, y.mean}})
    EXPECT_TRUE(std::memcmp(&u, &v, sizeof u) == 0 || (std::isnan(u) && std::isnan(v))) << what;
  EXPECT_EQ(x.nan, y.nan) << what;
  EXPECT_EQ(x.inf, y.inf) << what;
  EXPECT_EQ(x.l1.has_value(), y.l1.has_value()) << what;
  if (x.l1 && y.l1) {
    EXPECT_TRUE(std::memcmp(&*x.l1, &*y.l1, sizeof(double)) == 0 ||
                (std::isnan(*x.l1) && std::isnan(*y.l1)))
        << what;
  }
  EXPECT_EQ(x.mhash, y.mhash) << what;
  EXPECT_EQ(x.dtype, y.dtype) << what;
  EXPECT_EQ(x.shape, y.shape) << what;
  EXPECT_EQ(x.nnz, y.nnz) << what;
  EXPECT_EQ(x.shard, y.shard) << what;
  EXPECT_EQ(x.unsupported, y.unsupported) << what;
  EXPECT_EQ(x.partial, y.partial) << what;
  EXPECT_EQ(x.torch_hash, y.torch_hash) << what;
}

void expect_same_double(double a, double b) {
  if (std::isnan(a)) {
    EXPECT_TRUE(std::isnan(b));
  } else {
    EXPECT_EQ(a, b);
  }
}

}  // namespace

TEST(LogFormat, DoublesPrintInShortestFormThatRoundTrips) {
  EXPECT_EQ(lf::format_double(0.1), "0.1");
  EXPECT_EQ(lf::format_double(2024.0), "2024");
  EXPECT_EQ(lf::format_double(2024.0000000000002), "2024.0000000000002");
  EXPECT_EQ(lf::format_double(-0.0), "-0");
  EXPECT_EQ(lf::format_double(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(lf::format_double(-std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(lf::format_double(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(lf::format_double(1e-7), "1e-07");
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100000; ++i) {
    std::uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, 8);
    expect_same_double(lf::parse_double(lf::format_double(v)), v);
  }
}

TEST(LogFormat, TensorRecordRoundTrips) {
  Record r = tensor_record();
  r.stats.torch_hash = 42;
  const std::string line = lf::format_record(r);
  EXPECT_EQ(line,
            "step=3 kind=mb_grad name=layers.0.attention.wq.weight mb=5 hash=0123456789abcdef "
            "norm=0.1 min=-2.5 max=1e-300 mean=2024.0000000000002 nan=1 inf=2 dtype=bfloat16 "
            "shape=[4,16] shard=[8,16]@[4,0] torch_hash=000000000000002a");
  Record back = lf::parse_record(line);
  EXPECT_EQ(lf::format_record(back), line);
  EXPECT_EQ(back.stats.shard, r.stats.shard);
  EXPECT_EQ(back.microbatch, 5);
}

TEST(LogFormat, NoneScalarAndUnsupportedRecordsRoundTrip) {
  Record none;
  none.step = 1;
  none.kind = Kind::grad;
  none.name = "output.weight";
  none.state = Record::State::none;
  EXPECT_EQ(lf::format_record(none), "step=1 kind=grad name=output.weight none");
  EXPECT_EQ(lf::parse_record(lf::format_record(none)).state, Record::State::none);

  Record scalar;
  scalar.step = 2;
  scalar.kind = Kind::scalar;
  scalar.name = "loss";
  scalar.state = Record::State::scalar;
  scalar.value = 2.302585092994046;
  EXPECT_EQ(lf::format_record(scalar), "step=2 kind=scalar name=loss value=2.302585092994046");
  EXPECT_EQ(lf::parse_record(lf::format_record(scalar)).value, scalar.value);

  Record unsupported;
  unsupported.step = 0;
  unsupported.kind = Kind::tap;
  unsupported.name = "q";
  unsupported.stats.unsupported = "quantized dtype";
  unsupported.stats.dtype = "qint8";
  unsupported.stats.shape = {2};
  const std::string line = lf::format_record(unsupported);
  EXPECT_EQ(line, "step=0 kind=tap name=q unsupported=quantized%20dtype dtype=qint8 shape=[2]");
  EXPECT_EQ(lf::parse_record(line).stats.unsupported, "quantized dtype");
}

TEST(LogFormat, ValuesWithSpacesAndEqualsSignsAreEscaped) {
  const std::string raw = "a b=c%d\n\te";
  const std::string escaped = lf::escape_value(raw);
  EXPECT_EQ(escaped.find_first_of(" =\n\t"), std::string::npos);
  EXPECT_EQ(lf::unescape_value(escaped), raw);
  EXPECT_THROW(lf::unescape_value("abc%4"), lf::ParseError);
  EXPECT_THROW(lf::unescape_value("abc%zz"), lf::ParseError);
}

TEST(LogFormat, HeaderRoundTripsAndRejectsOtherVersions) {
  lf::Header h;
  h.rank = 3;
  h.world_size = 8;
  h.torch_version = "2.13.0+cpu";
  h.setup = "pp=2 x ddp=4, rng-seed 42";
  const std::string line = lf::format_header(h);
  lf::Header back = lf::parse_header(line);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.world_size, 8);
  EXPECT_EQ(back.setup, h.setup);
  EXPECT_EQ(back.torch_version, h.torch_version);
  EXPECT_EQ(back.format_version, lf::kVersion);
  EXPECT_EQ(lf::parse_header("#numprobe format=1 hash_spec=1 rank=0 world_size=1").format_version,
            1);
  EXPECT_EQ(lf::parse_header("#numprobe format=2 hash_spec=1 rank=0 world_size=1").format_version,
            2);
  EXPECT_EQ(lf::parse_header("#numprobe format=3 hash_spec=1 rank=0 world_size=1").format_version,
            3);
  EXPECT_EQ(lf::parse_header("#numprobe format=4 hash_spec=1 rank=0 world_size=1").format_version,
            4);
  EXPECT_EQ(lf::parse_header("#numprobe format=5 hash_spec=1 rank=0 world_size=1").format_version,
            5);
  EXPECT_EQ(lf::parse_header("#numprobe format=6 hash_spec=1 rank=0 world_size=1").format_version,
            6);
  EXPECT_EQ(lf::parse_header("#numprobe format=7 hash_spec=1 rank=0 world_size=1").format_version,
            7);
  EXPECT_EQ(lf::parse_header("#numprobe format=8 hash_spec=1 rank=0 world_size=1").format_version,
            8);
  EXPECT_EQ(lf::parse_header("#numprobe format=9 hash_spec=1 rank=0 world_size=1").format_version,
            9);
  EXPECT_EQ(lf::parse_header("#numprobe format=10 hash_spec=1 rank=0 world_size=1").format_version,
            10);
  for (const char* other : {"#numprobe format=11 hash_spec=1 rank=0 world_size=1",
                            "#numprobe format=0 hash_spec=1 rank=0 world_size=1"}) {
    try {
      lf::parse_header(other);
      ADD_FAILURE() << "accepted " << other;
    } catch (const lf::ParseError& e) {
      EXPECT_NE(std::string(e.what()).find("is not supported (this build reads versions 1 to 10)"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(lf::parse_header("step=0 kind=grad"), lf::ParseError);
  EXPECT_THROW(lf::parse_header("#numprobe format=1 hash_spec=1 rank=4 world_size=4"),
               lf::ParseError);
}

namespace {
// The ParseError message `parse` throws for `line`, or "no error".
template <class Parse>
std::string parse_error_of(Parse parse, const std::string& line) {
  try {
    parse(line);
  } catch (const lf::ParseError& e) {
    return e.what();
  }
  return "no error";
}

// The ParseError message of parsing record line `line`, or "no error".
std::string record_error_of(const std::string& line) {
  return parse_error_of([](const std::string& l) { lf::parse_record(l); }, line);
}
}  // namespace

TEST(LogFormat, BadRecordsSayWhatIsWrong) {
  EXPECT_EQ(record_error_of("kind=grad name=w none"), "record lacks step=");
  EXPECT_EQ(record_error_of("step=x kind=grad name=w none"), "field 'step' is not an integer: 'x'");
  EXPECT_EQ(record_error_of("step=1 kind=gradd name=w none"), "unknown kind 'gradd'");
  EXPECT_EQ(record_error_of("step=1 kind=grad name=w hash=12 dtype=f shape=[]"),
            "hash is not 16 hex digits: '12'");
  EXPECT_EQ(record_error_of("step=1 kind=grad name=w none value=1"),
            "record must have exactly one of: 'none', value=, or tensor fields (hash=/dtype=)");
  EXPECT_EQ(record_error_of("step=1 kind=grad name=w bogus"), "unexpected token 'bogus'");
  EXPECT_EQ(record_error_of("step=1 kind=grad name=w colour=red"), "unknown field 'colour'");
  EXPECT_EQ(record_error_of("step=1 kind=grad name=w hash=0000000000000000 dtype=f shape=[2,"),
            "field 'shape' is not a [d0,d1,...] list: '[2,'");
}

// parse_record_into keeps a record's buffers: whatever the record held before, the result is
// what a fresh parse gives, field by field (a field the reset forgets carries over).
TEST(LogFormat, ParsingIntoAUsedRecordGivesAFreshParse) {
  const std::vector<std::string> lines = {
      "step=3 kind=mb_grad name=layers.0.attention.wq.weight mb=5 hash=0123456789abcdef norm=0.1 "
      "min=-2.5 max=1e-300 mean=2 nan=1 inf=2 dtype=bfloat16 shape=[4,16] shard=[8,16]@[4,0] "
      "torch_hash=000000000000002a",
      "step=4 kind=grad name=emb.weight hash=0000000000000001 norm=1 min=0 max=1 mean=0.5 nan=0 "
      "inf=0 dtype=float32 shape=[50,8] nnz=3",
      "step=5 kind=op name=layers.3/aten::softmax#0 mb=2 phase=backward in=[00000000000000ff,-] "
      "hash=0000000000000002 norm=1 min=0 max=1 mean=0.5 nan=0 inf=0 dtype=float32 shape=[2]",
      "step=6 kind=grad name=q.weight unsupported=quantized%20dtype dtype=qint8 shape=[3]",
      "step=6 kind=tap name=layers.0.attention.wo mb=1 hash=0000000000000003 norm=2 min=-1 max=1 "
      "mean=0 nan=0 inf=0 dtype=float32 shape=[2,8] partial=1/2",
      "step=6 kind=mb_grad name=layers.0.moe.experts.w1 mb=1 hash=0000000000000004 norm=2 min=-1 "
      "max=1 "
      "mean=0 nan=0 inf=0 dtype=float32 shape=[2,8,4] shard=[8,8,4]@[2,0,0] partial=0/2 "
      "covers=[1,3,5,7]",
      "step=7 kind=grad name=w none",
      "step=8 kind=scalar name=loss value=0.25",
  };
  for (const auto& before : lines) {
    for (const auto& line : lines) {
      Record used = lf::parse_record(before);
      lf::parse_record_into(line, used);
      expect_same_record(used, lf::parse_record(line), "after '" + before + "': '" + line + "'");
    }
  }
}

// Records are swapped member by member (the differ's reused buffers): every field moves. The
// two records differ in every field, so a field the swap forgets stays and fails here.
TEST(LogFormat, SwappingRecordsExchangesEveryField) {
  Record a = tensor_record();
  a.stats.torch_hash = 42;
  a.stats.partial = {1, 2};
  a.covers = {5, 7};
  Record b;
  b.step = 9;
  b.kind = Kind::op;
  b.name = "a name longer than the short string buffer";
  b.state = Record::State::scalar;
  b.value = 2.5;
  b.phase = probe::Phase::backward;
  b.inputs = {std::uint64_t{1}, std::nullopt};
  b.stats.hash = 7;
  b.stats.norm = 3;
  b.stats.min = 1;
  b.stats.max = 4;
  b.stats.mean = 2;
  b.stats.dtype = "float16";
  b.stats.shape = {2};
  b.stats.nnz = 3;
  b.stats.unsupported = "quantized";
  const Record a0 = a, b0 = b;
  swap(a, b);
  expect_same_record(a, b0, "a after the swap");
  expect_same_record(b, a0, "b after the swap");
}

// The one-pass reader of the writer's field order gives what the general reader gives, on
// every line it accepts: the writer's own lines and thousands of mutations of them (a
// character deleted, replaced or doubled, a space inserted), where it must either read the
// same record or leave the line to the general reader (which words the error).
TEST(LogFormat, WriterOrderReadsWhatAnyOrderReads) {
  Record sharded = tensor_record();  // mb, shard, torch_hash
  Record whole = tensor_record();
  whole.microbatch.reset();
  whole.stats.shard = {};
  whole.stats.torch_hash.reset();
  whole.stats.nnz = 7;
  whole.stats.min = -0.0;
  whole.stats.mean = 6.02e23;
  Record scalar;
  scalar.step = 12;
  scalar.name = "loss";
  scalar.state = Record::State::scalar;
  scalar.value = -1.25e-7;
  Record nan_figures = whole;
  nan_figures.stats.min = nan_figures.stats.max = nan_figures.stats.mean = std::nan("");
  Record escaped = whole;
  escaped.name = "a name with spaces";
  Record summand = whole;  // partial, torch_hash
  summand.kind = Kind::tap;
  summand.microbatch = 0;
  summand.stats.nnz.reset();
  summand.stats.partial = {1, 2};
  summand.stats.torch_hash = 7;
  Record covering = sharded;  // shard, partial, covers, torch_hash
  covering.stats.partial = {0, 2};
  covering.covers = {5, 7, 9};
  std::vector<std::string> lines;
  for (const Record* r : {&sharded, &whole, &scalar, &summand, &covering}) {
    lines.push_back(lf::format_record(*r));
    Record read;
    EXPECT_TRUE(lf::parse_in_writer_order(lines.back(), read)) << lines.back();
    expect_same_record(read, *r, lines.back());
  }
  for (const Record* r : {&nan_figures, &escaped}) {  // left to the general reader
    Record read;
    EXPECT_FALSE(lf::parse_in_writer_order(lf::format_record(*r), read));
  }
  const std::string alphabet = " -09[],@=x%e.+";
  std::size_t checked = 0, read_in_one_pass = 0;
  auto check = [&](const std::string& line) {
    ++checked;
    Record fast;
    if (!lf::parse_in_writer_order(line, fast)) return;
    ++read_in_one_pass;
    Record general;
    try {
      lf::parse_any_order_into(line, general);
    } catch (const lf::ParseError& e) {
      ADD_FAILURE() << "read in one pass, rejected by the general reader (" << e.what() << "): '"
                    << line << "'";
      return;
    }
    expect_same_record(fast, general, line);
  };
  for (const auto& line : lines) {
    for (std::size_t i = 0; i <= line.size(); ++i) {
      if (i < line.size()) {
        check(line.substr(0, i) + line.substr(i + 1));        // deleted
        check(line.substr(0, i) + line[i] + line.substr(i));  // doubled
        for (char c : alphabet) {
          if (c == line[i]) continue;
          std::string replaced = line;
          replaced[i] = c;
          check(replaced);
        }
      }
      check(line.substr(0, i) + ' ' + line.substr(i));  // a space inserted
    }
  }
  const std::string tail =
      " hash=0123456789abcdef norm=1 min=0 max=1 mean=0.5 nan=0 inf=0 dtype=float32";
  for (const std::string& near_miss : std::vector<std::string>{
           "step=1 kind=grad name=w" + tail + " shape=[4] shard=[8,16]@[4,0]",  // ranks differ
           "step=1 kind=grad name=w" + tail + " shape=[4] shard=[8]@[4,0]",
           "step=1 kind=grad name=w" + tail + " shape=[4] shard=[]@[]",
           "step=1 kind=grad name=w" + tail + " shape=[004,0016]",
           "step=1 kind=grad name=w" + tail + " shape=[4] nnz=-1",
           "step=1 kind=grad name=w" + tail + " shape=[4] torch_hash=0123",
           "step=1 kind=grad name=w" + tail + " shape=[4] shard=[8]@[4] nnz=2",  // out of order
           "step=1 kind=tap name=w mb=0" + tail + " shape=[4] partial=2/2",
           "step=1 kind=tap name=w mb=0" + tail + " shape=[4] partial=-1/2",
           "step=1 kind=tap name=w mb=0" + tail + " shape=[4] partial=0/0",
           "step=1 kind=tap name=w mb=0" + tail + " shape=[4] partial=0/2/3",
           "step=1 kind=tap name=w mb=0" + tail + " shape=[4] partial=1",
           "step=1 kind=tap name=w mb=0" + tail +
               " shape=[4] torch_hash=0123456789abcdef partial=0/2",
           "step=1 kind=mb_grad name=w mb=0" + tail + " shape=[4] covers=[0]",
           "step=1 kind=mb_grad name=w mb=0" + tail + " shape=[4] covers=[0,0]",
           "step=1 kind=mb_grad name=w mb=0" + tail + " shape=[4] covers=[0,2,1]",
           "step=1 kind=mb_grad name=w mb=1" + tail + " shape=[4] covers=[0,1]",
           "step=1 kind=mb_grad name=w" + tail + " shape=[4] covers=[0,1]",
           // out of order
           "step=1 kind=mb_grad name=w mb=0" + tail + " shape=[4] covers=[0,1] partial=0/2",
           "step=1 kind=mb_grad name=w mb=0" + tail + " shape=[4] covers=[0,1,]",
           "step=1234567890123456789 kind=grad name=w" + tail + " shape=[4]",
           "step=1 kind=grad name=w mb=-1" + tail + " shape=[4]",
           // empty dtype
           "step=1 kind=grad name=w" + tail.substr(0, tail.size() - 7) + " shape=[4]",
           std::string("step=1 kind=scalar name=w value=nan"),
           "step=1 kind=scalar name=w value=1e999",
           "step=1 kind=op name=w" + tail + " shape=[4]",
           "step=1 kind=grad name=w none",
       })
    check(near_miss);
  // The mutations that keep a valid record (a digit for a digit) go the one-pass way too.
  EXPECT_GT(read_in_one_pass, checked / 20) << read_in_one_pass << " of " << checked;
}

// Integers are read by hand (a hot path of the differ): exactly what std::from_chars accepts.
TEST(LogFormat, IntegersAreDecimalWithinInt64) {
  auto step_of = [](const std::string& text) {
    return lf::parse_record("step=" + text + " kind=scalar name=x value=1").step;
  };
  EXPECT_EQ(step_of("0"), 0);
  EXPECT_EQ(step_of("9223372036854775807"), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(step_of("0000000000000000000000042"), 42);
  auto mb_of = [](const std::string& text) {
    return *lf::parse_record("step=1 kind=scalar name=x mb=" + text + " value=1").microbatch;
  };
  EXPECT_EQ(mb_of("-0"), 0);
  auto nnz_error = [](const std::string& text) {
    return record_error_of(
        "step=0 kind=grad name=w hash=0000000000000000 dtype=float32 shape=[2] nnz=" + text);
  };
  EXPECT_EQ(nnz_error("-9223372036854775808"), "negative nnz");  // int64's minimum reads
  for (const char* bad : {"9223372036854775808", "-9223372036854775809", "99999999999999999999",
                          "+1", "-", "", "1a", "a1", "1.0", "0x10", "1-"}) {
    const std::string line = std::string("step=") + bad + " kind=scalar name=x value=1";
    EXPECT_EQ(record_error_of(line), std::string("field 'step' is not an integer: '") + bad + "'")
        << line;
  }
}

TEST(LogFormat, StepEndRoundTripsAndBadOnesSayWhatIsWrong) {
  const std::string line = lf::format_step_end(12, 345);
  EXPECT_EQ(line, "#end step=12 records=345");
  EXPECT_TRUE(lf::is_step_end(line));
  const lf::StepEnd end = lf::parse_step_end(line);
  EXPECT_EQ(end.step, 12);
  EXPECT_EQ(end.records, 345);
  EXPECT_FALSE(end.compiled);
  const std::string compiled = lf::format_step_end(3, 4, true);
  EXPECT_EQ(compiled, "#end step=3 records=4 compiled=1");
  EXPECT_TRUE(lf::parse_step_end(compiled).compiled);
  EXPECT_FALSE(lf::parse_step_end("#end step=3 records=4 compiled=0").compiled);
  EXPECT_FALSE(lf::is_step_end("#end"));
  EXPECT_FALSE(lf::is_step_end("#endstep=1 records=1"));
  EXPECT_FALSE(lf::is_step_end("step=1 kind=grad name=w none"));
  auto message_of = [](const std::string& text) {
    return parse_error_of([](const std::string& l) { lf::parse_step_end(l); }, text);
  };
  EXPECT_EQ(message_of("#end step=1"), "step end lacks step= or records=");
  EXPECT_EQ(message_of("#end step=1 records=x"), "field 'records' is not an integer: 'x'");
  EXPECT_EQ(message_of("#end step=1 records=2 bytes=9"), "unknown field 'bytes' in step end");
  EXPECT_EQ(message_of("#end step=1 records=2 done"), "unexpected token 'done' in step end");
  EXPECT_EQ(message_of("#end step=-1 records=2"), "negative step or records in step end");
  EXPECT_EQ(message_of("#end step=1 records=2 compiled=yes"),
            "compiled=yes in step end is not 0 or 1");
}

TEST(LogFormat, SparseRecordCarriesItsNnzAndOlderRecordsHaveNone) {
  probe::Record r;
  r.step = 2;
  r.kind = probe::Kind::grad;
  r.name = "tok_embeddings.weight";
  r.stats.hash = 0x0123456789abcdefULL;
  r.stats.norm = 3;
  r.stats.dtype = "float32";
  r.stats.shape = {50, 8};
  r.stats.nnz = 3;
  const std::string line = lf::format_record(r);
  EXPECT_NE(line.find(" shape=[50,8] nnz=3"), std::string::npos) << line;
  EXPECT_EQ(lf::parse_record(line).stats.nnz, 3);
  r.stats.nnz.reset();
  EXPECT_EQ(lf::format_record(r).find("nnz"), std::string::npos);
  EXPECT_FALSE(lf::parse_record(lf::format_record(r)).stats.nnz);
  EXPECT_EQ(parse_error_of(
                lf::parse_record,
                "step=0 kind=grad name=w hash=0000000000000000 dtype=float32 shape=[2] nnz=-1"),
            "negative nnz");
}

TEST(LogFormat, StopLineRoundTripsAndBadOnesSayWhatIsWrong) {
  const std::string line = lf::format_stopped({7, "No space left on device"});
  EXPECT_EQ(line, "#stopped step=7 reason=No%20space%20left%20on%20device");
  EXPECT_TRUE(lf::is_stopped(line));
  EXPECT_FALSE(lf::is_stopped("#stoppedx step=1"));
  const lf::Stopped back = lf::parse_stopped(line);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.reason, "No space left on device");
  EXPECT_EQ(parse_error_of(lf::parse_stopped, "#stopped step=1"),
            "stop line lacks step= or reason=");
  EXPECT_EQ(parse_error_of(lf::parse_stopped, "#stopped step=-1 reason=x"),
            "negative step in stop line");
  EXPECT_EQ(parse_error_of(lf::parse_stopped, "#stopped step=1 reason=x junk"),
            "unexpected token 'junk' in stop line");
}

// One rule for unknown fields in every line (docs/log-format.md, "Unknown fields").
TEST(LogFormat, EveryLineRefusesAFieldItDoesNotDefine) {
  EXPECT_EQ(parse_error_of(lf::parse_header,
                           "#numprobe format=9 hash_spec=1 rank=0 world_size=1 colour=red"),
            "unknown field 'colour' in header");
  EXPECT_EQ(parse_error_of(lf::parse_stopped, "#stopped step=1 reason=x colour=red"),
            "unknown field 'colour' in stop line");
  EXPECT_EQ(parse_error_of(lf::parse_step_end, "#end step=1 records=2 colour=red"),
            "unknown field 'colour' in step end");
  EXPECT_EQ(parse_error_of(lf::parse_record, "step=1 kind=grad name=w none colour=red"),
            "unknown field 'colour'");
  // What every writer wrote still reads: the header's every field.
  const lf::Header h = lf::parse_header(lf::format_header({9, 1, 2, 4, "2.13.0", "zero3 x4"}));
  EXPECT_EQ(h.rank, 2);
  EXPECT_EQ(h.setup, "zero3 x4");
}

TEST(LogFormat, OpRecordRoundTripsWithPhaseAndInputHashes) {
  probe::Record r;
  r.step = 7;
  r.kind = probe::Kind::op;
  r.name = "layers.3.attention/aten::softmax#0";
  r.microbatch = 2;
  r.phase = probe::Phase::backward;
  r.inputs = {0x0123456789abcdefULL, std::nullopt, 0};
  r.stats.hash = 0xfedcba9876543210ULL;
  r.stats.norm = 1.5;
  r.stats.dtype = "float32";
  r.stats.shape = {2, 3};
  const std::string line = lf::format_record(r);
  EXPECT_NE(line.find(" phase=backward in=[0123456789abcdef,-,0000000000000000] hash="),
            std::string::npos)
      << line;
  const auto back = lf::parse_record(line);
  EXPECT_EQ(back.kind, probe::Kind::op);
  EXPECT_EQ(back.name, r.name);
  EXPECT_EQ(back.phase, probe::Phase::backward);
  EXPECT_EQ(back.inputs, r.inputs);
  EXPECT_EQ(lf::format_record(back), line);
  EXPECT_EQ(probe::phase_of(back), probe::Phase::backward);

  r.inputs.clear();  // an op without tensor inputs (aten::ones)
  r.phase = probe::Phase::forward;
  EXPECT_EQ(lf::parse_record(lf::format_record(r)).inputs.size(), 0u);
  EXPECT_NE(lf::format_record(r).find(" in=[] "), std::string::npos);
}

TEST(LogFormat, PhaseAndInputsBelongToOpRecordsOnly) {
  EXPECT_EQ(record_error_of("step=1 kind=grad name=w phase=forward in=[] none"),
            "phase= and in= belong to op records, and only to them");
  EXPECT_EQ(record_error_of("step=1 kind=op name=s/aten::add#0 mb=0 phase=forward none"),
            "op record lacks phase= or in=");
  EXPECT_EQ(record_error_of("step=1 kind=op name=s/aten::add#0 phase=sideways in=[] none"),
            "field 'phase' is not forward or backward");
  EXPECT_EQ(record_error_of("step=1 kind=op name=s/aten::add#0 phase=forward in=[12] none"),
            "hash is not 16 hex digits: '12'");
  EXPECT_EQ(
      record_error_of("step=1 kind=op name=s/aten::add#0 phase=forward in=0000000000000000 none"),
      "field 'in' is not [hash,...]");
}

TEST(LogFormat, Version4WritesOpRecordsAndVersion2And3HeadersStayReadable) {
  EXPECT_GE(lf::kVersion, 4);
  EXPECT_EQ(lf::parse_header("#numprobe format=2 hash_spec=1 rank=0 world_size=1").format_version,
            2);
  EXPECT_EQ(lf::parse_header("#numprobe format=3 hash_spec=1 rank=0 world_size=1").format_version,
            3);
  EXPECT_EQ(lf::parse_header("#numprobe format=4 hash_spec=1 rank=0 world_size=1").format_version,
            4);
}

// Version 5: a record that is summand `index` of `count` of a tensor (a tensor-parallel rank's
// partial product) says so; other records are written as before.
TEST(LogFormat, Version5PartialRecordRoundTripsAndBadOnesSayWhatIsWrong) {
  EXPECT_GE(lf::kVersion, 5);
  Record r = tensor_record();
  r.kind = Kind::tap;
  r.name = "layers.0.attention.wo";
  r.stats.shard = {};
  r.stats.partial = {1, 2};
  const std::string line = lf::format_record(r);
  EXPECT_NE(line.find(" shape=[4,16] partial=1/2"), std::string::npos) << line;
  Record back = lf::parse_record(line);
  EXPECT_EQ(back.stats.partial, (probe::Partial{1, 2}));
  EXPECT_EQ(lf::format_record(back), line);
  Record fast;
  ASSERT_TRUE(lf::parse_in_writer_order(line, fast)) << line;
  EXPECT_EQ(fast.stats.partial, (probe::Partial{1, 2}));
  r.stats.partial = {};
  EXPECT_EQ(lf::format_record(r).find("partial="), std::string::npos);
  EXPECT_TRUE(lf::parse_record(lf::format_record(r)).stats.partial.empty());

  const std::string head =
      "step=1 kind=tap name=w mb=0 hash=0000000000000000 norm=1 min=0 max=1 mean=0 nan=0 "
      "inf=0 dtype=float32 shape=[2]";
  EXPECT_EQ(record_error_of(head + " partial=2/2"),
            "field 'partial' needs 0 <= index < count: '2/2'");
  EXPECT_EQ(record_error_of(head + " partial=0/0"),
            "field 'partial' needs 0 <= index < count: '0/0'");
  EXPECT_EQ(record_error_of(head + " partial=-1/2"),
            "field 'partial' needs 0 <= index < count: '-1/2'");
  EXPECT_EQ(record_error_of(head + " partial=1"), "field 'partial' is not <index>/<count>: '1'");
  EXPECT_EQ(record_error_of(head + " partial=a/2"), "field 'partial' is not an integer: 'a'");
  EXPECT_THROW(probe::Partial::of(2, 2), std::invalid_argument);
  EXPECT_EQ(probe::Partial::of(1, 2), (probe::Partial{1, 2}));
}

// Version 10: a tied parameter's record lists its other names, each escaped so that a name
// holding a separator or a bracket reads back as it was.
TEST(LogFormat, Version10TiedNamesRoundTripAndBadOnesSayWhatIsWrong) {
  EXPECT_GE(lf::kVersion, 10);
  Record r = tensor_record();
  r.kind = Kind::param;
  r.name = "model.embed_tokens.weight";
  r.stats.shard = probe::Shard{{8, 4}, {0, 0}};
  r.tied = {"lm_head.weight", "odd,name[0] x=1"};
  const std::string line = lf::format_record(r);
  EXPECT_NE(line.find(" tied=[lm_head.weight,odd%2Cname%5B0%5D%20x%3D1]"), std::string::npos)
      << line;
  expect_same_record(lf::parse_record(line), r, line);
  EXPECT_EQ(lf::format_record(lf::parse_record(line)), line);
  // A record parsed after it into the same buffers keeps none of its names.
  Record reused = lf::parse_record(line);
  r.tied.clear();
  lf::parse_record_into(lf::format_record(r), reused);
  EXPECT_TRUE(reused.tied.empty());
  EXPECT_EQ(lf::format_record(r).find("tied="), std::string::npos);

  const std::string head =
      "step=1 kind=param name=w hash=0000000000000000 norm=1 min=0 max=1 mean=0 nan=0 inf=0 "
      "dtype=float32 shape=[2]";
  EXPECT_EQ(record_error_of(head + " tied=[]"), "field 'tied' holds no name");
  EXPECT_EQ(record_error_of(head + " tied=[b,a]"),
            "field 'tied' is not ascending without duplicates: '[b,a]'");
  EXPECT_EQ(record_error_of(head + " tied=[a,a]"),
            "field 'tied' is not ascending without duplicates: '[a,a]'");
  EXPECT_EQ(record_error_of(head + " tied=a"), "field 'tied' is not [name,...]");
  EXPECT_EQ(record_error_of(head + " tied=[a,]"), "field 'tied' ends with ','");
  const std::string grad =
      "step=1 kind=grad name=w hash=0000000000000000 norm=1 min=0 max=1 mean=0 nan=0 inf=0 "
      "dtype=float32 shape=[2] tied=[a]";
  EXPECT_EQ(record_error_of(grad), "tied= belongs to param records");
}

// Version 6: a record from one backward over several microbatches' tokens (an expert's gradient
// under expert parallelism) lists them after `partial`; other records are written as before.
TEST(LogFormat, Version6CoversRoundTripsAndBadOnesSayWhatIsWrong) {
  EXPECT_GE(lf::kVersion, 6);
  Record r = tensor_record();
  r.name = "layers.0.moe.experts.w1";
  r.microbatch = 1;
  r.stats.shape = {2, 16};
  r.stats.shard = probe::Shard{{8, 16}, {2, 0}};
  r.stats.partial = {1, 2};
  r.stats.torch_hash = 9;
  r.covers = {1, 3, 5, 7};
  const std::string line = lf::format_record(r);
  EXPECT_NE(line.find(" shard=[8,16]@[2,0] partial=1/2 covers=[1,3,5,7] torch_hash="),
            std::string::npos)
      << line;
  expect_same_record(lf::parse_record(line), r, line);
  EXPECT_EQ(lf::format_record(lf::parse_record(line)), line);
  Record fast;
  ASSERT_TRUE(lf::parse_in_writer_order(line, fast)) << line;
  expect_same_record(fast, r, line);
  // A none record keeps it too.
  Record gone;
  gone.step = 2;
  gone.kind = Kind::mb_grad;
  gone.name = "w";
  gone.microbatch = 0;
  gone.covers = {0, 2};
  gone.state = Record::State::none;
  expect_same_record(lf::parse_record(lf::format_record(gone)), gone, lf::format_record(gone));
  // Without covers: no field.
  r.covers.clear();
  EXPECT_EQ(lf::format_record(r).find("covers="), std::string::npos);
  EXPECT_TRUE(lf::parse_record(lf::format_record(r)).covers.empty());

  const std::string head =
      "step=1 kind=mb_grad name=w mb=0 hash=0000000000000000 norm=1 min=0 max=1 mean=0 nan=0 "
      "inf=0 dtype=float32 shape=[2]";
  EXPECT_EQ(record_error_of(head + " covers=[0]"),
            "field 'covers' needs at least 2 microbatches: '[0]'");
  EXPECT_EQ(record_error_of(head + " covers=[]"),
            "field 'covers' needs at least 2 microbatches: '[]'");
  EXPECT_EQ(record_error_of(head + " covers=[0,2,2]"),
            "field 'covers' is not ascending without duplicates: '[0,2,2]'");
  EXPECT_EQ(record_error_of(head + " covers=[0,4,2]"),
            "field 'covers' is not ascending without duplicates: '[0,4,2]'");
  EXPECT_EQ(record_error_of(head + " covers=[1,2]"),
            "field 'covers' does not start at the record's mb=0: '[1,2]'");
  EXPECT_EQ(record_error_of(head + " covers=0,2"),
            "field 'covers' is not a [d0,d1,...] list: '0,2'");
  EXPECT_EQ(record_error_of(head + " covers=[0,x]"), "field 'covers' is not an integer: 'x'");
  EXPECT_EQ(
      record_error_of(
          "step=1 kind=grad name=w hash=0000000000000000 norm=1 min=0 max=1 mean=0 nan=0 inf=0 "
          "dtype=float32 shape=[2] covers=[0,2]"),
      "field 'covers' belongs to records with an mb: '[0,2]'");
}

// Version 7: an op record of a split scope carries its rank of the split and its output's and
// inputs' hashes as shards along each dim; other op records are written as before.
TEST(LogFormat, Version7SplitOpRoundTripsAndBadOnesSayWhatIsWrong) {
  EXPECT_GE(lf::kVersion, 7);
  Record r = tensor_record();
  r.kind = Kind::op;
  r.name = "layers.0.attention/aten::softmax#0";
  r.microbatch = 0;
  r.phase = probe::Phase::forward;
  r.stats.shape = {2, 4};
  r.inputs = {std::uint64_t{0xa}, std::nullopt, std::uint64_t{0xb}};
  r.split.rank = 1;
  r.split.size = 2;
  r.split.output = {0x1, 0x2};
  r.split.inputs = {{0x3, 0x4}, {}, {}};
  const std::string line = lf::format_record(r);
  EXPECT_NE(line.find(" in=[000000000000000a,-,000000000000000b] split=1/2 "
                      "cand=[0000000000000001,0000000000000002] "
                      "incand=[0000000000000003:0000000000000004,-,-] hash="),
            std::string::npos)
      << line;
  expect_same_record(lf::parse_record(line), r, line);
  EXPECT_EQ(lf::format_record(lf::parse_record(line)), line);
  r.split = {};  // no split scope: no fields
  EXPECT_EQ(lf::format_record(r).find("split="), std::string::npos);
  r.dump = "dumps/step0/3.pt";  // a traced op's dump (dump=1)
  const std::string dumped = lf::format_record(r);
  EXPECT_NE(dumped.find(" in=[000000000000000a,-,000000000000000b] dump=dumps/step0/3.pt hash="),
            std::string::npos)
      << dumped;
  expect_same_record(lf::parse_record(dumped), r, dumped);

  const std::string head =
      "step=0 kind=op name=s/aten::add#0 mb=0 phase=forward in=[000000000000000a] "
      "hash=0000000000000000 norm=1 min=0 max=1 mean=0 nan=0 inf=0 dtype=float32 shape=[2]";
  const std::string cand = " cand=[0000000000000001] incand=[0000000000000002]";
  EXPECT_EQ(record_error_of(head + " split=2/2" + cand),
            "field 'split' needs 0 <= rank < size and size >= 2: '2/2'");
  EXPECT_EQ(record_error_of(head + " split=0/1" + cand),
            "field 'split' needs 0 <= rank < size and size >= 2: '0/1'");
  EXPECT_EQ(record_error_of(head + " split=1" + cand), "field 'split' is not <rank>/<size>: '1'");
  EXPECT_EQ(record_error_of(head + " split=0/2"), "split=, cand= and incand= go together");
  EXPECT_EQ(
      record_error_of(
          head + " split=0/2 cand=[0000000000000001,0000000000000001] incand=[0000000000000002]"),
      "field 'cand' has 2 hashes for a 1-dim output");
  EXPECT_EQ(record_error_of(head + " split=0/2 cand=[0000000000000001] incand=[-,-]"),
            "field 'incand' has 2 inputs where in= has 1");
  EXPECT_EQ(record_error_of(head + " split=0/2 cand=[0000000000000001,] incand=[0000000000000002]"),
            "field 'cand' ends with ','");
  EXPECT_EQ(
      record_error_of(
          head + " split=0/2 cand=[0000000000000001] incand=[0000000000000002::0000000000000003]"),
      "field 'incand' has an empty item");
  EXPECT_EQ(record_error_of(head + " split=0/2 cand=[-] incand=[-]"), "field 'cand' holds '-'");
  EXPECT_EQ(record_error_of(head + " dump="), "field 'dump' is empty");
  EXPECT_EQ(
      record_error_of(
          "step=0 kind=tap name=t mb=0 hash=0000000000000000 norm=1 min=0 max=1 mean=0 nan=0 inf=0 "
          "dtype=float32 shape=[2] dump=x.pt"),
      "dump= belongs to op records");
  EXPECT_EQ(
      record_error_of(
          "step=0 kind=tap name=t mb=0 hash=0000000000000000 norm=1 min=0 max=1 mean=0 nan=0 inf=0 "
          "dtype=float32 shape=[2] split=0/2" +
          cand),
      "split= belongs to op records");
}

// Version 8: a tensor record carries l1 and mhash after inf; both parsers read them, and a record
// without them (format 7 and older) reads with neither, not with zeros.
TEST(LogFormat, Version8OrderIndependentFiguresRoundTripAndAreAbsentInOlderRecords) {
  EXPECT_GE(lf::kVersion, 8);
  Record r = tensor_record();
  r.stats.l1 = 12.5;
  r.stats.mhash = 0x0123456789abcdefULL;
  const std::string line = lf::format_record(r);
  EXPECT_NE(line.find(" inf=2 l1=12.5 mhash=0123456789abcdef dtype="), std::string::npos) << line;
  Record general;
  lf::parse_any_order_into(line, general);
  for (const Record& back : {lf::parse_record(line), general}) {
    ASSERT_TRUE(back.stats.l1 && back.stats.mhash) << line;
    EXPECT_EQ(*back.stats.l1, 12.5);
    EXPECT_EQ(*back.stats.mhash, 0x0123456789abcdefULL);
  }
  Record old = tensor_record();
  const std::string v7 = lf::format_record(old);
  EXPECT_EQ(v7.find("l1="), std::string::npos) << v7;
  const Record read = lf::parse_record(v7);
  EXPECT_FALSE(read.stats.l1.has_value());
  EXPECT_FALSE(read.stats.mhash.has_value());
  // A reused record forgets the figures of the line before.
  Record reused = lf::parse_record(line);
  lf::parse_record_into(v7, reused);
  EXPECT_FALSE(reused.stats.l1.has_value());
  EXPECT_FALSE(reused.stats.mhash.has_value());
  EXPECT_THROW(lf::parse_record(lf::format_record(r).replace(line.find("mhash=") + 6, 16, "xyz")),
               lf::ParseError);
}
