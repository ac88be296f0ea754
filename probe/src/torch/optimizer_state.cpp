// The readers of LibTorch's optimizer state (torch/optim/*.h, the same in LibTorch 2.4 and
// 2.13) and the registry watch_optimizer() looks an optimizer's class up in.
#include "probe/optimizer_state.h"

#include <c10/util/Type.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "optimizer_lookup.h"

namespace probe {
namespace {

struct Entry {
  std::string class_name;
  OptimizerStateReader reader;
};

// Adam and AdamW keep the same state; max_exp_avg_sq is defined with amsgrad only.
template <class State>
OptimizerState adam_like(const State& s) {
  return {{{"exp_avg", s.exp_avg()},
           {"exp_avg_sq", s.exp_avg_sq()},
           {"max_exp_avg_sq", s.max_exp_avg_sq()}},
          s.step()};
}

std::map<std::type_index, Entry> built_in_readers() {
  std::map<std::type_index, Entry> readers;
  auto add = [&]<class OptimizerT, class StateT>(const char* name,
                                                 OptimizerState (*read)(const StateT&)) {
    readers.emplace(std::type_index(typeid(OptimizerT)),
                    Entry{name, [read](const torch::optim::OptimizerParamState& s) {
                            return read(static_cast<const StateT&>(s));
                          }});
  };
  add.operator()<torch::optim::Adam, torch::optim::AdamParamState>(
      "torch::optim::Adam", adam_like<torch::optim::AdamParamState>);
  add.operator()<torch::optim::AdamW, torch::optim::AdamWParamState>(
      "torch::optim::AdamW", adam_like<torch::optim::AdamWParamState>);
  // SGD keeps no step count; momentum_buffer is defined with momentum != 0 only.
  add.operator()<torch::optim::SGD, torch::optim::SGDParamState>(
      "torch::optim::SGD", [](const torch::optim::SGDParamState& s) {
        return OptimizerState{{{"momentum_buffer", s.momentum_buffer()}}, {}};
      });
  // momentum_buffer with momentum > 0, grad_avg when centered.
  add.operator()<torch::optim::RMSprop, torch::optim::RMSpropParamState>(
      "torch::optim::RMSprop", [](const torch::optim::RMSpropParamState& s) {
        return OptimizerState{{{"square_avg", s.square_avg()},
                               {"momentum_buffer", s.momentum_buffer()},
                               {"grad_avg", s.grad_avg()}},
                              s.step()};
      });
  add.operator()<torch::optim::Adagrad, torch::optim::AdagradParamState>(
      "torch::optim::Adagrad", [](const torch::optim::AdagradParamState& s) {
        return OptimizerState{{{"sum", s.sum()}}, s.step()};
      });
  return readers;
}

struct Registry {
  std::mutex mutex;
  std::map<std::type_index, Entry> readers = built_in_readers();
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_optimizer_state(std::type_index optimizer_type, std::string class_name,
                              OptimizerStateReader reader) {
  if (!reader) throw std::invalid_argument("numprobe: register_optimizer_state(): empty reader");
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.readers.insert_or_assign(optimizer_type,
                             Entry{c10::demangle(class_name.c_str()), std::move(reader)});
}

OptimizerStateReader optimizer_state_reader(const torch::optim::Optimizer& optimizer) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  // Exactly the dynamic type: a subclass may keep other state than its base.
  const auto it = r.readers.find(std::type_index(typeid(optimizer)));
  if (it == r.readers.end())
    throw std::invalid_argument(
        "numprobe: watch_optimizer(): no state reader for optimizer class '" +
        c10::demangle(typeid(optimizer).name()) +
        "' (built in: torch::optim::Adam, AdamW, SGD, RMSprop, Adagrad); register one with "
        "probe::register_optimizer_state<Optimizer, ParamState>(reader) (probe/optimizer_state.h)");
  return it->second.reader;  // a copy: a later registration may replace the entry
}

}  // namespace probe

namespace probe::detail {

std::optional<OptimizerState> optimizer_state_of(const torch::optim::Optimizer& optimizer,
                                                 const OptimizerStateReader& reader,
                                                 const at::Tensor& parameter) {
  // LibTorch keys an optimizer's state by the parameter's TensorImpl.
  const auto& state = optimizer.state();
  const auto it = state.find(parameter.unsafeGetTensorImpl());
  if (it == state.end() || !it->second) return std::nullopt;
  return reader(*it->second);
}

std::unordered_map<const c10::TensorImpl*, double> learning_rates(
    const torch::optim::Optimizer& optimizer) {
  std::unordered_map<const c10::TensorImpl*, double> lr;
  for (const auto& group : optimizer.param_groups()) {
    if (!group.has_options()) continue;
    double value = 0;
    try {
      value = group.options().get_lr();
    } catch (const c10::Error&) {
      continue;  // an options class of its own that does not implement get_lr()
    }
    for (const auto& t : group.params()) lr.emplace(t.unsafeGetTensorImpl(), value);
  }
  return lr;
}

}  // namespace probe::detail
