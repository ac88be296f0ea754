// probe::Probe: hooks on a LibTorch model that record, per step, a hash and health statistics
// of every parameter's value, every microbatch's forward input/output, output gradient,
// per-microbatch parameter gradient, accumulated parameter gradient, the optimizer's state,
// named taps and scalars, plus an RNG fingerprint, into <run_dir>/rank<R>/diff.log
// (docs/log-format.md).
//
// The observer does not perturb: it consumes no randomness, its hooks return nothing, and it
// never syncs the host per tensor (device figures are copied back once, at end_step()).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "probe/partial.h"
#include "probe/probe_options.h"
#include "probe/record.h"
#include "probe/scope.h"
#include "probe/shard.h"
#include "probe/tensor_stats.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}
namespace probe::detail {
struct ProbeImpl;   // the probe's state (probe.cpp)
struct ProbeHooks;  // the Python package's entry points (probe/detail/probe_hooks.h)
}  // namespace probe::detail

namespace probe {

// The global microbatches one backward's gradient covers, given the backward's microbatch
// (Probe::watch_parameter).
using MicrobatchCover = std::function<std::vector<std::int64_t>(std::int64_t microbatch)>;

class Probe {
 public:
  // Opens the log (when enabled). When it cannot: with on_error = throw, throws
  // std::runtime_error naming the path; by default reports it and records nothing.
  explicit Probe(ProbeOptions options = ProbeOptions::from_env());
  ~Probe();
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  // Whether it records: enabled in its options, and its log has not failed.
  bool enabled() const;
  // The error that stopped recording (a log that could not be written), or empty.
  std::string log_error() const;
  const ProbeOptions& options() const;
  // <run_dir>/rank<R>/diff.log (empty when disabled).
  const std::filesystem::path& log_path() const;
  const std::filesystem::path& run_dir() const;

  // Hooks every parameter of `module`, named `prefix` + its named_parameters() name; a tensor
  // registered under several names (tied weights) is watched under the first, and the others are
  // its other names (tie). `shards`
  // names the parameters that are shards of a global tensor (ZeRO-3, tensor parallel); a name
  // that is no parameter is an error. Watching again is harmless: a parameter already watched
  // stays watched once, and a new tensor under a watched name (a rebuilt model) replaces the
  // old one. A parameter that does not require grad when watched gets no mb_grad hook (its
  // .grad() is still recorded at end_step).
  void watch(const torch::nn::Module& module, const std::string& prefix = "",
             const std::vector<std::pair<std::string, Shard>>& shards = {});
  // `mb_grad_partial`: each per-microbatch gradient this rank sees is that summand of the
  // microbatch's gradient (a weight computed on sequence shards, a norm under sequence
  // parallelism, whose ranks each see a
  // sequence shard until a tensor-parallel all-reduce sums them); its mb_grad records say so.
  // `mb_grad_covers`: the global microbatches one backward's gradient covers, given the
  // microbatch the backward runs (ascending, at least two, its own among them; expert
  // parallelism: an expert's backward sees the tokens of every rank of its group); each
  // mb_grad record then carries them as `covers` and the first as its microbatch. Unset: the
  // backward's own microbatch alone.
  void watch_parameter(const std::string& name, const at::Tensor& parameter, Shard shard = {},
                       Partial mb_grad_partial = {}, MicrobatchCover mb_grad_covers = {});
  // Records `alias` as another name of the watched parameter `name`: one tensor under both names
  // (a head tied to its embedding). Its param records list the alias (`tied=`), so a run that
  // holds them as two parameters is told as having untied them (docs/log-format.md). Tying again
  // is harmless; an empty name, or a name tied to itself, is std::invalid_argument.
  void tie(const std::string& alias, const std::string& name);

