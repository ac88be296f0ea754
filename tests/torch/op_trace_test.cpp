// Kind `op`: the op trace's recording rules (docs/log-format.md, "Op records").
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>

#include "small_file_system.h"
#include "test_util.h"
#include "torch_test_util.h"
#include "probe/log_io.h"
#include "probe/probe.h"
#include "probe/scope.h"

namespace {

// directories named optrace_*, apart from probe_test.cpp's in the same binary
using test_util::fresh_dir;

probe::ProbeOptions traced(const std::filesystem::path& dir, const std::string& trace) {
  probe::ProbeOptions o = test_util::options_in(dir);
  o.trace = trace;
  return o;
}

std::vector<probe::Record> ops_of(const std::filesystem::path& dir) {
  probe::LogReader reader(dir / "rank0" / "diff.log");
  std::vector<probe::Record> ops;
  while (auto r = reader.next())
    if (r->kind == probe::Kind::op) ops.push_back(*r);
  return ops;
}

std::vector<std::string> names_of(const std::vector<probe::Record>& records) {
  std::vector<std::string> names;
  for (const auto& r : records) names.push_back(r.name);
  return names;
}

const probe::Record* find(const std::vector<probe::Record>& records, const std::string& name) {
  for (const auto& r : records)
    if (r.name == name) return &r;
  return nullptr;
}

std::uint64_t hash_of(const at::Tensor& t) { return probe::tensor_stats(t).hash; }

struct BlockImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  BlockImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  torch::Tensor forward(torch::Tensor x) {
    probe::Scope block("layers.0");
    torch::Tensor h;
    {
      probe::Scope scope("mlp");
      h = torch::gelu(fc(x));
    }
    return x + h;
  }
};
TORCH_MODULE(Block);

}  // namespace

TEST(OpTrace, NoSettingRecordsNoOpAndRegistersNoCallback) {
  auto dir = fresh_dir("optrace_none");
  {
    probe::Probe p(traced(dir, ""));
    Block block;
    p.begin_step(0);
    {
      probe::Scope scope("layers.0");
      EXPECT_FALSE(at::hasThreadLocalCallbacks());
    }
    p.backward(0, p.forward(0, block, torch::randn({2, 4})).sum());
    p.end_step();
  }
  EXPECT_TRUE(ops_of(dir).empty());
}

TEST(OpTrace, CallbacksAreRegisteredOnlyInsideTracedScopesOfTracedSteps) {
  auto dir = fresh_dir("optrace_callbacks");
  probe::Probe p(traced(dir, "steps=1;scopes=^layers\\.0$"));
  p.begin_step(0);
  {
    probe::Scope scope("layers.0");
    EXPECT_FALSE(at::hasThreadLocalCallbacks());  // step 0 is not traced
  }
  p.end_step();
  p.begin_step(1);
  {
    probe::Scope scope("layers.0");
    EXPECT_TRUE(at::hasThreadLocalCallbacks());
    {
      probe::Scope inner("mlp");  // layers.0.mlp: not traced, but the outer scope still is
      EXPECT_EQ(probe::current_scope(), "layers.0.mlp");
      EXPECT_TRUE(at::hasThreadLocalCallbacks());
    }
  }
  EXPECT_FALSE(at::hasThreadLocalCallbacks());
  {
    probe::Scope scope("layers.1");
    EXPECT_FALSE(at::hasThreadLocalCallbacks());
  }
  p.end_step();
}

TEST(OpTrace, ScopesNestWithDotsAndARootScopeStandsAlone) {
  EXPECT_EQ(probe::current_scope(), "");
  probe::Scope a("layers.3");
  {
    probe::Scope b("attention");
    EXPECT_EQ(b.name(), "layers.3.attention");
    EXPECT_EQ(a.name(), "layers.3");
  }
  probe::Scope root(probe::Scope::Root{}, "model");
  EXPECT_EQ(probe::current_scope(), "model");
  probe::Scope c("layers.0");
  EXPECT_EQ(probe::current_scope(), "layers.0");
}

