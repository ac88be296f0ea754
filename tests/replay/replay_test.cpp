// The replay verdict per op family (docs/diff-logs.md, "Replay verdict"): for a matmul, a sum, a
// softmax, an rsqrt norm and a gather, a correct re-association is noise, an error of 10x the
// derived tolerance is precision, a changed constant is different math.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <sstream>
#include <unordered_map>

#include "region_replay.h"
#include "verdict.h"

namespace {

using probe::replay::RegionOp;
using probe::replay::RunRegion;

// The dump's form of an argument: lists as tuples.
c10::IValue as_dumped(const c10::IValue& v) {
  if (!v.isList()) return v;
  std::vector<c10::IValue> items;
  for (const auto& e : v.toListRef()) items.push_back(as_dumped(e));
  return c10::ivalue::Tuple::create(std::move(items));
}

// Ops called through the dispatcher and kept as the trace keeps them; a tensor's "hash" is its
// identity, so that the region links an op's input to the op that made it.
class Recorder {
 public:
  std::uint64_t id(const at::Tensor& t) {
    auto [it, added] = ids_.try_emplace(t.unsafeGetTensorImpl(), ids_.size() + 1);
    if (added) kept_.push_back(t);
    return it->second;
  }
  at::Tensor call(RunRegion& run, const char* name, const char* overload,
                  std::vector<c10::IValue> args) {
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
    RegionOp r;
    r.name = std::string("m/") + name + "#" + std::to_string(run.ops.size());
    std::ostringstream schema;
    schema << op.schema();
    r.dump.schema = schema.str();
    r.schema = op.schema();
    for (const auto& a : args) {
      r.dump.args.push_back(as_dumped(a));
      std::vector<at::Tensor> tensors;
      probe::replay::flatten_tensors(a, tensors);
      for (const auto& t : tensors) r.inputs.push_back(id(t));
    }
    torch::jit::Stack stack(args.begin(), args.end());
    op.callBoxed(stack);
    r.dump.outputs.assign(stack.begin(), stack.end());
    const at::Tensor out = stack[0].toTensor();
    r.output = id(out);
    run.output = r.output;
    run.ops.push_back(std::move(r));
    return out;
  }

 private:
  std::unordered_map<const void*, std::uint64_t> ids_;
  std::vector<at::Tensor> kept_;  // alive, so that no address is reused
};

probe::differ::ReplayVerdict judge(const RunRegion& base, const RunRegion& test) {
  probe::differ::ReplayVerdict v;
  for (const auto& op : base.ops) v.base_ops.push_back(op.name);
  for (const auto& op : test.ops) v.test_ops.push_back(op.name);
  probe::replay::judge(base, test, v);
  return v;
}

std::string evidence(const probe::differ::ReplayVerdict& v) {
  std::string s = v.reason;
  for (const auto& line : v.evidence) s += "\n  " + line;
  return s;
}

// The run's recorded output with element 0 moved by `units` times its derived tolerance.
RunRegion with_error(const RunRegion& run, double units) {
  const auto r = probe::replay::replay_run(run);
  const double u = probe::replay::unit_roundoff(r.recorded.scalar_type());
  const double tolerance = u * r.bound.reshape({-1})[0].item<double>() + 1e-45;
  RunRegion out = run;
  auto& last = out.ops.back();
  at::Tensor moved = last.dump.outputs[0].toTensor().clone();
  moved.reshape({-1})[0] += units * tolerance;
  last.dump.outputs[0] = moved;
  return out;
}

at::Tensor data(std::vector<std::int64_t> shape, double scale = 1, std::uint64_t seed = 1) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen) * scale;
}

