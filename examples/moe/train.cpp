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
// What makes the setups agree bitwise per microbatch: the same initial weights (from the seed
// and each parameter's name), the same tokens per global microbatch, dropout masks drawn from
// a generator per (step, microbatch, layer), the loss of every microbatch divided by the global
// microbatch count, one intra-op thread. Accumulated gradients then differ only by the order
// in which microbatch contributions were summed.
//
// The optimizer (--optimizer sgd|adamw, LibTorch's) updates what each rank owns: whole
// parameters, or under zero3 its shards, so its state is sharded like them. The probe records
// the parameters at each step's start and the optimizer state after each update.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include "model.h"
#include "parallel.h"
#include "probe/probe.h"

namespace {

using moe::DropoutRng;
using moe::ModelArgs;
using moe::ProcessGroups;
using moe::Transformer;

struct Config {
  std::string setup = "single";
  int stages = 2;  // pp-ddp only
  std::uint64_t rng_seed = 42;
  std::int64_t steps = 3;
  std::int64_t microbatches = 8;  // global, per step
  std::int64_t microbatch_size = 2;
  std::int64_t seq_len = 32;
  std::string optimizer = "sgd";
  double lr = 0.1, momentum = 0.9;  // lr: 0.1 for sgd, 1e-3 for adamw unless --lr is given
  double weight_decay = 0.01;       // adamw
  std::string device = "cpu";
  bool backend_at_one_rank = false;  // NCCL/Gloo groups even with one rank (one-GPU checks)
  std::string out;  // probe run dir ("" = next free out/<N>)
  bool probe = true;
  std::string probe_kinds = "all";
  std::string fault = "none";
  std::string params_out;  // write a fingerprint of the final parameters here
  std::int64_t die_after_step = -1;
  int die_rank = 1;
  ModelArgs model;
};

// --fault: each reproduces a classic divergence that diff_logs must name.
struct Fault {
  enum class Kind { none, grads_none, rng_per_rank, nan, skip_reduce, init, lr, op, op_backward } kind = Kind::none;
  std::int64_t step = -1;
  std::int64_t layer = -1;  // op, op_backward
  std::string param;
  double factor = 1;  // lr