  // Records, at every end_step(), the optimizer's state of each watched parameter it holds
  // (kind `optim`): its state tensors as `<param>.<state>` (Adam/AdamW exp_avg, exp_avg_sq,
  // max_exp_avg_sq; SGD momentum_buffer; RMSprop square_avg, momentum_buffer, grad_avg;
  // Adagrad sum), each with the parameter's Shard when it has the parameter's shape (a ZeRO
  // optimizer over shards keeps sharded state), and its update count as the scalar
  // `<param>.step`. Call optimizer.step() before end_step(). The optimizer must outlive the
  // probe's use of it; watching it again is harmless. Another optimizer class needs a reader
  // (probe::register_optimizer_state, probe/optimizer_state.h): without one this throws
  // std::invalid_argument naming the class. A no-op when the probe is disabled.
  void watch_optimizer(const torch::optim::Optimizer& optimizer);

  // Steps: begin_step(n) names the step; without it steps count 0, 1, ... per end_step(). Steps
  // are >= 0 and only go forward within one log (std::invalid_argument otherwise).
  // begin_step() also records every watched parameter's value (kind `param`): the weights this
  // step's forward reads, so step 0's are the initialization. Call it before the step's first
  // forward (and, under ZeRO, with the shards the probe watches up to date).
  void begin_step(std::int64_t step);
  // Records every watched parameter's .grad() (or `none`) and the watched optimizers' state,
  // resolves device figures with one copy per device, and returns once the step's lines reached
  // the OS. Call it after the step's backward passes returned (hooks of a backward still running
  // would land in the next step) and after optimizer.step() when an optimizer is watched.
  // A write error stops recording (ProbeOptions::on_error says whether it also throws).
  void end_step();
  std::int64_t step() const;

  // Runs `module->forward(args...)` for global microbatch `microbatch`, recording the RNG
  // fingerprint and tensor inputs before it and the output (and its gradient) after, inside a
  // root probe::Scope named `name` (op records of ops outside the model's own scopes). Tensors
  // inside std::vector, std::tuple and std::pair arguments and results count too; several are
  // named `name.0`, `name.1`, ... in order.
  template <class ModuleHolder, class... Args>
  auto forward(std::int64_t microbatch, ModuleHolder& module, Args&&... args) {
    return forward_named(options().model_name, microbatch, module, std::forward<Args>(args)...);
  }
  template <class ModuleHolder, class... Args>
  auto forward_named(const std::string& name, std::int64_t microbatch, ModuleHolder& module,
                     Args&&... args) {
    begin_forward(name, microbatch, tensor_args(args...));
    auto output = [&] {
      Scope scope(Scope::Root{}, name);
      return module->forward(std::forward<Args>(args)...);
    }();
    std::vector<at::Tensor> outputs;
    append_tensors(outputs, output);
    for (std::size_t i = 0; i < outputs.size(); ++i)
      record_output(outputs.size() == 1 ? name : name + "." + std::to_string(i), microbatch,
                    outputs[i]);
    return output;
  }

  // The pieces forward() is made of, for trainers that run stages by hand (pipelines).
  void begin_forward(const std::string& name, std::int64_t microbatch,
                     const std::vector<at::Tensor>& inputs);
  // `shards`, `partials`: empty, or one per input (inputs that are pieces of a global tensor).
  // An overload, not default arguments: trainers built against the three-argument one keep it.
  void begin_forward(const std::string& name, std::int64_t microbatch,
                     const std::vector<at::Tensor>& inputs, const std::vector<Shard>& shards,
                     const std::vector<Partial>& partials);
  void record_output(const std::string& name, std::int64_t microbatch, const at::Tensor& output);

  // Backward of global microbatch `microbatch`: mb_grad records of this backward carry its id.
  // Without it, they carry the microbatch of the latest forward. Backward ops are traced only
  // inside this call.
  void backward(std::int64_t microbatch, const at::Tensor& root, const at::Tensor& grad = {});
  void set_backward_microbatch(std::int64_t microbatch);

  // A named intermediate tensor of the current forward microbatch (see also probe::tap).
  // `partial`: the tensor is that summand of the tapped value (a tensor-parallel rank's partial
  // product before the row-parallel reduction).
  void tap(const std::string& name, const at::Tensor& t, const Shard& shard = {},
           Partial partial = {});
  // Named values of this step (loss, grad_norm, lr). A one-element tensor's value is taken now
  // (on a device: copied there, no host sync) and read back with the step's figures at end_step().
  // A tensor without elements has no value: its record carries the tensor's figures (hash 0).
  void scalar(const std::string& name, double value);
  void scalar(const std::string& name, const at::Tensor& value);

