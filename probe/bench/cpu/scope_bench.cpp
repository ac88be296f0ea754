// What a probe::Scope costs where nothing is traced (docs/perf.md, "Op trace"): every module
// scope of a model pays it on every forward, traced or not. With no PROBE_TRACE no op callback
// is registered, so a scope is a name join, a push and pop on the thread's scope stack, one
// atomic load and RecordFunction's has-callbacks check.
#include <benchmark/benchmark.h>

#include "probe/scope.h"

namespace {

// A module's scope inside its parent's, as examples/moe opens "attention" inside "layers.3".
void BM_UntracedScopeInsideAParent(benchmark::State& state) {
  probe::Scope layer("layers.3");
  for (auto _ : state) {
    probe::Scope scope("attention");
    benchmark::DoNotOptimize(scope.name().data());
  }
}
BENCHMARK(BM_UntracedScopeInsideAParent);

// Probe::forward's root scope.
void BM_UntracedRootScope(benchmark::State& state) {
  for (auto _ : state) {
    probe::Scope scope(probe::Scope::Root{}, "model");
    benchmark::DoNotOptimize(scope.name().data());
  }
}
BENCHMARK(BM_UntracedRootScope);

}  // namespace

BENCHMARK_MAIN();
