#include "probe/probe.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "probe/log_io.h"
#include "small_file_system.h"
#include "test_util.h"
#include "torch_test_util.h"

namespace {

using namespace test_util;

struct NetImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout dropout{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
    dropout = register_module("dropout", torch::nn::Dropout(0.3));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::relu(fc1(x));
    probe::tap("fc1.relu", h);
    return fc2(dropout(h));
  }
};
TORCH_MODULE(Net);

// Trains `steps` steps of 2 microbatches with gradient accumulation; the probe is optional.
std::vector<torch::Tensor> train(probe::Probe* p, int steps) {
  torch::manual_seed(7);
  Net net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  if (p) {
    p->watch(*net);
    p->watch_optimizer(opt);
  }
  for (int step = 0; step < steps; ++step) {
    if (p) p->begin_step(step);
    opt.zero_grad();
    for (int mb = 0; mb < 2; ++mb) {
      auto x = torch::randn({4, 8});
      auto y = p ? p->forward(mb, net, x) : net->forward(x);
      auto loss = y.pow(2).mean();
      if (p) {
        p->backward(mb, loss);
        p->scalar("loss", loss);
      } else {
        loss.backward();
      }
    }
    opt.step();
    if (p) p->end_step();
  }
  std::vector<torch::Tensor> params;
  for (auto& t : net->parameters()) params.push_back(t.detach().clone());
  return params;
}

}  // namespace

TEST(Probe, RecordsEveryKindOfAMicrobatchedStep) {
  auto dir = fresh_dir("kinds");
  {
    probe::Probe p(options_in(dir));
    train(&p, 1);
    EXPECT_EQ(p.log_path(), dir / "rank0" / "diff.log");
  }
  auto records = read_records(dir / "rank0" / "diff.log");
  std::map<std::string, int> count;
  for (const auto& r : records) count[std::string(probe::kind_name(r.kind))]++;
  EXPECT_EQ(count["rng"], 2);  // one per microbatch (CPU generator)
  EXPECT_EQ(count["input"], 2);
  EXPECT_EQ(count["output"], 2);
  EXPECT_EQ(count["tap"], 2);
  EXPECT_EQ(count["output_grad"], 2);
  EXPECT_EQ(count["mb_grad"], 2 * 4);  // 4 parameters x 2 microbatches
  EXPECT_EQ(count["grad"], 4);
  EXPECT_EQ(count["scalar"], 2);
  EXPECT_EQ(count["param"], 4);      // each parameter's value at begin_step
  EXPECT_EQ(count["optim"], 2 * 4);  // SGD's momentum_buffer and lr per parameter (no step count)
  for (const auto& r : records) {
    EXPECT_EQ(r.step, 0);
    if (r.kind == probe::Kind::mb_grad || r.kind == probe::Kind::input) {
      EXPECT_TRUE(r.microbatch);
    }
    if (r.kind == probe::Kind::grad) {
      EXPECT_FALSE(r.microbatch);
    }
  }
  EXPECT_EQ(records.front().kind, probe::Kind::param);  // begin_step, before the forward
  EXPECT_EQ(records.front().name, "fc1.weight");
  EXPECT_EQ(records.back().kind, probe::Kind::optim);  // end_step, after the update
  EXPECT_EQ(records.back().name, "fc2.bias.lr");
  EXPECT_EQ(records.back().state, probe::Record::State::scalar);
  EXPECT_EQ(records.rbegin()[1].name, "fc2.bias.momentum_buffer");
}

TEST(Probe, MicrobatchGradientsAddUpToTheAccumulatedGradient) {
  auto dir = fresh_dir("mbgrad");
  torch::manual_seed(3);
  torch::nn::Linear lin(3, 2), twin(3, 2);  // twin: same weights, no probe, fresh grads
  {
    torch::NoGradGuard no_grad;
    twin->weight.copy_(lin->weight);
    twin->bias.copy_(lin->bias);
  }
  probe::Probe p(options_in(dir));
  p.watch(*lin);
  std::vector<torch::Tensor> contributions;
  for (int mb = 0; mb < 3; ++mb) {
    auto x = torch::randn({5, 3});
    twin->forward(x).pow(2).sum().backward();
    contributions.push_back(twin->weight.grad().clone());
    twin->weight.mutable_grad().zero_();
    p.backward(mb, p.forward(mb, lin, x).pow(2).sum());
  }
  p.end_step();
  auto records = read_records(p.log_path());
  std::vector<std::uint64_t> mb_hashes;
  std::uint64_t grad_hash = 0;
  for (const auto& r : records) {
    if (r.name != "weight") continue;
    if (r.kind == probe::Kind::mb_grad) mb_hashes.push_back(r.stats.hash);
    if (r.kind == probe::Kind::grad) grad_hash = r.stats.hash;
  }
  ASSERT_EQ(mb_hashes.size(), 3u);
  for (int mb = 0; mb < 3; ++mb)
    EXPECT_EQ(mb_hashes[mb], probe::tensor_stats(contributions[mb]).hash);
  EXPECT_EQ(grad_hash, probe::tensor_stats(lin->weight.grad()).hash);
}

