// The CUDA kernel on a GPU against its CPU reference (bit for bit, every figure) and against
// tensor_stats()'s CPU kernel (hash, min, max, counts exact; sums within docs/cuda.md's bound).
// Every test skips itself when no GPU is visible, so the binary also runs in CI.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <bit>
#include <cmath>
#include <optional>

#include "cuda/stats_reference.h"
#include "probe/tensor_stats.h"
#include "torch/stats_device.h"
#include "torch_test_util.h"

namespace {

namespace tile = probe::kernels::cuda_tile;
using test_util::random_of;

#define SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

const std::vector<at::ScalarType> kTypes = {
    at::kFloat,
    at::kDouble,
    at::kHalf,
    at::kBFloat16,
    at::kFloat8_e4m3fn,
    at::kFloat8_e5m2,
    at::kFloat8_e4m3fnuz,
    at::kFloat8_e5m2fnuz,
    at::kChar,
    at::kByte,
    at::kShort,
    at::kInt,
    at::kLong,
    at::kBool,
    at::kUInt16,
    at::kUInt32,
    at::kUInt64,
#if NUMPROBE_TORCH_AT_LEAST(2, 7)
    at::kFloat8_e8m0fnu,
#endif
};

std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }

// GPU packed figures for `t` next to the CPU reference of the same kernel order.
void expect_gpu_equals_reference_and_cpu(const at::Tensor& t, const probe::Shard& shard,
                                         const std::string& what) {
  probe::TensorStats meta;
  auto prepared = probe::detail::prepare(t, shard, meta);
  if (!prepared) return;  // empty
  auto kernel = probe::detail::device_kernel(c10::DeviceType::CUDA);
  ASSERT_NE(kernel, nullptr) << "the CUDA kernel did not register";
  at::Tensor out = at::empty({probe::detail::kPackedSlots}, t.options().dtype(at::kLong));
  kernel(*prepared, false, out);
  at::Tensor packed = out.cpu();
  const auto* p = packed.const_data_ptr<std::int64_t>();

  at::Tensor host = prepared->data.cpu().contiguous();  // the view read in logical order
  probe::kernels::ContiguousLayout layout(prepared->type, host.const_data_ptr(), host.sizes().vec(),
                                          prepared->shard);
  const auto ref =
      tile::reference_partial(prepared->type, tile::run_layout_of(layout), host.const_data_ptr());
  EXPECT_EQ(static_cast<std::uint64_t>(p[probe::detail::kHash]), ref.hash) << what;
  EXPECT_EQ(p[probe::detail::kNanCount], ref.nan) << what;
  EXPECT_EQ(p[probe::detail::kInfCount], ref.inf) << what;
  const auto same_bits = [](std::int64_t gpu, double cpu) {
    const double g = std::bit_cast<double>(gpu);
    return (std::isnan(g) && std::isnan(cpu)) ||
           std::bit_cast<std::uint64_t>(g) == std::bit_cast<std::uint64_t>(cpu) ||
           (g == 0 && cpu == 0);  // the sign of a zero min/max depends on which zero came first
  };
  EXPECT_TRUE(same_bits(p[probe::detail::kSumSquares], ref.sum_squares)) << what;
  EXPECT_TRUE(same_bits(p[probe::detail::kSum], ref.sum)) << what;
  EXPECT_TRUE(same_bits(p[probe::detail::kMin], ref.min)) << what;
  EXPECT_TRUE(same_bits(p[probe::detail::kMax], ref.max)) << what;

  // And against tensor_stats() of the same tensor on the CPU.
  const auto gpu_stats = probe::tensor_stats(t, shard);
  const auto cpu_stats = probe::tensor_stats(t.cpu(), shard);
  EXPECT_EQ(gpu_stats.hash, cpu_stats.hash) << what;
  EXPECT_EQ(gpu_stats.nan, cpu_stats.nan) << what;
  EXPECT_EQ(gpu_stats.inf, cpu_stats.inf) << what;
  if (!std::isnan(cpu_stats.min)) {
    EXPECT_EQ(gpu_stats.min, cpu_stats.min) << what;
    EXPECT_EQ(gpu_stats.max, cpu_stats.max) << what;
  }
  if (std::isfinite(cpu_stats.norm)) {
    EXPECT_NEAR(gpu_stats.norm, cpu_stats.norm, 1e-11 * cpu_stats.norm) << what;
  }
}

}  // namespace

