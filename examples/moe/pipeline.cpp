#include "pipeline.h"

#include <ATen/ATen.h>

#include <string>

#include "data.h"
#include "probe/probe.h"

namespace moe {

Pipeline::Pipeline(const Config& config, Transformer model, ProcessGroups& groups,
                   probe::Probe& probe, c10::Device device, std::int64_t rank_salt)
    : config_(config),
      model_(std::move(model)),
      groups_(groups),
      probe_(probe),
      device_(device),
      rank_salt_(rank_salt),
      // Under sp a stage sends its sequence shard on, to the next stage's rank of the same shard.
      activation_shape_{config.microbatch_size,
                        config.sp ? config.seq_len / groups.tp_size : config.seq_len,
                        config.model.dim} {}

void Pipeline::run(std::int64_t step, at::Tensor& losses) {
  const auto per_rank = config_.microbatches / groups_.dp_size;
  std::vector<InFlight> in_flight;
  for (std::int64_t i = 0; i < per_rank; ++i) {
    const std::int64_t mb = groups_.dp_rank * per_rank + i;  // the global microbatch id
    in_flight.push_back(forward(step, mb, losses));
  }
  for (const auto& f : in_flight) backward(f);
}

// The last stage ends the microbatch with its loss, divided by the global microbatch count so
// that every mb_grad is the same tensor in every setup; other stages send their activations on.
Pipeline::InFlight Pipeline::forward(std::int64_t step, std::int64_t mb, at::Tensor& losses) {
  const DropoutRng rng{config_.rng_seed, step, mb, rank_salt_};
  const auto data = make_microbatch(config_, step, mb, device_);
  at::Tensor x = stage_input(mb, data);
  record_dropout_rng(mb, rng);
  auto y = model_->forward(x, rng);
  if (!model_->has_output()) {
    auto activations = y.detach().contiguous();
    groups_.pp.send(activations, groups_.stage + 1, forward_tag(mb));
    return {mb, x, y};
  }
  probe_.record_output("model", mb, y);
  // In float32 whatever the model computes in, as torchtitan's loss does.
  auto logits = y.reshape({-1, config_.model.vocab_size}).to(at::kFloat);
  auto loss = at::cross_entropy_loss(logits, data.targets.reshape({-1}));
  probe_.record(probe::Kind::output, "loss", mb, loss);
  // Every tp rank computed the same loss: one of them adds it to the step's.
  if (groups_.tp_rank == 0) losses[mb] = loss.item<double>();
  return {mb, x, loss / static_cast<double>(config_.microbatches)};
}

// The first stage reads the tokens; later ones receive the previous stage's activations.
at::Tensor Pipeline::stage_input(std::int64_t mb, const Microbatch& data) {
  if (model_->has_embedding()) {
    probe_.begin_forward("model", mb, {data.inputs});
    return data.inputs;
  }
  auto x = at::empty(activation_shape_, at::TensorOptions(device_).dtype(compute_dtype(config_)));
  groups_.pp.recv(x, groups_.stage - 1, forward_tag(mb));
  x.requires_grad_(true);
  probe_.begin_forward("model", mb, {});  // the model's input lives on stage 0
  return x;
}

void Pipeline::record_dropout_rng(std::int64_t mb, const DropoutRng& rng) {
  if (!probe_.enabled()) return;
  for (auto layer = model_->first_layer; layer < model_->last_layer; ++layer)
    probe_.record(probe::Kind::rng, "layers." + std::to_string(layer) + ".dropout", mb,
                  rng.for_layer(layer).get_state());
}

// The last stage starts from the loss; others from the gradient the next stage sends back.
// Every stage but the first sends its input's gradient on.
void Pipeline::backward(const InFlight& f) {
  backward_microbatch_ = f.mb;
  if (model_->has_output()) {
    probe_.backward(f.mb, f.output);
  } else {
    auto grad =
        at::empty(activation_shape_, at::TensorOptions(device_).dtype(compute_dtype(config_)));
    groups_.pp.recv(grad, groups_.stage + 1, backward_tag(f.mb));
    probe_.backward(f.mb, f.output, grad);
  }
  if (!model_->has_embedding()) {
    auto input_grad = f.input.grad().contiguous();
    groups_.pp.send(input_grad, groups_.stage - 1, backward_tag(f.mb));
  }
}

}  // namespace moe