TEST(Probe, GradIsNoneWhenBackwardNeverRan) {
  auto dir = fresh_dir("none");
  torch::nn::Linear lin(3, 2);
  probe::Probe p(options_in(dir));
  p.watch(*lin, "layer.");
  p.forward(0, lin, torch::randn({2, 3}));
  p.end_step();
  int none = 0;
  for (const auto& r : read_records(p.log_path()))
    if (r.kind == probe::Kind::grad) {
      EXPECT_EQ(r.state, probe::Record::State::none) << r.name;
      EXPECT_TRUE(r.name == "layer.weight" || r.name == "layer.bias") << r.name;
      ++none;
    }
  EXPECT_EQ(none, 2);
  EXPECT_NE(read_all(p.log_path()).find("kind=grad name=layer.weight none"), std::string::npos);
}

TEST(Probe, DoesNotPerturbTraining) {
  auto dir = fresh_dir("perturb");
  const auto without = train(nullptr, 3);
  std::vector<torch::Tensor> with;
  {
    probe::Probe p(options_in(dir));
    with = train(&p, 3);
  }
  ASSERT_EQ(without.size(), with.size());
  for (std::size_t i = 0; i < with.size(); ++i)
    EXPECT_TRUE(torch::equal(without[i], with[i])) << "parameter " << i;
  // The same run twice writes byte-identical logs: nothing run-specific on record lines.
  auto dir2 = fresh_dir("perturb2");
  {
    probe::Probe p(options_in(dir2));
    train(&p, 3);
  }
  EXPECT_EQ(read_all(dir / "rank0" / "diff.log"), read_all(dir2 / "rank0" / "diff.log"));
}

TEST(Probe, EveryAndKindsSelectWhatIsRecorded) {
  auto dir = fresh_dir("every");
  auto o = options_in(dir);
  o.every = 2;
  o.kinds = probe::KindSet::parse("grad,scalar");
  {
    probe::Probe p(o);
    train(&p, 4);
  }
  std::set<std::int64_t> steps;
  for (const auto& r : read_records(dir / "rank0" / "diff.log")) {
    steps.insert(r.step);
    EXPECT_TRUE(r.kind == probe::Kind::grad || r.kind == probe::Kind::scalar);
  }
  EXPECT_EQ(steps, (std::set<std::int64_t>{0, 2}));
  EXPECT_EQ(probe::KindSet::parse("-mb_grad"), probe::KindSet::all().without(probe::Kind::mb_grad));
  EXPECT_THROW(probe::KindSet::parse("grads"), std::invalid_argument);
}

// A scalar tensor's value is the one it had when recorded, even if the trainer changes the
// tensor in place before end_step (the device path copies it on the device at the call).
TEST(Probe, ScalarTensorIsTheValueAtTheCall) {
  auto dir = fresh_dir("scalar");
  {
    probe::Probe p(options_in(dir));
    // float64: no conversion copy to hide behind
    at::Tensor loss = at::scalar_tensor(0.25, at::kDouble);
    p.scalar("loss", loss);
    loss.add_(1);
    p.scalar("grad_norm", at::full({1, 1}, 3.0, at::kDouble));
    p.scalar("lr", 1e-3);
    EXPECT_THROW(p.scalar("bad", at::ones({2})), c10::Error);
    p.end_step();
  }
  std::map<std::string, double> value;
  for (const auto& r : read_records(dir / "rank0" / "diff.log")) value[r.name] = r.value;
  EXPECT_EQ(value,
            (std::map<std::string, double>{{"loss", 0.25}, {"grad_norm", 3.0}, {"lr", 1e-3}}));
}

// The numprobe::tap operator, called through the dispatcher as a compiled graph calls it,
// records what probe::tap records (a shard, a partial sum) and marks its step as compiled.
TEST(Probe, TheTapOperatorRecordsAsTapDoesAndMarksItsStepCompiled) {
  auto dir = fresh_dir("tap_operator");
  const auto op = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("numprobe::tap", "")
                      .typed<void(c10::string_view, const at::Tensor&, c10::IntArrayRef,
                                  c10::IntArrayRef, std::int64_t, std::int64_t)>();
  const at::Tensor t = at::arange(6, at::kFloat).reshape({2, 3});
  {
    probe::Probe p(options_in(dir));
    p.begin_step(0);
    p.tap("eager", t);
    p.end_step();
    p.begin_step(1);
    op.call("whole", t, {}, {}, 0, 1);
    op.call("shard", t, {4, 3}, {2, 0}, 0, 1);
    op.call("summand", t, {}, {}, 1, 2);
    // nothing
    op.call("meta", at::empty({2, 3}, at::TensorOptions().device(at::kMeta)), {}, {}, 0, 1);
    p.end_step();
  }
  std::map<std::string, probe::Record> taps;
  for (const auto& r : read_records(dir / "rank0" / "diff.log")) taps[r.name] = r;
  ASSERT_EQ(taps.size(), 4u);
  EXPECT_EQ(taps["whole"].stats.hash, taps["eager"].stats.hash);
  EXPECT_EQ(taps["shard"].stats.shard.offset, (std::vector<std::int64_t>{2, 0}));
  EXPECT_EQ(taps["summand"].stats.partial.index, 1);
  EXPECT_EQ(taps["summand"].stats.partial.count, 2);
  probe::LogReader reader(dir / "rank0" / "diff.log");
  while (reader.next()) {
  }
  EXPECT_FALSE(reader.step_compiled(0));  // the eager tap
  EXPECT_TRUE(reader.step_compiled(1));
}