TEST(CudaStats, GpuFiguresEqualTheCpuReferenceBitwiseForEveryDtypeAndSize) {
  SKIP_WITHOUT_GPU();
  at::manual_seed(0);
  for (auto type : kTypes)
    for (std::int64_t n : {0, 1, 7, 16, 1000, 8192, 8193, 65536 * 3 + 5, 1 << 22})
      expect_gpu_equals_reference_and_cpu(
          random_of(type, {n}, at::kCUDA), {},
          std::string(at::toString(type)) + " n=" + std::to_string(n));
}

TEST(CudaStats, LargeTensorsUpTo512MiB) {
  SKIP_WITHOUT_GPU();
  for (auto type : {at::kFloat, at::kBFloat16, at::kByte, at::kBool})
    for (std::int64_t mib : {64, 512}) {
      const std::int64_t n = (mib << 20) / at::elementSize(type);
      expect_gpu_equals_reference_and_cpu(
          random_of(type, {n}, at::kCUDA), {},
          std::string(at::toString(type)) + " " + std::to_string(mib) + " MiB");
    }
}

TEST(CudaStats, ShardsUseGlobalIndexSeeds) {
  SKIP_WITHOUT_GPU();
  for (auto type : {at::kFloat, at::kBFloat16, at::kFloat8_e4m3fn, at::kLong}) {
    at::Tensor whole = random_of(type, {64, 48, 6}, at::kCUDA);
    const std::uint64_t expected = probe::tensor_stats(whole).hash;
    std::uint64_t sum = 0;
    for (std::int64_t c = 0; c < 48; c += 12) {  // tensor parallel: column blocks, many runs
      at::Tensor local = whole.narrow(1, c, 12).contiguous();
      probe::Shard shard{{64, 48, 6}, {0, c, 0}};
      expect_gpu_equals_reference_and_cpu(local, shard,
                                          std::string(at::toString(type)) + " column shard");
      // The same shard read in place, as a strided view of the whole tensor.
      expect_gpu_equals_reference_and_cpu(
          whole.narrow(1, c, 12), shard,
          std::string(at::toString(type)) + " column shard, strided view");
      sum += probe::tensor_stats(local, shard).hash;
    }
    EXPECT_EQ(sum, expected);
    expect_gpu_equals_reference_and_cpu(whole.narrow(0, 16, 16).contiguous(),
                                        probe::Shard::along({64, 48, 6}, 0, 16), "row shard");
  }
}

TEST(CudaStats, StridedViewsAndMisalignedStorage) {
  SKIP_WITHOUT_GPU();
  at::Tensor t = random_of(at::kFloat, {1031, 517}, at::kCUDA);
  expect_gpu_equals_reference_and_cpu(t.t(), {}, "transpose");
  expect_gpu_equals_reference_and_cpu(t.slice(1, 5, 400, 3), {}, "strided slice");
  expect_gpu_equals_reference_and_cpu(t.view(-1).narrow(0, 1, 100000), {}, "offset by 4 bytes");
  expect_gpu_equals_reference_and_cpu(t.narrow(0, 0, 1).expand({1031, 517}), {},
                                      "expanded (zero stride)");
  expect_gpu_equals_reference_and_cpu(
      random_of(at::kHalf, {64, 1}, at::kCUDA).expand({64, 300}).t(), {},
      "expanded, then transposed");
  at::Tensor h = random_of(at::kBFloat16, {1 << 20}, at::kCUDA);
  expect_gpu_equals_reference_and_cpu(h.narrow(0, 3, (1 << 20) - 3), {}, "offset by 6 bytes");
}

TEST(CudaStats, NanAndInfAreCountedAndKeptOutOfMinMaxMean) {
  SKIP_WITHOUT_GPU();
  for (auto type : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    at::Tensor t = random_of(type, {100000}, at::kCUDA);
    t.index_put_({at::arange(0, 100000, 997, at::kLong).cuda()}, std::nan(""));
    t.index_put_({at::arange(5, 100000, 1999, at::kLong).cuda()}, INFINITY);
    t.index_put_({at::arange(7, 100000, 3001, at::kLong).cuda()}, -INFINITY);
    expect_gpu_equals_reference_and_cpu(t, {}, std::string(at::toString(type)) + " with NaN/Inf");
    const auto s = probe::tensor_stats(t);
    EXPECT_GT(s.nan, 0);
    EXPECT_GT(s.inf, 0);
    EXPECT_TRUE(std::isinf(s.max));
  }
}

