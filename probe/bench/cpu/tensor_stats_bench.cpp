// tensor_stats throughput against (a) XXH3_64bits streaming over the same bytes on one core and
// (b) the PyTorch-ops way on the same tensor and thread count: at::hash_tensor +
// at::linalg_vector_norm + isnan().sum() + min + max. Bytes read per second for every case;
// scripts/bench_tensor_stats.sh turns them into the ratios of docs/perf.md.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include "core/stats_kernel.h"
#include "torch/stats_device.h"  // NUMPROBE_TORCH_AT_LEAST
#include "probe/tensor_stats.h"

namespace {

const at::ScalarType kTypes[] = {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble};

at::Tensor make_tensor(std::int64_t type_index, std::int64_t mib) {
  const auto type = kTypes[type_index];
  at::manual_seed(0);
  return at::randn({(mib << 20) / static_cast<std::int64_t>(c10::elementSize(type))}).to(type);
}

// range(0): dtype, range(1): MiB.
at::Tensor make_tensor(const benchmark::State& state) {
  return make_tensor(state.range(0), state.range(1));
}

void label(benchmark::State& state, const at::Tensor& t) {
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(t.nbytes()));
  state.SetLabel(probe::dtype_name(t.scalar_type()) +
                 " threads=" + std::to_string(at::get_num_threads()));
}

void BM_TensorStats(benchmark::State& state) {
  const at::Tensor t = make_tensor(state);
  for (auto _ : state) benchmark::DoNotOptimize(probe::tensor_stats(t).hash);
  label(state, t);
}

void BM_TorchOps(benchmark::State& state) {
#if !NUMPROBE_TORCH_AT_LEAST(2, 9)
  state.SkipWithError("at::hash_tensor needs LibTorch >= 2.9");
  return;
#endif
  const at::Tensor t = make_tensor(state);
  for (auto _ : state) {
#if NUMPROBE_TORCH_AT_LEAST(2, 9)
    benchmark::DoNotOptimize(at::hash_tensor(t).view(at::kLong).item<std::int64_t>());
#endif
    benchmark::DoNotOptimize(at::linalg_vector_norm(t).item<double>());
    benchmark::DoNotOptimize(at::isnan(t).sum().item<std::int64_t>());
    benchmark::DoNotOptimize(t.min().item<double>());
    benchmark::DoNotOptimize(t.max().item<double>());
  }
  label(state, t);
}

// libxxhash's runtime-dispatched entry point (AVX2/AVX-512 code where the CPU has it), exported by
// builds made with its x86 dispatcher, Debian's among them; XXH3_64bits itself runs the code
// the library was compiled for (SSE2 on a baseline x86-64 build). Weak: absent elsewhere.
extern "C" XXH64_hash_t XXH3_64bits_dispatch(const void* input, size_t length)
    __attribute__((weak));

void BM_Xxh3Dispatch(benchmark::State& state) {
  if (XXH3_64bits_dispatch == nullptr) {
    state.SkipWithError("libxxhash has no XXH3_64bits_dispatch");
    return;
  }
  const at::Tensor t = make_tensor(state);
  for (auto _ : state)
    benchmark::DoNotOptimize(XXH3_64bits_dispatch(t.const_data_ptr(), t.nbytes()));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(t.nbytes()));
  state.SetLabel(probe::dtype_name(t.scalar_type()) + " threads=1");
}

void BM_Xxh3Streaming(benchmark::State& state) {
  const at::Tensor t = make_tensor(state);
  for (auto _ : state) benchmark::DoNotOptimize(XXH3_64bits(t.const_data_ptr(), t.nbytes()));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(t.nbytes()));
  state.SetLabel(probe::dtype_name(t.scalar_type()) + " threads=1");
}

// The raw CPU kernel of each instruction set this CPU runs, on one thread, 16 MiB in the 64
// Ki-element chunks tensor_stats() hands it.
void BM_StatsKernelIsa(benchmark::State& state) {
  const auto kernels = probe::kernels::runnable_isa_kernels();
  const auto isa = static_cast<std::size_t>(state.range(1));
  if (isa >= kernels.size()) {
    state.SkipWithError("ISA not runnable on this CPU");
    return;
  }
  const at::Tensor t = make_tensor(state.range(0), 16);
  const probe::kernels::ElementType types[] = {
      probe::kernels::ElementType::float32, probe::kernels::ElementType::bfloat16,
      probe::kernels::ElementType::float16, probe::kernels::ElementType::float64};
  const auto type = types[state.range(0)];
  const auto* bytes = static_cast<const unsigned char*>(t.const_data_ptr());
  const std::int64_t n = t.numel(), chunk = probe::kernels::kChunkElements;
  for (auto _ : state) {
    std::uint64_t hash = 0;
    for (std::int64_t c = 0; c < n; c += chunk)
      hash += kernels[isa]
                  .run(type, bytes + c * t.element_size(), std::min(chunk, n - c),
                       static_cast<std::uint64_t>(c))
                  .hash;
    benchmark::DoNotOptimize(hash);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(t.nbytes()));
  state.SetLabel(probe::dtype_name(t.scalar_type()) + " " + kernels[isa].isa + " threads=1");
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int type = 0; type < 4; ++type)
    for (int mib : {1, 16, 256}) b->Args({type, mib});
  b->ArgNames({"dtype", "MiB"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_TensorStats)->Apply(sizes);
BENCHMARK(BM_TorchOps)->Apply(sizes);
BENCHMARK(BM_Xxh3Streaming)->Apply(sizes);
BENCHMARK(BM_Xxh3Dispatch)->Apply(sizes);
// range(1) is an index into runnable_isa_kernels(): generic, then avx2 and avx512 where the CPU
// has them; 16 MiB, so dtype ids read as in the other benchmarks.
BENCHMARK(BM_StatsKernelIsa)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2}})
    ->ArgNames({"dtype", "isa"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
