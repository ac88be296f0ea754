// The probe's side of optimizer state: one parameter's entry in an optimizer, read by its
// class's reader. Private to the LibTorch layer (keeps torch/optim headers out of probe.cpp).
#pragma once

#include <optional>
#include <unordered_map>

#include "probe/optimizer_state.h"

namespace probe::detail {

// The state `optimizer` keeps for `parameter`, read with `reader`; nullopt when it keeps none
// (not stepped yet, or not one of its parameters).
std::optional<OptimizerState> optimizer_state_of(const torch::optim::Optimizer& optimizer,
                                                 const OptimizerStateReader& reader,
                                                 const at::Tensor& parameter);

// The learning rate of each parameter's group (OptimizerOptions::get_lr()), by TensorImpl: what
// the update just taken used. Groups whose options do not implement get_lr() are left out.
std::unordered_map<const c10::TensorImpl*, double> learning_rates(
    const torch::optim::Optimizer& optimizer);

}  // namespace probe::detail
