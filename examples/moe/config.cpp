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
  app.add_option("--stages", c.stages, "pipeline stages of pp-ddp (pp: every rank is a stage)")->capture_default_str();
  app.add_option("--rng-seed", c.rng_seed, "seed of weights, data and dropout")->capture_default_str();
  app.add_option("--steps", c.steps, "training steps")->capture_default_str();
  app.add_option("--microbatches", c.microbatches, "global microbatches per step")->capture_default_str();
  app.add_option("--microbatch-size", c.microbatch_size, "sequences per microbatch")->capture_default_str();
  app.add_option("--seq-len", c.seq_len, "tokens per sequence")->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd (momentum 0.9) or adamw (LibTorch's)")->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate (default 0.1 for sgd, 1e-3 for adamw)");
  app.add_option("--weight-decay", c.weight_decay, "adamw's weight decay")->capture_default_str();
  app.add_option("--device", c.device, "cpu (Gloo) or cuda (NCCL, CUDA builds)")->capture_default_str();
  app.add_flag("--backend-at-one-rank", c.backend_at_one_rank,
               "build the process groups through Gloo/NCCL even with one rank (runs NCCL on one GPU)");
  app.add_option("--out", c.out, "the probe's run directory (default: the next free out/<N>)");
  app.add_option("--probe", c.probe, "probe on or off")->capture_default_str();
  app.add_option("--probe-kinds", c.probe_kinds, "kinds to record: all, a list, or -kind to drop one")->capture_default_str();
  app.add_option("--fault", c.fault,
                 "none, grads-none, rng-per-rank, nan=<step>:<param>, skip-reduce=<param>, init=<param>, "
                 "lr=<step>:<factor>, op=<layer>, op-backward=<layer>")->capture_default_str();
  app.add_option("--params-out", c.params_out, "write a fingerprint of the final parameters to DIR/rank<R>.txt");
  app.add_option("--die-after-step", c.die_after_step, "SIGKILL --die-rank in the step after this one, once its collectives are done and before it logs the step (tests)")->capture_default_str();
  app.add_option("--die-rank", c.die_rank, "the rank --die-after-step kills")->capture_default_str();
  add_model_options(app, c.model);
}

void apply_dependent_defaults(const CLI::App& app, Config& c) {
  if (!app.count("--lr") && c.optimizer == "adamw") c.lr = 1e-3;
}

int stages_for(const Config& c, int world_size) {
  if (c.setup == "single") {
    if (world_size != 1) throw std::invalid_argument("--setup single runs as one process");
    return 1;
  }
  if (c.setup == "ddp" || c.setup == "zero3") return 1;
  if (c.setup == "pp") return world_size;
  if (c.setup == "pp-ddp") return c.stages;
  throw std::invalid_argument("--setup '" + c.setup + "': expected single, ddp, zero3, pp or pp-ddp");
}

c10::Device device_of(const Config& c) {
  if (c.device == "cpu") return c10::Device(c10::kCPU);
  const char* local_rank = std::getenv("LOCAL_RANK");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank ? std::atoi(local_rank) : 0));
}

}  // namespace moe
