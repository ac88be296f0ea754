// Training-step time of a small MLP trainer (4 microbatches, gradient accumulation, AdamW) with
// no probe calls at all, with a disabled probe, and with the probe recording all kinds or all
// but mb_grad. docs/perf.md takes the ratios to the no-probe baseline from one run.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>
#include <unistd.h>

#include "probe/probe.h"

namespace {

struct MlpImpl : torch::nn::Module {
  torch::nn::Sequential layers;
  MlpImpl() {
    for (int i = 0; i < 4; ++i) {
      layers->push_back(torch::nn::Linear(256, 256));
      layers->push_back(torch::nn::GELU());
    }
    layers->push_back(torch::nn::Dropout(0.1));
    register_module("layers", layers);
  }
  torch::Tensor forward(torch::Tensor x) { return layers->forward(x); }
};
TORCH_MODULE(Mlp);

enum Mode { kNoProbe, kDisabled, kAllButMbGrad, kAll };

void BM_TrainStep(benchmark::State& state) {
  const auto mode = static_cast<Mode>(state.range(0));
  torch::manual_seed(0);
  Mlp model;
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-4));
  probe::ProbeOptions options;
  options.enabled = mode != kNoProbe && mode != kDisabled;
  options.run_dir = "/tmp/numprobe_overhead_bench_" + std::to_string(::getpid());
  options.kinds = mode == kAllButMbGrad ? probe::KindSet::all().without(probe::Kind::mb_grad)
                                        : probe::KindSet::all();
  probe::Probe probe(options);
  if (mode != kNoProbe) probe.watch(*model);
  auto x = torch::randn({4, 128, 256});
  for (auto _ : state) {
    optimizer.zero_grad();
    for (int mb = 0; mb < 4; ++mb) {
      if (mode == kNoProbe) {
        model->forward(x[mb]).pow(2).mean().backward();
      } else {
        probe.backward(mb, probe.forward(mb, model, x[mb]).pow(2).mean());
      }
    }
    optimizer.step();
    if (mode != kNoProbe) probe.end_step();
  }
  std::filesystem::remove_all(options.run_dir);
  static const char* kNames[] = {"no probe", "probe disabled", "all kinds but mb_grad", "all kinds"};
  state.SetLabel(kNames[mode]);
}

// One intra-op thread, as bitwise-comparable trainers run (and stable timings on 2 cores).
const int kThreads = (at::set_num_threads(1), 1);

BENCHMARK(BM_TrainStep)->DenseRange(0, 3)->ArgName("mode")->Unit(benchmark::kMillisecond)
    ->UseRealTime()->MinTime(1.0)->Repetitions(12)->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