  static Fault parse(const std::string& text) {
    Fault f;
    auto value = [&](const std::string& prefix) { return text.substr(prefix.size()); };
    if (text == "none") return f;
    if (text == "grads-none") {
      f.kind = Kind::grads_none;
    } else if (text == "rng-per-rank") {
      f.kind = Kind::rng_per_rank;
    } else if (text.starts_with("nan=") && value("nan=").find(':') != std::string::npos) {
      f.kind = Kind::nan;
      const std::string v = value("nan=");
      const auto colon = v.find(':');
      f.step = std::stoll(v.substr(0, colon));
      f.param = v.substr(colon + 1);
    } else if (text.starts_with("skip-reduce=")) {
      f.kind = Kind::skip_reduce;
      f.param = value("skip-reduce=");
    } else if (text.starts_with("init=") && text.size() > 5) {
      f.kind = Kind::init;
      f.param = value("init=");
    } else if (text.starts_with("lr=") && parse_lr(value("lr="), f)) {
      f.kind = Kind::lr;
    } else if (text.starts_with("op=") || text.starts_with("op-backward=")) {
      f.kind = text.starts_with("op=") ? Kind::op : Kind::op_backward;
      const std::string v = value(f.kind == Kind::op ? "op=" : "op-backward=");
      std::size_t used = 0;
      try {
        f.layer = std::stoll(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (v.empty() || used != v.size() || f.layer < 0)
        throw std::invalid_argument("--fault '" + text + "': the layer must be a non-negative integer");
    } else {
      throw std::invalid_argument("--fault '" + text +
                                  "': expected none, grads-none, rng-per-rank, nan=<step>:<param>, "
                                  "skip-reduce=<param>, init=<param>, lr=<step>:<factor>, op=<layer> or "
                                  "op-backward=<layer>");
    }
    return f;
  }

  // "<step>:<factor>", both whole: no trailing characters.
  static bool parse_lr(const std::string& v, Fault& f) {
    const auto colon = v.find(':');
    if (colon == std::string::npos) return false;
    try {
      std::size_t used_step = 0, used_factor = 0;
      f.step = std::stoll(v.substr(0, colon), &used_step);
      f.factor = std::stod(v.substr(colon + 1), &used_factor);
      return used_step == colon && used_factor == v.size() - colon - 1 && f.step >= 0;
    } catch (const std::exception&) {
      return false;
    }
  }
};

// A fault that names no parameter of the model is an error; one that cannot fire in this run
// is worth a warning (a comparison would otherwise show "equal" for a fault the user thinks is on).
void check_fault(const Fault& fault, const Config& c, const ProcessGroups& groups) {
  if (!fault.param.empty()) {
    Transformer whole(c.model, 0, c.model.n_layers);
    const auto params = whole->named_parameters();
    if (std::none_of(params.begin(), params.end(), [&](const auto& item) { return item.key() == fault.param; }))
      throw std::invalid_argument("--fault: no parameter named '" + fault.param + "'");
  }
  if (fault.layer >= c.model.n_layers)
    throw std::invalid_argument("--fault: no layer " + std::to_string(fault.layer) + " (the model has " +
                                std::to_string(c.model.n_layers) + ")");
  std::string why;
  if (fault.kind == Fault::Kind::nan && fault.step >= c.steps)
    why = "step " + std::to_string(fault.step) + " is past the run's last step " + std::to_string(c.steps - 1);
  if (fault.kind == Fault::Kind::skip_reduce && groups.dp_size == 1)
    why = "with one data-parallel rank there is no gradient reduction to skip";
  if (fault.kind == Fault::Kind::rng_per_rank && groups.world_size == 1)
    why = "with one rank, rank 0's dropout draws are every rank's";
  if (fault.kind == Fault::Kind::init && fault.param.ends_with("norm.weight"))
    why = "norm weights start at 1 whatever the seed";
  if (fault.kind == Fault::Kind::lr && fault.step >= c.steps)
    why = "step " + std::to_string(fault.step) + " is past the run's last step " + std::to_string(c.steps - 1);
  if (fault.kind == Fault::Kind::lr && fault.factor == 1)
    why = "a factor of 1 leaves the learning rate as it is";
  if (!why.empty() && groups.rank == 0)
    std::fprintf(stderr, "moe_train: warning: --fault %s has no effect here: %s\n", c.fault.c_str(), why.c_str());
}

// The tokens of global microbatch `mb` of `step`: the same in every setup. Each sequence
// counts up from a random token by a random stride (mod vocab), with some tokens replaced by
// noise, so the loss has something to learn.
struct Microbatch {
  at::Tensor inputs, targets;  // [B, T] int64
};
Microbatch make_microbatch(const Config& c, std::int64_t step, std::int64_t mb, at::Device device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(
      moe::mix_seed(c.rng_seed, {0xDA7Au, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(mb)}));
  const auto B = c.microbatch_size, T = c.seq_len + 1, V = c.model.vocab_size;
  auto start = at::randint(V, {B, 1}, gen, at::kLong);
  auto stride = at::randint(1, 4, {B, 1}, gen, at::kLong);
  auto tokens = (start + stride * at::arange(T, at::kLong)).remainder(V);
  auto noise = at::randint(V, {B, T}, gen, at::kLong);
  auto noisy = at::rand({B, T}, gen) < 0.1;
  tokens = at::where(noisy, noise, tokens);
  return {tokens.narrow(1, 0, c.seq_len).to(device).contiguous(), tokens.narrow(1, 1, c.seq_len).to(device).contiguous()};
}

// One parameter as this rank holds it.
struct Param {
  std::string name;
  at::Tensor compute;  // the module's parameter: what the forward reads and the backward fills
  at::Tensor owned;    // what this rank keeps and updates: `compute` itself, or its zero3 shard
  probe::Shard shard;  // where `owned` sits in the whole parameter (zero3); empty otherwise
  std::vector<std::int64_t> full_shape;
};

std::uint64_t fingerprint(const at::Tensor& t) {
  auto c = t.detach().contiguous();
  const auto* bytes = static_cast<const unsigned char*>(c.const_data_ptr());
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the raw bytes: bitwise identity
  for (std::size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  return h;
}

// The rank's device: the CPU, or the GPU of its local rank (torchrun's LOCAL_RANK).
at::Device device_of(const Config& c) {
  if (c.device == "cpu") return at::Device(at::kCPU);
  const char* local_rank = std::getenv("LOCAL_RANK");
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank ? std::atoi(local_rank) : 0));
}

class Trainer {
 public:
  Trainer(Config config, ProcessGroups& groups, probe::Probe& probe, Fault fault)
      : config_(std::move(config)), groups_(groups), probe_(probe), fault_(std::move(fault)) {
    zero3_ = config_.setup == "zero3";
    device_ = device_of(config_);
    if (config_.microbatches % groups_.dp_size != 0)
      throw std::invalid_argument("--microbatches " + std::to_string(config_.microbatches) +
                                  " is not divisible by the data-parallel size " + std::to_string(groups_.dp_size));
    if (config_.model.n_layers < groups_.stages)
      throw std::invalid_argument("more pipeline stages than layers");
    // Stage s holds layers [s*L/S, (s+1)*L/S).
    const auto L = config_.model.n_layers;
    model_ = Transformer(config_.model, groups_.stage * L / groups_.stages, (groups_.stage + 1) * L / groups_.stages);
    moe::init_weights(model_, config_.rng_seed);
    if (fault_.kind == Fault::Kind::init) initialize_from_another_seed(fault_.param);
    // Module constructors drew from the default generator, differently per stage; reset it so
    // its fingerprint (the probe's `rng cpu` record) is the same on every rank and setup.
    at::manual_seed(config_.rng_seed);
    model_->to(device_);  // initialised on the CPU: the same values on every device
    model_->train();

    for (auto& item : model_->named_parameters()) {
      Param p;
      p.name = item.key();
      p.compute = item.value();
      p.full_shape = p.compute.sizes().vec();
      if (zero3_) shard(p);
      else p.owned = p.compute;
      params_.push_back(std::move(p));
    }
    make_optimizer();
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
        std::printf("step %lld  loss %.6f  probe %.3f ms  time %.2f ms\n", static_cast<long long>(step), loss,
                    probe_ms_, ms);
      std::fflush(stdout);
    }
    if (groups_.rank == 0 && config_.steps > 1)
      std::printf("mean step time (steps 1-%lld): %.3f ms\n", static_cast<long long>(config_.steps - 1),
                  total_ms / static_cast<double>(config_.steps - 1));
    if (!config_.params_out.empty()) write_parameters();
  }

