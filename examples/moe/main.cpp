// moe_train: trains the tiny DeepSeek-V3-style MoE (model.h) under one parallel setup, with
// the numprobe probe logging every microbatch, so that two setups can be compared with
// diff_logs. docs/examples.md describes the setups, flags and faults.
//
//   torchrun --standalone --nproc-per-node 4 --no-python build/examples/moe_train
//       --setup zero3 --rng-seed 42 --steps 3 --out out/0
//
// Every setup is "S pipeline stages x D data-parallel ranks" run by one GPipe loop:
//   single  S=1, D=1          gradient accumulation over all microbatches (the reference)
//   ddp     S=1, D=N          gradients all-reduced
//   zero3   S=1, D=N          parameters sharded along dim 0: all-gathered before the forward,
//                             gradients reduce-scattered into the shards
//   pp      S=N, D=1          activations and their gradients sent between stages
//   pp-ddp  S=--stages, D=N/S
// --tp T splits every stage's attention heads and shared expert over T ranks (D = N/(S*T));
// --sp also runs norms and dropout on sequence shards (tensor_parallel.h). --ep E splits the
// routed experts over E of a stage's data-parallel ranks, tokens dispatched by all-to-all
// (expert_parallel.h).
// What makes the setups agree bitwise per microbatch: the same initial weights (from the seed
// and each parameter's name), the same tokens per global microbatch, dropout masks drawn from
// a generator per (step, microbatch, layer), the loss of every microbatch divided by the global
// microbatch count, one intra-op thread. Accumulated gradients then differ only by the order
// in which microbatch contributions were summed.
//
// The optimizer (--optimizer sgd|adamw, LibTorch's) updates what each rank owns: whole
// parameters, or under zero3 its shards, so its state is sharded like them. The probe records
// the parameters at each step's start and the optimizer state after each update.
//
// The files, one concern each: config (flags), faults, data (the microbatches), parallel (process
// groups), data_parallel (ddp, zero3), tensor_parallel (tp, sp), expert_parallel (ep), pipeline
// (the GPipe schedule), trainer (the step loop and the probe's step calls), model.
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "config.h"
#include "faults.h"
#include "parallel.h"
#include "probe/probe.h"
#include "trainer.h"

namespace {

using moe::Config;

// The probe's options: this run's defaults, PROBE_* variables over them, flags given on the
// command line over both.
probe::ProbeOptions probe_options(const Config& c, const CLI::App& app,
                                  const moe::ProcessGroups& groups) {
  probe::ProbeOptions defaults;
  defaults.enabled = c.probe;
  defaults.kinds = probe::KindSet::parse(c.probe_kinds);
  defaults.rank = groups.rank;
  defaults.world_size = groups.world_size;
  std::ostringstream setup;
  setup << c.setup << " x" << groups.world_size << " (" << groups.stages << " stages x "
        << groups.dp_size << " dp";
  if (groups.tp_size > 1) setup << " x " << groups.tp_size << " tp" << (c.sp ? " sp" : "");
  if (groups.ep_size > 1) setup << ", " << groups.ep_size << " ep";
  setup << ", " << groups.backend_name << "), " << c.optimizer << " lr " << c.lr
        << (c.dtype == "float32" ? "" : ", " + c.dtype) << ", seed " << c.rng_seed << ", fault "
        << c.fault;
  defaults.setup = setup.str();
  probe::ProbeOptions options = probe::ProbeOptions::from_env(defaults);
  if (app.count("--out")) options.run_dir = c.out;
  if (app.count("--probe")) options.enabled = c.probe;
  if (app.count("--probe-kinds")) options.kinds = defaults.kinds;
  return options;
}

void print_banner(const Config& c, const probe::ProbeOptions& options, const probe::Probe& probe) {
  const auto& m = c.model;
  std::printf(
      "moe_train: %s; %lld layers, dim %lld, %lld experts top-%lld; %lld microbatches x %lld x "
      "%lld tokens; probe %s\n",
      options.setup.c_str(), static_cast<long long>(m.n_layers), static_cast<long long>(m.dim),
      static_cast<long long>(m.n_experts), static_cast<long long>(m.top_k),
      static_cast<long long>(c.microbatches), static_cast<long long>(c.microbatch_size),
      static_cast<long long>(c.seq_len), probe.enabled() ? probe.run_dir().c_str() : "off");
}

// One intra-op thread: CPU reductions then sum in one fixed order on every rank, and K
// processes on K cores do not oversubscribe.
void make_deterministic(const Config& c) {
  at::set_num_threads(1);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  // deterministic cuBLAS
  if (c.device != "cpu") ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
}

void run(Config& c, const CLI::App& app) {
  make_deterministic(c);
  // The rank's GPU is the current device from here on: NCCL's communicators, its barrier and
  // every allocation without an explicit device go there, not to GPU 0.
  std::optional<c10::DeviceGuard> on_device;
  if (c.device != "cpu") on_device.emplace(moe::device_of(c));
  const int world_size = std::getenv("WORLD_SIZE") ? std::atoi(std::getenv("WORLD_SIZE")) : 1;
  moe::ProcessGroups groups = moe::init_process_groups(moe::stages_for(c, world_size), c.tp, c.ep,
                                                       c.device, c.backend_at_one_rank);
  // Before the probe makes its run directory: a bad --fault leaves nothing behind.
  const moe::Fault fault = moe::Fault::parse(c.fault);
  moe::compute_dtype(c);  // a bad --dtype is an error before the run directory exists too
  moe::check_fault(fault, c, groups);
  moe::apply_op_fault(fault, c.model);

  const probe::ProbeOptions options = probe_options(c, app, groups);
  probe::Probe probe(options);
  if (groups.rank == 0) print_banner(c, options, probe);

  moe::train(c, groups, probe, fault);
  groups.world.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{
      "moe_train: a tiny DeepSeek-V3-style MoE trained under one parallel setup, logged "
      "by the numprobe probe (docs/examples.md)"};
  moe::add_options(app, c);
  CLI11_PARSE(app, argc, argv);
  moe::apply_dependent_defaults(app, c);

  try {
    run(c, app);
  } catch (const std::invalid_argument& e) {
    // A setting the example does not accept (a degree that does not divide, ...): said apart
    // from a failure while training, so that a sweep over settings can tell the two.
    std::fprintf(stderr, "moe_train: invalid setting: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {  // without LibTorch's C++ backtrace
    std::fprintf(stderr, "moe_train: error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
