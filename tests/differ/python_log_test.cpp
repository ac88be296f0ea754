// autoparallel's NumericsLogger writes "[prefix] hash={torch.hash_tensor(t)}, norm={torch.norm(t)}"
// (tensor reprs) and "[grad NAME] None" lines, one diff.log per run.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "differ/detail/python_log.h"
#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {
void write_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}
std::int64_t count(const Result& r, Kind k, Class c) {
  return r.counts[static_cast<std::size_t>(k)][static_cast<std::size_t>(c)];
}
const char* kPython =
    "[full batch input] hash=tensor(123, device='cuda:0', dtype=torch.uint64), norm=tensor(42.5000, device='cuda:0')\n"
    "[grad tok_embeddings.weight] hash=tensor(456, device='cuda:0', dtype=torch.uint64), norm=tensor(1.2346e+05, device='cuda:0')\n"
    "[grad output.weight] None\n"
    "[full batch input] hash=tensor(124, device='cuda:0', dtype=torch.uint64), norm=tensor(42.5000, device='cuda:0')\n"
    "[grad tok_embeddings.weight] hash=tensor(457, device='cuda:0', dtype=torch.uint64), norm=tensor(1.2300e+05, device='cuda:0')\n"
    "[grad output.weight] None\n";
}  // namespace

TEST(PythonLog, ParsesTensorReprsDTensorsPlainIntegersAndNone) {
  auto l = parse_python_line("[grad w] hash=DTensor(tensor(18446744073709551615, device='cuda:0', dtype=torch.uint64)), norm=tensor(nan, device='cuda:0', grad_fn=<NormBackward>)");
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
  EXPECT_EQ(count(res, Kind::input, Class::equal), 2);
  EXPECT_EQ(count(res, Kind::grad, Class::equal), 3);  // includes none == none
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
  EXPECT_EQ(count(res, Kind::grad, Class::equal), 4);
  EXPECT_EQ(count(res, Kind::input, Class::equal), 2);
  EXPECT_EQ(res.exit_code(), 0);

  probe_recs[1].stats.torch_hash.reset();  // without the compatible hash: cannot compare
  write_run(dir / "cpp2", {probe_recs});
  auto res2 = diff(dir / "py.log", dir / "cpp2");
  EXPECT_EQ(count(res2, Kind::grad, Class::unsupported), 1);

  // Without a common hash the norms still show a difference.
  probe_recs[1].stats.norm = 9e9;
  write_run(dir / "cpp3", {probe_recs});
  auto res3 = diff(dir / "py.log", dir / "cpp3");
  EXPECT_EQ(count(res3, Kind::grad, Class::different), 1);
  ASSERT_TRUE(res3.first_divergence);
  EXPECT_EQ(res3.first_divergence->note, "no common hash; differs in: norm");
  EXPECT_EQ(res3.exit_code(), 1);
}

TEST(PythonLog, EveryPairWithoutACommonHashIsNothingCompared) {
  auto dir = fresh_dir("pynothing");
  write_file(dir / "py.log", "[grad w] hash=tensor(1), norm=tensor(2.)\n");
  write_run(dir / "cpp", {{tensor(0, Kind::grad, "w", 0xabc, 2.0)}});
  auto res = diff(dir / "py.log", dir / "cpp");
  EXPECT_EQ(count(res, Kind::grad, Class::unsupported), 1);
  EXPECT_EQ(res.verdict(), Result::Verdict::nothing_compared);
  EXPECT_EQ(res.exit_code(), 2);
}

TEST(PythonLog, HashesPrintAsNumericsLoggerWroteThem) {
  auto dir = fresh_dir("pyhashtext");
  write_file(dir / "0" / "diff.log", kPython);
  std::string other = kPython;
  other.replace(other.find("457"), 3, "999");
  write_file(dir / "1" / "diff.log", other);
  std::ostringstream out;
  print_text(diff(dir / "0", dir / "1"), out, {});
  EXPECT_NE(out.str().find("  base: hash=457 norm=123000  (rank 0)\n  test: hash=999 norm=123000  (rank 0)\n"),
            std::string::npos)
      << out.str();
}