 private:
  static double milliseconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }

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
    if (zero3_) gather_parameters();
    auto losses = at::zeros({config_.microbatches}, at::kDouble);
    pipeline(step, losses);
    if (fault_.kind == Fault::Kind::nan && fault_.step == step) inject_nan();
    reduce_gradients();
    if (zero3_) release_parameters();

    // Every microbatch's loss was computed on exactly one rank: the sum over ranks is exact,
    // and summing it in microbatch order gives the same step loss in every setup.
    if (device_.is_cpu()) {
      groups_.world.all_reduce_sum(losses);
    } else {  // NCCL reduces device tensors
      auto on_device = losses.to(device_);
      groups_.world.all_reduce_sum(on_device);
      losses = on_device.cpu();
    }
    double loss = 0;
    for (std::int64_t mb = 0; mb < config_.microbatches; ++mb) loss += losses[mb].item<double>();
    loss /= static_cast<double>(config_.microbatches);

    // A rank killed mid-run (tests): its peers log this step, it does not.
    if (config_.die_after_step >= 0 && step == config_.die_after_step + 1 && groups_.rank == config_.die_rank) std::raise(SIGKILL);

    if (fault_.kind == Fault::Kind::grads_none) {
      // The bug this project was started for: gradients logged after the optimizer step had
      // already cleared them, so every logged gradient is `none`.
      optimizer_step(step);
      zero_grad();
      in_probe([&] {
        probe_.scalar("loss", loss);
        probe_.end_step();
      });
    } else {
      in_probe([&] { probe_.scalar("loss", loss); });
      optimizer_step(step);
      in_probe([&] { probe_.end_step(); });  // every accumulated gradient, the optimizer state after the update
      zero_grad();
    }
    return loss;
  }

  // GPipe: this rank's microbatches all forward, then all backward in the same order (so that
  // accumulation order, and hence the accumulated gradient, matches `single`).
  void pipeline(std::int64_t step, at::Tensor& losses) {
    const bool first = model_->has_embedding(), last = model_->has_output();
    const auto per_rank = config_.microbatches / groups_.dp_size;
    struct InFlight {
      std::int64_t mb;
      at::Tensor input, output;  // output: the stage's activations, or the scaled loss on the last stage
    };
    std::vector<InFlight> in_flight;
    const std::vector<std::int64_t> activation_shape{config_.microbatch_size, config_.seq_len, config_.model.dim};

    for (std::int64_t i = 0; i < per_rank; ++i) {
      const std::int64_t mb = groups_.dp_rank * per_rank + i;  // the global microbatch id
      const DropoutRng rng{config_.rng_seed, step, mb,
                           fault_.kind == Fault::Kind::rng_per_rank ? groups_.rank : 0};
      const auto data = make_microbatch(config_, step, mb, device_);
      at::Tensor x;
      if (first) {
        x = data.inputs;
        probe_.begin_forward("model", mb, {x});
      } else {
        x = at::empty(activation_shape, device_);
        groups_.pp.recv(x, groups_.stage - 1, forward_tag(mb));
        x.requires_grad_(true);
        probe_.begin_forward("model", mb, {});  // the model's input lives on stage 0
      }
      if (probe_.enabled())
        for (auto layer = model_->first_layer; layer < model_->last_layer; ++layer)
          probe_.record(probe::Kind::rng, "layers." + std::to_string(layer) + ".dropout", mb,
                        rng.for_layer(layer).get_state());
      auto y = model_->forward(x, rng);
      if (last) {
        probe_.record_output("model", mb, y);
        auto loss = at::cross_entropy_loss(y.reshape({-1, config_.model.vocab_size}), data.targets.reshape({-1}));
        probe_.record(probe::Kind::output, "loss", mb, loss);
        losses[mb] = loss.item<double>();
        in_flight.push_back({mb, x, loss / static_cast<double>(config_.microbatches)});
      } else {
        auto activations = y.detach().contiguous();
        groups_.pp.send(activations, groups_.stage + 1, forward_tag(mb));
        in_flight.push_back({mb, x, y});
      }
    }

    for (auto& f : in_flight) {
      backward_microbatch_ = f.mb;
      if (last) {
        probe_.backward(f.mb, f.output);
      } else {
        auto grad = at::empty(activation_shape, device_);
        groups_.pp.recv(grad, groups_.stage + 1, backward_tag(f.mb));
        probe_.backward(f.mb, f.output, grad);
      }
      if (!first) {
        auto input_grad = f.input.grad().contiguous();
        groups_.pp.send(input_grad, groups_.stage - 1, backward_tag(f.mb));
      }
    }
  }
  static int forward_tag(std::int64_t mb) { return static_cast<int>(2 * mb); }
  static int backward_tag(std::int64_t mb) { return static_cast<int>(2 * mb + 1); }

  // ddp: all-reduce; zero3: reduce-scatter into the shard's gradient; pp: each stage owns its
  // parameters, nothing to do.
  void reduce_gradients() {
    for (auto& p : params_) {
      auto grad = p.compute.grad();
      if (!grad.defined()) continue;
      const bool skip = fault_.kind == Fault::Kind::skip_reduce && p.name == fault_.param;
      if (zero3_) {
        at::Tensor shard_grad;
        if (skip) {
          shard_grad = grad.narrow(0, p.shard.offset[0], p.owned.size(0)).clone();
        } else {
          shard_grad = at::empty_like(p.owned);
          auto full = grad.contiguous();
          groups_.dp.reduce_scatter_sum(shard_grad, full);
        }
        p.owned.mutable_grad() = shard_grad;
      } else if (!skip) {
        groups_.dp.all_reduce_sum(grad);
      }
    }
  }

  // A NaN enters the named parameter's gradient on the first data-parallel rank that holds it,
  // before the gradient reduction spreads it.
  void inject_nan() {
    if (groups_.dp_rank != 0) return;
    for (auto& p : params_)
      if (p.name == fault_.param && p.compute.grad().defined())
        p.compute.grad().view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  }

  // The optimizer over what this rank owns: element-wise updates, so a zero3 shard is updated
  // bit for bit like the same rows of the whole parameter (every row count here is a multiple
  // of the vector width, so no element falls in a loop's scalar tail in one layout only).
  void make_optimizer() {
    std::vector<at::Tensor> owned;
    for (const auto& p : params_) owned.push_back(p.owned);
    if (config_.optimizer == "sgd")
      optimizer_ = std::make_unique<torch::optim::SGD>(owned, torch::optim::SGDOptions(config_.lr).momentum(config_.momentum));
    else if (config_.optimizer == "adamw")
      optimizer_ = std::make_unique<torch::optim::AdamW>(
          owned, torch::optim::AdamWOptions(config_.lr).weight_decay(config_.weight_decay));
    else
      throw std::invalid_argument("--optimizer '" + config_.optimizer + "': expected sgd or adamw");
  }

  // --fault lr=<step>:<factor> scales the learning rate of that step's update alone.
  void optimizer_step(std::int64_t step) {
    const bool scaled = fault_.kind == Fault::Kind::lr && fault_.step == step;
    auto set_lr = [&](double factor) {
      for (auto& group : optimizer_->param_groups()) group.options().set_lr(config_.lr * factor);
    };
    if (scaled) set_lr(fault_.factor);
    optimizer_->step();
    if (scaled) set_lr(1);
  }

  // --fault init=<param>: that parameter (if this stage holds it) drawn from another seed.
  void initialize_from_another_seed(const std::string& name) {
    for (auto& item : model_->named_parameters())
      if (item.key() == name) moe::init_parameter(name, item.value(), config_.rng_seed + 1);
  }

  void zero_grad() {
    for (auto& p : params_) {
      p.compute.mutable_grad().reset();
      p.owned.mutable_grad().reset();
    }
  }

  // zero3: this rank keeps rows [rank*n, (rank+1)*n) of every parameter.
  void shard(Param& p) {
    const auto rows = p.full_shape.at(0), ranks = static_cast<std::int64_t>(groups_.dp_size);
    if (rows % ranks != 0)
      throw std::invalid_argument("zero3: " + p.name + " has " + std::to_string(rows) +
                                  " rows, not divisible by " + std::to_string(ranks) +
                                  " ranks (choose sizes that are)");
    const auto n = rows / ranks, begin = groups_.dp_rank * n;
    p.owned = p.compute.detach().narrow(0, begin, n).clone().requires_grad_(true);
    p.shard = probe::Shard::along(p.full_shape, 0, begin);
    release(p);
  }
  void gather_parameters() {
    at::NoGradGuard no_grad;
    for (auto& p : params_) {
      auto full = at::empty(p.full_shape, p.owned.options().requires_grad(false));
      auto mine = p.owned.detach();
      groups_.dp.all_gather(full, mine);
      p.compute.set_data(full);
    }
  }
  void release_parameters() {
    for (auto& p : params_) release(p);
  }
  static void release(Param& p) {
    p.compute.mutable_grad().reset();
    p.compute.set_data(at::empty({0}, p.owned.options().requires_grad(false)));
  }

  // Whole parameters' mb_grad records, and each rank's accumulated gradient (its zero3 shard)
  // as `grad` records the differ composes back into the whole.
  void watch_parameters() {
    if (!zero3_) {
      probe_.watch(*model_);
      return;
    }
    for (auto& p : params_) {
      probe_.watch_parameter(p.name, p.owned, p.shard);
      // The gathered parameter is what the backward reaches: one whole-parameter contribution
      // per microbatch, comparable with every other setup.
      if (probe_.enabled() && probe_.options().kinds.contains(probe::Kind::mb_grad))
        p.compute.register_hook([this, name = p.name](const at::Tensor& grad) {
          probe_.record(probe::Kind::mb_grad, name, backward_microbatch_, grad);
        });
    }
  }

  void write_parameters() {
    std::filesystem::create_directories(config_.params_out);
    std::ofstream out(std::filesystem::path(config_.params_out) / ("rank" + std::to_string(groups_.rank) + ".txt"));
    for (const auto& p : params_) {
      out << p.name;
      for (auto o : p.shard.offset) out << " @" << o;
      out << " " << std::hex << fingerprint(p.owned.cpu()) << std::dec << "\n";
    }
  }

  Config config_;
  ProcessGroups& groups_;
  probe::Probe& probe_;
  Fault fault_;
  bool zero3_ = false;
  at::Device device_{at::kCPU};
  Transformer model_{nullptr};
  std::vector<Param> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::int64_t backward_microbatch_ = 0;
  double probe_ms_ = 0;  // this step's time in in_probe() calls
};

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

