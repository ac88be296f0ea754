// The per-element rules of tensor_stats(), shared by the CPU kernel and the CUDA kernel: how an
// element's stored bits become a value (every dtype), and how values fold into a StatsPartial.
//
// Torch-free and `__host__ __device__` (PROBE_HOST_DEVICE from hash_spec.h): the CPU tests run
// exactly the definitions the GPU runs. Float arithmetic goes through add_rn/mul_rn so that
// nvcc cannot contract `s + x * x` into an FMA: a contracted sum would round differently from
// the host's and the CPU reference of the CUDA kernel would no longer match it bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "probe/hash_spec.h"

namespace probe::kernels {

enum class ElementType : std::uint8_t {
  float32,
  float64,
  float16,
  bfloat16,
  float8_e4m3fn,
  float8_e5m2,
  float8_e4m3fnuz,
  float8_e5m2fnuz,
  float8_e8m0fnu,
  int8,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int64,
  uint64,
  boolean,
};

inline constexpr double kInf = __builtin_huge_val();

PROBE_HOST_DEVICE inline float bits_to_float(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

PROBE_HOST_DEVICE inline std::uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
#endif
}

PROBE_HOST_DEVICE inline double bits_to_double(std::uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
#endif
}

PROBE_HOST_DEVICE inline std::uint64_t double_to_bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(d));
#else
  std::uint64_t bits;
  std::memcpy(&bits, &d, 8);
  return bits;
#endif
}

// Round-to-nearest add and multiply that the compiler may not fuse (see the file comment).
PROBE_HOST_DEVICE inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
PROBE_HOST_DEVICE inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// 2^e exactly, for a normal double exponent (-1022 <= e <= 1023).
PROBE_HOST_DEVICE inline double pow2(int e) {
  return bits_to_double(static_cast<std::uint64_t>(e + 1023) << 52);
}

// IEEE half to float without branches (after Maratea's FP16 library, fp16_ieee_to_fp32_value).
PROBE_HOST_DEVICE inline float half_to_float(std::uint16_t h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000U;
  const std::uint32_t two_w = w + w;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = bits_to_float((two_w >> 4) + (0xE0U << 23)) * exp_scale;
  const float denormalized = bits_to_float((two_w >> 17) | (126U << 23)) - 0.5f;
  const std::uint32_t result =
      sign | (two_w < (1U << 27) ? float_to_bits(denormalized) : float_to_bits(normalized));
  return bits_to_float(result);
}

PROBE_HOST_DEVICE inline float bfloat16_to_float(std::uint16_t b) {
  return bits_to_float(static_cast<std::uint32_t>(b) << 16);
}

PROBE_HOST_DEVICE constexpr bool is_float8(ElementType type) {
  return type >= ElementType::float8_e4m3fn && type <= ElementType::float8_e8m0fnu;
}