TEST(OpTrace, ForwardOpsAreNamedByScopeAndOccurrenceWithInputHashes) {
  auto dir = fresh_dir("optrace_forward");
  torch::manual_seed(0);
  Block block;
  const auto x = torch::randn({2, 4});
  at::Tensor fc_out, gelu_out, sum_out;
  {
    probe::Probe p(traced(dir, "phases=forward"));
    p.begin_step(0);
    auto y = p.forward(0, block, x);
    fc_out = block->fc(x).detach();
    gelu_out = torch::gelu(fc_out);
    sum_out = x + gelu_out;
    p.end_step();
  }
  const auto ops = ops_of(dir);
  // The outermost op only: aten::addmm, not the aten::mm/aten::add it may call. (The C++
  // frontend's Linear runs aten::t and aten::addmm itself: no aten::linear op.)
  EXPECT_EQ(names_of(ops),
            (std::vector<std::string>{"layers.0.mlp/aten::t#0", "layers.0.mlp/aten::addmm#0",
                                      "layers.0.mlp/aten::gelu#0", "layers.0/aten::add#0"}));
  const auto* addmm = find(ops, "layers.0.mlp/aten::addmm#0");
  ASSERT_TRUE(addmm);
  EXPECT_EQ(addmm->phase, probe::Phase::forward);
  EXPECT_EQ(addmm->microbatch, 0);
  EXPECT_EQ(addmm->stats.hash, hash_of(fc_out));
  ASSERT_EQ(addmm->inputs.size(), 3u);  // bias, input, weight.t()
  EXPECT_EQ(addmm->inputs[0], hash_of(block->fc->bias));
  EXPECT_EQ(addmm->inputs[1], hash_of(x));
  EXPECT_EQ(addmm->inputs[2], hash_of(block->fc->weight.t()));
  EXPECT_EQ(find(ops, "layers.0.mlp/aten::t#0")->stats.hash, hash_of(block->fc->weight.t()));
  const auto* gelu = find(ops, "layers.0.mlp/aten::gelu#0");
  ASSERT_TRUE(gelu);
  EXPECT_EQ(gelu->inputs, (std::vector<std::optional<std::uint64_t>>{hash_of(fc_out)}));
  EXPECT_EQ(gelu->stats.hash, hash_of(gelu_out));
  EXPECT_EQ(find(ops, "layers.0/aten::add#0")->stats.hash, hash_of(sum_out));
}

TEST(OpTrace, OccurrencesCountPerScopeOpAndMicrobatch) {
  auto dir = fresh_dir("optrace_occurrence");
  {
    probe::Probe p(traced(dir, "phases=forward"));
    p.begin_step(0);
    for (int mb = 0; mb < 2; ++mb) {
      p.begin_forward("model", mb, {});
      probe::Scope scope("s");
      auto a = torch::ones({3});
      a = a * 2;
      a = a * 3;
    }
    p.end_step();
  }
  const auto ops = ops_of(dir);
  ASSERT_EQ(ops.size(), 6u);
  EXPECT_EQ(ops[1].name, "s/aten::mul#0");
  EXPECT_EQ(ops[2].name, "s/aten::mul#1");
  EXPECT_EQ(ops[4].name, "s/aten::mul#0");
  EXPECT_EQ(ops[4].microbatch, 1);
  EXPECT_TRUE(ops[0].inputs.empty());  // aten::ones has no tensor input
}