TEST(CudaStats, SameTensorGivesBitwiseSameFiguresEveryTime) {
  SKIP_WITHOUT_GPU();
  at::Tensor t = random_of(at::kFloat, {10'000'000}, at::kCUDA);
  const auto first = probe::tensor_stats(t);
  for (int i = 0; i < 5; ++i) {
    const auto again = probe::tensor_stats(t);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(again.norm), std::bit_cast<std::uint64_t>(first.norm));
    EXPECT_EQ(std::bit_cast<std::uint64_t>(again.mean), std::bit_cast<std::uint64_t>(first.mean));
    EXPECT_EQ(again.hash, first.hash);
  }
}

TEST(CudaStats, StatsBatchNeverSyncsTheHostBeforeResolve) {
  SKIP_WITHOUT_GPU();
  // A CUDA graph capture fails on any host sync (or sync-requiring call) made while capturing:
  // adding several tensors and a scalar inside one proves the per-entry path is sync-free.
  std::vector<at::Tensor> tensors{random_of(at::kFloat, {1 << 20}, at::kCUDA),
                                  random_of(at::kBFloat16, {4096, 3}, at::kCUDA),
                                  random_of(at::kInt, {17}, at::kCUDA)};
  const at::Tensor loss = random_of(at::kFloat, {}, at::kCUDA).abs();
  probe::StatsBatch batch;
  // Warm up the kernels and the batch's device chunk outside the capture; clear() keeps the chunk.
  for (auto& t : tensors) batch.add(t);
  batch.add_scalar(loss);
  batch.resolve();
  batch.clear();
  at::cuda::CUDAStream stream = at::cuda::getStreamFromPool();
  std::size_t loss_entry = 0;
  {
    at::cuda::CUDAStreamGuard guard(stream);
    at::cuda::CUDAGraph graph;
    graph.capture_begin();
    for (auto& t : tensors) batch.add(t);
    loss_entry = batch.add_scalar(loss);
    graph.capture_end();
    graph.replay();
    batch.resolve();
  }
  for (std::size_t i = 0; i < tensors.size(); ++i)
    EXPECT_EQ(batch.stats(i).hash, probe::tensor_stats(tensors[i].cpu()).hash);
  EXPECT_EQ(batch.scalar(loss_entry), static_cast<double>(loss.item<float>()));
}

// Many entries over several chunks of the device buffer (three rows each), mixed with scalars
// and a CPU tensor: every entry gets its own figures back from the one copy.
TEST(CudaStats, StatsBatchRowsSpanChunks) {
  SKIP_WITHOUT_GPU();
  probe::StatsBatch batch({}, /*rows_per_chunk=*/3);
  std::vector<std::pair<std::size_t, at::Tensor>> tensors;
  std::vector<std::pair<std::size_t, double>> scalars;
  for (int i = 0; i < 11; ++i) {
    at::Tensor t =
        random_of(kTypes[static_cast<std::size_t>(i) % kTypes.size()], {37 * (i + 1)}, at::kCUDA);
    tensors.emplace_back(batch.add(t), t);
    if (i % 4 == 1) {
      at::Tensor value = random_of(at::kBFloat16, {1, 1}, at::kCUDA);
      scalars.emplace_back(batch.add_scalar(value), value.to(at::kDouble).item<double>());
    }
  }
  at::Tensor on_cpu = at::arange(10, at::kFloat);
  tensors.emplace_back(batch.add(on_cpu), on_cpu);
  batch.resolve();
  for (const auto& [entry, t] : tensors) {
    const auto cpu = probe::tensor_stats(t.cpu());
    EXPECT_EQ(batch.stats(entry).hash, cpu.hash) << entry;
    EXPECT_EQ(batch.stats(entry).nan, cpu.nan) << entry;
  }
  for (const auto& [entry, value] : scalars) EXPECT_EQ(batch.scalar(entry), value) << entry;
}

