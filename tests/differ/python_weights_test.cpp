// autoparallel's NumericsLogger.log_model_weights appends "name='<param>' hash=<H>" lines to
// weights.log, one block per call: read as `param` records, the k-th block step k.
#include <gtest/gtest.h>

#include "differ/detail/read/python_weights.h"
#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {
Record probe_param(std::int64_t step, const std::string& name, std::uint64_t torch_hash) {
  Record r = tensor(step, Kind::param, name, 1000 + torch_hash, 1.0);
  r.stats.torch_hash = torch_hash;
  return r;
}
}  // namespace

TEST(PythonWeights, ParsesNamesHashesDTensorsAndComplexHashes) {
  auto w = parse_python_weight_line("name='layers.0.attention.wq.weight' hash=123");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->name, "layers.0.attention.wq.weight");
  EXPECT_EQ(w->hash, 123u);
  w = parse_python_weight_line("name=\"it's\" hash=DTensor(18446744073709551615)");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->name, "it's");
  EXPECT_EQ(w->hash, 18446744073709551615ULL);
  w = parse_python_weight_line("name='freqs' hash=-5");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->hash, static_cast<std::uint64_t>(-5));
  w = parse_python_weight_line("name='c' hash=real=1, imag=2)");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->hash_text, "real=1, imag=2)");
  EXPECT_FALSE(parse_python_weight_line("[grad w] None"));
  EXPECT_THROW(parse_python_weight_line("name='w'"), probe::log_format::ParseError);
  EXPECT_THROW(parse_python_weight_line("name='w hash=1"), probe::log_format::ParseError);
  EXPECT_THROW(parse_python_weight_line("name=w hash=1"), probe::log_format::ParseError);
}

TEST(PythonWeights, BlocksBesideANumericsLoggerDiffLogAreParamRecordsPerStep) {
  auto dir = fresh_dir("py_weights");
  write_file(dir / "py" / "diff.log",
             "[grad w] hash=tensor(7), norm=tensor(1.5000)\n"
             "[grad w] hash=tensor(8), norm=tensor(1.2500)\n");
  write_file(dir / "py" / "weights.log",
             "name='w' hash=11\nname='b' hash=12\n"
             "name='w' hash=21\nname='b' hash=22\n");
  // The probe run: the same weights at step 0, w differs at step 1.
  auto grad = [](std::int64_t step, std::uint64_t h, double norm) {
    Record r = tensor(step, Kind::grad, "w", 1, norm);
    r.stats.torch_hash = h;
    return r;
  };
  write_run(dir / "probe", {{probe_param(0, "w", 11), probe_param(0, "b", 12), grad(0, 7, 1.5),
                             probe_param(1, "w", 99), probe_param(1, "b", 22), grad(1, 8, 1.25)}});
  auto res = diff(dir / "py", dir / "probe");
  EXPECT_EQ(count(res, Kind::param, PairClass::equal), 3);
  EXPECT_EQ(count(res, Kind::param, PairClass::different), 1);
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->kind, Kind::param);
  EXPECT_EQ(res.first_divergence->step, 1);
  EXPECT_EQ(res.first_divergence->name, "w");
  EXPECT_NE(res.first_divergence->note.find("weights.log holds no other figure"), std::string::npos)
      << res.first_divergence->note;
  EXPECT_EQ(res.first_divergence->rel_diff, 0);  // no norm: no size of a difference
  // grads of step 0 agree, the weights of step 1 do not: the update.
  bool optimizer = false;
  for (const auto& c : res.causes) optimizer = optimizer || c.rule == Rule::optimizer;
  EXPECT_TRUE(optimizer);
}

TEST(PythonWeights, AWeightsLogAloneIsARun) {
  auto dir = fresh_dir("py_weights_alone");
  write_file(dir / "a" / "weights.log", "name='w' hash=11\n");
  write_file(dir / "b" / "weights.log", "name='w' hash=12\n");
  auto res = diff(dir / "a", dir / "b");
  ASSERT_TRUE(res.first_divergence);
  bool init = false;
  for (const auto& c : res.causes) init = init || c.rule == Rule::init;
  EXPECT_TRUE(init);
  // The file itself, too.
  auto same = diff(dir / "a" / "weights.log", dir / "a");
  EXPECT_EQ(same.exit_code(), 0);
}

TEST(PythonWeights, ABadLineNamesFileAndLine) {
  auto dir = fresh_dir("py_weights_bad");
  write_file(dir / "a" / "weights.log", "name='w' hash=11\nname='b'\n");
  try {
    probe::differ::Run run(dir / "a", {false, true, {}, "base"});
    FAIL() << "a bad line must be an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("weights.log:2"), std::string::npos) << e.what();
  }
}