TEST(OpTrace, InPlaceOpsRecordTheTensorAfterTheOpAndViewsTheirValuesThen) {
  auto dir = fresh_dir("optrace_inplace");
  const auto base = torch::arange(6, torch::kFloat32);
  at::Tensor before, after, view_then;
  {
    probe::Probe p(traced(dir, "phases=forward"));
    p.begin_step(0);
    p.begin_forward("model", 0, {});
    {
      probe::Scope scope("s");
      auto t = base.clone();
      before = t.clone();
      t.mul_(2);
      after = t.clone();
      auto v = t.view({2, 3});
      view_then = v.clone();
      t.add_(1);  // changes the view's storage after the view was recorded
    }
    p.end_step();
  }
  const auto ops = ops_of(dir);
  const auto* mul = find(ops, "s/aten::mul_#0");
  ASSERT_TRUE(mul);
  EXPECT_EQ(mul->inputs[0], hash_of(before));  // input hashed before the op wrote it
  EXPECT_EQ(mul->stats.hash, hash_of(after));
  const auto* view = find(ops, "s/aten::view#0");
  ASSERT_TRUE(view);
  EXPECT_EQ(view->stats.hash, hash_of(view_then));
  EXPECT_EQ(view->stats.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_TRUE(find(ops, "s/aten::add_#0"));
}

TEST(OpTrace, OpsWithoutATensorOutputAreNotRecorded) {
  auto dir = fresh_dir("optrace_notensor");
  {
    probe::Probe p(traced(dir, "phases=forward"));
    p.begin_step(0);
    p.begin_forward("model", 0, {});
    {
      probe::Scope scope("s");
      auto t = torch::ones({3});
      EXPECT_EQ(t.sum().item<float>(), 3.0f);  // aten::item returns a Scalar
      EXPECT_TRUE(torch::equal(t, t));         // aten::equal returns a bool
    }
    p.end_step();
  }
  EXPECT_EQ(names_of(ops_of(dir)), (std::vector<std::string>{"s/aten::ones#0", "s/aten::sum#0"}));
}

TEST(OpTrace, BackwardOpsAreNamedAfterTheForwardOpThatMadeTheirNode) {
  auto dir = fresh_dir("optrace_backward");
  torch::manual_seed(0);
  Block block;
  {
    probe::Probe p(traced(dir, "scopes=^layers\\.0\\.mlp$"));
    p.begin_step(0);
    auto y = p.forward(0, block, torch::randn({2, 4}, torch::requires_grad()));
    p.backward(0, y.sum());
    p.end_step();
  }
  const auto ops = ops_of(dir);
  std::vector<std::string> backward;
  for (const auto& r : ops)
    if (r.phase == probe::Phase::backward) backward.push_back(r.name);
  ASSERT_FALSE(backward.empty());
  // gelu's node runs gelu_backward; addmm's node runs mm and friends.
  EXPECT_EQ(backward.front(), "layers.0.mlp/aten::gelu#0/aten::gelu_backward#0");
  bool linear_node = false;
  for (const auto& name : backward) {
    EXPECT_EQ(name.rfind("layers.0.mlp/", 0), 0u) << name;  // the add's node is not traced
    linear_node = linear_node || name.rfind("layers.0.mlp/aten::addmm#0/aten::", 0) == 0;
  }
  EXPECT_TRUE(linear_node);
  for (const auto& r : ops) EXPECT_EQ(r.microbatch, 0);
}

TEST(OpTrace, PhasesStepsAndMicrobatchesSelectWhatIsRecorded) {
  auto run = [](const std::string& name, const std::string& trace) {
    auto dir = fresh_dir("optrace_" + name);
    torch::manual_seed(0);
    Block block;
    {
      probe::Probe p(traced(dir, trace));
      for (int step = 0; step < 2; ++step) {
        for (int mb = 0; mb < 2; ++mb)
          p.backward(mb, p.forward(mb, block, torch::randn({2, 4})).sum());
        p.end_step();
      }
    }
    std::map<std::string, int> count;
    for (const auto& r : ops_of(dir))
      count[std::to_string(r.step) + " " + std::string(probe::phase_name(*r.phase)) + " mb" +
            std::to_string(*r.microbatch)]++;
    return count;
  };
  const auto backward_only = run("bwd", "steps=1;phases=backward;mb=1");
  ASSERT_EQ(backward_only.size(), 1u);
  EXPECT_EQ(backward_only.begin()->first, "1 backward mb1");
  const auto forward_only = run("fwd", "steps=0;phases=forward");
  ASSERT_EQ(forward_only.size(), 2u);
  EXPECT_TRUE(forward_only.count("0 forward mb0") && forward_only.count("0 forward mb1"));
}

TEST(OpTrace, TracingChangesNoResultAndConsumesNoRandomness) {
  auto train = [](const std::string& trace) {
    auto dir = fresh_dir("optrace_perturb" + std::to_string(trace.size()));
    torch::manual_seed(1);
    Block block;
    torch::nn::Dropout dropout(0.5);
    torch::optim::SGD opt(block->parameters(), 0.1);
    probe::Probe p(traced(dir, trace));
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      for (int mb = 0; mb < 2; ++mb) {
        auto x = dropout(torch::randn({3, 4}));
        p.backward(mb, p.forward(mb, block, x).pow(2).mean());
      }
      opt.step();
      p.end_step();
    }
    std::vector<at::Tensor> state;
    for (auto& t : block->parameters()) state.push_back(t.detach().clone());
    state.push_back(torch::randn({4}));  // the generator's next draw
    return state;
  };
  const auto plain = train("");
  const auto with_trace = train("steps=1");
  const auto with_dumps = train("steps=1;dump=1");
  ASSERT_EQ(plain.size(), with_trace.size());
  ASSERT_EQ(plain.size(), with_dumps.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain[i], with_trace[i])) << i;
    EXPECT_TRUE(torch::equal(plain[i], with_dumps[i])) << i;
  }
}

