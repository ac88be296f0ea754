// The training data: synthetic token sequences, the same for a global microbatch in every setup.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "config.h"

namespace moe {

struct Microbatch {
  at::Tensor inputs, targets;  // [B, T] int64
};

// The tokens of global microbatch `mb` of `step`: the same in every setup. Each sequence
// counts up from a random token by a random stride (mod vocab), with some tokens replaced by
// noise, so the loss has something to learn.
Microbatch make_microbatch(const Config& c, std::int64_t step, std::int64_t mb, at::Device device);

}  // namespace moe