TEST(CudaStats, TorchHashOptionMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  probe::StatsOptions options;
  options.torch_hash = true;
  for (auto type : {at::kFloat, at::kBFloat16, at::kInt, at::kBool}) {
    if (!probe::detail::has_torch_hash_kernel(type)) continue;  // LibTorch < 2.9
    at::Tensor t = random_of(type, {300, 7}, at::kCUDA);
    const auto gpu = probe::tensor_stats(t, {}, options);
    const auto cpu = probe::tensor_stats(t.cpu(), {}, options);
    ASSERT_TRUE(gpu.torch_hash.has_value()) << at::toString(type);
    EXPECT_EQ(gpu.torch_hash, cpu.torch_hash) << at::toString(type);
    EXPECT_EQ(gpu.hash, cpu.hash) << at::toString(type);
  }
}

// A tensor on another GPU than the current one: its kernel runs on its own device and stream.
TEST(CudaStats, TensorOnAnotherDeviceThanTheCurrentOne) {
  SKIP_WITHOUT_GPU();
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  const c10::cuda::CUDAGuard current(0);
  at::Tensor t = random_of(at::kFloat, {1 << 20}, at::kCUDA).to(at::Device(at::kCUDA, 1));
  probe::StatsBatch batch;
  const auto entry = batch.add(t);
  const auto on_device0 = batch.add(random_of(at::kFloat, {1000}, at::kCUDA));
  batch.resolve();
  EXPECT_EQ(batch.stats(entry).hash, probe::tensor_stats(t.cpu()).hash);
  EXPECT_TRUE(batch.ready(on_device0));
}

// Rows written from a side stream (a trainer's, or autograd's for a backward hook), resolved on
// the default stream: the copy back must wait for them. The side stream's kernel is held back by
// a sleeping kernel, so a copy that did not wait would read the row before it is written.
TEST(CudaStats, StatsBatchCopyWaitsForRowsWrittenOnAnotherStream) {
  SKIP_WITHOUT_GPU();
  at::Tensor t = random_of(at::kFloat, {1 << 22}, at::kCUDA);
  const auto expected = probe::tensor_stats(t.cpu());  // the copy syncs: t is ready everywhere
  probe::StatsBatch batch;
  std::size_t entry = 0, scalar_entry = 0;
  const at::Tensor loss = at::full({}, 2.5, t.options());
  torch::cuda::synchronize();
  at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
  {
    const at::cuda::CUDAStreamGuard guard(side);
    at::cuda::sleep(400'000'000);  // some 0.2 s
    entry = batch.add(t);
    scalar_entry = batch.add_scalar(loss);
  }
  batch.resolve();  // on the default stream
  EXPECT_EQ(batch.stats(entry).hash, expected.hash);
  EXPECT_EQ(bits(batch.stats(entry).norm), bits(probe::tensor_stats(t).norm));
  EXPECT_EQ(batch.scalar(scalar_entry), 2.5);
}

// A trainer frees a tensor right after add(), and its stream reuses the memory at once; the
// probe's kernel, on another stream and held back by a sleeping kernel, must still read the old
// values (the allocator is told the probe's stream uses the memory).
TEST(CudaStats, StatsBatchInputFreedRightAfterAddIsNotReusedBeforeItIsRead) {
  SKIP_WITHOUT_GPU();
  at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
  std::optional<at::Tensor> t;
  {
    const at::cuda::CUDAStreamGuard guard(side);  // allocated on the trainer's side stream
    t = random_of(at::kFloat, {1 << 22}, at::kCUDA);
  }
  side.synchronize();
  const std::uint64_t expected = probe::tensor_stats(t->cpu()).hash;
  probe::StatsBatch batch;
  at::cuda::sleep(400'000'000);  // on the default stream, where add() launches
  const std::size_t entry = batch.add(*t);
  t.reset();
  at::Tensor reuse;
  {
    const at::cuda::CUDAStreamGuard guard(side);
    // same size: same block if free
    reuse = at::zeros({1 << 22}, at::TensorOptions().device(at::kCUDA));
  }
  batch.resolve();
  EXPECT_EQ(batch.stats(entry).hash, expected);
  EXPECT_NE(batch.stats(entry).hash, probe::tensor_stats(reuse.cpu()).hash);
}

