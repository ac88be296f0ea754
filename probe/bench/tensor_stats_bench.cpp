// tensor_stats throughput against (a) XXH3_64bits streaming over the same bytes on one core and
// (b) the PyTorch-ops way on the same tensor and thread count: at::hash_tensor +
// at::linalg_vector_norm + isnan().sum() + min + max. Bytes read per second for every case;
// scripts/bench.sh turns them into the ratios of docs/perf.md.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <xxhash.h>

#include "probe/tensor_stats.h"

namespace {

const at::ScalarType kTypes[] = {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble};

at::Tensor make_tensor(const benchmark::State& state) {
  const auto type = kTypes[state.range(0)];
  const std::int64_t bytes = state.range(1) << 20;
  at::manual_seed(0);
  return at::randn({bytes / static_cast<std::int64_t>(c10::elementSize(type))}).to(type);
}

void label(benchmark::State& state, const at::Tensor& t) {
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(t.nbytes()));
  state.SetLabel(probe::dtype_name(t.scalar_type()) + " threads=" + std::to_string(at::get_num_threads()));
}

void BM_TensorStats(benchmark::State& state) {
  const at::Tensor t = make_tensor(state);
  for (auto _ : state) benchmark::DoNotOptimize(probe::tensor_stats(t).hash);
  label(state, t);
}

void BM_TorchOps(benchmark::State& state) {
  const at::Tensor t = make_tensor(state);
  for (auto _ : state) {
    benchmark::DoNotOptimize(at::hash_tensor(t).view(at::kLong).item<std::int64_t>());
    benchmark::DoNotOptimize(at::linalg_vector_norm(t).item<double>());
    benchmark::DoNotOptimize(at::isnan(t).sum().item<std::int64_t>());
    benchmark::DoNotOptimize(t.min().item<double>());
    benchmark::DoNotOptimize(t.max().item<double>());
  }
  label(state, t);
}

void BM_Xxh3Streaming(benchmark::State& state) {
  const at::Tensor t = make_tensor(state);
  for (auto _ : state) benchmark::DoNotOptimize(XXH3_64bits(t.const_data_ptr(), t.nbytes()));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(t.nbytes()));
  state.SetLabel(probe::dtype_name(t.scalar_type()) + " threads=1");
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int type = 0; type < 4; ++type)
    for (int mib : {1, 16, 256}) b->Args({type, mib});
  b->ArgNames({"dtype", "MiB"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_TensorStats)->Apply(sizes);
BENCHMARK(BM_TorchOps)->Apply(sizes);
BENCHMARK(BM_Xxh3Streaming)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
