#include "trainer.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <vector>

#include "data_parallel.h"
#include "model.h"
#include "pipeline.h"
#include "probe/probe.h"

namespace moe {

namespace {

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::uint64_t fingerprint(const at::Tensor& t) {
  auto c = t.detach().contiguous();
  const auto* bytes = static_cast<const unsigned char*>(c.const_data_ptr());
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the raw bytes: bitwise identity
  for (std::size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  return h;
}

// The tensor-parallel layout of this rank's group, its faults applied.
std::shared_ptr<TensorParallel> tensor_parallel(const Config& c, ProcessGroups& groups,
                                                const Fault& fault) {
  auto layout = std::make_shared<TensorParallel>(groups.tp, c.sp);
  apply_tensor_parallel_fault(fault, *layout);
  return layout;
}

// The expert-parallel layout of this rank's group, its faults applied.
std::shared_ptr<ExpertParallel> expert_parallel(const Config& c, ProcessGroups& groups,
                                                const Fault& fault) {
  auto layout = std::make_shared<ExpertParallel>(groups.ep, c.model.n_experts);
  apply_expert_parallel_fault(fault, *layout);
  return layout;
}

// This rank's pipeline stage of the model, initialised the same on every rank and in every setup.
Transformer build_stage(const Config& c, ProcessGroups& groups, const Fault& fault,
                        at::Device device) {
  if (c.microbatches % groups.dp_size != 0)
    throw std::invalid_argument("--microbatches " + std::to_string(c.microbatches) +
                                " is not divisible by the data-parallel size " +
                                std::to_string(groups.dp_size));
  if (c.model.n_layers < groups.stages)
    throw std::invalid_argument("more pipeline stages than layers");
  // Stage s holds layers [s*L/S, (s+1)*L/S).
  const auto L = c.model.n_layers;
  Transformer model(c.model, groups.stage * L / groups.stages,
                    (groups.stage + 1) * L / groups.stages);
  init_weights(model, c.rng_seed);
  apply_init_fault(fault, *model, c.rng_seed);
  if (groups.tp_size > 1) parallelize_tensors(model, tensor_parallel(c, groups, fault));
  if (groups.ep_size > 1) parallelize_experts(model, expert_parallel(c, groups, fault));
  // Module constructors drew from the default generator, differently per stage; reset it so
  // its fingerprint (the probe's `rng cpu` record) is the same on every rank and setup.
  at::manual_seed(c.rng_seed);
  model->to(device);  // initialised on the CPU: the same values on every device
  model->train();
  return model;
}

// The optimizer over what this rank owns: element-wise updates, so a zero3 shard is updated
// bit for bit like the same rows of the whole parameter (every row count here is a multiple
// of the vector width, so no element falls in a loop's scalar tail in one layout only).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Config& c,
                                                        const std::vector<Param>& params) {
  std::vector<at::Tensor> owned;
  for (const auto& p : params) owned.push_back(p.owned);
  if (c.optimizer == "sgd")
    return std::make_unique<torch::optim::SGD>(owned,
                                               torch::optim::SGDOptions(c.lr).momentum(c.momentum));
  if (c.optimizer == "adamw")
    return std::make_unique<torch::optim::AdamW>(
        owned, torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  throw std::invalid_argument("--optimizer '" + c.optimizer + "': expected sgd or adamw");
}

class Trainer {
 public:
  Trainer(const Config& config, ProcessGroups& groups, probe::Probe& probe, const Fault& fault)
      : config_(config),
        groups_(groups),
        probe_(probe),
        fault_(fault),
        zero3_(config.setup == "zero3"),
        device_(device_of(config)),
        model_(build_stage(config, groups, fault, device_)),
        params_(hold_parameters(*model_, groups, zero3_, config.sp, compute_dtype(config))),
        optimizer_(make_optimizer(config, params_)),
        pipeline_(config, model_, groups, probe, device_, fault.dropout_rank_salt(groups)) {
    watch_parameters();
    probe_.watch_optimizer(*optimizer_);
  }

  // Per step: the loss, the wall time spent inside the probe's step calls (probe_ms_) and the
  // step's wall time, which includes it.
  void train() {
    double total_ms = 0;
    for (std::int64_t step = 0; step < config_.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      probe_ms_ = 0;
      const double loss = train_step(step);
      const double ms = milliseconds_since(start);
      if (step > 0) total_ms += ms;  // step 0 warms up allocators and connections
      if (groups_.rank == 0)
        std::printf("step %lld  loss %.6f  probe %.3f ms  time %.2f ms\n",
                    static_cast<long long>(step), loss, probe_ms_, ms);
      std::fflush(stdout);
    }
    if (groups_.rank == 0 && config_.steps > 1)
      std::printf("mean step time (steps 1-%lld): %.3f ms\n",
                  static_cast<long long>(config_.steps - 1),
                  total_ms / static_cast<double>(config_.steps - 1));
    if (!config_.params_out.empty()) write_parameters();
  }

 private:
  // A call into the probe at the step's edges, its wall time added to probe_ms_: begin_step
  // records the parameters, end_step the gradients and the optimizer state and hands the step
  // to the writer. What `param` and `optim` cost is read there directly, not as the difference
  // of two noisy step times (scripts/bench_examples.sh).
  template <class Call>
  void in_probe(Call&& call) {
    const auto start = std::chrono::steady_clock::now();
    call();
    probe_ms_ += milliseconds_since(start);
  }

  // Not inlined: a profiler can select one training step by this name (docs/perf.md).
  [[gnu::noinline]] double train_step(std::int64_t step) {
    in_probe([&] { probe_.begin_step(step); });
    materialize_parameters(params_, groups_, zero3_);
    auto losses = at::zeros({config_.microbatches}, at::kDouble);
    pipeline_.run(step, losses);
    inject_nan_if_due(fault_, step, params_, groups_);
    scale_gradient_if_due(fault_, step, params_, groups_);
    reduce_gradients(params_, groups_, zero3_, fault_.unreduced_param(),
                     fault_.kind == Fault::Kind::sp_norm_unreduced);
    scale_expert_gradients_if_due(fault_, params_, groups_);
    if (zero3_) release_parameters(params_);
    const double loss = step_loss(losses);
    die_if_due(config_, step, groups_);  // its peers log this step, it does not
    update_and_log(step, loss);
    return loss;
  }

  // Every microbatch's loss was counted on exactly one rank (a tp group's rank 0): the sum over
  // ranks is exact,
  // and summing it in microbatch order gives the same step loss in every setup.
  double step_loss(at::Tensor losses) {
    if (device_.is_cpu()) {
      groups_.world.all_reduce_sum(losses);
    } else {  // NCCL reduces device tensors
      auto on_device = losses.to(device_);
      groups_.world.all_reduce_sum(on_device);
      losses = on_device.cpu();
    }
    double loss = 0;
    for (std::int64_t mb = 0; mb < config_.microbatches; ++mb) loss += losses[mb].item<double>();
    return loss / static_cast<double>(config_.microbatches);
  }

  // The loss scalar, the optimizer's update and the step's end in the probe (every accumulated
  // gradient, the optimizer state after the update), then the gradients cleared.
  void update_and_log(std::int64_t step, double loss) {
    if (fault_.kind == Fault::Kind::grads_none ||
        (fault_.kind == Fault::Kind::pp_grads_none && groups_.stages > 1)) {
      // The bug this project was started for: gradients logged after the optimizer step had
      // already cleared them, so every logged gradient is `none`.
      optimizer_step(step);
      zero_grad(params_);
      in_probe([&] {
        probe_.scalar("loss", loss);
        probe_.end_step();
      });
      return;
    }
    in_probe([&] { probe_.scalar("loss", loss); });
    optimizer_step(step);
    in_probe([&] { probe_.end_step(); });
    zero_grad(params_);
  }

  // The lr fault scales the learning rate of its step's update alone, as a schedule that is off
  // by one step would: the optimizer holds the scaled rate until the next step sets its own.
  void optimizer_step(std::int64_t step) {
    const double lr = config_.lr * fault_.lr_factor(step).value_or(1);
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    optimizer_->step();
  }

  // What each rank holds as the shard it is (tensor- and expert-parallel slices, zero3 rows), so
  // that the differ composes `param`, `grad` and `optim` records back into the whole;
  // per-microbatch gradients of what a rank computes with (a slice, or a summand under sp),
  // a routed expert's covering every microbatch of its dispatch under ep.
  void watch_parameters() {
    for (auto& p : params_) {
      const auto covers = microbatches_covered(p);
      if (p.owned.is_same(p.compute)) {
        probe_.watch_parameter(p.name, p.owned, p.shard, p.mb_grad_partial, covers);
        continue;
      }
      probe_.watch_parameter(p.name, p.owned, p.shard);
      // The gathered (zero3) or cast (another dtype) parameter is what the backward reaches:
      // one contribution per microbatch to the whole parameter (or its slice), comparable with
      // every other setup.
      if (probe_.enabled() && probe_.options().kinds.contains(probe::Kind::mb_grad))
        p.compute.register_hook([this, name = p.name, shard = p.slice, partial = p.mb_grad_partial,
                                 covers](const at::Tensor& grad) {
          const auto mb = pipeline_.backward_microbatch();
          probe_.record(probe::Kind::mb_grad, name, mb, grad, shard, partial,
                        covers ? covers(mb) : std::vector<std::int64_t>{});
        });
    }
  }

  // A routed expert's gradient under ep covers the microbatches of one dispatch; unset otherwise.
  probe::MicrobatchCover microbatches_covered(const Param& p) const {
    if (!p.expert) return {};
    return [&groups = groups_, per_rank = config_.microbatches / groups_.dp_size](std::int64_t mb) {
      return covered_microbatches(groups, per_rank, mb);
    };
  }

  void write_parameters() {
    std::filesystem::create_directories(config_.params_out);
    std::ofstream out(std::filesystem::path(config_.params_out) /
                      ("rank" + std::to_string(groups_.rank) + ".txt"));
    for (const auto& p : params_) {
      out << p.name;
      for (auto o : p.shard.offset) out << " @" << o;
      out << " " << std::hex << fingerprint(p.owned.cpu()) << std::dec << "\n";
    }
  }

  const Config& config_;
  ProcessGroups& groups_;
  probe::Probe& probe_;
  const Fault& fault_;
  const bool zero3_;
  const at::Device device_;
  Transformer model_;
  std::vector<Param> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Pipeline pipeline_;
  double probe_ms_ = 0;  // this step's time in in_probe() calls
};

}  // namespace

void train(const Config& config, ProcessGroups& groups, probe::Probe& probe, const Fault& fault) {
  Trainer trainer(config, groups, probe, fault);
  trainer.train();
}

}  // namespace moe
