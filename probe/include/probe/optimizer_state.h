// What Probe::watch_optimizer() reads of an optimizer: per parameter, its state tensors by name
// (exp_avg, momentum_buffer, ...) and its step count. Readers for LibTorch's Adam, AdamW, SGD,
// RMSprop and Adagrad are built in; register_optimizer_state<Optimizer, ParamState>() adds one
// for another optimizer class (docs/log-format.md, kind `optim`).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <typeindex>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace probe {

// One parameter's optimizer state. Undefined tensors (a state the configuration does not use,
// such as max_exp_avg_sq without amsgrad) are left out of the log.
struct OptimizerState {
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // (state name, tensor), in log order
  std::optional<std::int64_t> step;                         // the parameter's update count
};

// Reads the state of one parameter; `state` is the optimizer's entry for it (never null).
using OptimizerStateReader =
    std::function<OptimizerState(const torch::optim::OptimizerParamState& state)>;

// Registers `reader` for optimizers whose dynamic type is exactly `optimizer_type`, replacing
// an earlier one. Thread-safe. Prefer the template below.
void register_optimizer_state(std::type_index optimizer_type, std::string class_name,
                              OptimizerStateReader reader);

// register_optimizer_state<MyOptimizer, MyParamState>([](const MyParamState& s) { ... }):
// the reader gets the parameter's state as the optimizer's own ParamState class.
template <class OptimizerT, class ParamStateT, class Reader>
void register_optimizer_state(Reader reader) {
  register_optimizer_state(
      std::type_index(typeid(OptimizerT)), typeid(OptimizerT).name(),
      [reader = std::move(reader)](const torch::optim::OptimizerParamState& state) {
        return reader(static_cast<const ParamStateT&>(state));
      });
}

// The reader registered (or built in) for the optimizer's dynamic type. Throws
// std::invalid_argument naming the class when there is none.
OptimizerStateReader optimizer_state_reader(const torch::optim::Optimizer& optimizer);

}  // namespace probe