// An MoE expert that received no tokens: every tensor it sees has no elements, and one of its
// parameters has none either.
struct IdleExpertImpl : torch::nn::Module {
  torch::Tensor w, empty;
  IdleExpertImpl() {
    w = register_parameter("w", torch::randn({4, 5}));
    empty = register_parameter("empty", torch::randn({0, 5}));
  }
  torch::Tensor forward(torch::Tensor tokens) {  // [0, 4]
    probe::tap("routed", tokens);
    probe::tap("routed.view", tokens.t().narrow(0, 1, 2));  // [2, 0], a view
    probe::tap("scores", torch::zeros({3, 0, 2}));
    probe::tap("w.none", w.narrow(0, 1, 0));       // a 0-row slice of [4, 5]
    return torch::cat({tokens.matmul(w), empty});  // [0, 5]
  }
};
TORCH_MODULE(IdleExpert);

TEST(Probe, ZeroElementTensorsAreRecordedForEveryKindAndOption) {
  for (bool torch_hash : {false, true})
    for (const char* kinds : {"all", "-mb_grad", "tap,grad,scalar"}) {
      const std::string what = std::string(torch_hash ? "torch_hash " : "") + kinds;
      auto dir = fresh_dir("empty");
      auto o = options_in(dir);
      o.torch_hash = torch_hash;
      o.kinds = probe::KindSet::parse(kinds);
      torch::manual_seed(1);
      IdleExpert expert;
      {
        probe::Probe p(o);
        p.watch(*expert, "expert.", {{"expert.empty", probe::Shard::along({6, 5}, 0, 6)}});
        for (int step = 0; step < 2; ++step) {
          for (int mb = 0; mb < 2; ++mb) {
            auto out = p.forward(mb, expert, torch::empty({0, 4}));
            p.backward(mb, out.sum());
            p.scalar("tokens", torch::empty({0}));
            p.record(probe::Kind::tap, "shard", mb, torch::empty({0, 5}),
                     probe::Shard::along({4, 5}, 0, 4));
          }
          p.end_step();
        }
      }
      std::map<probe::Kind, int> count;
      for (const auto& r : read_records(dir / "rank0" / "diff.log")) {
        ++count[r.kind];
        if (r.kind == probe::Kind::rng) continue;
        const std::string name = what + " " + std::string(probe::kind_name(r.kind)) + " " + r.name;
        ASSERT_EQ(r.state, probe::Record::State::tensor) << name;
        if (r.stats.numel() != 0) continue;  // w's gradients
        EXPECT_TRUE(r.stats.supported()) << name;
        EXPECT_EQ(r.stats.hash, 0u) << name;
        EXPECT_EQ(r.stats.norm, 0.0) << name;
        EXPECT_TRUE(std::isnan(r.stats.min) && std::isnan(r.stats.max) && std::isnan(r.stats.mean))
            << name;
        EXPECT_EQ(r.stats.dtype, "float32") << name;
        EXPECT_EQ(r.stats.torch_hash, torch_hash ? std::optional<std::uint64_t>(0) : std::nullopt)
            << name;
        if (r.name == "expert.empty") {
          EXPECT_EQ(r.stats.shard, probe::Shard::along({6, 5}, 0, 6)) << name;
        }
      }
      const probe::KindSet set = probe::KindSet::parse(kinds);
      auto expected = [&](probe::Kind k, int n) { return set.contains(k) ? n : 0; };
      EXPECT_EQ(count[probe::Kind::rng], expected(probe::Kind::rng, 4)) << what;
      EXPECT_EQ(count[probe::Kind::input], expected(probe::Kind::input, 4)) << what;
      EXPECT_EQ(count[probe::Kind::output], expected(probe::Kind::output, 4)) << what;
      EXPECT_EQ(count[probe::Kind::tap], expected(probe::Kind::tap, 4 * 5)) << what;
      EXPECT_EQ(count[probe::Kind::output_grad], expected(probe::Kind::output_grad, 4)) << what;
      EXPECT_EQ(count[probe::Kind::mb_grad], expected(probe::Kind::mb_grad, 4 * 2)) << what;
      EXPECT_EQ(count[probe::Kind::grad], expected(probe::Kind::grad, 2 * 2)) << what;
      EXPECT_EQ(count[probe::Kind::scalar], expected(probe::Kind::scalar, 4)) << what;
    }
}

