// Throughput of tensor_stats() on a CUDA tensor (the fused kernel), printed as bytes read per
// second next to the device-to-device copy bandwidth measured in the same run, and the speedup
// over the PyTorch-ops way Python tooling uses: at::hash_tensor + linalg_vector_norm +
// isnan().sum() + isinf().sum() + min + max, each read back with .item() (one sync per figure).
//
// The fused path is timed two ways: batched (StatsBatch::add on the stream, the probe's way: the
// step's one copy back is not included) and one tensor at a time (tensor_stats(): add, then a
// copy back and sync per tensor, wall time), so the speedup is given for both.
//
// Copy bandwidth is reported two ways: bytes copied per second (size / time, what a copy
// "moves") and DRAM traffic (2 * size / time, read + write). The target ratio (>= 70%
// for >= 64 MiB float32/bfloat16) is stated against both in docs/perf.md.
//
// Usage: stats_cuda_bench [--quick]   (prints one line per dtype and size, and a summary)
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <vector>

#include "probe/tensor_stats.h"

namespace {

// Median-free mean over `iters` launches on the current stream, in seconds, after a warm-up.
double time_on_stream(const std::function<void()>& fn, int iters) {
  fn();
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  auto stream = at::cuda::getCurrentCUDAStream();
  start.record(stream);
  for (int i = 0; i < iters; ++i) fn();
  stop.record(stream);
  stop.synchronize();
  return static_cast<double>(start.elapsed_time(stop)) / 1e3 / iters;
}

// Wall time including host syncs (for the .item() way, whose cost is the syncs).
double time_wall(const std::function<void()>& fn, int iters) {
  fn();
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  torch::cuda::synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::puts("stats_cuda_bench: no CUDA device, nothing to measure");
    return 0;
  }
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  auto props = at::cuda::getCurrentDeviceProperties();
  std::printf("device: %s, %d SMs\n", props->name, props->multiProcessorCount);
  std::printf("%-9s %9s %10s %10s %10s %8s %8s %10s %8s %10s %8s\n", "dtype", "MiB", "stats_GB/s",
              "copy_GB/s", "copy_traffic", "ratio", "ratio_tr", "torch_ms", "speedup", "single_ms",
              "speedup1");
  int failed_rows = 0;
  const std::vector<std::int64_t> mib = quick ? std::vector<std::int64_t>{1, 64, 512}
                                              : std::vector<std::int64_t>{1, 4, 16, 64, 256, 512};
  for (auto type :
       {at::kFloat, at::kBFloat16, at::kHalf, at::kFloat8_e4m3fn, at::kDouble, at::kInt}) {
    for (auto m : mib) try {
        const std::int64_t bytes = m << 20;
        const std::int64_t n = bytes / static_cast<std::int64_t>(at::elementSize(type));
        at::Tensor t = (at::randn({n}, at::TensorOptions().device(at::kCUDA)) * 3).to(type);
        at::Tensor dst = at::empty_like(t);
        const int iters = m >= 256 ? 10 : 50;
        const double copy_s = time_on_stream([&] { dst.copy_(t); }, iters);
        probe::StatsBatch batch({},
                                /*rows_per_chunk=*/iters + 1);  // one chunk: no allocation timed
        const double stats_s = time_on_stream([&] { batch.add(t); }, iters);
        const double single_s =
            time_wall([&] { (void)probe::tensor_stats(t); }, std::max(3, iters / 5));
        double torch_s = 0;
        if (type != at::kFloat8_e4m3fn) {  // at::hash_tensor has no float8 kernel
          // linalg_vector_norm takes floating tensors only: an integer tensor is converted first,
          // as Python tooling has to.
          const bool floating = at::isFloatingType(type);
          torch_s = time_wall(
              [&] {
                volatile std::int64_t h = at::hash_tensor(t).view(at::kLong).item<std::int64_t>();
                volatile double norm = at::linalg_vector_norm(floating ? t : t.to(at::kDouble), 2,
                                                              {}, false, at::kDouble)
                                           .item<double>();
                volatile std::int64_t nan = at::isnan(t).sum().item<std::int64_t>();
                volatile std::int64_t inf = at::isinf(t).sum().item<std::int64_t>();
                volatile double mn = t.min().item<double>();
                volatile double mx = t.max().item<double>();
                (void)h, (void)norm, (void)nan, (void)inf, (void)mn, (void)mx;
              },
              std::max(3, iters / 5));
        }
        const double stats_gbs = bytes / stats_s / 1e9, copy_gbs = bytes / copy_s / 1e9;
        std::printf("%-9s %9lld %10.1f %10.1f %10.1f %7.0f%% %7.0f%% %10.3f %7.1fx %10.3f %7.1fx\n",
                    probe::dtype_name(type).c_str(), static_cast<long long>(m), stats_gbs, copy_gbs,
                    2 * copy_gbs, 100 * stats_gbs / copy_gbs, 50 * stats_gbs / copy_gbs,
                    torch_s * 1e3, torch_s > 0 ? torch_s / stats_s : 0.0, single_s * 1e3,
                    torch_s > 0 ? torch_s / single_s : 0.0);
        std::fflush(stdout);
      } catch (const c10::Error& e) {  // one failing row must not cost the rest of the table
        ++failed_rows;
        std::printf("%-9s %9lld FAILED: %s\n", probe::dtype_name(type).c_str(),
                    static_cast<long long>(m), e.what_without_backtrace());
        std::fflush(stdout);
      } catch (const std::exception& e) {
        ++failed_rows;
        std::printf("%-9s %9lld FAILED: %s\n", probe::dtype_name(type).c_str(),
                    static_cast<long long>(m), e.what());
        std::fflush(stdout);
      }
  }
  return failed_rows == 0 ? 0 : 1;
}
