// autoparallel's NumericsLogger writes "[prefix] hash={torch.hash_tensor(t)}, norm={torch.norm(t)}"
// (tensor reprs) and "[grad NAME] None" lines, one diff.log per run.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "differ/detail/read/python_log.h"
#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {
const char* kPython =
    "[full batch input] hash=tensor(123, device='cuda:0', dtype=torch.uint64), "
    "norm=tensor(42.5000, device='cuda:0')\n"
    "[grad tok_embeddings.weight] hash=tensor(456, device='cuda:0', dtype=torch.uint64), "
    "norm=tensor(1.2346e+05, device='cuda:0')\n"
    "[grad output.weight] None\n"
    "[full batch input] hash=tensor(124, device='cuda:0', dtype=torch.uint64), "
    "norm=tensor(42.5000, device='cuda:0')\n"
    "[grad tok_embeddings.weight] hash=tensor(457, device='cuda:0', dtype=torch.uint64), "
    "norm=tensor(1.2300e+05, device='cuda:0')\n"
    "[grad output.weight] None\n";
}  // namespace

TEST(PythonLog, ParsesTensorReprsDTensorsPlainIntegersAndNone) {
  auto l = parse_python_line(
      "[grad w] hash=DTensor(tensor(18446744073709551615, device='cuda:0', dtype=torch.uint64)), "
      "norm=tensor(nan, device='cuda:0', grad_fn=<NormBackward>)");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->prefix, "grad w");
  EXPECT_EQ(l->hash, 18446744073709551615ULL);
  EXPECT_TRUE(std::isnan(l->norm));
  l = parse_python_line("[x] hash=42, norm=1.5");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->hash, 42u);
  EXPECT_EQ(l->norm, 1.5);
  l = parse_python_line("[grad w] None");
  ASSERT_TRUE(l && l->none);
  l = parse_python_line("[c] hash=real=tensor(1), imag=tensor(2)), norm=tensor(3.)");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->hash_text, "real=tensor(1), imag=tensor(2))");
  EXPECT_EQ(l->norm, 3.0);
  EXPECT_FALSE(parse_python_line("step=0 kind=grad name=w none"));
  EXPECT_THROW(parse_python_line("[x] hash=1 norm=2"), probe::log_format::ParseError);
}

TEST(PythonLog, TwoPythonRunsAlignByPrefixAndOccurrence) {
  auto dir = fresh_dir("py");
  write_file(dir / "0" / "diff.log", kPython);
  std::string other = kPython;
  other.replace(other.find("457"), 3, "999");
  write_file(dir / "1" / "diff.log", other);
  auto res = diff(dir / "0", dir / "1");
  EXPECT_TRUE(res.base.python);
  EXPECT_EQ(res.paired_steps, 2);
  EXPECT_EQ(count(res, Kind::input, PairClass::equal), 2);
  EXPECT_EQ(count(res, Kind::grad, PairClass::equal), 3);  // includes none == none
  ASSERT_TRUE(res.first_divergence);
  EXPECT_EQ(res.first_divergence->step, 1);
  EXPECT_EQ(res.first_divergence->name, "tok_embeddings.weight");
}

TEST(PythonLog, ProbeRunWithTorchHashComparesWithPythonRun) {
  auto dir = fresh_dir("pyprobe");
  write_file(dir / "py.log", kPython);
  std::vector<Record> probe_recs;
  for (int s = 0; s < 2; ++s) {
    auto in = tensor(s, Kind::input, "full batch input", 0xabc, 42.5);
    in.stats.torch_hash = 123 + s;
    auto g = tensor(s, Kind::grad, "module.tok_embeddings.weight", 0xdef, 1.2346e5);
    g.stats.torch_hash = 456 + s;
    probe_recs.push_back(in);
    probe_recs.push_back(g);
    probe_recs.push_back(none(s, Kind::grad, "output.weight"));
  }
  write_run(dir / "cpp", {probe_recs});
  auto res = diff(dir / "py.log", dir / "cpp");
  EXPECT_EQ(count(res, Kind::grad, PairClass::equal), 4);
  EXPECT_EQ(count(res, Kind::input, PairClass::equal), 2);
  EXPECT_EQ(res.exit_code(), 0);

  probe_recs[1].stats.torch_hash.reset();  // without the compatible hash: cannot compare
  write_run(dir / "cpp2", {probe_recs});
  auto res2 = diff(dir / "py.log", dir / "cpp2");
  EXPECT_EQ(count(res2, Kind::grad, PairClass::unsupported), 1);

  // Without a common hash the norms still show a difference.
  probe_recs[1].stats.norm = 9e9;
  write_run(dir / "cpp3", {probe_recs});
  auto res3 = diff(dir / "py.log", dir / "cpp3");
  EXPECT_EQ(count(res3, Kind::grad, PairClass::different), 1);
  ASSERT_TRUE(res3.first_divergence);
  EXPECT_EQ(res3.first_divergence->note, "no common hash; differs in: norm");
  EXPECT_EQ(res3.exit_code(), 1);
}

TEST(PythonLog, EveryPairWithoutACommonHashIsNothingCompared) {
  auto dir = fresh_dir("pynothing");
  write_file(dir / "py.log", "[grad w] hash=tensor(1), norm=tensor(2.)\n");
  write_run(dir / "cpp", {{tensor(0, Kind::grad, "w", 0xabc, 2.0)}});
  auto res = diff(dir / "py.log", dir / "cpp");
  EXPECT_EQ(count(res, Kind::grad, PairClass::unsupported), 1);
  EXPECT_EQ(res.verdict(), Result::Verdict::nothing_compared);
  EXPECT_EQ(res.exit_code(), 2);
}

