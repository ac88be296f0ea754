// Pipeline parallelism: this rank's stage of the model runs its microbatches by a GPipe
// schedule, activations and their gradients going to the neighbouring stages by send/recv over
// ProcessGroups::pp. With one stage this is plain gradient accumulation.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "config.h"
#include "model.h"
#include "parallel.h"

namespace probe {
class Probe;
}

namespace moe {

struct Microbatch;

class Pipeline {
 public:
  // `rank_salt` goes into every dropout seed (the rng-per-rank fault; 0 otherwise).
  Pipeline(const Config& config, Transformer model, ProcessGroups& groups, probe::Probe& probe,
           c10::Device device, std::int64_t rank_salt);

  // One step's microbatches of this data-parallel rank: all forward, then all backward in the
  // same order (so that accumulation order, and hence the accumulated gradient, matches
  // `single`). The last stage writes each microbatch's loss into losses[mb].
  void run(std::int64_t step, at::Tensor& losses);

  // The global id of the microbatch whose backward is running (zero3's mb_grad hooks name it).
  std::int64_t backward_microbatch() const { return backward_microbatch_; }

 private:
  struct InFlight {
    std::int64_t mb;
    // output: the stage's activations, or the scaled loss on the last stage
    at::Tensor input, output;
  };

  InFlight forward(std::int64_t step, std::int64_t mb, at::Tensor& losses);
  at::Tensor stage_input(std::int64_t mb, const Microbatch& data);
  void record_dropout_rng(std::int64_t mb, const DropoutRng& rng);
  void backward(const InFlight& f);

  static int forward_tag(std::int64_t mb) { return static_cast<int>(2 * mb); }
  static int backward_tag(std::int64_t mb) { return static_cast<int>(2 * mb + 1); }

  const Config& config_;
  Transformer model_;
  ProcessGroups& groups_;
  probe::Probe& probe_;
  c10::Device device_;
  std::int64_t rank_salt_;
  std::vector<std::int64_t> activation_shape_;  // [B, T, dim]: what goes between stages
  std::int64_t backward_microbatch_ = 0;
};

}  // namespace moe
