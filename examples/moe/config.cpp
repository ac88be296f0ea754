#include "config.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <stdexcept>

namespace moe {

namespace {

void add_model_options(CLI::App& app, ModelArgs& m) {
  app.add_option("--vocab", m.vocab_size)->capture_default_str();
  app.add_option("--dim", m.dim)->capture_default_str();
  app.add_option("--layers", m.n_layers)->capture_default_str();
  app.add_option("--heads", m.n_heads)->capture_default_str();
  app.add_option("--kv-lora-rank", m.kv_lora_rank)->capture_default_str();
  app.add_option("--experts", m.n_experts)->capture_default_str();
  app.add_option("--top-k", m.top_k)->capture_default_str();
  app.add_option("--moe-hidden", m.moe_hidden_dim)->capture_default_str();
  app.add_option("--shared-hidden", m.shared_hidden_dim)->capture_default_str();
  app.add_option("--dropout", m.dropout)->capture_default_str();
}

}  // namespace

void add_options(CLI::App& app, Config& c) {
  app.add_option("--setup", c.setup, "single, ddp, zero3, pp or pp-ddp")->capture_default_str();
  app.add_option("--stages", c.stages, "pipeline stages of pp-ddp (pp: every rank is a stage)")
      ->capture_default_str();
  app.add_option(
         "--tp", c.tp,
         "tensor-parallel degree: attention heads and the shared expert split over --tp ranks")
      ->capture_default_str();
  app.add_option("--ep", c.ep,
                 "expert-parallel degree: routed experts split over --ep of a stage's "
                 "data-parallel ranks, tokens "
                 "dispatched to them by all-to-all")
      ->capture_default_str();
  app.add_flag("--sp", c.sp,
               "sequence parallel: norms and dropout on sequence shards between the "
               "tensor-parallel regions (needs --tp > 1)");
  app.add_option("--rng-seed", c.rng_seed, "seed of weights, data and dropout")
      ->capture_default_str();
  app.add_option("--steps", c.steps, "training steps")->capture_default_str();
  app.add_option("--microbatches", c.microbatches, "global microbatches per step")
      ->capture_default_str();
  app.add_option("--microbatch-size", c.microbatch_size, "sequences per microbatch")
      ->capture_default_str();
  app.add_option("--seq-len", c.seq_len, "tokens per sequence")->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd (momentum 0.9) or adamw (LibTorch's)")
      ->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate (default 0.1 for sgd, 1e-3 for adamw)");
  app.add_option("--weight-decay", c.weight_decay, "adamw's weight decay")->capture_default_str();
  app.add_option("--dtype", c.dtype,
                 "float32, or bfloat16: parameters and activations in bfloat16, float32 master "
                 "weights and gradient "
                 "reductions")
      ->capture_default_str();
  app.add_option("--device", c.device, "cpu (Gloo) or cuda (NCCL, CUDA builds)")
      ->capture_default_str();
  app.add_flag(
      "--backend-at-one-rank", c.backend_at_one_rank,
      "build the process groups through Gloo/NCCL even with one rank (runs NCCL on one GPU)");
  app.add_option("--out", c.out, "the probe's run directory (default: the next free out/<N>)");
  app.add_option("--probe", c.probe, "probe on or off")->capture_default_str();
  app.add_option("--probe-kinds", c.probe_kinds,
                 "kinds to record: all, a list, or -kind to drop one")
      ->capture_default_str();
  app.add_option(
         "--fault", c.fault,
         "none, grads-none, pp-grads-none, rng-per-rank, nan=<step>:<param>, skip-reduce=<param>, "
         "init=<param>, "
         "lr=<step>:<factor>, grad-scale=<step>:<param>:<factor>, out-scale=<layer>:<factor>, "
         "op=<layer>, op-backward=<layer>, op-wrong=<layer>, op-lowp=<layer>; "
         "under --tp: tp-no-reduce=<layer>; "
         "under --sp: sp-norm-unreduced, sp-dropout-seed; under --ep: ep-permute=<layer>, "
         "ep-grad-scale=<layer>")
      ->capture_default_str();
  app.add_option("--params-out", c.params_out,
                 "write a fingerprint of the final parameters to DIR/rank<R>.txt");
  app.add_option("--die-after-step", c.die_after_step,
                 "SIGKILL --die-rank in the step after this one, once its collectives are done and "
                 "before it logs the step (tests)")
      ->capture_default_str();
  app.add_option("--die-rank", c.die_rank, "the rank --die-after-step kills")
      ->capture_default_str();
  add_model_options(app, c.model);
}

void apply_dependent_defaults(const CLI::App& app, Config& c) {
  if (!app.count("--lr") && c.optimizer == "adamw") c.lr = 1e-3;
}

namespace {

// The stage's data-parallel degree of --setup in `world_size` ranks (1 for single and pp).
int data_parallel_degree(const Config& c, int world_size) {
  if (c.setup == "ddp" || c.setup == "zero3") return world_size / c.tp;
  if (c.setup == "pp-ddp" && c.stages > 0 && world_size % c.stages == 0)
    return world_size / c.stages / c.tp;
  return 1;
}

// Expert-parallel ranks are taken from a stage's data-parallel ranks (as torchtitan and
// DeepSeek do): --ep divides them and the experts.
void check_expert_parallel(const Config& c, int world_size) {
  const auto ep = std::to_string(c.ep);
  if (c.ep < 1) throw std::invalid_argument("--ep " + ep + ": expected a degree >= 1");
  if (c.model.n_experts % c.ep != 0)
    throw std::invalid_argument("--ep " + ep + " does not divide the " +
                                std::to_string(c.model.n_experts) + " experts");
  const int dp = data_parallel_degree(c, world_size);
  if (dp % c.ep != 0)
    throw std::invalid_argument("--ep " + ep + " does not divide the " + std::to_string(dp) +
                                " data-parallel rank(s) of a " + "stage of --setup " + c.setup +
                                " (expert-parallel ranks are taken from them)");
}

// The pipeline stages of --setup (checked) in `world_size` ranks.
int stages_of_setup(const Config& c, int world_size) {
  if (c.setup == "single") {
    if (world_size != c.tp)
      throw std::invalid_argument(
          c.tp == 1 ? "--setup single runs as one process"
                    : "--setup single runs one replica of one stage: " + std::to_string(c.tp) +
                          " processes with --tp " + std::to_string(c.tp));
    return 1;
  }
  if (c.setup == "ddp" || c.setup == "zero3") return 1;
  if (c.setup == "pp") return world_size / c.tp;
  if (c.setup == "pp-ddp") return c.stages;
  throw std::invalid_argument("--setup '" + c.setup +
                              "': expected single, ddp, zero3, pp or pp-ddp");
}

}  // namespace

int stages_for(const Config& c, int world_size) {
  if (c.tp < 1)
    throw std::invalid_argument("--tp " + std::to_string(c.tp) + ": expected a degree >= 1");
  if (c.sp && c.tp == 1)
    throw std::invalid_argument(
        "--sp needs --tp > 1 (sequence parallel splits what tensor parallel replicates)");
  if (c.sp && c.seq_len % c.tp != 0)
    throw std::invalid_argument("--sp: --seq-len " + std::to_string(c.seq_len) +
                                " is not divisible by --tp " + std::to_string(c.tp));
  if (c.model.n_heads % c.tp != 0 || c.model.shared_hidden_dim % c.tp != 0)
    throw std::invalid_argument("--tp " + std::to_string(c.tp) + " does not divide the " +
                                std::to_string(c.model.n_heads) + " heads and the " +
                                std::to_string(c.model.shared_hidden_dim) + " shared-expert units");
  if (world_size % c.tp != 0)
    throw std::invalid_argument("--tp " + std::to_string(c.tp) +
                                " does not divide the world size " + std::to_string(world_size));
  const int stages = stages_of_setup(c, world_size);
  check_expert_parallel(c, world_size);
  return stages;
}

c10::ScalarType compute_dtype(const Config& c) {
  if (c.dtype == "float32") return c10::kFloat;
  if (c.dtype == "bfloat16") return c10::kBFloat16;
  throw std::invalid_argument("--dtype '" + c.dtype + "': expected float32 or bfloat16");
}

c10::Device device_of(const Config& c) {
  if (c.device == "cpu") return c10::Device(c10::kCPU);
  const char* local_rank = std::getenv("LOCAL_RANK");
  return c10::Device(c10::kCUDA,
                     static_cast<c10::DeviceIndex>(local_rank ? std::atoi(local_rank) : 0));
}

}  // namespace moe