// Each family's three cases: `reassociated` computes base's function another way; `changed`
// with another constant.
void expect_three_verdicts(const RunRegion& base, const RunRegion& reassociated,
                           const RunRegion& changed) {
  auto v = judge(base, reassociated);
  EXPECT_EQ(v.verdict, "noise") << evidence(v);
  v = judge(base, with_error(base, 10));
  EXPECT_EQ(v.verdict, "precision: test") << evidence(v);
  v = judge(with_error(base, 10), base);
  EXPECT_EQ(v.verdict, "precision: base") << evidence(v);
  v = judge(base, with_error(base, 0.5));  // half the tolerance: still a correct result
  EXPECT_EQ(v.verdict, "noise") << evidence(v);
  v = judge(base, changed);
  EXPECT_EQ(v.verdict, "different math") << evidence(v);
}

bool same_bits(const RunRegion& a, const RunRegion& b) {
  return at::equal(probe::replay::replay_run(a).recorded, probe::replay::replay_run(b).recorded);
}

// Where to cut an inner dimension of `extent` so that the two parts' results, added, round
// otherwise than the whole: kernels block inner dimensions their own way (one machine's BLAS
// rounds the two halves of a product exactly as the whole), so the premise is checked, not
// assumed, over cuts that no blocking shares with every other.
template <class Build>
std::int64_t cut_that_rounds_otherwise(const RunRegion& whole, std::int64_t extent, Build parts) {
  for (const std::int64_t cut : std::initializer_list<std::int64_t>{
           extent / 2, extent / 3, 37 * extent / 100, extent / 2 + 1, extent - 7, 5}) {
    if (cut <= 0 || cut >= extent) continue;
    if (!same_bits(whole, parts(cut))) return cut;
  }
  return 0;
}

TEST(ReplayVerdict, MatmulAsTwoPartsOfItsInnerDimIsNoise) {
  Recorder rec;
  const at::Tensor a = data({8, 256}, 1, 1), b = data({256, 16}, 1, 2);
  RunRegion base, scaled;
  rec.call(base, "aten::mm", "", {a, b});
  auto parts = [&](std::int64_t cut) {
    RunRegion run;
    const auto a1 = rec.call(run, "aten::slice", "Tensor", {a, 1, 0, cut, 1});
    const auto b1 = rec.call(run, "aten::slice", "Tensor", {b, 0, 0, cut, 1});
    const auto a2 = rec.call(run, "aten::slice", "Tensor", {a, 1, cut, 256, 1});
    const auto b2 = rec.call(run, "aten::slice", "Tensor", {b, 0, cut, 256, 1});
    const auto m1 = rec.call(run, "aten::mm", "", {a1, b1});
    const auto m2 = rec.call(run, "aten::mm", "", {a2, b2});
    rec.call(run, "aten::add", "Tensor", {m1, m2, 1});
    return run;
  };
  const std::int64_t cut = cut_that_rounds_otherwise(base, 256, parts);
  ASSERT_GT(cut, 0) << "no cut of the inner dimension rounds otherwise than the whole product";
  const auto m = rec.call(scaled, "aten::mm", "", {a, b});
  rec.call(scaled, "aten::mul", "Scalar", {m, 1.0 + 1e-4});
  expect_three_verdicts(base, parts(cut), scaled);
}

