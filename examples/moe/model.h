// A tiny DeepSeek-V3-style transformer (multi-head latent attention, top-k routed mixture of
// experts with a shared expert) in the LibTorch C++ frontend, with the parameter names such
// models have in torchtitan, so that numprobe logs from this example read like real ones.
//
// One Transformer holds a contiguous range of layers: the whole model for `single`, `ddp` and
// `zero3`, one pipeline stage for `pp`. Layers keep their global index in their names
// (`layers.<i>...`), so every layout logs the same names.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <memory>
#include <string>

#include "model_args.h"
#include "expert_parallel.h"
#include "tensor_parallel.h"

namespace moe {

// Dropout randomness of one global microbatch: every layer draws from its own generator,
// seeded from (seed, step, microbatch, layer), so the masks do not depend on which rank or
// pipeline stage runs the microbatch. `rank_salt` is 0 unless the rng-per-rank fault is on.
struct DropoutRng {
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  std::int64_t microbatch = 0;
  std::int64_t rank_salt = 0;
  at::Generator for_layer(std::int64_t layer) const;
};

// A deterministic 64-bit mix of a few integers (splitmix64 steps): seeds derived from it are
// the same on every rank and in every layout.
std::uint64_t mix_seed(std::uint64_t seed, std::initializer_list<std::uint64_t> values);

struct RMSNormImpl : torch::nn::Module {
  explicit RMSNormImpl(std::int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

// Multi-head latent attention without query compression (DeepSeek-V3's q_lora_rank = 0).
struct AttentionImpl : torch::nn::Module {
  AttentionImpl(const ModelArgs& args, std::int64_t layer);
  at::Tensor forward(const at::Tensor& x);
  ModelArgs args;
  std::int64_t layer;
  torch::nn::Linear wq{nullptr}, wkv_a{nullptr}, wkv_b{nullptr}, wo{nullptr};
  RMSNorm kv_norm{nullptr};
  std::shared_ptr<const TensorParallel> tp;  // null: whole heads

 private:
  // This rank's heads of the tensor-parallel layout: x is its sequence shard (sp) or the whole
  // sequence; returns the same.
  at::Tensor forward_tensor_parallel(const at::Tensor& x);
  // Scores, softmax and values of `heads` heads: [B, T, heads * v_head_dim], before wo.
  at::Tensor attend(const at::Tensor& q_nope, const at::Tensor& q_rope, const at::Tensor& k_nope,
                    const at::Tensor& k_rope, const at::Tensor& v, std::int64_t heads);
};
TORCH_MODULE(Attention);

// SwiGLU feed-forward: w2(silu(w1 x) * w3 x).
struct FeedForwardImpl : torch::nn::Module {
  FeedForwardImpl(std::int64_t dim, std::int64_t hidden_dim);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

struct RouterImpl : torch::nn::Module {
  RouterImpl(std::int64_t dim, std::int64_t n_experts);
  torch::nn::Linear gate{nullptr};
};
TORCH_MODULE(Router);

// The routed experts' weights, batched over experts: w1, w3 [E, hidden, dim], w2 [E, dim, hidden].
struct GroupedExpertsImpl : torch::nn::Module {
  GroupedExpertsImpl(std::int64_t dim, std::int64_t hidden_dim, std::int64_t n_experts);
  at::Tensor w1, w2, w3;
};
TORCH_MODULE(GroupedExperts);

struct MoEImpl : torch::nn::Module {
  MoEImpl(const ModelArgs& args, std::int64_t layer);
  at::Tensor forward(const at::Tensor& x);
  ModelArgs args;
  std::int64_t layer;
  Router router{nullptr};
  GroupedExperts experts{nullptr};
  FeedForward shared_experts{nullptr};
  std::shared_ptr<const TensorParallel> tp;  // null: the whole shared expert
  std::shared_ptr<const ExpertParallel> ep;  // null: every routed expert on this rank

 private:
  // Each token's top-k experts and their weights [N, k].
  std::pair<at::Tensor, at::Tensor> route(const at::Tensor& tokens);
  at::Tensor routed_experts(const at::Tensor& tokens);
  // Expert `e` of those this rank holds on its tokens x [n, dim].
  at::Tensor expert(std::int64_t e, const at::Tensor& x);
  // The routed experts split over the ep ranks: tokens dispatched, computed, combined back.
  at::Tensor routed_expert_parallel(const at::Tensor& tokens, const at::Tensor& top_experts,
                                    const at::Tensor& weights);
  // This rank's experts on what a dispatch brought, each source's tokens of each expert apart.
  at::Tensor local_experts(const ExpertParallel::Received& received);
  // The shared expert split over the tp ranks: x [B, T', dim] in, [B * T', dim] out.
  at::Tensor shared_tensor_parallel(const at::Tensor& x);
};
TORCH_MODULE(MoE);

struct TransformerBlockImpl : torch::nn::Module {
  TransformerBlockImpl(const ModelArgs& args, std::int64_t layer);
  // `dropout_generator` undefined: no dropout.
  at::Tensor forward(const at::Tensor& x, std::optional<at::Generator> dropout_generator);
  double dropout;
  double output_scale;  // 1 but under the out-scale fault
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  Attention attention{nullptr};
  MoE moe{nullptr};
  std::shared_ptr<const TensorParallel> tp;  // null: no tensor parallelism

 private:
  // Keep-mask of the dropout after attention, shaped like `a` (a sequence shard under sp: the
  // same positions of the whole sequence's mask, so every layout drops the same elements).
  at::Tensor dropout_mask(const at::Tensor& a, at::Generator& generator) const;
};
TORCH_MODULE(TransformerBlock);

// Layers [first_layer, last_layer) of the model; the first stage owns the token embedding,
// the last one the final norm and output projection.
struct TransformerImpl : torch::nn::Module {
  TransformerImpl(const ModelArgs& args, std::int64_t first_layer, std::int64_t last_layer);
  // Tokens [B, T] (int64) on the first stage, hidden states [B, T, dim] elsewhere. Returns
  // logits [B, T, vocab] on the last stage, hidden states otherwise.
  at::Tensor forward(const at::Tensor& x, const DropoutRng& rng);
  bool has_embedding() const { return first_layer == 0; }
  bool has_output() const { return last_layer == args.n_layers; }

  ModelArgs args;
  std::int64_t first_layer, last_layer;
  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleDict layers{nullptr};
  RMSNorm norm{nullptr};
  torch::nn::Linear output{nullptr};
  std::shared_ptr<const TensorParallel> tp;  // null: no tensor parallelism
};
TORCH_MODULE(Transformer);

// Tensor parallelism over `tp` (tensor_parallel.h): the split parameters replaced by this
// rank's slices of them, every module told. After init_weights, so that the slices are those
// of the whole model's values.
void parallelize_tensors(Transformer& model, std::shared_ptr<const TensorParallel> tp);

// Expert parallelism over `ep` (expert_parallel.h): every layer's routed experts replaced by
// this rank's experts, every MoE told. After init_weights, like parallelize_tensors.
void parallelize_experts(Transformer& model, std::shared_ptr<const ExpertParallel> ep);

// Initialises every parameter from (seed, its name): the same values whichever layers this
// Transformer holds and however it is later sharded.
void init_weights(Transformer& model, std::uint64_t seed);
// One parameter as init_weights draws it: N(0, 0.02) from (seed, its name); norm weights 1.
void init_parameter(const std::string& name, at::Tensor& parameter, std::uint64_t seed);

}  // namespace moe