// A full disk (a tmpfs of 16 KiB, or a file-size limit where no tmpfs can be mounted) under the
// default on_error: the error is reported once on stderr with the path and the reason, recording
// stops, training goes on undisturbed, and every step the log keeps is complete and readable.
TEST(Probe, AFullDiskStopsRecordingButNotTraining) {
  const auto undisturbed = train(nullptr, 6);
  for (auto kind : test_support::SmallFileSystem::kinds()) {
    const std::string what = test_support::SmallFileSystem::name(kind);
    test_support::SmallFileSystem fs("full_disk", kind, 16 * 1024);
    ASSERT_TRUE(fs.ready()) << what;
    std::vector<torch::Tensor> params;
    std::filesystem::path log;
    testing::internal::CaptureStderr();
    {
      probe::Probe p(options_in(fs.dir() / "run"));
      log = p.log_path();
      EXPECT_NO_THROW(params = train(&p, 6)) << what;
      EXPECT_FALSE(p.enabled()) << what;
    }
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_EQ(params.size(), undisturbed.size());
    for (std::size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(params[i].equal(undisturbed[i])) << what;
    EXPECT_NE(err.find(log.string()), std::string::npos) << what << ": " << err;
    EXPECT_NE(err.find(fs.expected_reason()), std::string::npos) << what << ": " << err;
    EXPECT_EQ(err.find("numprobe"), err.rfind("numprobe: cannot write"))
        << what << ": reported more than once: " << err;
    // The log: whole steps 0..k-1 (k >= 1), no partial one, and marked as cut short.
    probe::LogReader reader(log);
    std::set<std::int64_t> steps;
    std::map<std::int64_t, int> records;
    while (auto r = reader.next()) {
      steps.insert(r->step);
      ++records[r->step];
    }
    ASSERT_FALSE(steps.empty()) << what;
    EXPECT_LT(*steps.rbegin(), 5) << what;
    EXPECT_EQ(static_cast<std::int64_t>(steps.size()), *steps.rbegin() + 1) << what;
    for (const auto& [step, n] : records)
      EXPECT_EQ(n, records.begin()->second) << what << " step " << step;
    EXPECT_TRUE(reader.truncated()) << what;
    EXPECT_FALSE(reader.unterminated()) << what;
  }
}

// A sparse=true embedding's gradient is a sparse COO tensor (uncoalesced: one row per token,
// repeated ids repeated): logged with its dense shape and compared as its dense equivalent, it
// equals the gradient of the same embedding with sparse=false.
TEST(Probe, SparseEmbeddingGradientIsLoggedAsItsDenseEquivalent) {
  auto dir = fresh_dir("sparse_embedding");
  torch::manual_seed(4);
  torch::nn::Embedding sparse(torch::nn::EmbeddingOptions(50, 8).sparse(true));
  torch::nn::Embedding dense(torch::nn::EmbeddingOptions(50, 8));
  {
    torch::NoGradGuard no_grad;
    dense->weight.copy_(sparse->weight);
  }
  auto o = options_in(dir);
  o.torch_hash = true;
  {
    probe::Probe p(o);
    p.watch(*sparse, "sparse.");
    p.watch(*dense, "dense.");
    // Ids repeat within a microbatch, not across: summing a row's repeats is then exact in any
    // order, so the sparse and dense sums agree bit for bit.
    const auto ids = torch::tensor({{3, 7, 3, 49}, {0, 12, 12, 20}}, torch::kLong);
    for (int mb = 0; mb < 2; ++mb) {
      p.backward(mb, (sparse(ids[mb]) * (mb + 1.5)).pow(2).sum());
      p.backward(mb, (dense(ids[mb]) * (mb + 1.5)).pow(2).sum());
    }
    ASSERT_TRUE(sparse->weight.grad().is_sparse());
    p.end_step();
  }
  std::map<std::string, probe::Record> by_name;
  for (const auto& r : read_records(dir / "rank0" / "diff.log"))
    by_name[std::string(probe::kind_name(r.kind)) + " " + r.name + " " +
            std::to_string(r.microbatch.value_or(-1))] = r;
  int compared = 0;
  for (const auto& [key, r] : by_name) {
    if (key.find(" sparse.") == std::string::npos) continue;
    std::string twin_key = key;
    twin_key.replace(twin_key.find(" sparse."), 8, " dense.");
    const probe::Record& twin = by_name.at(twin_key);
    EXPECT_TRUE(r.stats.supported()) << key << ": " << r.stats.unsupported.value_or("");
    EXPECT_EQ(r.stats.shape, (std::vector<std::int64_t>{50, 8})) << key;
    EXPECT_EQ(r.stats.hash, twin.stats.hash) << key;
    EXPECT_EQ(r.stats.norm, twin.stats.norm) << key;
    EXPECT_EQ(r.stats.min, twin.stats.min) << key;
    EXPECT_EQ(r.stats.max, twin.stats.max) << key;
    EXPECT_EQ(r.stats.mean, twin.stats.mean) << key;
    EXPECT_EQ(r.stats.torch_hash, twin.stats.torch_hash) << key;
    EXPECT_EQ(r.stats.nnz, r.kind == probe::Kind::grad ? 6 : 3) << key;  // rows, once coalesced
    EXPECT_FALSE(twin.stats.nnz) << key;
    ++compared;
  }
  EXPECT_EQ(compared, 3);  // two mb_grad records and the grad
}

TEST(Probe, EnvironmentConfiguresTheProbe) {
  ::setenv("PROBE_EVERY", "3", 1);
  ::setenv("PROBE_KINDS", "-rng", 1);
  ::setenv("PROBE_ENABLE", "0", 1);
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  auto o = probe::ProbeOptions::from_env();
  EXPECT_EQ(o.every, 3);
  EXPECT_FALSE(o.kinds.contains(probe::Kind::rng));
  EXPECT_FALSE(o.enabled);
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.world_size, 4);
  ::setenv("PROBE_EVERY", "often", 1);
  try {
    probe::ProbeOptions::from_env();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("PROBE_EVERY='often'"), std::string::npos);
  }
  ::setenv("PROBE_EVERY", "3", 1);
  ::setenv("PROBE_KINDS", "mb_grads", 1);
  try {
    probe::ProbeOptions::from_env();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("PROBE_KINDS='mb_grads': unknown record kind"),
              std::string::npos)
        << e.what();
  }
  for (const char* v : {"PROBE_EVERY", "PROBE_KINDS", "PROBE_ENABLE", "RANK", "WORLD_SIZE"})
    ::unsetenv(v);
}

