// The device fallback of tensor_stats(): hash spec v1 and the statistics built from ATen ops,
// so they run on any device with no host sync. Unsigned 64-bit arithmetic is done on int64
// tensors (two's complement wraps the same way); logical shifts are arithmetic shifts masked.
// It allocates several temporaries per element: the fused CUDA kernel replaces it on CUDA.
#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/add.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bitwise_and.h>
#include <ATen/ops/bitwise_left_shift.h>
#include <ATen/ops/bitwise_or.h>
#include <ATen/ops/bitwise_right_shift.h>
#include <ATen/ops/bitwise_xor.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/rsub.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <bit>
#include <limits>

#include "probe/hash_spec.h"
#include "stats_device.h"

#if NUMPROBE_TORCH_AT_LEAST(2, 9)
#include <ATen/ops/hash_tensor.h>
#endif

namespace probe::detail {
namespace {

namespace hs = hash_spec;

at::Scalar u64(std::uint64_t v) { return at::Scalar(static_cast<std::int64_t>(v)); }

at::Tensor lsr(const at::Tensor& x, int k) {  // logical shift right
  return at::bitwise_and(at::bitwise_right_shift(x, k), u64((~0ULL) >> k));
}
at::Tensor shl(const at::Tensor& x, int k) { return at::bitwise_left_shift(x, k); }
at::Tensor rotl(const at::Tensor& x, int r) { return at::bitwise_or(shl(x, r), lsr(x, 64 - r)); }
at::Tensor bxor(const at::Tensor& a, const at::Tensor& b) { return at::bitwise_xor(a, b); }
at::Tensor band(const at::Tensor& a, std::uint64_t mask) { return at::bitwise_and(a, u64(mask)); }

at::Tensor avalanche(at::Tensor h) {
  h = bxor(h, lsr(h, 33));
  h = h * u64(hs::kPrime64_2);
  h = bxor(h, lsr(h, 29));
  h = h * u64(hs::kPrime64_3);
  return bxor(h, lsr(h, 32));
}

at::Tensor rrmxmx(at::Tensor h, std::uint64_t len) {
  h = bxor(h, bxor(rotl(h, 49), rotl(h, 24)));
  h = h * u64(hs::kRrmxmxMultiplier);
  h = bxor(h, lsr(h, 35) + u64(len));
  h = h * u64(hs::kRrmxmxMultiplier);
  return bxor(h, lsr(h, 28));
}

at::Tensor swap32(const at::Tensor& x) {  // x holds a 32-bit value in its low half
  return at::bitwise_or(at::bitwise_or(band(shl(x, 24), 0xff000000U), band(shl(x, 8), 0x00ff0000U)),
                        at::bitwise_or(band(lsr(x, 8), 0x0000ff00U), band(lsr(x, 24), 0xffU)));
}

// Global row-major index of every element of the (contiguous) local tensor.
at::Tensor global_indices(const PreparedTensor& p) {
  const auto& data = p.data;
  auto opts = data.options().dtype(at::kLong);
  if (p.shard.empty()) return at::arange(data.numel(), opts).view(data.sizes());
  const auto rank = static_cast<std::int64_t>(data.dim());
  at::Tensor index = at::zeros(data.sizes(), opts);
  std::uint64_t stride = 1;
  for (std::int64_t d = rank - 1; d >= 0; --d) {
    std::vector<std::int64_t> view(static_cast<std::size_t>(rank), 1);
    view[static_cast<std::size_t>(d)] = data.size(d);
    at::Tensor along =
        (at::arange(data.size(d), opts) + p.shard.offset[static_cast<std::size_t>(d)]) *
        u64(stride);
    index = index + along.view(view);
    stride *= static_cast<std::uint64_t>(p.shard.global_shape[static_cast<std::size_t>(d)]);
  }
  return index;
}

at::Tensor element_hashes(const PreparedTensor& p) {
  const int size = kernels::element_size(p.type);
  const at::ScalarType bits_type = size == 1   ? at::kByte
                                   : size == 2 ? at::kShort
                                   : size == 4 ? at::kInt
                                               : at::kLong;
  at::Tensor bits = p.data.view(bits_type).to(at::kLong);
  if (size < 8) bits = band(bits, (1ULL << (8 * size)) - 1);
  at::Tensor seed = global_indices(p);
  if (size <= 2) {
    at::Tensor c1 = band(bits, 0xff);
    at::Tensor c2 = size == 1 ? c1 : band(lsr(bits, 8), 0xff);
    at::Tensor combined = at::bitwise_or(at::bitwise_or(shl(c1, 16), shl(c2, 24)),
                                         at::bitwise_or(c2, u64(std::uint64_t(size) << 8)));
    return avalanche(bxor(combined, seed + u64(hs::kBitflip1to3)));
  }
  seed = bxor(seed, shl(swap32(band(seed, 0xffffffffU)), 32));
  at::Tensor bitflip = at::rsub(seed, u64(hs::kBitflip4to8));  // K - seed
  at::Tensor lo = band(bits, 0xffffffffU);
  at::Tensor hi = size == 4 ? lo : lsr(bits, 32);
  return rrmxmx(bxor(hi + shl(lo, 32), bitflip), static_cast<std::uint64_t>(size));
}

// kernels::value_term of every element's bits, zero-extended (the order-independent hash).
at::Tensor value_terms(const PreparedTensor& p) {
  const int size = kernels::element_size(p.type);
  const at::ScalarType bits_type = size == 1   ? at::kByte
                                   : size == 2 ? at::kShort
                                   : size == 4 ? at::kInt
                                               : at::kLong;
  at::Tensor z = p.data.view(bits_type).to(at::kLong);
  if (size < 8) z = band(z, (1ULL << (8 * size)) - 1);
  z = z + u64(0x9e3779b97f4a7c15ULL);
  z = bxor(z, lsr(z, 30)) * u64(0xbf58476d1ce4e5b9ULL);
  z = bxor(z, lsr(z, 27)) * u64(0x94d049bb133111ebULL);
  return bxor(z, lsr(z, 31));
}

}  // namespace

void write_empty_figures(const at::Tensor& out) {
  const double inf = std::numeric_limits<double>::infinity();
  out.zero_();  // hash, sums, counts, torch hash
  out.select(0, kMin).fill_(std::bit_cast<std::int64_t>(inf));
  out.select(0, kMax).fill_(std::bit_cast<std::int64_t>(-inf));
}

void packed_figures_aten(const PreparedTensor& view, bool torch_hash, const at::Tensor& out) {
  if (view.data.numel() == 0) return write_empty_figures(out);
  PreparedTensor p = view;
  p.data = view.data.contiguous();
  at::Tensor hash = at::sum(element_hashes(p));
  at::Tensor x = p.data.to(at::kDouble);
  at::Tensor nan = at::isnan(x);
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor figures[kPackedSlots] = {
      hash,
      at::sum(x * x).view(at::kLong),
      at::sum(at::where(nan, 0.0, x)).view(at::kLong),
      at::amin(at::where(nan, inf, x)).view(at::kLong),
      at::amax(at::where(nan, -inf, x)).view(at::kLong),
      at::sum(nan, at::kLong),
      at::sum(at::isinf(x), at::kLong),
      at::zeros({}, hash.options()),
      at::sum(value_terms(p)),
      at::sum(at::where(nan, 0.0, x.abs())).view(at::kLong),
  };
#if NUMPROBE_TORCH_AT_LEAST(2, 9)
  if (torch_hash) figures[kTorchHash] = at::hash_tensor(p.data).view(at::kLong);
#else
  (void)torch_hash;  // has_torch_hash_kernel() is false for every dtype before 2.9
#endif
  out.copy_(at::stack(figures));
}

}  // namespace probe::detail