TEST(OpTrace, BadSettingIsAClearError) {
  try {
    probe::Probe p(traced(fresh_dir("optrace_bad"), "steps=7;layer=3"));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("numprobe: ProbeOptions::trace: trace setting "
                                         "'steps=7;layer=3': unknown field 'layer'"),
              std::string::npos)
        << e.what();
  }
  ::setenv("PROBE_TRACE", "phases=up", 1);
  try {
    probe::ProbeOptions::from_env();
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("numprobe: PROBE_TRACE: trace setting 'phases=up'"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("PROBE_TRACE");
}

TEST(OpTrace, KindsWithoutOpTurnTheTraceOff) {
  auto dir = fresh_dir("optrace_kindsoff");
  auto o = traced(dir, "phases=forward");
  o.kinds = probe::KindSet::all().without(probe::Kind::op);
  {
    probe::Probe p(o);
    p.begin_forward("model", 0, {});
    {
      probe::Scope scope("s");
      EXPECT_FALSE(at::hasThreadLocalCallbacks());
      auto t = torch::ones({2});
    }
    p.end_step();
  }
  EXPECT_TRUE(ops_of(dir).empty());
}

// A traced run whose log fills its disk stops recording (docs/log-format.md): it stops tracing
// too, registering no op callback in a scope the setting selects and hashing no more ops.
TEST(OpTrace, AProbeThatStoppedRecordingTracesNoMoreOps) {
  test_support::SmallFileSystem fs("optrace_full", test_support::SmallFileSystem::kinds().front(),
                                   16 * 1024);
  ASSERT_TRUE(fs.ready());
  testing::internal::CaptureStderr();
  {
    probe::Probe p(traced(fs.dir() / "run", "scopes=^layers"));
    Block block;
    std::int64_t step = 0;
    for (; step < 200 && p.enabled(); ++step) {
      p.begin_step(step);
      p.backward(0, p.forward(0, block, torch::randn({2, 4})).sum());
      p.end_step();
    }
    ASSERT_FALSE(p.enabled()) << "16 KiB held " << step << " traced steps";
    p.begin_step(step);
    {
      probe::Scope scope("layers.0");
      EXPECT_FALSE(at::hasThreadLocalCallbacks());
    }
    p.backward(0, p.forward(0, block, torch::randn({2, 4})).sum());
    p.end_step();
  }
  testing::internal::GetCapturedStderr();
}

// A split scope (format 7): its ops, those of the scopes inside it and their backward ops say
// which piece of the split they ran on, with their output's and inputs' hashes as that piece
// along each dim; the pieces of two ranks compose into the whole's hash.
TEST(OpTrace, OpsOfASplitScopeCarryTheirHashesAsPiecesAlongEachDim) {
  auto whole_x = torch::randn({4, 6});
  const auto whole_y = torch::softmax(whole_x, -1);
  std::vector<probe::Record> rank_records[2];
  for (int rank = 0; rank < 2; ++rank) {
    auto dir = fresh_dir("optrace_split" + std::to_string(rank));
    probe::Probe p(traced(dir, "scopes=^layers\\.0"));
    p.begin_step(0);
    p.begin_forward("model", 0, {});
    auto x = whole_x.narrow(0, 2 * rank, 2).clone().requires_grad_();
    at::Tensor y;
    {
      probe::Scope scope("layers.0", probe::Split{rank, 2});
      probe::Scope inner("attention");  // split alike
      y = torch::softmax(x, -1);
    }
    p.backward(0, y.sum());
    p.end_step();
    rank_records[rank] = ops_of(dir);
  }
  const auto* r0 = find(rank_records[0], "layers.0.attention/aten::softmax#0");
  const auto* r1 = find(rank_records[1], "layers.0.attention/aten::softmax#0");
  ASSERT_TRUE(r0 && r1);
  EXPECT_EQ(r1->split.rank, 1);
  EXPECT_EQ(r1->split.size, 2);
  ASSERT_EQ(r0->split.output.size(), 2u);  // one hash per dim of [2, 6]
  ASSERT_EQ(r1->split.output.size(), 2u);
  EXPECT_EQ(r0->split.output[0] + r1->split.output[0], hash_of(whole_y));  // tiled along dim 0
  EXPECT_NE(r0->split.output[1] + r1->split.output[1], hash_of(whole_y));  // not along dim 1
  ASSERT_EQ(r1->split.inputs.size(), 1u);
  EXPECT_EQ(r0->split.inputs[0][0] + r1->split.inputs[0][0], hash_of(whole_x));
  // its own hash as before
  EXPECT_EQ(r1->stats.hash, hash_of(whole_y.narrow(0, 2, 2).contiguous()));
  bool backward_split = false;
  for (const auto& r : rank_records[1])
    backward_split = backward_split || (r.phase == probe::Phase::backward && r.split.size == 2);
  EXPECT_TRUE(backward_split);
  EXPECT_THROW(probe::Scope("bad", probe::Split{2, 2}), std::invalid_argument);
}

namespace {
c10::IValue load_dump(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes);
}
}  // namespace

