// Kinds `param` (a parameter's value at begin_step) and `optim` (Probe::watch_optimizer: the
// optimizer's state after the update), with LibTorch's built-in optimizers and a registered one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "probe/log_io.h"
#include "probe/optimizer_state.h"
#include "probe/probe.h"
#include "probe/tensor_stats.h"
#include "test_util.h"
#include "torch_test_util.h"

namespace {

// directories named optim_*, apart from probe_test.cpp's in the same binary
using test_util::fresh_dir;
using test_util::options_in;

// (step, kind name, record name) -> record
using Log = std::map<std::tuple<std::int64_t, std::string, std::string>, probe::Record>;
Log read_log(const std::filesystem::path& dir) {
  probe::LogReader reader(dir / "rank0" / "diff.log");
  Log log;
  while (auto r = reader.next())
    log[std::make_tuple(r->step, std::string(probe::kind_name(r->kind)), r->name)] = *r;
  return log;
}

const probe::Record& rec(const Log& log, std::int64_t step, const std::string& kind,
                         const std::string& name) {
  static const probe::Record missing;
  const auto it = log.find({step, kind, name});
  EXPECT_TRUE(it != log.end()) << kind << " " << name << " at step " << step;
  return it == log.end() ? missing : it->second;
}

std::uint64_t hash_of(const torch::Tensor& t, const probe::Shard& shard = {}) {
  return probe::tensor_stats(t, shard).hash;
}

// One step of a linear layer under `optimizer`, watched by a probe in `dir`; returns the state
// tensors' hashes as the optimizer holds them after the update.
template <class Optimizer, class Options>
Log one_step(const std::string& dir_name, Options options) {
  auto dir = fresh_dir("optim_" + dir_name);
  torch::manual_seed(5);
  torch::nn::Linear lin(3, 2);
  Optimizer opt(lin->parameters(), options);
  {
    probe::Probe p(options_in(dir));
    p.watch(*lin);
    p.watch_optimizer(opt);
    for (int step = 0; step < 2; ++step) {
      p.begin_step(step);
      opt.zero_grad();
      p.forward(0, lin, torch::ones({4, 3})).pow(2).sum().backward();
      opt.step();
      p.end_step();
    }
  }
  return read_log(dir);
}

}  // namespace

TEST(ParamRecords, AreTheValuesAtBeginStepBeforeTheUpdate) {
  auto dir = fresh_dir("optim_param");
  torch::manual_seed(2);
  torch::nn::Linear lin(3, 2);
  const auto initial = lin->weight.detach().clone();
  torch::Tensor updated;
  {
    probe::Probe p(options_in(dir));
    p.watch(*lin);
    p.begin_step(0);
    {
      torch::NoGradGuard no_grad;
      lin->weight.add_(1.0);  // the update, after the step's record was taken
    }
    p.end_step();
    updated = lin->weight.detach().clone();
    p.begin_step(1);
    p.end_step();
  }
  auto log = read_log(dir);
  ASSERT_EQ(log.count({0, "param", "weight"}), 1u);
  EXPECT_EQ(rec(log, 0, "param", "weight").stats.hash, hash_of(initial));
  EXPECT_EQ(rec(log, 1, "param", "weight").stats.hash, hash_of(updated));
  EXPECT_NE(hash_of(initial), hash_of(updated));
  EXPECT_EQ(log.count({0, "param", "bias"}), 1u);
}

TEST(ParamRecords, ShardedParameterRecordsCarryTheShard) {
  auto dir = fresh_dir("optim_param_shard");
  auto shard_rows = torch::arange(8, torch::kFloat).reshape({2, 4}).requires_grad_(true);
  const auto shard = probe::Shard::along({6, 4}, 0, 2);
  {
    probe::Probe p(options_in(dir));
    p.watch_parameter("w", shard_rows, shard);
    p.begin_step(0);
    p.end_step();
  }
  auto log = read_log(dir);
  const auto& r = rec(log, 0, "param", "w");
  EXPECT_EQ(r.stats.shard, shard);
  EXPECT_EQ(r.stats.hash, hash_of(shard_rows, shard));  // seeded by global indices
}

TEST(OptimRecords, AdamWithAmsgradRecordsItsThreeMomentsAndStep) {
  auto log = one_step<torch::optim::Adam>("adam", torch::optim::AdamOptions(0.01).amsgrad(true));
  for (const auto* state : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
    EXPECT_EQ(log.count({0, "optim", std::string("weight.") + state}), 1u) << state;
    EXPECT_EQ(log.count({1, "optim", std::string("bias.") + state}), 1u) << state;
  }
  EXPECT_EQ(rec(log, 0, "optim", "weight.step").value, 1);
  EXPECT_EQ(rec(log, 1, "optim", "weight.step").value, 2);
  EXPECT_EQ(rec(log, 1, "optim", "weight.step").state, probe::Record::State::scalar);
}

TEST(OptimRecords, AdamWWithoutAmsgradLeavesTheUnusedMomentOut) {
  auto log = one_step<torch::optim::AdamW>("adamw", torch::optim::AdamWOptions(0.01));
  EXPECT_EQ(log.count({0, "optim", "weight.exp_avg"}), 1u);
  EXPECT_EQ(log.count({0, "optim", "weight.exp_avg_sq"}), 1u);
  EXPECT_EQ(log.count({0, "optim", "weight.max_exp_avg_sq"}), 0u);
}

