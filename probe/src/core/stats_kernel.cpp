#include "stats_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace probe::kernels {

namespace generic {
StatsPartial stats_run(ElementType, const void*, std::int64_t, std::uint64_t);
}
#if defined(NUMPROBE_X86_KERNELS)
namespace avx2 {
StatsPartial stats_run(ElementType, const void*, std::int64_t, std::uint64_t);
}
namespace avx512 {
StatsPartial stats_run(ElementType, const void*, std::int64_t, std::uint64_t);
}
#endif

namespace {

using RunFn = StatsPartial (*)(ElementType, const void*, std::int64_t, std::uint64_t);

#if defined(NUMPROBE_X86_KERNELS)
// What each x86 build was compiled for (see probe/CMakeLists.txt).
bool cpu_runs_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
}
bool cpu_runs_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
}
#endif

// The best build this CPU runs, or the one PROBE_STATS_ISA names (generic, avx2, avx512) when
// the CPU runs it: every build gives the same bits, so the variable changes the speed only (to
// measure what a CPU without AVX-512 pays, on one with it). A name this CPU cannot run, or an
// unknown one, is said once on stderr and the best build is used.
struct Dispatch {
  RunFn run = nullptr;
  const char* isa = nullptr;
  Dispatch() {
    const auto kernels = runnable_isa_kernels();  // best last
    const char* wanted = std::getenv("PROBE_STATS_ISA");
    const IsaKernel* chosen = &kernels.back();
    if (wanted && *wanted) {
      const auto it = std::find_if(kernels.begin(), kernels.end(), [&](const IsaKernel& k) {
        return std::strcmp(k.isa, wanted) == 0;
      });
      if (it != kernels.end()) chosen = &*it;
      else
        std::fprintf(stderr,
                     "numprobe: PROBE_STATS_ISA=%s is not a kernel build this CPU runs; using %s\n",
                     wanted, chosen->isa);
    }
    run = chosen->run;
    isa = chosen->isa;
  }
};

const Dispatch& dispatch() {
  static const Dispatch d;
  return d;
}

}  // namespace

int element_size(ElementType type) {
  switch (type) {
    case ElementType::float32:
    case ElementType::int32:
    case ElementType::uint32: return 4;
    case ElementType::float64:
    case ElementType::int64:
    case ElementType::uint64: return 8;
    case ElementType::float16:
    case ElementType::bfloat16:
    case ElementType::int16:
    case ElementType::uint16: return 2;
    default: return 1;
  }
}

StatsPartial stats_run(ElementType type, const void* data, std::int64_t count,
                       std::uint64_t first_index) {
  return dispatch().run(type, data, count, first_index);
}

const char* stats_kernel_isa() { return dispatch().isa; }

std::vector<IsaKernel> runnable_isa_kernels() {
  std::vector<IsaKernel> kernels{{"generic", generic::stats_run}};
#if defined(NUMPROBE_X86_KERNELS)
  if (cpu_runs_avx2()) kernels.push_back({"avx2", avx2::stats_run});
  if (cpu_runs_avx512()) kernels.push_back({"avx512", avx512::stats_run});
#endif
  return kernels;
}

ContiguousLayout::ContiguousLayout(ElementType type, const void* data,
                                   std::vector<std::int64_t> local_shape, const Shard& shard)
    : type_(type),
      data_(static_cast<const unsigned char*>(data)),
      element_size_(element_size(type)) {
  for (auto d : local_shape) numel_ *= d;
  if (shard.empty()) {
    run_length_ = numel_;
    return;
  }
  shard.check_fits(local_shape, "tensor_stats");
  const std::size_t rank = local_shape.size();
  std::vector<std::uint64_t> global_stride(rank, 1);
  for (std::size_t d = rank; d-- > 1;)
    global_stride[d - 1] = global_stride[d] * static_cast<std::uint64_t>(shard.global_shape[d]);
  // Dims [inner, rank) that the shard spans fully, plus dim inner - 1, form one run.
  std::size_t inner = rank;
  while (inner > 0 && local_shape[inner - 1] == shard.global_shape[inner - 1]) --inner;
  std::size_t run_from = inner == 0 ? 0 : inner - 1;
  run_length_ = 1;
  for (std::size_t d = run_from; d < rank; ++d) run_length_ *= local_shape[d];
  for (std::size_t d = 0; d < rank; ++d)
    base_global_index_ += static_cast<std::uint64_t>(shard.offset[d]) * global_stride[d];
  for (std::size_t d = 0; d < run_from; ++d) {
    outer_extent_.push_back(local_shape[d]);
    outer_global_stride_.push_back(global_stride[d]);
  }
}

std::uint64_t ContiguousLayout::run_first_global_index(std::int64_t run) const {
  std::uint64_t index = base_global_index_;
  for (std::size_t d = outer_extent_.size(); d-- > 0;) {
    index += static_cast<std::uint64_t>(run % outer_extent_[d]) * outer_global_stride_[d];
    run /= outer_extent_[d];
  }
  return index;
}

StatsPartial ContiguousLayout::chunk_stats(std::int64_t chunk) const {
  return chunk_stats(chunk, data_ + chunk * kChunkElements * element_size_);
}

StatsPartial ContiguousLayout::chunk_stats(std::int64_t chunk, const void* chunk_data) const {
  const std::int64_t begin = chunk * kChunkElements;
  const std::int64_t end = std::min(numel_, begin + kChunkElements);
  const auto* data = static_cast<const unsigned char*>(chunk_data);  // local element `begin`
  StatsPartial out;
  if (run_length_ == 0) return out;
  std::int64_t run = begin / run_length_, pos = begin % run_length_;
  for (std::int64_t i = begin; i < end; ++run, pos = 0) {
    const std::int64_t count = std::min(run_length_ - pos, end - i);
    out.merge(stats_run(type_, data + (i - begin) * element_size_, count,
                        run_first_global_index(run) + static_cast<std::uint64_t>(pos)));
    i += count;
  }
  return out;
}

std::int64_t ContiguousLayout::segment_first(std::int64_t local) const {
  const std::int64_t run_first = local - local % run_length_;
  return std::max(run_first, local - local % kChunkElements);
}

std::uint64_t ContiguousLayout::global_index(std::int64_t local) const {
  return run_first_global_index(local / run_length_) +
         static_cast<std::uint64_t>(local % run_length_);
}

TensorStats finish_stats(const std::vector<StatsPartial>& chunks, std::int64_t numel) {
  StatsPartial total;
  for (const auto& c : chunks) total.merge(c);
  TensorStats s;
  s.hash = total.hash;
  s.mhash = total.mhash;
  s.l1 = total.sum_abs;
  s.norm = std::sqrt(total.sum_squares);
  s.nan = total.nan;
  s.inf = total.inf;
  const std::int64_t counted = numel - total.nan;
  if (counted > 0) {
    // A zero extreme is reported as +0: -0 and +0 compare equal, so which of them a reduction
    // keeps depends on its order, and the figures must not.
    s.min = total.min == 0 ? 0.0 : total.min;
    s.max = total.max == 0 ? 0.0 : total.max;
    s.mean = total.sum / static_cast<double>(counted);
  }
  return s;
}

}  // namespace probe::kernels