// Tensors without elements on the GPU: the documented figures under every option, from
// tensor_stats(), a StatsBatch and the CUDA kernel itself (which writes them without launching
// a grid of zero blocks).
TEST(CudaStats, EmptyTensorsGiveTheDocumentedFigures) {
  SKIP_WITHOUT_GPU();
  auto kernel = probe::detail::device_kernel(c10::DeviceType::CUDA);
  ASSERT_NE(kernel, nullptr);
  for (auto type : kTypes) {
    at::Tensor base = random_of(type, {4, 3}, at::kCUDA);
    const auto cuda = base.options();
    for (const at::Tensor& t :
         {at::empty({0}, cuda), at::empty({0, 5}, cuda), at::empty({3, 0, 2}, cuda),
          base.narrow(0, 2, 0), base.t().narrow(1, 4, 0)})
      for (bool torch_hash : {false, true}) {
        const std::string what = at::toString(type) + std::string(" ") + c10::str(t.sizes()) +
                                 (torch_hash ? " torch_hash" : "");
        probe::StatsOptions options;
        options.torch_hash = torch_hash;
        probe::StatsBatch batch(options);
        const std::size_t entry = batch.add(t);
        batch.resolve();
        for (const probe::TensorStats& s :
             {probe::tensor_stats(t, {}, options), batch.stats(entry)}) {
          EXPECT_TRUE(s.supported()) << what;
          EXPECT_EQ(s.hash, 0u) << what;
          EXPECT_EQ(s.norm, 0.0) << what;
          EXPECT_TRUE(std::isnan(s.min) && std::isnan(s.max) && std::isnan(s.mean)) << what;
          EXPECT_EQ(s.shape, t.sizes().vec()) << what;
          const bool has = torch_hash && probe::detail::has_torch_hash_kernel(type);
          EXPECT_EQ(s.torch_hash, has ? std::optional<std::uint64_t>(0) : std::nullopt) << what;
        }
        probe::detail::PreparedTensor prepared;
        prepared.data = t;
        at::Tensor out = at::full({probe::detail::kPackedSlots}, 7, cuda.dtype(at::kLong));
        kernel(prepared, torch_hash, out);
        probe::TensorStats unpacked;
        unpacked.shape = t.sizes().vec();
        probe::detail::unpack_figures(out.cpu().const_data_ptr<std::int64_t>(), torch_hash,
                                      unpacked);
        EXPECT_EQ(unpacked.hash, 0u) << what;
        EXPECT_EQ(unpacked.norm, 0.0) << what;
        EXPECT_TRUE(std::isnan(unpacked.min) && std::isnan(unpacked.max)) << what;
        if (torch_hash) {
          EXPECT_EQ(unpacked.torch_hash, std::optional<std::uint64_t>(0)) << what;
        }
      }
  }
}

// A sparse CUDA tensor: read on the host from its coalesced indices and values, so every figure
// is the CPU kernel's on its dense equivalent, bit for bit.
TEST(CudaStats, SparseTensorFiguresAreTheDenseEquivalentsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  at::manual_seed(12);
  probe::StatsOptions options;
  options.torch_hash = true;
  for (auto type : {at::kFloat, at::kBFloat16, at::kLong})
    for (double density : {0.0, 0.05, 1.0}) {
      at::Tensor dense = random_of(type, {3, 70001}, at::kCUDA);
      dense = at::where(at::rand(dense.sizes(), dense.options().dtype(at::kFloat)) < density, dense,
                        at::zeros({}, dense.options()));
      const std::string what =
          at::toString(type) + std::string(" density ") + std::to_string(density);
      const auto gpu = probe::tensor_stats(dense.to_sparse(), {}, options);
      const auto cpu = probe::tensor_stats(dense.cpu(), {}, options);
      EXPECT_TRUE(gpu.supported()) << what;
      EXPECT_EQ(gpu.hash, cpu.hash) << what;
      EXPECT_EQ(bits(gpu.norm), bits(cpu.norm)) << what;
      EXPECT_EQ(bits(gpu.mean), bits(cpu.mean)) << what;
      EXPECT_EQ(bits(gpu.min), bits(cpu.min)) << what;
      EXPECT_EQ(bits(gpu.max), bits(cpu.max)) << what;
      EXPECT_EQ(gpu.torch_hash, cpu.torch_hash) << what;
      EXPECT_EQ(gpu.nnz, dense.count_nonzero().item<std::int64_t>()) << what;
    }
}
