// moe_train's configuration: the command line (CLI11), the setup's pipeline stages and the rank's
// device. Torch-free but for c10's Device: the flags compile without LibTorch's heavy headers.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

#include "model_args.h"

namespace CLI {
class App;
}

namespace moe {

struct Config {
  std::string setup = "single";
  int stages = 2;   // pp-ddp only
  int tp = 1;       // tensor-parallel degree (Megatron-style; tensor_parallel.h)
  bool sp = false;  // sequence parallel between the tensor-parallel regions (needs tp > 1)
  // expert-parallel degree: routed experts split over that many data-parallel ranks
  int ep = 1;
  std::uint64_t rng_seed = 42;
  std::int64_t steps = 3;
  std::int64_t microbatches = 8;  // global, per step
  std::int64_t microbatch_size = 2;
  std::int64_t seq_len = 32;
  std::string optimizer = "sgd";
  double lr = 0.1, momentum = 0.9;  // lr: 0.1 for sgd, 1e-3 for adamw unless --lr is given
  double weight_decay = 0.01;       // adamw
  std::string device = "cpu";
  // the forward and backward's: float32, or bfloat16 over float32 masters
  std::string dtype = "float32";
  bool backend_at_one_rank = false;  // NCCL/Gloo groups even with one rank (one-GPU checks)
  std::string out;                   // probe run dir ("" = next free out/<N>)
  bool probe = true;
  std::string probe_kinds = "all";
  std::string fault = "none";
  std::string params_out;  // write a fingerprint of the final parameters here
  std::int64_t die_after_step = -1;
  int die_rank = 1;
  ModelArgs model;
};

// moe_train's flags, their defaults written once (CLI11 prints them with --help).
void add_options(CLI::App& app, Config& c);

// After parsing: defaults that depend on other flags (adamw's learning rate).
void apply_dependent_defaults(const CLI::App& app, Config& c);

// The pipeline stages of --setup in a world of `world_size` ranks (the rest is tensor and data
// parallel). Checks --tp, --sp and --ep.
int stages_for(const Config& c, int world_size);

// The dtype the model computes in (--dtype, checked): parameters, activations and the
// per-microbatch gradients. The optimizer keeps float32 masters and gradients are reduced in
// float32 either way (FSDP2's MixedPrecisionPolicy(param_dtype, reduce_dtype=float32)).
c10::ScalarType compute_dtype(const Config& c);

// The rank's device: the CPU, or the GPU of its local rank (torchrun's LOCAL_RANK).
c10::Device device_of(const Config& c);

}  // namespace moe