TEST(ReplayVerdict, SumAsTwoPartialSumsIsNoise) {
  Recorder rec;
  const at::Tensor x = data({4, 4096}, 1, 3);
  RunRegion base, wrong_count;
  const auto s = rec.call(base, "aten::sum", "dim_IntList",
                          {x, c10::List<std::int64_t>({1}), false, c10::IValue()});
  rec.call(base, "aten::div", "Scalar", {s, 4096});
  auto parts = [&](std::int64_t cut) {
    RunRegion run;
    const auto x1 = rec.call(run, "aten::slice", "Tensor", {x, 1, 0, cut, 1});
    const auto x2 = rec.call(run, "aten::slice", "Tensor", {x, 1, cut, 4096, 1});
    const auto s1 = rec.call(run, "aten::sum", "dim_IntList",
                             {x1, c10::List<std::int64_t>({1}), false, c10::IValue()});
    const auto s2 = rec.call(run, "aten::sum", "dim_IntList",
                             {x2, c10::List<std::int64_t>({1}), false, c10::IValue()});
    const auto total = rec.call(run, "aten::add", "Tensor", {s1, s2, 1});
    rec.call(run, "aten::div", "Scalar", {total, 4096});
    return run;
  };
  const std::int64_t cut = cut_that_rounds_otherwise(base, 4096, parts);
  ASSERT_GT(cut, 0) << "no cut of the summed dimension rounds otherwise than the whole sum";
  const auto w = rec.call(wrong_count, "aten::sum", "dim_IntList",
                          {x, c10::List<std::int64_t>({1}), false, c10::IValue()});
  rec.call(wrong_count, "aten::div", "Scalar", {w, 4095});  // a mean over one element too few
  expect_three_verdicts(base, parts(cut), wrong_count);
}

TEST(ReplayVerdict, SoftmaxByItsFormulaIsNoise) {
  Recorder rec;
  const at::Tensor x = data({4, 512}, 4, 4);
  RunRegion base, formula, tempered;
  rec.call(base, "aten::softmax", "int", {x, -1, c10::IValue()});
  const auto m = rec.call(formula, "aten::amax", "", {x, c10::List<std::int64_t>({-1}), true});
  const auto z = rec.call(formula, "aten::sub", "Tensor", {x, m, 1});
  const auto e = rec.call(formula, "aten::exp", "", {z});
  const auto s = rec.call(formula, "aten::sum", "dim_IntList",
                          {e, c10::List<std::int64_t>({-1}), true, c10::IValue()});
  rec.call(formula, "aten::div", "Tensor", {e, s});
  const auto t = rec.call(tempered, "aten::mul", "Scalar", {x, 1.001});  // another temperature
  rec.call(tempered, "aten::softmax", "int", {t, -1, c10::IValue()});
  EXPECT_FALSE(same_bits(base, formula)) << "the formula should round otherwise";
  expect_three_verdicts(base, formula, tempered);
}

TEST(ReplayVerdict, RmsNormByReciprocalSquareRootIsNoise) {
  Recorder rec;
  const at::Tensor x = data({8, 256}, 0.1, 5);
  RunRegion base, other, other_eps;
  const auto norm = [&](RunRegion& run, double eps) {
    const auto sq = rec.call(run, "aten::pow", "Tensor_Scalar", {x, 2});
    const auto ms = rec.call(run, "aten::mean", "dim",
                             {sq, c10::List<std::int64_t>({-1}), true, c10::IValue()});
    const auto shifted = rec.call(run, "aten::add", "Scalar", {ms, eps, 1});
    const auto r = rec.call(run, "aten::rsqrt", "", {shifted});
    rec.call(run, "aten::mul", "Tensor", {x, r});
  };
  norm(base, 1e-6);
  norm(other_eps, 1e-3);
  const auto sq = rec.call(other, "aten::mul", "Tensor", {x, x});
  const auto s = rec.call(other, "aten::sum", "dim_IntList",
                          {sq, c10::List<std::int64_t>({-1}), true, c10::IValue()});
  const auto ms = rec.call(other, "aten::div", "Scalar", {s, 256});
  const auto shifted = rec.call(other, "aten::add", "Scalar", {ms, 1e-6, 1});
  const auto root = rec.call(other, "aten::sqrt", "", {shifted});
  rec.call(other, "aten::div", "Tensor", {x, root});
  EXPECT_FALSE(same_bits(base, other)) << "x / sqrt(..) should round otherwise than x * rsqrt(..)";
  expect_three_verdicts(base, other, other_eps);
}