// NumericsLogger writes torch.hash_tensor's value in decimal; the report prints every hash in
// hex, 16 digits (457 = 0x1c9, 999 = 0x3e7).
TEST(PythonLog, HashesPrintInHexLikeEveryOtherHash) {
  auto dir = fresh_dir("pyhashtext");
  write_file(dir / "0" / "diff.log", kPython);
  std::string other = kPython;
  other.replace(other.find("457"), 3, "999");
  write_file(dir / "1" / "diff.log", other);
  std::ostringstream out;
  print_text(diff(dir / "0", dir / "1"), out, {});
  EXPECT_TRUE(says(out.str(),
                   "\nbase: hash=00000000000001c9 norm=123000 (rank 0)\ntest: "
                   "hash=00000000000003e7 norm=123000 (rank 0)\n"))
      << out.str();
}

// autoparallel's example logs "[mb<i> fwd out]" per microbatch: the model's forward output of
// microbatch i, which a probe run records as output `model` (ProbeOptions::model_name), mb i.
TEST(PythonLog, MicrobatchForwardOutputsPairWithTheProbesModelOutputs) {
  auto dir = fresh_dir("pymb");
  write_file(dir / "py.log",
             "[mb0 fwd out] hash=48162009300074496, norm=1.8559048175811768\n"
             "[mb1 fwd out] hash=7, norm=2.5\n"
             "[mb1 attn scores] hash=9, norm=0.5\n"
             "[grad fc1.weight] hash=11, norm=3.0\n"
             "[mb0 fwd out] hash=8, norm=1.5\n"
             "[mb1 fwd out] hash=10, norm=2.5\n"
             "[mb1 attn scores] hash=12, norm=0.5\n"
             "[grad fc1.weight] hash=13, norm=3.0\n");
  auto with_torch_hash = [](Record r, std::uint64_t h) {
    r.stats.torch_hash = h;
    return r;
  };
  auto probe_run = [&](const std::string& model) {
    std::vector<Record> recs;
    const std::uint64_t out[2][2] = {{48162009300074496ULL, 7}, {8, 10}};
    const std::uint64_t tap[2] = {9, 12}, grad[2] = {11, 13};
    for (int s = 0; s < 2; ++s) {
      const auto i = static_cast<std::size_t>(s);
      recs.push_back(
          with_torch_hash(tensor(s, Kind::output, model, 1, 1.8559048175811768, 0), out[i][0]));
      recs.push_back(with_torch_hash(tensor(s, Kind::tap, "attn scores", 2, 0.5, 1), tap[i]));
      recs.push_back(with_torch_hash(tensor(s, Kind::output, model, 3, 2.5, 1), out[i][1]));
      recs.push_back(with_torch_hash(tensor(s, Kind::grad, "fc1.weight", 4, 3.0), grad[i]));
    }
    return std::vector<std::vector<Record>>{recs};
  };
  write_run(dir / "cpp", probe_run("model"));
  auto res = diff(dir / "py.log", dir / "cpp");
  EXPECT_EQ(count(res, Kind::output, PairClass::equal), 4);
  EXPECT_EQ(count(res, Kind::tap, PairClass::equal), 2);
  EXPECT_EQ(count(res, Kind::grad, PairClass::equal), 2);
  EXPECT_EQ(res.verdict(), Result::Verdict::equal);
  EXPECT_TRUE(res.names_only_base.empty());
  EXPECT_TRUE(res.names_only_test.empty());

  // A probe whose model_name is "net": the name is an option of the Python run.
  write_run(dir / "net", probe_run("net"));
  RunOptions py_opt, probe_opt;
  py_opt.model_name = "net";
  probe_opt.label = "test";
  {
    probe::differ::Run base(dir / "py.log", py_opt), test(dir / "net", probe_opt);
    auto renamed = diff_runs(base, test, {});
    EXPECT_EQ(count(renamed, Kind::output, PairClass::equal), 4);
    EXPECT_EQ(renamed.verdict(), Result::Verdict::equal);
  }
  auto unnamed = diff(dir / "py.log", dir / "net");  // the default name does not pair with it
  EXPECT_EQ(count(unnamed, Kind::output, PairClass::only_base), 4);
}

TEST(PythonLog, OnlyAnMbNumberAndAWordMakeAMicrobatchPrefix) {
  auto dir = fresh_dir("pymbprefix");
  write_file(dir / "py.log",
             "[mb fwd out] hash=1, norm=1\n"      // no number: a tap
             "[mb2] hash=2, norm=1\n"             // nothing after it: a tap
             "[mb-1 fwd out] hash=3, norm=1\n"    // negative: a tap
             "[mbx3 fwd out] hash=4, norm=1\n"    // not a number: a tap
             "[mb12 fwd out] hash=5, norm=1\n");  // output of microbatch 12
  probe::differ::Run run(dir / "py.log", {});
  std::int64_t step = -1;
  std::vector<Merged> records;
  ASSERT_TRUE(run.next_step(step, records));
  ASSERT_EQ(records.size(), 5u);
  int taps = 0;
  for (const auto& m : records) {
    if (m.record.kind == Kind::tap) {
      ++taps;
      EXPECT_FALSE(m.record.microbatch) << m.record.name;
    } else {
      EXPECT_EQ(m.record.kind, Kind::output);
      EXPECT_EQ(m.record.name, "model");
      EXPECT_EQ(m.record.microbatch, 12);
    }
  }
  EXPECT_EQ(taps, 4);
}
