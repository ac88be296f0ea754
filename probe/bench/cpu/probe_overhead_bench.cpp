// Training-step time of a small MLP trainer (4 microbatches, gradient accumulation, AdamW) with
// no probe calls at all, with a disabled probe, and with the probe recording all kinds or all
// but mb_grad. docs/perf.md quotes its table.
//
// Paired rounds, not one long run per mode: this machine's speed drifts by several percent over
// seconds (shared host), which swamps a 2-5% effect between runs taken a minute apart. Each
// round runs every mode for a few steps back to back (in a rotating order) and takes each mode's
// time relative to the no-probe trainer of the same round; the median of those ratios over the
// rounds is the overhead, and its interquartile range says how far to trust it.
//
//   usage: probe_overhead_bench [ROUNDS=40] [STEPS_PER_ROUND=8]
//          probe_overhead_bench --only MODE STEPS   (one trainer, for a profiler; MODE 0..3)
//   With PROBE_KINDS set (e.g. PROBE_KINDS=rng), a fifth trainer records just those kinds.
//          probe_overhead_bench --per-record      (fixed cost of one small record, all in)
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

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

enum Mode { kNoProbe, kDisabled, kAllButMbGrad, kAll, kFromEnvironment };
const char* const kModeNames[] = {"no probe calls at all", "probe constructed, disabled",
                                  "all kinds but mb_grad", "all kinds", "kinds of PROBE_KINDS"};

// One trainer per mode, each with its own model, optimizer and probe.
struct Trainer {
  Mode mode;
  Mlp model;
  torch::optim::AdamW optimizer;
  std::unique_ptr<probe::Probe> probe;
  torch::Tensor x = torch::randn({4, 128, 256});

  Trainer(Mode m, const std::string& run_dir)
      : mode(m), model(), optimizer(model->parameters(), torch::optim::AdamWOptions(1e-4)) {
    probe::ProbeOptions options;
    options.enabled = mode != kNoProbe && mode != kDisabled;
    options.run_dir = run_dir;
    options.kinds = mode == kAllButMbGrad ? probe::KindSet::all().without(probe::Kind::mb_grad)
                                          : probe::KindSet::all();
    if (mode == kFromEnvironment) options.kinds = probe::KindSet::parse(std::getenv("PROBE_KINDS"));
    probe = std::make_unique<probe::Probe>(options);
    if (mode != kNoProbe) probe->watch(*model);
  }

  void step() {
    optimizer.zero_grad();
    for (int mb = 0; mb < 4; ++mb) {
      if (mode == kNoProbe) {
        model->forward(x[mb]).pow(2).mean().backward();
      } else {
        probe->backward(mb, probe->forward(mb, model, x[mb]).pow(2).mean());
      }
    }
    optimizer.step();
    if (mode != kNoProbe) probe->end_step();
  }

  double seconds_per_step(int steps) {
    const auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  }
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);  // as bitwise-comparable trainers run; also steadier on 2 cores
  const std::string run_root = "/tmp/numprobe_overhead_bench_" + std::to_string(::getpid());
  if (argc == 2 && std::string(argv[1]) == "--per-record") {
    // 100 tap records of 64 float32 elements per step, end_step included (formatting, writing,
    // the wait for the flush): what a record costs beyond reading its elements.
    probe::ProbeOptions options;
    options.run_dir = run_root;
    probe::Probe probe(options);
    const torch::Tensor small = torch::randn({64});
    std::vector<std::string> names;  // one per record, as a model's taps are
    for (int r = 0; r < 100; ++r) names.push_back("layers." + std::to_string(r) + ".out");
    auto run = [&](int steps) {
      const auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) {
        for (int r = 0; r < 100; ++r) probe.tap(names[static_cast<std::size_t>(r)], small);
        probe.end_step();
      }
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
             (steps * 100.0);
    };
    run(100);  // warm-up
    std::vector<double> per_record;
    for (int rep = 0; rep < 15; ++rep) per_record.push_back(run(200));
    std::printf(
        "one tap record of 64 float32 elements, end_step included: %.2f us (median of 15 x "
        "20,000)\n",
        quantile(per_record, 0.5) * 1e6);
    std::filesystem::remove_all(run_root);
    return 0;
  }
  if (argc == 4 && std::string(argv[1]) == "--only") {
    const auto mode = static_cast<Mode>(std::stoi(argv[2]));
    torch::manual_seed(0);
    Trainer trainer(mode, run_root);
    std::printf("%s: %.3f ms/step\n", kModeNames[mode],
                trainer.seconds_per_step(std::stoi(argv[3])) * 1e3);
    std::filesystem::remove_all(run_root);
    return 0;
  }
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 40;
  const int steps = argc > 2 ? std::stoi(argv[2]) : 8;
  const int mode_count = std::getenv("PROBE_KINDS") ? kFromEnvironment + 1 : kFromEnvironment;
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int m = 0; m < mode_count; ++m) {
    torch::manual_seed(0);
    trainers.push_back(
        std::make_unique<Trainer>(static_cast<Mode>(m), run_root + "/" + std::to_string(m)));
  }
  for (auto& t : trainers) t->seconds_per_step(steps);  // warm-up: allocator, oneDNN, files

  std::vector<std::vector<double>> time(mode_count), ratio(mode_count);
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> round_time(mode_count);
    for (int k = 0; k < mode_count; ++k) {
      const int m = (r + k) % mode_count;  // rotate who goes first
      round_time[m] = trainers[static_cast<std::size_t>(m)]->seconds_per_step(steps);
    }
    for (int m = 0; m < mode_count; ++m) {
      time[m].push_back(round_time[m]);
      ratio[m].push_back(round_time[m] / round_time[kNoProbe]);
    }
  }
  trainers.clear();
  std::filesystem::remove_all(run_root);

  std::printf("%d rounds x %d steps per mode, 1 intra-op thread\n\n", rounds, steps);
  std::printf(
      "| mode | median step | overhead vs no probe (median of paired rounds) | interquartile range "
      "|\n");
  std::printf("| --- | --- | --- | --- |\n");
  for (int m = 0; m < mode_count; ++m) {
    const double t = quantile(time[m], 0.5) * 1e3;
    const std::string name =
        m == kFromEnvironment ? std::string("kinds ") + std::getenv("PROBE_KINDS") : kModeNames[m];
    if (m == kNoProbe) {
      std::printf("| %s | %.2f ms | baseline | |\n", name.c_str(), t);
      continue;
    }
    std::printf("| %s | %.2f ms | %+.1f%% | %+.1f%% .. %+.1f%% |\n", name.c_str(), t,
                (quantile(ratio[m], 0.5) - 1) * 100, (quantile(ratio[m], 0.25) - 1) * 100,
                (quantile(ratio[m], 0.75) - 1) * 100);
  }
  return 0;
}
