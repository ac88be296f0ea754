// The probe on a CUDA model: every kind is recorded through the GPU path (figures in the step's
// StatsBatch rows, one copy at end_step) and equals the CPU kernel's figures for the same
// tensors. Skips itself when no GPU is visible, so the binary also runs in CI.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "probe/log_io.h"
#include "probe/probe.h"
#include "test_util.h"

namespace {

TEST(CudaProbe, RecordsEveryKindOfACudaStepWithTheCpuKernelsHashes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = test_util::fresh_dir("cuda_probe");
  torch::manual_seed(5);
  torch::nn::Linear net(8, 4);
  net->to(torch::kCUDA);
  std::vector<torch::Tensor> inputs, losses;
  std::map<std::string, std::uint64_t> grad_hash;
  {
    probe::ProbeOptions o;
    o.run_dir = dir;
    o.rank = 0;
    o.world_size = 1;
    probe::Probe p(o);
    p.watch(*net);
    for (int mb = 0; mb < 2; ++mb) {
      inputs.push_back(torch::randn({16, 8}, torch::kCUDA));
      losses.push_back(p.forward(mb, net, inputs.back()).pow(2).mean());
      p.backward(mb, losses.back());
      p.scalar("loss", losses.back());
    }
    for (const auto& item : net->named_parameters())
      grad_hash[item.key()] = probe::tensor_stats(item.value().grad().cpu()).hash;
    p.end_step();
  }
  probe::LogReader reader(dir / "rank0" / "diff.log");
  std::map<probe::Kind, int> count;
  std::vector<double> loss_values;
  while (auto r = reader.next()) {
    ++count[r->kind];
    if (r->state == probe::Record::State::tensor) {
      EXPECT_TRUE(r->stats.supported()) << r->name << ": " << r->stats.unsupported.value_or("");
    }
    if (r->kind == probe::Kind::grad) {
      EXPECT_EQ(r->stats.hash, grad_hash.at(r->name)) << r->name;
    }
    if (r->kind == probe::Kind::input) {
      EXPECT_EQ(
          r->stats.hash,
          probe::tensor_stats(inputs.at(static_cast<std::size_t>(*r->microbatch)).cpu()).hash);
    }
    if (r->kind == probe::Kind::scalar) loss_values.push_back(r->value);
  }
  EXPECT_EQ(count[probe::Kind::rng], 4);  // per microbatch: the CPU and the input's CUDA generator
  EXPECT_EQ(count[probe::Kind::input], 2);
  EXPECT_EQ(count[probe::Kind::output], 2);
  EXPECT_EQ(count[probe::Kind::output_grad], 2);
  EXPECT_EQ(count[probe::Kind::mb_grad], 2 * 2);
  EXPECT_EQ(count[probe::Kind::grad], 2);
  ASSERT_EQ(loss_values.size(), 2U);
  for (std::size_t i = 0; i < 2; ++i)
    EXPECT_EQ(loss_values[i], static_cast<double>(losses[i].item<float>()));
  std::filesystem::remove_all(dir);
}

// An MoE expert that received no tokens, on the GPU, with the compatibility hash on: every
// kind is recorded with an empty tensor's figures, and nothing throws.
TEST(CudaProbe, ZeroElementTensorsAreRecordedForEveryKind) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = test_util::fresh_dir("cuda_empty");
  torch::manual_seed(6);
  torch::nn::Linear net(4, 5);
  net->to(torch::kCUDA);
  auto empty = torch::zeros({0, 5}, torch::kCUDA).set_requires_grad(true);
  {
    probe::ProbeOptions o;
    o.run_dir = dir;
    o.rank = 0;
    o.world_size = 1;
    o.torch_hash = true;
    probe::Probe p(o);
    p.watch(*net);
    p.watch_parameter("empty", empty, probe::Shard::along({3, 5}, 0, 3));
    for (int mb = 0; mb < 2; ++mb) {
      auto out = p.forward(mb, net, torch::empty({0, 4}, torch::kCUDA));
      p.tap("scores", torch::empty({3, 0, 2}, torch::kCUDA));
      p.backward(mb, torch::cat({out, empty}).sum());
      p.scalar("tokens", torch::empty({0}, torch::kCUDA));
    }
    p.end_step();
  }
  probe::LogReader reader(dir / "rank0" / "diff.log");
  std::map<probe::Kind, int> count;
  while (auto r = reader.next()) {
    ++count[r->kind];
    if (r->kind == probe::Kind::rng || r->stats.numel() != 0) continue;
    EXPECT_TRUE(r->stats.supported()) << r->name;
    EXPECT_EQ(r->stats.hash, 0u) << r->name;
    EXPECT_EQ(r->stats.torch_hash, std::optional<std::uint64_t>(0)) << r->name;
  }
  EXPECT_EQ(count[probe::Kind::input], 2);
  EXPECT_EQ(count[probe::Kind::output], 2);
  EXPECT_EQ(count[probe::Kind::tap], 2);
  EXPECT_EQ(count[probe::Kind::output_grad], 2);
  EXPECT_EQ(count[probe::Kind::mb_grad], 2 * 3);
  EXPECT_EQ(count[probe::Kind::grad], 3);
  EXPECT_EQ(count[probe::Kind::scalar], 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
