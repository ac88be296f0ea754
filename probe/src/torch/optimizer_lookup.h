// The probe's side of optimizer state: one parameter's entry in an optimizer, read by its
// class's reader. Private to the LibTorch layer (keeps torch/optim headers out of probe.cpp).
#pragma once

#include <optional>

#include "probe/optimizer_state.h"

namespace probe::detail {

// The state `optimizer` keeps for `parameter`, read with `reader`; nullopt when it keeps none
// (not stepped yet, or not one of its parameters).
std::optional<OptimizerState> optimizer_state_of(const torch::optim::Optimizer& optimizer,
                                                 const OptimizerStateReader& reader,
                                                 const at::Tensor& parameter);

}  // namespace probe::detail