TEST(ReplayVerdict, GatherAsTakeAlongDimIsNoise) {
  Recorder rec;
  const at::Tensor x = data({16, 32}, 1, 6);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor index = at::randint(16, {16, 4}, gen, at::kLong);
  RunRegion base, take, other_dim;
  rec.call(base, "aten::gather", "", {x, 1, index, false});
  rec.call(take, "aten::take_along_dim", "", {x, index, 1});
  // the index read along another dim
  rec.call(other_dim, "aten::gather", "", {x, 0, index, false});
  expect_three_verdicts(base, take, other_dim);
}

TEST(ReplayVerdict, CastThroughBfloat16IsLostPrecision) {
  Recorder rec;
  const at::Tensor x = data({4, 128}, 3, 8);
  RunRegion base, lowp;
  rec.call(base, "aten::softmax", "int", {x, -1, c10::IValue()});
  const auto b =
      rec.call(lowp, "aten::to", "dtype", {x, at::kBFloat16, false, false, c10::IValue()});
  const auto y = rec.call(lowp, "aten::softmax", "int", {b, -1, c10::IValue()});
  rec.call(lowp, "aten::to", "dtype", {y, at::kFloat, false, false, c10::IValue()});
  const auto v = judge(base, lowp);
  EXPECT_EQ(v.verdict, "precision: test") << evidence(v);
  ASSERT_TRUE(v.test);
  EXPECT_GT(v.test->units, 1000) << "bfloat16's rounding is 2^16 float32 roundings";
  EXPECT_EQ(v.test->dtype, "float32");
}

TEST(ReplayVerdict, RandomOpsAndOpsWithoutSchemaAreNotReplayable) {
  Recorder rec;
  const at::Tensor x = data({4, 8});
  RunRegion base, dropout;
  rec.call(base, "aten::mul", "Scalar", {x, 2});
  rec.call(dropout, "aten::native_dropout", "", {x, 0.5, true});
  auto v = judge(base, dropout);
  EXPECT_EQ(v.verdict, "not replayable");
  EXPECT_NE(v.reason.find("random op"), std::string::npos) << v.reason;
  RunRegion no_schema = base;
  no_schema.ops[0].dump.schema.clear();
  no_schema.ops[0].schema.reset();
  v = judge(base, no_schema);
  EXPECT_EQ(v.verdict, "not replayable");
  EXPECT_NE(v.reason.find("no schema"), std::string::npos) << v.reason;
}

TEST(ReplayVerdict, DumpedDevicesAndUndefinedTensorsKeepTheirPlaces) {
  // A dump names a device ("cpu") and an undefined tensor ("<undefined>"), as the probe writes
  // them.
  std::vector<at::Tensor> tensors;
  const at::Tensor x = data({2, 3});
  probe::replay::flatten_tensors(
      c10::ivalue::Tuple::create(
          {c10::IValue(x), c10::IValue(std::string("<undefined>")), c10::IValue(x)}),
      tensors);
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_FALSE(tensors[1].defined());
  Recorder rec;
  RunRegion run;
  rec.call(
      run, "aten::_to_copy", "",
      {x, at::kDouble, c10::IValue(), c10::Device(c10::kCPU), c10::IValue(), false, c10::IValue()});
  for (auto& a : run.ops[0].dump.args)
    if (a.isDevice()) a = c10::IValue(std::string("cpu"));
  const auto r = probe::replay::replay_run(run);
  EXPECT_TRUE(r.replays_bitwise && *r.replays_bitwise);
  EXPECT_EQ(r.families, std::vector<probe::replay::Family>({probe::replay::Family::cast}));
}

TEST(ReplayVerdict, RecordedDtypeReplayIsBitwise) {
  Recorder rec;
  RunRegion run;
  rec.call(run, "aten::mm", "", {data({8, 64}), data({64, 8}, 1, 2)});
  const auto r = probe::replay::replay_run(run);
  ASSERT_TRUE(r.replays_bitwise);
  EXPECT_TRUE(*r.replays_bitwise);
  EXPECT_EQ(r.reference.scalar_type(), at::kDouble);
}

}  // namespace