// dump=1: each traced op's schema, record name, arguments (as they were before it ran) and
// outputs, one file per op; lists as tuples, as torch.load opens them.
TEST(OpTrace, DumpsHoldEachOpsSchemaArgumentsAndOutputs) {
  auto dir = fresh_dir("optrace_dump");
  const auto base = torch::arange(6, torch::kFloat32);
  at::Tensor y;
  {
    probe::Probe p(traced(dir, "phases=forward;dump=1"));
    p.begin_step(0);
    p.begin_forward("model", 0, {});
    {
      probe::Scope scope("s");
      auto t = base.clone();
      t.mul_(2);
      y = torch::softmax(t.view({2, 3}), 1);
    }
    p.end_step();
  }
  const auto ops = ops_of(dir);
  const auto* mul = find(ops, "s/aten::mul_#0");
  ASSERT_TRUE(mul);
  ASSERT_EQ(mul->dump, "dumps/step0/1.pt");  // the clone before it has 0
  const auto d = load_dump(dir / "rank0" / mul->dump).toTupleRef().elements();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].toStringRef().rfind("aten::mul_.Scalar(", 0), 0u) << d[0].toStringRef();
  EXPECT_EQ(d[1].toStringRef(), "s/aten::mul_#0");
  const auto args = d[2].toTupleRef().elements();
  ASSERT_EQ(args.size(), 2u);
  EXPECT_TRUE(torch::equal(args[0].toTensor(), base));  // before the in-place op wrote it
  EXPECT_EQ(args[1].toScalar().toDouble(), 2.0);
  EXPECT_TRUE(torch::equal(d[3].toTupleRef().elements()[0].toTensor(), base * 2));
  const auto* view = find(ops, "s/aten::view#0");
  ASSERT_TRUE(view && !view->dump.empty());
  const auto view_args =
      load_dump(dir / "rank0" / view->dump).toTupleRef().elements()[2].toTupleRef().elements();
  ASSERT_TRUE(view_args[1].isTuple());  // the size list, as a tuple
  EXPECT_EQ(view_args[1].toTupleRef().elements()[1].toInt(), 3);
  const auto* softmax = find(ops, "s/aten::softmax#0");
  ASSERT_TRUE(softmax && !softmax->dump.empty());
  const auto sd = load_dump(dir / "rank0" / softmax->dump).toTupleRef().elements();
  EXPECT_TRUE(torch::equal(sd[3].toTupleRef().elements()[0].toTensor(), y));
  EXPECT_TRUE(sd[2].toTupleRef().elements()[2].isNone());  // dtype=None
}

// A rank's dumps stop at the first one that would pass dump_cap, with one message; the op records
// go on without dump= and the log and training go on.
TEST(OpTrace, DumpsStopAtTheCapWithOneMessage) {
  auto dir = fresh_dir("optrace_dump_cap");
  testing::internal::CaptureStderr();
  {
    probe::Probe p(traced(dir, "phases=forward;dump=1;dump_cap=1"));
    for (int step = 0; step < 2; ++step) {
      p.begin_step(step);
      p.begin_forward("model", 0, {});
      {
        probe::Scope scope("s");
        auto small = torch::ones({4}) * 2;                 // fits
        auto large = torch::ones({200000}) + small.sum();  // 0.8 MB in, 0.8 MB out: passes 1 MiB
        (void)(large * 3);
      }
      p.end_step();
    }
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("would pass dump_cap=1 MiB"), std::string::npos) << err;
  EXPECT_EQ(err.find("op dumps in"), err.rfind("op dumps in")) << "one message: " << err;
  const auto ops = ops_of(dir);
  ASSERT_TRUE(find(ops, "s/aten::mul#0"));
  EXPECT_FALSE(find(ops, "s/aten::mul#0")->dump.empty());  // the small op's, before the cap
  const auto* add = find(ops, "s/aten::add#0");
  ASSERT_TRUE(add);
  EXPECT_TRUE(add->dump.empty());
  int step1 = 0, dumped_step1 = 0;
  for (const auto& r : ops)
    if (r.step == 1) {
      ++step1;
      dumped_step1 += !r.dump.empty();
    }
  EXPECT_GT(step1, 0);  // the trace goes on
  EXPECT_EQ(dumped_step1, 0);
}