TEST(OptimRecords, SgdRmspropAndAdagradRecordTheirState) {
  auto sgd = one_step<torch::optim::SGD>("sgd", torch::optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_EQ(sgd.count({0, "optim", "weight.momentum_buffer"}), 1u);
  EXPECT_EQ(sgd.count({0, "optim", "weight.step"}), 0u);  // SGD keeps no step count
  auto rms = one_step<torch::optim::RMSprop>(
      "rmsprop", torch::optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
  for (const auto* state : {"square_avg", "momentum_buffer", "grad_avg"})
    EXPECT_EQ(rms.count({0, "optim", std::string("bias.") + state}), 1u) << state;
  EXPECT_EQ(rec(rms, 1, "optim", "bias.step").value, 2);
  auto adagrad = one_step<torch::optim::Adagrad>("adagrad", torch::optim::AdagradOptions(0.1));
  EXPECT_EQ(adagrad.count({0, "optim", "weight.sum"}), 1u);
  EXPECT_EQ(rec(adagrad, 0, "optim", "weight.step").value, 1);
}

TEST(OptimRecords, HashesAreThoseOfTheStateAfterTheUpdate) {
  auto dir = fresh_dir("optim_hash");
  torch::manual_seed(5);
  torch::nn::Linear lin(3, 2);
  torch::optim::AdamW opt(lin->parameters(), torch::optim::AdamWOptions(0.01));
  {
    probe::Probe p(options_in(dir));
    p.watch(*lin);
    p.watch_optimizer(opt);
    p.watch_optimizer(opt);  // again: harmless, recorded once
    p.begin_step(0);
    lin->forward(torch::ones({4, 3})).sum().backward();
    opt.step();
    p.end_step();
  }
  auto log = read_log(dir);
  const auto& state = static_cast<const torch::optim::AdamWParamState&>(
      *opt.state().find(lin->weight.unsafeGetTensorImpl())->second);
  EXPECT_EQ(rec(log, 0, "optim", "weight.exp_avg").stats.hash, hash_of(state.exp_avg()));
  EXPECT_EQ(rec(log, 0, "optim", "weight.exp_avg_sq").stats.hash, hash_of(state.exp_avg_sq()));
}

TEST(OptimRecords, StateOfAShardedParameterIsRecordedAsShards) {
  auto dir = fresh_dir("optim_shard");
  auto rows = torch::ones({2, 4}).requires_grad_(true);
  const auto shard = probe::Shard::along({6, 4}, 0, 4);
  torch::optim::AdamW opt(std::vector<torch::Tensor>{rows}, torch::optim::AdamWOptions(0.01));
  {
    probe::Probe p(options_in(dir));
    p.watch_parameter("w", rows, shard);
    p.watch_optimizer(opt);
    p.begin_step(0);
    rows.mutable_grad() = torch::full({2, 4}, 0.5);
    opt.step();
    p.end_step();
  }
  auto log = read_log(dir);
  EXPECT_EQ(rec(log, 0, "optim", "w.exp_avg").stats.shard, shard);
  EXPECT_EQ(rec(log, 0, "optim", "w.exp_avg_sq").stats.shard, shard);
  EXPECT_EQ(rec(log, 0, "optim", "w.step").value, 1);
}

namespace {
// An optimizer the probe does not know: plain gradient descent with a running sum of updates.
struct DriftState : torch::optim::OptimizerCloneableParamState<DriftState> {
  TORCH_ARG(torch::Tensor, drift);
};
struct DriftOptions : torch::optim::OptimizerCloneableOptions<DriftOptions> {
  double lr = 0.1;
};
class Drift : public torch::optim::Optimizer {
 public:
  explicit Drift(std::vector<torch::Tensor> params)
      : torch::optim::Optimizer(std::move(params), std::make_unique<DriftOptions>()) {}
  torch::Tensor step(LossClosure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (auto& p : param_groups_.at(0).params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state_[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto s = std::make_unique<DriftState>();
        s->drift(torch::zeros_like(p));
        slot = std::move(s);
      }
      auto& s = static_cast<DriftState&>(*slot);
      s.drift().add_(p.grad());
      p.sub_(p.grad() * 0.1);
    }
    return {};
  }
};
}  // namespace

TEST(OptimRecords, AnUnknownOptimizerClassIsAnErrorNamingItUntilAReaderIsRegistered) {
  auto dir = fresh_dir("optim_unknown");
  torch::nn::Linear lin(3, 2);
  Drift opt(lin->parameters());
  {
    probe::Probe p(options_in(dir));
    p.watch(*lin);
    try {
      p.watch_optimizer(opt);
      FAIL() << "an optimizer without a state reader must be refused";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("Drift"), std::string::npos) << what;
      EXPECT_NE(what.find("register_optimizer_state"), std::string::npos) << what;
    }
    probe::register_optimizer_state<Drift, DriftState>(
        [](const DriftState& s) { return probe::OptimizerState{{{"drift", s.drift()}}, {}}; });
    p.watch_optimizer(opt);
    p.begin_step(0);
    lin->forward(torch::ones({1, 3})).sum().backward();
    opt.step();
    p.end_step();
  }
  auto log = read_log(dir);
  EXPECT_EQ(log.count({0, "optim", "weight.drift"}), 1u);
  EXPECT_EQ(log.count({0, "optim", "bias.drift"}), 1u);
  // A disabled probe reads nothing and checks nothing.
  auto off = options_in(fresh_dir("optim_off"));
  off.enabled = false;
  probe::Probe disabled(off);
  torch::optim::LBFGS lbfgs(lin->parameters());
  EXPECT_NO_THROW(disabled.watch_optimizer(lbfgs));
}