  // Any tensor under an explicit kind (for trainers with their own hooks). `covers`: empty, or
  // the global microbatches the record covers (see watch_parameter), `microbatch` among them.
  void record(Kind kind, const std::string& name, std::optional<std::int64_t> microbatch,
              const at::Tensor& t, const Shard& shard = {}, Partial partial = {},
              std::vector<std::int64_t> covers = {});

  // Code a compiler generated (torch.compile) runs in the current step: its fused kernels may
  // round otherwise than eager ones, which the differ allows for in a comparison with a run that
  // ran other code (the step's end says so, log format 9). The Python package calls it for a
  // compiled module's forward; the numprobe::tap operator for a tap inside a compiled graph.
  void note_compiled();
  // Whether the current step records `kind` (enabled, in the kinds, a step `every` selects):
  // lets a trainer's own hooks skip work the probe would drop.
  bool records(Kind kind) const;

  friend struct detail::ProbeHooks;

 private:
  template <class T>
  struct IsTuple : std::false_type {};
  template <class... T>
  struct IsTuple<std::tuple<T...>> : std::true_type {};
  template <class A, class B>
  struct IsTuple<std::pair<A, B>> : std::true_type {};

  // The tensors of a forward argument or result, in order: a tensor, a std::vector of tensors,
  // or the tensor elements of a std::tuple / std::pair (other values hold none).
  template <class T>
  static void append_tensors(std::vector<at::Tensor>& tensors, const T& value) {
    if constexpr (std::is_convertible_v<const T&, const at::Tensor&>) {
      tensors.push_back(value);
    } else if constexpr (std::is_convertible_v<const T&, const std::vector<at::Tensor>&>) {
      const std::vector<at::Tensor>& elements = value;
      tensors.insert(tensors.end(), elements.begin(), elements.end());
    } else if constexpr (IsTuple<T>::value) {
      std::apply([&](const auto&... element) { (append_tensors(tensors, element), ...); }, value);
    }
  }
  template <class... Args>
  static std::vector<at::Tensor> tensor_args(const Args&... args) {
    std::vector<at::Tensor> tensors;
    (append_tensors(tensors, args), ...);
    return tensors;
  }

  void set_step(std::int64_t step);  // begin_step's checks and bookkeeping, without recording

  // The Python package's entry points (through detail::ProbeHooks): it runs autograd, reads
  // optimizer state and hooks gradients itself.
  // begin_backward() names the microbatch and starts tracing backward ops (when the
  // trace setting says so), end_backward() stops it. One at a time, on one thread.
  void begin_backward(std::int64_t microbatch);
  void end_backward();
  // A later pipeline stage's forward of `microbatch`: names it, records nothing.
  void continue_forward(const std::string& name, std::int64_t microbatch);
  // A scalar record of another kind: an optimizer's update count (`optim`).
  void record_scalar(Kind kind, const std::string& name, double value);
  void record_scalar(Kind kind, const std::string& name, const at::Tensor& value);
  // A parameter's gradient from a hook of the package's own, recorded as watch_parameter's hook
  // records it: kind `mb_grad`, the running backward's microbatch.
  void record_mb_grad(const std::string& name, const at::Tensor& grad, const Shard& shard = {},
                      Partial partial = {});

  void start_op_trace();
  // shared: hooks hold it weakly, autograd may outlive the probe
  std::shared_ptr<detail::ProbeImpl> impl_;
};

// Records `t` as a tap of the active probe (the most recently constructed enabled one), with
// its shard or as a summand (Probe::tap); a no-op when there is none.
void tap(const std::string& name, const at::Tensor& t, const Shard& shard = {},
         Partial partial = {});
// Probe::note_compiled of the active probe; a no-op when there is none.
void note_compiled();

}  // namespace probe