// The exact value of a float8 byte, from the format's definition (OCP / fnuz / e8m0). The CPU
// kernel tabulates it once per format; the CUDA kernel tabulates it in shared memory per block.
PROBE_HOST_DEVICE inline double float8_to_double(std::uint8_t b, ElementType type) {
  const double nan = bits_to_double(0x7FF8000000000000ULL);
  if (type == ElementType::float8_e8m0fnu)  // unsigned power of two, 0xff is NaN
    return b == 0xff ? nan : pow2(b - 127);
  int exponent_bits = 4, bias = 7;
  bool has_inf = false, nan_is_0x80 = false;
  if (type == ElementType::float8_e5m2) {
    exponent_bits = 5, bias = 15, has_inf = true;
  } else if (type == ElementType::float8_e4m3fnuz) {
    bias = 8, nan_is_0x80 = true;
  } else if (type == ElementType::float8_e5m2fnuz) {
    exponent_bits = 5, bias = 16, nan_is_0x80 = true;
  }
  const int mantissa_bits = 7 - exponent_bits;
  const int sign = b >> 7, exp = (b >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mant = b & ((1 << mantissa_bits) - 1);
  const int max_exp = (1 << exponent_bits) - 1;
  if (nan_is_0x80) {  // fnuz: no negative zero, 0x80 is the only NaN, no Inf
    if (b == 0x80) return nan;
  } else if (has_inf && exp == max_exp) {  // e5m2: IEEE-like specials
    return mant == 0 ? (sign ? -kInf : kInf) : nan;
  } else if (!has_inf && exp == max_exp && mant == (1 << mantissa_bits) - 1) {  // e4m3fn
    return nan;
  }
  // Subnormal: mant * 2^(1 - bias - m); normal: (2^m + mant) * 2^(exp - bias - m). Exact.
  const double v = exp == 0 ? static_cast<double>(mant) * pow2(1 - bias - mantissa_bits)
                            : static_cast<double>((1 << mantissa_bits) + mant) *
                                  pow2(exp - bias - mantissa_bits);
  return sign ? -v : v;
}

// The order-independent term of an element (format 8's `mhash`, docs/hash-spec.md): splitmix64's
// finalizer of its stored bits, zero-extended, plus the golden-ratio increment. The figure is
// the sum of the terms mod 2^64: the same for the same values in any places, so two tensors
// whose positional hashes differ and whose mhash agree hold the same values elsewhere (moved),
// and any value changed by one bit changes it but for a 2^-64 chance.
PROBE_HOST_DEVICE inline std::uint64_t value_term(std::uint64_t bits) {
  std::uint64_t z = bits + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Running figures of a set of elements; merge() is exact for every field but the floating
// sums, whose order the caller fixes.
struct StatsPartial {
  std::uint64_t hash = 0;
  std::uint64_t mhash = 0;  // sum of value_term(bits)
  double sum_squares = 0;
  double sum = 0;      // of non-NaN values
  double sum_abs = 0;  // of non-NaN magnitudes: the L1 norm error bounds are written in
  double min = kInf;
  double max = -kInf;
  std::int64_t nan = 0;
  std::int64_t inf = 0;

  // One element of value `x` whose hash-spec term is `element_hash` and whose order-independent
  // term is `value_hash` (value_term of its bits).
  PROBE_HOST_DEVICE void add(double x, std::uint64_t element_hash, std::uint64_t value_hash) {
    const bool is_nan = x != x;
    hash += element_hash;
    mhash += value_hash;
    sum_squares = add_rn(sum_squares, mul_rn(x, x));
    sum = add_rn(sum, is_nan ? 0.0 : x);
    sum_abs = add_rn(sum_abs, is_nan ? 0.0 : (x < 0 ? -x : x));
    min = x < min ? x : min;  // NaN compares false: skipped
    max = x > max ? x : max;
    nan += is_nan;
    inf += (x == kInf) | (x == -kInf);
  }

  // The figures of format 7 alone (no mhash, no sum_abs): the CUDA kernel's, whose instruction
  // budget per element (scripts/sass_report.py) the two more terms would exceed by ~40%.
  PROBE_HOST_DEVICE void add_positional(double x, std::uint64_t element_hash) {
    const bool is_nan = x != x;
    hash += element_hash;
    sum_squares = add_rn(sum_squares, mul_rn(x, x));
    sum = add_rn(sum, is_nan ? 0.0 : x);
    min = x < min ? x : min;
    max = x > max ? x : max;
    nan += is_nan;
    inf += (x == kInf) | (x == -kInf);
  }

  PROBE_HOST_DEVICE void merge(const StatsPartial& other) {
    hash += other.hash;
    mhash += other.mhash;
    sum_squares = add_rn(sum_squares, other.sum_squares);
    sum = add_rn(sum, other.sum);
    sum_abs = add_rn(sum_abs, other.sum_abs);
    min = other.min < min ? other.min : min;
    max = other.max > max ? other.max : max;
    nan += other.nan;
    inf += other.inf;
  }
};

}  // namespace probe::kernels