// RANK counts from 0; WORLD_SIZE and PROBE_EVERY from 1: a zero there is refused, naming it.
TEST(Probe, EnvironmentRefusesZeroWhereACountMustBePositive) {
  const auto error_of = [](const char* var, const char* value) -> std::string {
    ::setenv(var, value, 1);
    std::string what = "accepted";
    try {
      probe::ProbeOptions::from_env();
    } catch (const std::invalid_argument& e) {
      what = e.what();
    }
    ::unsetenv(var);
    return what;
  };
  ::setenv("RANK", "0", 1);
  EXPECT_EQ(probe::ProbeOptions::from_env().rank, 0);
  ::unsetenv("RANK");
  EXPECT_NE(error_of("WORLD_SIZE", "0").find("WORLD_SIZE='0' is not an integer from 1"),
            std::string::npos);
  EXPECT_NE(error_of("PROBE_EVERY", "0").find("PROBE_EVERY='0' is not an integer from 1"),
            std::string::npos);
  EXPECT_NE(error_of("RANK", "-1").find("RANK='-1' is not an integer from 0"), std::string::npos);
  EXPECT_NE(error_of("RANK", "3000000000").find("RANK='3000000000'"), std::string::npos);
  EXPECT_NE(error_of("WORLD_SIZE", " 4").find("WORLD_SIZE=' 4'"), std::string::npos);
}

TEST(Probe, DisabledProbeWritesNothingAndTapIsANoOp) {
  auto dir = fresh_dir("disabled") / "run";
  auto o = options_in(dir);
  o.enabled = false;
  probe::Probe p(o);
  EXPECT_FALSE(p.enabled());
  train(&p, 1);
  probe::tap("anything", torch::ones({1}));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(Probe, UnwritableRunDirectoryIsAnErrorNamingThePath) {
  auto blocker = fresh_dir("unwritable") / "blocker";
  std::ofstream(blocker.string()) << "not a directory";
  auto o = options_in(blocker / "run");
  o.on_error = probe::ProbeOptions::OnError::throw_error;
  try {
    probe::Probe p(o);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(blocker.string()), std::string::npos) << e.what();
  }
  // By default the trainer goes on without a log, told why once.
  testing::internal::CaptureStderr();
  {
    probe::Probe p(options_in(blocker / "run"));
    EXPECT_FALSE(p.enabled());
    EXPECT_NE(p.log_error().find(blocker.string()), std::string::npos) << p.log_error();
    p.tap("x", torch::ones({2}));
    p.end_step();
    EXPECT_EQ(p.step(), 1);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(blocker.string()), std::string::npos) << err;
  EXPECT_NE(err.find("no log was written"), std::string::npos) << err;
  std::filesystem::remove(blocker);
}

// PROBE_ON_ERROR=throw keeps a failing log's error for tests and CI: end_step() throws it,
// naming the file and the reason, and so does every later end_step(); the log keeps its
// complete steps and says why the rest is missing.
TEST(Probe, OnErrorThrowThrowsTheLogsErrorFromEndStep) {
  ::setenv("PROBE_ON_ERROR", "throw", 1);
  auto o = probe::ProbeOptions::from_env();
  ::setenv("PROBE_ON_ERROR", "explode", 1);
  EXPECT_THROW(probe::ProbeOptions::from_env(), std::invalid_argument);
  ::unsetenv("PROBE_ON_ERROR");
  EXPECT_EQ(o.on_error, probe::ProbeOptions::OnError::throw_error);
  EXPECT_EQ(probe::ProbeOptions::from_env().on_error, probe::ProbeOptions::OnError::report);
  for (auto kind : test_support::SmallFileSystem::kinds()) {
    const std::string what = test_support::SmallFileSystem::name(kind);
    test_support::SmallFileSystem fs("throw", kind, 16 * 1024);
    ASSERT_TRUE(fs.ready()) << what;
    auto options = options_in(fs.dir() / "run");
    options.on_error = probe::ProbeOptions::OnError::throw_error;
    probe::Probe p(options);
    torch::manual_seed(2);
    Net net;
    p.watch(*net);
    std::int64_t failed = -1;
    for (int step = 0; step < 10 && failed < 0; ++step) {
      for (int mb = 0; mb < 2; ++mb) p.backward(mb, p.forward(mb, net, torch::randn({4, 8})).sum());
      try {
        p.end_step();
      } catch (const probe::LogWriteError& e) {
        failed = step;
        EXPECT_NE(std::string(e.what()).find(p.log_path().string()), std::string::npos)
            << what << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(fs.expected_reason()), std::string::npos)
            << what << ": " << e.what();
      }
    }
    ASSERT_GT(failed, 0) << what;
    EXPECT_THROW(p.end_step(), probe::LogWriteError) << what;
    probe::LogReader reader(p.log_path());
    std::int64_t last = -1;
    while (auto r = reader.next()) last = r->step;
    EXPECT_EQ(last, failed - 1) << what;
    ASSERT_TRUE(reader.stopped()) << what;
    EXPECT_EQ(reader.stopped()->step, failed) << what;
  }
}

