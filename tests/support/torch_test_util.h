// The LibTorch tests' helpers: random tensors of every dtype and a probe writing into a scratch
// directory. Apart from test_util.h because it needs LibTorch: only tests/torch and tests/cuda
// include it, so the core and differ suites still build without it.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>

#include "probe/probe.h"
#include "torch/stats_device.h"  // NUMPROBE_TORCH_AT_LEAST

namespace test_util {

// Random values of `type` on `device`, small enough for every integer type: bool 0 or 1,
// unsigned types 0 .. 199, signed ones -100 .. 99, floating types normal with deviation 3.
inline at::Tensor random_of(at::ScalarType type, at::IntArrayRef shape,
                            at::Device device = at::kCPU) {
  const auto on = at::TensorOptions().device(device);
  if (type == at::kBool) return at::randint(0, 2, shape, on.dtype(at::kLong)).to(at::kBool);
  // Before the integral test, which also counts the unsigned types: -100 .. -1 would wrap to
  // values near their maximum.
  if (type == at::kByte || type == at::kUInt16 || type == at::kUInt32 || type == at::kUInt64)
    return at::randint(0, 200, shape, on.dtype(at::kLong)).to(type);
  if (at::isIntegralType(type, /*includeBool=*/false))
    return at::randint(-100, 100, shape, on.dtype(at::kLong)).to(type);
#if NUMPROBE_TORCH_AT_LEAST(2, 7)
  // Every bit pattern (NaN 0xff included), without relying on a conversion kernel for the type.
  if (type == at::kFloat8_e8m0fnu)
    return at::randint(0, 256, shape, on.dtype(at::kByte)).view(type);
#endif
  // Drawn in double on the CPU, so a double tensor has every mantissa bit random; in float on a
  // GPU, where the tests draw tensors of up to 512 MiB and most GPUs are slow in double.
  const at::ScalarType draw = device.is_cpu() ? at::kDouble : at::kFloat;
  return (at::randn(shape, on.dtype(draw)) * 3).to(type);
}

// A single-process probe (rank 0 of 1) writing rank0/diff.log under `dir`.
inline probe::ProbeOptions options_in(const std::filesystem::path& dir) {
  probe::ProbeOptions o;
  o.run_dir = dir;
  o.rank = 0;
  o.world_size = 1;
  o.setup = "unit test";
  return o;
}

}  // namespace test_util
