#include "data.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "model.h"

namespace moe {

Microbatch make_microbatch(const Config& c, std::int64_t step, std::int64_t mb, at::Device device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(mix_seed(
      c.rng_seed, {0xDA7Au, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(mb)}));
  const auto B = c.microbatch_size, T = c.seq_len + 1, V = c.model.vocab_size;
  auto start = at::randint(V, {B, 1}, gen, at::kLong);
  auto stride = at::randint(1, 4, {B, 1}, gen, at::kLong);
  auto tokens = (start + stride * at::arange(T, at::kLong)).remainder(V);
  auto noise = at::randint(V, {B, T}, gen, at::kLong);
  auto noisy = at::rand({B, T}, gen) < 0.1;
  tokens = at::where(noisy, noise, tokens);
  return {tokens.narrow(1, 0, c.seq_len).to(device).contiguous(),
          tokens.narrow(1, 1, c.seq_len).to(device).contiguous()};
}

}  // namespace moe