// moe_train's flags, their defaults written once (CLI11 prints them with --help).
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
  auto& m = c.model;
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

// --fault op / op-backward: the model computes that layer's softmax another way.
void apply_op_fault(const Fault& fault, ModelArgs& model) {
  if (fault.kind != Fault::Kind::op && fault.kind != Fault::Kind::op_backward) return;
  model.alt_softmax = fault.kind == Fault::Kind::op ? ModelArgs::AltSoftmax::forward : ModelArgs::AltSoftmax::backward;
  model.alt_softmax_layer = fault.layer;
}

// The probe's options: this run's defaults, PROBE_* variables over them, flags given on the
// command line over both.
probe::ProbeOptions probe_options(const Config& c, const CLI::App& app, const ProcessGroups& groups) {
  probe::ProbeOptions defaults;
  defaults.enabled = c.probe;
  defaults.kinds = probe::KindSet::parse(c.probe_kinds);
  defaults.rank = groups.rank;
  defaults.world_size = groups.world_size;
  std::ostringstream setup;
  setup << c.setup << " x" << groups.world_size << " (" << groups.stages << " stages x " << groups.dp_size
        << " dp, " << groups.backend_name << "), " << c.optimizer << " lr " << c.lr << ", seed "
        << c.rng_seed << ", fault " << c.fault;
  defaults.setup = setup.str();
  probe::ProbeOptions options = probe::ProbeOptions::from_env(defaults);
  if (app.count("--out")) options.run_dir = c.out;
  if (app.count("--probe")) options.enabled = c.probe;
  if (app.count("--probe-kinds")) options.kinds = defaults.kinds;
  return options;
}

