// The model's sizes and switches: plain values, so that the command line (config.h) holds them
// without LibTorch's module headers.
#pragma once

#include <cstdint>

namespace moe {

struct ModelArgs {
  std::int64_t vocab_size = 256;
  std::int64_t dim = 64;
  std::int64_t n_layers = 4;
  std::int64_t n_heads = 4;
  // Multi-head latent attention: keys and values come from a rank-`kv_lora_rank` latent.
  std::int64_t kv_lora_rank = 32;
  std::int64_t qk_nope_head_dim = 16;
  std::int64_t qk_rope_head_dim = 8;
  std::int64_t v_head_dim = 16;
  // Mixture of experts.
  std::int64_t n_experts = 8;
  std::int64_t top_k = 2;
  std::int64_t moe_hidden_dim = 32;     // per routed expert
  std::int64_t shared_hidden_dim = 64;  // the shared expert
  double dropout = 0.1;                 // after attention, so the RNG matters
  double norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // The op faults (--fault op=<layer>, op-backward=<layer>, op-wrong=<layer>, op-lowp=<layer>):
  // that layer's attention softmax is computed another way. Mathematically equal: `forward`, in
  // float64, rounded back (last-bit differences from the forward on); `backward`, the forward as
  // usual, the gradient by a distributed formula (last-bit differences in the backward only).
  // Real bugs: `scaled`, the softmax times 1 + 1e-3 (another function); `low_precision`,
  // computed in bfloat16 and cast back (the same function, 8 bits of precision).
  enum class AltSoftmax { none, forward, backward, scaled, low_precision };
  AltSoftmax alt_softmax = AltSoftmax::none;
  std::int64_t alt_softmax_layer = -1;
  // --fault out-scale=<layer>:<factor>: that block's output times `factor` (a wrong constant).
  std::int64_t scaled_output_layer = -1;
  double output_scale = 1;
};

}  // namespace moe