TEST(Probe, RanksOfOneLaunchAgreeOnTheNextFreeRunDirectory) {
  auto root = fresh_dir("nextfree");
  ::setenv("PROBE_RUN_ID", "launch a", 1);  // a space: the stamp is read whole
  std::filesystem::path a0, a1, b0;
  {
    probe::ProbeOptions o;
    o.output_root = root;
    o.rank = 0;
    o.world_size = 2;
    probe::Probe rank0(o);
    o.rank = 1;
    probe::Probe rank1(o);
    a0 = rank0.log_path();
    a1 = rank1.log_path();
  }
  ::setenv("PROBE_RUN_ID", "launch-b", 1);
  {
    probe::ProbeOptions o;
    o.output_root = root;
    probe::Probe p(o);
    b0 = p.log_path();
  }
  // A directory without a stamp made long ago (by hand, by another tool) is skipped at once.
  std::filesystem::create_directories(root / "2");
  std::filesystem::last_write_time(
      root / "2", std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  ::setenv("PROBE_RUN_ID", "launch-c", 1);
  std::filesystem::path c0;
  const auto start = std::chrono::steady_clock::now();
  {
    probe::ProbeOptions o;
    o.output_root = root;
    probe::Probe p(o);
    c0 = p.log_path();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  ::unsetenv("PROBE_RUN_ID");
  EXPECT_EQ(c0, root / "3" / "rank0" / "diff.log");
  EXPECT_EQ(a0, root / "0" / "rank0" / "diff.log");
  EXPECT_EQ(a1, root / "0" / "rank1" / "diff.log");
  EXPECT_EQ(b0, root / "1" / "rank0" / "diff.log");
}

TEST(Probe, ShardedParameterRecordsCarryTheirShard) {
  auto dir = fresh_dir("shard");
  torch::manual_seed(0);
  auto full = torch::randn({8, 3});
  auto local = full.narrow(0, 4, 4).clone().set_requires_grad(true);
  probe::Probe p(options_in(dir));
  p.watch_parameter("w", local, probe::Shard::along({8, 3}, 0, 4));
  (local * 2).sum().backward();
  p.end_step();
  bool seen = false;
  for (const auto& r : read_records(p.log_path()))
    if (r.kind == probe::Kind::grad) {
      EXPECT_EQ(r.stats.shard, probe::Shard::along({8, 3}, 0, 4));
      seen = true;
    }
  EXPECT_TRUE(seen);
}

// An expert's gradient under expert parallelism: one backward covers several microbatches, and
// each mb_grad record says which, the first as its microbatch; a shard may be a summand too.
TEST(Probe, MbGradRecordsCarryTheMicrobatchesTheyCover) {
  auto dir = fresh_dir("covers");
  auto w = torch::ones({2, 3}).set_requires_grad(true);
  probe::Probe p(options_in(dir));
  p.watch_parameter("experts.w1", w, probe::Shard::along({4, 3}, 0, 2), probe::Partial{1, 2},
                    [](std::int64_t mb) { return std::vector<std::int64_t>{mb % 2, mb % 2 + 2}; });
  p.begin_step(0);
  p.backward(3, (w * 2).sum());
  p.end_step();
  bool seen = false;
  for (const auto& r : read_records(p.log_path()))
    if (r.kind == probe::Kind::mb_grad) {
      EXPECT_EQ(r.microbatch, 1);
      EXPECT_EQ(r.covers, (std::vector<std::int64_t>{1, 3}));
      EXPECT_EQ(r.stats.shard, probe::Shard::along({4, 3}, 0, 2));
      EXPECT_EQ(r.stats.partial, (probe::Partial{1, 2}));
      seen = true;
    }
  EXPECT_TRUE(seen);
}

TEST(Probe, RecordRefusesCoversWithoutItsOwnMicrobatch) {
  auto dir = fresh_dir("covers_bad");
  probe::Probe p(options_in(dir));
  const auto t = torch::ones({2});
  EXPECT_THROW(p.record(probe::Kind::mb_grad, "e", 1, t, {}, {}, {0, 2}), std::invalid_argument);
  EXPECT_THROW(p.record(probe::Kind::mb_grad, "e", 1, t, {}, {}, {1}), std::invalid_argument);
  EXPECT_THROW(p.record(probe::Kind::mb_grad, "e", 1, t, {}, {}, {3, 1}), std::invalid_argument);
  EXPECT_NO_THROW(p.record(probe::Kind::mb_grad, "e", 3, t, {}, {}, {1, 3}));
}

// The hashes a probe wrote, recomputed by Python's xxhash package from the tensors' bytes.
TEST(Probe, LoggedHashesMatchPythonXxhashReference) {
  const std::string python = NUMPROBE_PYTHON;
  if (python.empty())
    GTEST_SKIP() << "no Python configured: configure with -DNUMPROBE_PYTHON=<python with the "
                    "xxhash package> (scripts/setup.sh passes the project venv's)";
  if (std::system((python + " -c 'import xxhash' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << python << " cannot import the xxhash package (pip install xxhash)";
  auto dir = fresh_dir("python");
  auto dump = dir / "tensors";
  std::filesystem::create_directories(dump);
  torch::manual_seed(11);
  auto full = torch::randn({6, 5});
  std::vector<std::tuple<std::string, torch::Tensor, probe::Shard>> cases = {
      {"f32", torch::randn({3, 7}), {}},
      {"bf16", torch::randn({33}).to(torch::kBFloat16), {}},
      {"f16", torch::randn({2, 2, 3}).to(torch::kHalf), {}},
      {"f64", torch::randn({9}, torch::kDouble), {}},
      {"i64", torch::randint(-1000, 1000, {17}), {}},
      {"u8", torch::randint(0, 255, {10}).to(torch::kByte), {}},
      {"bool", torch::randint(0, 2, {12}).to(torch::kBool), {}},
      {"transposed", full.t(), {}},
      {"row_shard", full.narrow(0, 2, 3), probe::Shard::along({6, 5}, 0, 2)},
      {"block_shard", full.narrow(0, 1, 2).narrow(1, 3, 2), probe::Shard{{6, 5}, {1, 3}}},
  };
  probe::Probe p(options_in(dir));
  for (const auto& [name, t, shard] : cases) {
    p.tap(name, t, shard);
    auto c = t.contiguous();
    std::ofstream(dump / (name + ".bin"), std::ios::binary)
        .write(static_cast<const char*>(c.const_data_ptr()),
               static_cast<std::streamsize>(c.nbytes()));
    auto join = [](at::IntArrayRef v) {
      std::string s;
      for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
      return s.empty() ? std::string(",") : s;
    };
    std::vector<std::int64_t> offset(static_cast<std::size_t>(t.dim()), 0);
    auto global = shard.empty() ? t.sizes().vec() : shard.global_shape;
    if (!shard.empty()) offset = shard.offset;
    std::ofstream(dump / (name + ".meta"))
        << c.element_size() << " " << join(global) << " " << join(offset) << " " << join(t.sizes());
  }
  p.end_step();
  const std::string command = python + " " + NUMPROBE_SOURCE_DIR +
                              "/tests/python/recompute_hashes.py " + p.log_path().string() + " " +
                              dump.string();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

TEST(Probe, AKeyRecordedAgainInAStepGetsAnOccurrenceSuffix) {
  auto dir = fresh_dir("occurrence");
  {
    probe::Probe p(options_in(dir));
    p.tap("block.out", torch::ones({2}));  // a tap every layer of a stack uses
    p.tap("block.out", torch::zeros({2}));
    p.tap("block.out", torch::ones({3}));
    p.scalar("loss", 1.0);  // a per-microbatch loss under one name
    p.scalar("loss", 2.0);
    p.end_step();
    p.tap("block.out", torch::ones({2}));  // the count starts again each step
    p.end_step();
  }
  std::vector<std::pair<std::int64_t, std::string>> names;
  for (const auto& r : read_records(dir / "rank0" / "diff.log")) names.emplace_back(r.step, r.name);
  EXPECT_EQ(names, (std::vector<std::pair<std::int64_t, std::string>>{{0, "block.out"},
                                                                      {0, "block.out#1"},
                                                                      {0, "block.out#2"},
                                                                      {0, "loss"},
                                                                      {0, "loss#1"},
                                                                      {1, "block.out"}}));
}

TEST(Probe, WatchingAgainRecordsEachParameterOnceAndARebuiltModelReplacesTheOld) {
  auto dir = fresh_dir("rewatch");
  torch::manual_seed(1);
  torch::nn::Linear old_model(3, 2), new_model(3, 2);
  {
    probe::Probe p(options_in(dir));
    p.watch(*old_model);
    p.watch(*old_model);
    p.forward(0, old_model, torch::ones({1, 3})).sum().backward();
    p.end_step();
    p.watch(*new_model);  // same names, new tensors
    p.forward(0, new_model, torch::ones({1, 3})).sum().backward();
    old_model->forward(torch::ones({1, 3})).sum().backward();  // no longer watched
    p.end_step();
  }
  std::map<std::pair<std::int64_t, std::string>, int> count;
  for (const auto& r : read_records(dir / "rank0" / "diff.log"))
    if (r.kind == probe::Kind::mb_grad || r.kind == probe::Kind::grad)
      count[{r.step, std::string(probe::kind_name(r.kind)) + " " + r.name}]++;
  for (const auto& [key, n] : count) EXPECT_EQ(n, 1) << key.second << " at step " << key.first;
  EXPECT_EQ(count.size(), 8u);  // weight and bias, mb_grad and grad, 2 steps
  EXPECT_EQ(count.count({1, "mb_grad weight#1"}), 0u);
}

// A head tied to its embedding: one tensor registered under two names.
struct TiedLmImpl : torch::nn::Module {
  torch::Tensor w;
  TiedLmImpl() {
    w = register_parameter("embed", torch::randn({6, 4}));
    register_parameter("head", w);
  }
  torch::Tensor forward(torch::Tensor ids) { return torch::embedding(w, ids).matmul(w.t()); }
};
TORCH_MODULE(TiedLm);

TEST(Probe, ATiedParameterIsRecordedOnceWithItsOtherNames) {
  auto dir = fresh_dir("tied");
  torch::manual_seed(2);
  TiedLm model;
  {
    probe::Probe p(options_in(dir));
    p.watch(*model);
    p.tie("output", "embed");
    p.tie("output", "embed");  // again: harmless
    p.begin_step(0);
    p.forward(0, model, torch::tensor({1, 2, 3})).sum().backward();
    p.end_step();
    EXPECT_THROW(p.tie("embed", "embed"), std::invalid_argument);
    EXPECT_THROW(p.tie("", "embed"), std::invalid_argument);
  }
  std::map<std::string, std::vector<std::string>> params;
  int grads = 0;
  for (const auto& r : read_records(dir / "rank0" / "diff.log")) {
    if (r.kind == probe::Kind::param) params[r.name] = r.tied;
    grads += r.kind == probe::Kind::grad;
  }
  EXPECT_EQ(params.size(), 1u);
  EXPECT_EQ(params["embed"], (std::vector<std::string>{"head", "output"}));
  EXPECT_EQ(grads, 1);  // one parameter, one .grad: the sum of both uses
}

TEST(Probe, WhatTheLogCannotHoldIsRefusedWhereItIsPassed) {
  auto dir = fresh_dir("refused");
  probe::Probe p(options_in(dir));
  torch::nn::Linear lin(3, 2);
  EXPECT_THROW(p.begin_step(-1), std::invalid_argument);
  EXPECT_THROW(p.forward(-1, lin, torch::ones({1, 3})), std::invalid_argument);
  EXPECT_THROW(p.set_backward_microbatch(-2), std::invalid_argument);
  EXPECT_THROW(p.scalar("", 1.0), std::invalid_argument);
  EXPECT_THROW(p.tap("", torch::ones({1})), std::invalid_argument);
  try {
    p.watch(*lin, "", {{"wieght", probe::Shard::along({4, 3}, 0, 2)}});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'wieght', which is no parameter"), std::string::npos)
        << e.what();
  }
  p.begin_step(5);
  p.end_step();
  try {
    p.begin_step(3);  // a resumed run reusing the log
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("begin_step(3) after step 5 ended"), std::string::npos)
        << e.what();
  }
  p.begin_step(7);  // forward is fine
  p.end_step();
}

namespace {
struct TwoHeadsImpl : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr};
  TwoHeadsImpl() {
    a = register_module("a", torch::nn::Linear(3, 2));
    b = register_module("b", torch::nn::Linear(3, 1));
  }
  std::tuple<torch::Tensor, double, torch::Tensor> forward(std::vector<torch::Tensor> xs) {
    return {a(xs[0]), 0.5, b(xs[1])};
  }
};
TORCH_MODULE(TwoHeads);
}  // namespace

TEST(Probe, TensorsInsideVectorAndTupleArgumentsAndResultsAreRecorded) {
  auto dir = fresh_dir("tuple");
  {
    probe::Probe p(options_in(dir));
    TwoHeads model;
    auto [ya, aux, yb] =
        p.forward(0, model, std::vector<torch::Tensor>{torch::ones({1, 3}), torch::zeros({1, 3})});
    (ya.sum() + yb.sum() * aux).backward();
    p.end_step();
  }
  std::vector<std::string> names;
  for (const auto& r : read_records(dir / "rank0" / "diff.log"))
    if (r.kind == probe::Kind::input || r.kind == probe::Kind::output ||
        r.kind == probe::Kind::output_grad)
      names.push_back(std::string(probe::kind_name(r.kind)) + " " + r.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"input model.0", "input model.1", "output model.0",
                                             "output model.1", "output_grad model.0",
                                             "output_grad model.1"}));
}

TEST(Probe, AutogradHooksThatOutliveTheProbeDoNothing) {
  auto dir = fresh_dir("outlive");
  torch::nn::Linear lin(3, 2);
  torch::Tensor y;
  {
    probe::Probe p(options_in(dir));
    p.watch(*lin);
    y = p.forward(0, lin, torch::ones({1, 3}));  // an output_grad hook on y
  }
  y.sum().backward();  // runs y's hook after the probe is gone
  EXPECT_TRUE(lin->weight.grad().defined());
}

namespace {
struct ReturnsItsParameterImpl : torch::nn::Module {
  torch::Tensor w;
  ReturnsItsParameterImpl() { w = register_parameter("w", torch::ones({2})); }
  torch::Tensor forward(torch::Tensor) { return w; }
};
TORCH_MODULE(ReturnsItsParameter);
}  // namespace

TEST(Probe, ALeafOutputGetsNoHookThatWouldOutliveItsForward) {
  auto dir = fresh_dir("leafout");
  {
    probe::Probe p(options_in(dir));
    ReturnsItsParameter model;
    for (int step = 0; step < 3; ++step) {
      p.forward(0, model, torch::ones({1})).sum().backward();
      p.end_step();
    }
  }
  int output_grads = 0;
  for (const auto& r : read_records(dir / "rank0" / "diff.log"))
    output_grads += r.kind == probe::Kind::output_grad;
  EXPECT_EQ(output_grads, 0);
}