void print_banner(const Config& c, const probe::ProbeOptions& options, const probe::Probe& probe) {
  const auto& m = c.model;
  std::printf("moe_train: %s; %lld layers, dim %lld, %lld experts top-%lld; %lld microbatches x %lld x %lld tokens; probe %s\n",
              options.setup.c_str(), static_cast<long long>(m.n_layers), static_cast<long long>(m.dim),
              static_cast<long long>(m.n_experts), static_cast<long long>(m.top_k),
              static_cast<long long>(c.microbatches), static_cast<long long>(c.microbatch_size),
              static_cast<long long>(c.seq_len), probe.enabled() ? probe.run_dir().c_str() : "off");
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"moe_train: a tiny DeepSeek-V3-style MoE trained under one parallel setup, logged "
               "by the numprobe probe (docs/examples.md)"};
  add_options(app, c);
  CLI11_PARSE(app, argc, argv);
  if (!app.count("--lr") && c.optimizer == "adamw") c.lr = 1e-3;

  try {
    // One intra-op thread: CPU reductions then sum in one fixed order on every rank, and
    // K processes on K cores do not oversubscribe.
    at::set_num_threads(1);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    if (c.device != "cpu") ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);  // deterministic cuBLAS

    // The rank's GPU is the current device from here on: NCCL's communicators, its barrier and
    // every allocation without an explicit device go there, not to GPU 0.
    std::optional<c10::DeviceGuard> on_device;
    if (c.device != "cpu") on_device.emplace(device_of(c));
    const int world_size = std::getenv("WORLD_SIZE") ? std::atoi(std::getenv("WORLD_SIZE")) : 1;
    ProcessGroups groups = moe::init_process_groups(stages_for(c, world_size), c.device, c.backend_at_one_rank);
    // Before the probe makes its run directory: a bad --fault leaves nothing behind.
    Fault fault = Fault::parse(c.fault);
    check_fault(fault, c, groups);
    apply_op_fault(fault, c.model);

    const probe::ProbeOptions options = probe_options(c, app, groups);
    probe::Probe probe(options);
    if (groups.rank == 0) print_banner(c, options, probe);

    Trainer trainer(c, groups, probe, std::move(fault));
    trainer.train();
    groups.world.barrier();
  } catch (const c10::Error& e) {  // without LibTorch's C++ backtrace
    std::fprintf(stderr, "moe_train: error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
