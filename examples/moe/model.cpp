#include "model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/init.h>

#include <cmath>

#include "probe/probe.h"
#include "probe/scope.h"

namespace moe {

std::uint64_t mix_seed(std::uint64_t seed, std::initializer_list<std::uint64_t> values) {
  auto splitmix = [](std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  std::uint64_t h = splitmix(seed);
  for (auto v : values) h = splitmix(h ^ v);
  return h;
}

at::Generator DropoutRng::for_layer(std::int64_t layer) const {
  return at::make_generator<at::CPUGeneratorImpl>(mix_seed(
      seed, {0xD50u, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(microbatch),
             static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(rank_salt)}));
}

// ---------------------------------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", at::ones({dim}));
}

// Every module's forward runs in a probe::Scope named as in named_modules() (layers.3.attention,
// layers.3.moe.router, ...): an op trace (PROBE_TRACE) names each op after its module.

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

namespace {

torch::nn::Linear linear(std::int64_t in, std::int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// Rotary position embedding over the last dim of x [B, T, H, D] (D even), pairs interleaved.
at::Tensor apply_rope(const at::Tensor& x, double theta) {
  const auto T = x.size(1), D = x.size(-1);
  auto inv_freq = at::pow(theta, -at::arange(0, D, 2, x.options()) / static_cast<double>(D));
  auto angles = at::outer(at::arange(T, x.options()), inv_freq).view({1, T, 1, D / 2});
  auto cos = angles.cos(), sin = angles.sin();
  auto pairs = x.unflatten(-1, {D / 2, 2});
  auto x1 = pairs.select(-1, 0), x2 = pairs.select(-1, 1);
  return at::stack({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1).flatten(-2);
}

// softmax over the last dim whose gradient is y*g - y*sum(g*y) rather than aten's
// y*(g - sum(g*y)): the same forward bits, a backward that differs in the last bits.
struct SoftmaxDistributedBackward : torch::autograd::Function<SoftmaxDistributedBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    auto y = at::softmax(x, -1);
    ctx->save_for_backward({y});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto y = ctx->get_saved_variables()[0];
    const auto& g = grads[0];
    return {y * g - y * (g * y).sum(-1, /*keepdim=*/true)};
  }
};

at::Tensor softmax_of(const at::Tensor& scores, const ModelArgs& args, std::int64_t layer) {
  if (layer != args.alt_softmax_layer) return at::softmax(scores, -1);
  switch (args.alt_softmax) {
    case ModelArgs::AltSoftmax::forward:
      return at::softmax(scores, -1, at::kDouble).to(scores.scalar_type());
    case ModelArgs::AltSoftmax::backward: return SoftmaxDistributedBackward::apply(scores);
    case ModelArgs::AltSoftmax::scaled: return at::softmax(scores, -1) * (1.0 + 1e-3);
    case ModelArgs::AltSoftmax::low_precision:
      return at::softmax(scores.to(at::kBFloat16), -1).to(scores.scalar_type());
    case ModelArgs::AltSoftmax::none: break;
  }
  return at::softmax(scores, -1);
}

}  // namespace

AttentionImpl::AttentionImpl(const ModelArgs& a, std::int64_t layer_) : args(a), layer(layer_) {
  const auto qk_head_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
  wq = register_module("wq", linear(a.dim, a.n_heads * qk_head_dim));
  wkv_a = register_module("wkv_a", linear(a.dim, a.kv_lora_rank + a.qk_rope_head_dim));
  kv_norm = register_module("kv_norm", RMSNorm(a.kv_lora_rank, a.norm_eps));
  wkv_b = register_module("wkv_b",
                          linear(a.kv_lora_rank, a.n_heads * (a.qk_nope_head_dim + a.v_head_dim)));
  wo = register_module("wo", linear(a.n_heads * a.v_head_dim, a.dim));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x) {
  if (tp) return forward_tensor_parallel(x);
  const auto B = x.size(0), T = x.size(1), H = args.n_heads;
  const auto nope = args.qk_nope_head_dim, rope = args.qk_rope_head_dim, vdim = args.v_head_dim;

  auto q = wq(x).view({B, T, H, nope + rope});
  auto q_nope = q.narrow(-1, 0, nope),
       q_rope = apply_rope(q.narrow(-1, nope, rope), args.rope_theta);

  // Keys and values from a small latent; the rotary part of the key is shared by all heads.
  auto kv = wkv_a(x);
  auto latent = kv.narrow(-1, 0, args.kv_lora_rank);
  auto k_rope = apply_rope(kv.narrow(-1, args.kv_lora_rank, rope).unsqueeze(2), args.rope_theta);
  auto kv_heads = wkv_b([&] {
                    probe::Scope scope("kv_norm");
                    return kv_norm(latent);
                  }())
                      .view({B, T, H, nope + vdim});
  auto k_nope = kv_heads.narrow(-1, 0, nope), v = kv_heads.narrow(-1, nope, vdim);
  return wo(attend(q_nope, q_rope, k_nope, k_rope, v, H));
}

// The latent (wkv_a, kv_norm) is replicated: computed from x, then brought into the region with
// the rotary key, so that its weights see the gradient of every head. wq, wkv_b hold this
// rank's heads, wo their columns: its output is this rank's summand of the attention output,
// logged as such before the reduction sums them.
at::Tensor AttentionImpl::forward_tensor_parallel(const at::Tensor& x) {
  const auto nope = args.qk_nope_head_dim, rope = args.qk_rope_head_dim, vdim = args.v_head_dim;
  const auto lora = args.kv_lora_rank, H = wq->weight.size(0) / (nope + rope);
  auto whole = tp->enter(x);
  const auto B = whole.size(0), T = whole.size(1);

  auto q = wq(whole).view({B, T, H, nope + rope});
  auto q_nope = q.narrow(-1, 0, nope),
       q_rope = apply_rope(q.narrow(-1, nope, rope), args.rope_theta);

  auto kv = wkv_a(x);
  auto normed = [&] {
    probe::Scope scope("kv_norm");
    return kv_norm(kv.narrow(-1, 0, lora));
  }();
  auto latent_and_rope = tp->enter(at::cat({normed, kv.narrow(-1, lora, rope)}, -1));
  auto k_rope = apply_rope(latent_and_rope.narrow(-1, lora, rope).unsqueeze(2), args.rope_theta);
  auto kv_heads =
      wkv_b(latent_and_rope.narrow(-1, 0, lora).contiguous()).view({B, T, H, nope + vdim});
  auto k_nope = kv_heads.narrow(-1, 0, nope), v = kv_heads.narrow(-1, nope, vdim);

  auto partial = wo(attend(q_nope, q_rope, k_nope, k_rope, v, H));
  probe::tap(probe::current_scope() + ".wo", partial, {}, tp->partial());
  // the tp-no-reduce fault: this rank's summand goes on
  if (layer == tp->unreduced_attention_layer)
    return tp->sequence_parallel() ? tp->sequence_shard(partial) : partial;
  return tp->leave(partial);
}

at::Tensor AttentionImpl::attend(const at::Tensor& q_nope, const at::Tensor& q_rope,
                                 const at::Tensor& k_nope, const at::Tensor& k_rope,
                                 const at::Tensor& v, std::int64_t H) {
  const auto B = q_nope.size(0), T = q_nope.size(1);
  const auto nope = args.qk_nope_head_dim, rope = args.qk_rope_head_dim, vdim = args.v_head_dim;
  auto query = at::cat({q_nope, q_rope}, -1).transpose(1, 2);                        // B H T d
  auto key = at::cat({k_nope, k_rope.expand({B, T, H, rope})}, -1).transpose(1, 2);  // B H T d
  // Plain matmul + softmax rather than a fused attention kernel: one code path everywhere.
  auto scores =
      at::matmul(query, key.transpose(-2, -1)) / std::sqrt(static_cast<double>(nope + rope));
  auto causal = at::ones({T, T}, q_nope.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(causal, -std::numeric_limits<float>::infinity());
  auto out = at::matmul(softmax_of(scores, args, layer), v.transpose(1, 2));  // B H T vdim
  return out.transpose(1, 2).reshape({B, T, H * vdim});
}

FeedForwardImpl::FeedForwardImpl(std::int64_t dim, std::int64_t hidden) {
  w1 = register_module("w1", linear(dim, hidden));
  w2 = register_module("w2", linear(hidden, dim));
  w3 = register_module("w3", linear(dim, hidden));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) { return w2(at::silu(w1(x)) * w3(x)); }

RouterImpl::RouterImpl(std::int64_t dim, std::int64_t n_experts) {
  gate = register_module("gate", linear(dim, n_experts));
}

GroupedExpertsImpl::GroupedExpertsImpl(std::int64_t dim, std::int64_t hidden,
                                       std::int64_t n_experts) {
  w1 = register_parameter("w1", at::empty({n_experts, hidden, dim}));
  w2 = register_parameter("w2", at::empty({n_experts, dim, hidden}));
  w3 = register_parameter("w3", at::empty({n_experts, hidden, dim}));
}

MoEImpl::MoEImpl(const ModelArgs& a, std::int64_t layer_) : args(a), layer(layer_) {
  router = register_module("router", Router(a.dim, a.n_experts));
  experts = register_module("experts", GroupedExperts(a.dim, a.moe_hidden_dim, a.n_experts));
  shared_experts = register_module("shared_experts", FeedForward(a.dim, a.shared_hidden_dim));
}

at::Tensor MoEImpl::forward(const at::Tensor& x) {
  const auto shape = x.sizes().vec();
  auto tokens = x.reshape({-1, args.dim});  // N dim
  auto routed = routed_experts(tokens);
  at::Tensor shared;
  {
    probe::Scope scope("shared_experts");
    shared = tp ? shared_tensor_parallel(x) : shared_experts(tokens);
  }
  return (shared + routed).view(shape);
}

std::pair<at::Tensor, at::Tensor> MoEImpl::route(const at::Tensor& tokens) {
  // DeepSeek-V3 routing: sigmoid affinities, top-k experts, weights renormalised over the k.
  probe::Scope scope("router");
  // Affinities and their weights in float32 whatever the model computes in (torchtitan's router).
  auto affinity = at::sigmoid(router->gate(tokens).to(at::kFloat));  // N E
  auto [top_scores, top_experts] = at::topk(affinity, args.top_k, -1);
  return {top_experts,
          (top_scores / top_scores.sum(-1, /*keepdim=*/true)).to(tokens.scalar_type())};
}

at::Tensor MoEImpl::routed_experts(const at::Tensor& tokens) {
  auto [top_experts, weights] = route(tokens);
  if (ep) {
    probe::Scope scope("experts");
    return routed_expert_parallel(tokens, top_experts, weights);
  }
  auto routed = at::zeros_like(tokens);
  probe::Scope scope("experts");
  for (std::int64_t e = 0; e < args.n_experts; ++e) {
    auto hits = at::nonzero(top_experts == e);  // [n, 2]: (token, slot)
    if (hits.size(0) == 0) continue;
    auto token_ids = hits.select(1, 0);
    auto xe = tokens.index_select(0, token_ids);
    auto w = weights.index({token_ids, hits.select(1, 1)}).unsqueeze(-1);
    routed = routed.index_add(0, token_ids, expert(e, xe) * w);
  }
  return routed;
}

at::Tensor MoEImpl::expert(std::int64_t e, const at::Tensor& x) {
  auto h = at::silu(at::matmul(x, experts->w1[e].t())) * at::matmul(x, experts->w3[e].t());
  return at::matmul(h, experts->w2[e].t());
}

// The tokens of each expert leave in expert order and come back in it: the combine adds them as
// the loop above does, in the same order, so the routed output is the same bits in every layout.
at::Tensor MoEImpl::routed_expert_parallel(const at::Tensor& tokens, const at::Tensor& top_experts,
                                           const at::Tensor& weights) {
  std::vector<at::Tensor> token_ids(args.n_experts), slots(args.n_experts), rows;
  std::vector<std::int64_t> counts(args.n_experts, 0);
  for (std::int64_t e = 0; e < args.n_experts; ++e) {
    auto hits = at::nonzero(top_experts == e);
    counts[e] = hits.size(0);
    if (counts[e] == 0) continue;
    token_ids[e] = hits.select(1, 0);
    slots[e] = hits.select(1, 1);
    rows.push_back(tokens.index_select(0, token_ids[e]));
  }
  const auto received = ep->dispatch(rows.empty() ? tokens.narrow(0, 0, 0) : at::cat(rows), counts);
  const auto back = ep->combine(local_experts(received), received);
  auto routed = at::zeros_like(tokens);
  std::int64_t offset = 0;
  for (std::int64_t e = 0; e < args.n_experts; ++e) {
    if (counts[e] == 0) continue;
    auto w = weights.index({token_ids[e], slots[e]}).unsqueeze(-1);
    // The ep-permute fault: expert e's returned rows added to its tokens in reverse order.
    auto to = layer == ep->permuted_layer ? token_ids[e].flip(0) : token_ids[e];
    routed = routed.index_add(0, to, back.narrow(0, offset, counts[e]) * w);
    offset += counts[e];
  }
  return routed;
}

// One matmul per (source, expert), as each source would compute alone: a token row's product in
// a batch of other rows differs in the last bits where the batch has one or two rows
// (docs/examples.md), so one matmul over every source's rows would not be the single run's.
// Each on a copy of its rows: an allocation of its own, as the single run's index_select gives,
// not a view at an offset (a kernel may take another path for another alignment; not measured).
at::Tensor MoEImpl::local_experts(const ExpertParallel::Received& received) {
  std::vector<at::Tensor> outputs;
  std::int64_t offset = 0;
  for (const auto& per_expert : received.counts) {
    for (std::int64_t e = 0; e < static_cast<std::int64_t>(per_expert.size()); ++e) {
      if (per_expert[e] == 0) continue;
      outputs.push_back(expert(e, received.rows.narrow(0, offset, per_expert[e]).clone()));
      offset += per_expert[e];
    }
  }
  return outputs.empty() ? received.rows.narrow(0, 0, 0) : at::cat(outputs);
}

// w1, w3 hold this rank's hidden units, w2 their columns: its output is this rank's summand.
at::Tensor MoEImpl::shared_tensor_parallel(const at::Tensor& x) {
  auto whole = tp->enter(x);
  auto partial = shared_experts(whole.reshape({-1, args.dim}));
  probe::tap(probe::current_scope() + ".w2", partial, {}, tp->partial());
  return tp->leave(partial.view(whole.sizes())).reshape({-1, args.dim});
}

TransformerBlockImpl::TransformerBlockImpl(const ModelArgs& a, std::int64_t layer)
    : dropout(a.dropout), output_scale(layer == a.scaled_output_layer ? a.output_scale : 1) {
  attention_norm = register_module("attention_norm", RMSNorm(a.dim, a.norm_eps));
  attention = register_module("attention", Attention(a, layer));
  ffn_norm = register_module("ffn_norm", RMSNorm(a.dim, a.norm_eps));
  moe = register_module("moe", MoE(a, layer));
}

at::Tensor TransformerBlockImpl::forward(const at::Tensor& x,
                                         std::optional<at::Generator> dropout_generator) {
  at::Tensor a;
  {
    probe::Scope scope("attention_norm");
    a = attention_norm(x);
  }
  {
    probe::Scope scope("attention");
    a = attention(a);
  }
  if (dropout_generator && dropout > 0 && is_training())
    a = a * dropout_mask(a, *dropout_generator) / (1.0 - dropout);
  auto h = x + a;
  at::Tensor normed, routed;
  {
    probe::Scope scope("ffn_norm");
    normed = ffn_norm(h);
  }
  {
    probe::Scope scope("moe");
    routed = moe(normed);
  }
  if (output_scale != 1) return (h + routed) * output_scale;
  return h + routed;
}

// Drawn on the CPU (the generator is a CPU one): the same mask on every device.
at::Tensor TransformerBlockImpl::dropout_mask(const at::Tensor& a, at::Generator& generator) const {
  auto on_cpu = a.options().device(at::kCPU);
  if (!tp || !tp->sequence_parallel())
    return at::empty(a.sizes(), on_cpu).bernoulli_(1.0 - dropout, generator).to(a.device());
  auto whole = a.sizes().vec();
  whole[1] *= tp->size();
  auto mask = at::empty(whole, on_cpu).bernoulli_(1.0 - dropout, generator);
  // The sp-dropout-seed fault: every rank keeps the first shard's positions (one RNG stream per
  // rank seeded alike, as a forgotten model-parallel RNG tracker gives).
  return tp->sequence_shard(mask, tp->dropout_of_first_shard ? 0 : tp->rank()).to(a.device());
}

TransformerImpl::TransformerImpl(const ModelArgs& a, std::int64_t first, std::int64_t last)
    : args(a), first_layer(first), last_layer(last) {
  TORCH_CHECK(0 <= first && first < last && last <= a.n_layers, "bad layer range [", first, ", ",
              last, ")");
  if (has_embedding())
    tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(a.vocab_size, a.dim));
  layers = register_module("layers", torch::nn::ModuleDict());
  for (auto i = first; i < last; ++i)
    layers->update({{std::to_string(i), TransformerBlock(a, i).ptr()}});
  if (has_output()) {
    norm = register_module("norm", RMSNorm(a.dim, a.norm_eps));
    output = register_module("output", linear(a.dim, a.vocab_size));
  }
}

at::Tensor TransformerImpl::forward(const at::Tensor& x, const DropoutRng& rng) {
  at::Tensor h = x;
  const bool sp = tp && tp->sequence_parallel();  // h is this rank's sequence shard
  // Under tp every module's ops run on a piece (heads, a sequence shard) or alike on every rank.
  const probe::Split split = tp ? tp->split() : probe::Split{};
  if (has_embedding()) {
    probe::Scope scope("tok_embeddings", split);
    h = tok_embeddings(sp ? tp->sequence_shard(x) : x);
  }
  for (auto i = first_layer; i < last_layer; ++i) {
    probe::Scope scope("layers." + std::to_string(i), split);
    auto block = layers[std::to_string(i)]->as<TransformerBlockImpl>();
    h = block->forward(h, rng.for_layer(i));
    // A no-op without an active probe.
    probe::tap("layers." + std::to_string(i), h, sp ? tp->shard_of_sequence(h) : probe::Shard{});
  }
  if (!has_output()) return h;
  {
    probe::Scope scope("norm", split);
    h = norm(h);
  }
  probe::Scope scope("output", split);
  return output(sp ? tp->gather_for_replicated(h) : h);
}

void init_parameter(const std::string& name, at::Tensor& p, std::uint64_t seed) {
  at::NoGradGuard no_grad;
  if (name.ends_with("norm.weight")) {
    p.fill_(1.0);
    return;
  }
  std::uint64_t name_hash = 0xcbf29ce484222325ull;  // FNV-1a: stable across platforms
  for (unsigned char c : name) name_hash = (name_hash ^ c) * 0x100000001b3ull;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed, {name_hash}));
  p.normal_(0.0, 0.02, gen);
}

void init_weights(Transformer& model, std::uint64_t seed) {
  for (auto& item : model->named_parameters()) init_parameter(item.key(), item.value(), seed);
}

void parallelize_experts(Transformer& model, std::shared_ptr<const ExpertParallel> ep) {
  at::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    if (!is_expert_parameter(item.key())) continue;
    item.value().set_data(
        item.value().narrow(0, ep->first_expert(), ep->experts_per_rank()).clone());
  }
  for (auto& item : model->layers->items()) item.second->as<TransformerBlockImpl>()->moe->ep = ep;
}

void parallelize_tensors(Transformer& model, std::shared_ptr<const TensorParallel> tp) {
  at::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    const TpLayout layout = tp_layout(item.key(), tp->sequence_parallel());
    if (layout.split == TpLayout::Split::none) continue;
    const auto n = item.value().size(layout.dim()) / tp->size();
    item.value().set_data(item.value().narrow(layout.dim(), tp->rank() * n, n).clone());
  }
  model->tp = tp;
  for (auto& item : model->layers->items()) {
    auto block = item.second->as<TransformerBlockImpl>();
    block->tp = block->attention->tp = block->moe->tp = tp;
  }
}

}  // namespace moe
