#include "probe/tensor_stats.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "torch/stats_device.h"
#include "torch_test_util.h"

namespace {

// Hash spec v1 straight from its definition: libxxhash over each element's bytes, seeded with
// the element's global row-major index.
std::uint64_t reference_hash(const at::Tensor& local, const probe::Shard& shard = {}) {
  at::Tensor c = local.contiguous();
  if (c.is_complex()) c = at::view_as_real(c).contiguous();
  const auto size = static_cast<std::size_t>(c.element_size());
  const auto* bytes = static_cast<const unsigned char*>(c.const_data_ptr());
  std::vector<std::int64_t> global = shard.empty() ? c.sizes().vec() : shard.global_shape;
  std::vector<std::int64_t> offset =
      shard.empty() ? std::vector<std::int64_t>(c.dim(), 0) : shard.offset;
  if (!shard.empty() && local.is_complex()) {
    global.push_back(2);
    offset.push_back(0);
  }
  std::uint64_t h = 0;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(c.dim()), 0);
  for (std::int64_t i = 0; i < c.numel(); ++i) {
    std::uint64_t g = 0;
    for (std::size_t d = 0; d < idx.size(); ++d)
      g = g * static_cast<std::uint64_t>(global[d]) +
          static_cast<std::uint64_t>(idx[d] + offset[d]);
    h += XXH3_64bits_withSeed(bytes + static_cast<std::size_t>(i) * size, size, g);
    for (std::size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < c.size(static_cast<std::int64_t>(d))) break;
      idx[d] = 0;
    }
  }
  return h;
}

// at::hash_tensor's value (LibTorch >= 2.9; before, has_torch_hash_kernel() is false for every
// dtype, so no test asks for it).
std::uint64_t torch_hash_of(const at::Tensor& t) {
#if NUMPROBE_TORCH_AT_LEAST(2, 9)
  return static_cast<std::uint64_t>(at::hash_tensor(t).view(at::kLong).item<std::int64_t>());
#else
  ADD_FAILURE() << "at::hash_tensor of a " << t.dtype() << " tensor needs LibTorch >= 2.9";
  return 0;
#endif
}

using test_util::random_of;

const std::vector<at::ScalarType> kHashableTypes = {at::kFloat,
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
                                                    at::kUInt64};

}  // namespace

TEST(TensorStats, HashEqualsLibxxhashElementByElementForEveryDtype) {
  at::manual_seed(0);
  for (auto type : kHashableTypes) {
    // Sizes around the kernel's lane width and chunk size.
    for (std::int64_t n : {1, 7, 8, 9, 1000, 65536 + 3, 200001}) {
      at::Tensor t = random_of(type, {n});
      EXPECT_EQ(probe::tensor_stats(t).hash, reference_hash(t)) << at::toString(type) << " n=" << n;
    }
  }
}

// The dtype tests' values come from random_of: an unsigned tensor drawn like a signed one wraps
// to values near its type's maximum (uint64: ~1.8e19), outside the range random_of promises.
TEST(RandomOf, UnsignedTypesStayInRangeSignedOnesReachBelowZero) {
  at::manual_seed(4);
  for (auto type : {at::kByte, at::kUInt16, at::kUInt32, at::kUInt64}) {
    const at::Tensor v = random_of(type, {1000}).to(at::kDouble);
    EXPECT_GE(v.min().item<double>(), 0) << at::toString(type);
    EXPECT_LT(v.max().item<double>(), 200) << at::toString(type);
  }
  for (auto type : {at::kChar, at::kShort, at::kInt, at::kLong}) {
    const at::Tensor v = random_of(type, {1000}).to(at::kDouble);
    EXPECT_GE(v.min().item<double>(), -100) << at::toString(type);
    EXPECT_LT(v.min().item<double>(), 0) << at::toString(type);
    EXPECT_LT(v.max().item<double>(), 100) << at::toString(type);
  }
  const at::Tensor b = random_of(at::kBool, {1000});
  EXPECT_EQ(b.scalar_type(), at::kBool);
  EXPECT_TRUE(b.any().item<bool>());
  EXPECT_FALSE(b.all().item<bool>());
}

TEST(TensorStats, TransposedViewHashesLikeItsContiguousCopy) {
  at::Tensor t = at::randn({37, 53});
  at::Tensor view = t.t();
  ASSERT_FALSE(view.is_contiguous());
  EXPECT_EQ(probe::tensor_stats(view).hash, probe::tensor_stats(view.contiguous()).hash);
  EXPECT_NE(probe::tensor_stats(view).hash, probe::tensor_stats(t).hash);
  at::Tensor slice = t.slice(1, 5, 40, 2);
  EXPECT_EQ(probe::tensor_stats(slice).hash, reference_hash(slice));
}

TEST(TensorStats, ShardHashesAddUpToTheWholeTensorsHash) {
  at::Tensor whole = at::randn({12, 10, 6}).to(at::kBFloat16);
  const std::uint64_t expected = probe::tensor_stats(whole).hash;
  // Rows (ZeRO-3 style), columns (tensor parallel) and 3-D blocks.
  for (int dim : {0, 1, 2}) {
    std::uint64_t sum = 0;
    const std::int64_t parts = dim == 0 ? 4 : dim == 1 ? 5 : 3;
    const std::int64_t step = whole.size(dim) / parts;
    for (std::int64_t p = 0; p < parts; ++p) {
      at::Tensor local = whole.narrow(dim, p * step, step).contiguous();
      auto shard = probe::Shard::along(whole.sizes().vec(), dim, p * step);
      const auto stats = probe::tensor_stats(local, shard);
      EXPECT_EQ(stats.hash, reference_hash(local, shard));
      EXPECT_EQ(stats.shard, shard);
      sum += stats.hash;
    }
    EXPECT_EQ(sum, expected) << "split along dim " << dim;
  }
  std::uint64_t blocks = 0;
  for (std::int64_t r = 0; r < 12; r += 6)
    for (std::int64_t c = 0; c < 10; c += 5) {
      at::Tensor local = whole.narrow(0, r, 6).narrow(1, c, 5);
      blocks += probe::tensor_stats(local, probe::Shard{{12, 10, 6}, {r, c, 0}}).hash;
    }
  EXPECT_EQ(blocks, expected);
}

TEST(TensorStats, StatisticsMatchDoublePrecisionReference) {
  at::manual_seed(1);
  for (auto type : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt}) {
    at::Tensor t = random_of(type, {1000, 77});
    at::Tensor d = t.to(at::kDouble);
    const auto s = probe::tensor_stats(t);
    EXPECT_NEAR(s.norm, d.norm().item<double>(), 1e-12 * s.norm) << at::toString(type);
    EXPECT_EQ(s.min, d.min().item<double>());
    EXPECT_EQ(s.max, d.max().item<double>());
    EXPECT_NEAR(s.mean, d.mean().item<double>(), 1e-12 * d.abs().max().item<double>());
    EXPECT_EQ(s.nan, 0);
    EXPECT_EQ(s.inf, 0);
    EXPECT_EQ(s.dtype, probe::dtype_name(type));
    EXPECT_EQ(s.shape, (std::vector<std::int64_t>{1000, 77}));
  }
}

TEST(TensorStats, NanAndInfAreCountedAndKeptOutOfMinMaxMean) {
  at::Tensor t = at::tensor({1.0f, NAN, -INFINITY, 3.0f, NAN});
  const auto s = probe::tensor_stats(t);
  EXPECT_EQ(s.nan, 2);
  EXPECT_EQ(s.inf, 1);
  EXPECT_TRUE(std::isnan(s.norm));
  EXPECT_EQ(s.min, -INFINITY);
  EXPECT_EQ(s.max, 3.0);
  EXPECT_EQ(s.mean, -INFINITY);
  const auto all_nan = probe::tensor_stats(at::full({4}, NAN));
  EXPECT_EQ(all_nan.nan, 4);
  EXPECT_TRUE(std::isnan(all_nan.min) && std::isnan(all_nan.max) && std::isnan(all_nan.mean));
}

TEST(TensorStats, EmptyTensorHasHashZero) {
  const auto s = probe::tensor_stats(at::empty({0, 5}));
  EXPECT_EQ(s.hash, 0u);
  EXPECT_EQ(s.norm, 0.0);
  EXPECT_TRUE(std::isnan(s.mean));
  EXPECT_EQ(s.shape, (std::vector<std::int64_t>{0, 5}));
}

// Tensors without elements (an MoE expert that received no tokens): the documented figures,
// never an error, whatever the dtype, option, shape, view or shard.
std::vector<std::pair<std::string, at::Tensor>> empty_tensors_of(at::ScalarType type) {
  at::Tensor base = random_of(type, {4, 3});
  return {{"[0]", at::empty({0}, type)},
          {"[0,5]", at::empty({0, 5}, type)},
          {"[3,0,2]", at::empty({3, 0, 2}, type)},
          {"slice of [4,3]", base.narrow(0, 2, 0)},
          {"transposed slice", base.t().narrow(1, 4, 0)}};
}

void expect_empty_figures(const probe::TensorStats& s, const at::Tensor& t, bool torch_hash,
                          const std::string& what) {
  EXPECT_TRUE(s.supported()) << what << ": " << s.unsupported.value_or("");
  EXPECT_EQ(s.hash, 0u) << what;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(s.norm), 0u) << what;  // +0
  EXPECT_TRUE(std::isnan(s.min) && std::isnan(s.max) && std::isnan(s.mean)) << what;
  EXPECT_EQ(s.nan, 0) << what;
  EXPECT_EQ(s.inf, 0) << what;
  EXPECT_EQ(s.shape, t.sizes().vec()) << what;
  if (torch_hash && probe::detail::has_torch_hash_kernel(t.scalar_type())) {
    ASSERT_TRUE(s.torch_hash) << what;
    EXPECT_EQ(*s.torch_hash, 0u) << what;  // the XOR reduction's identity
  } else {
    EXPECT_FALSE(s.torch_hash) << what;
  }
}

TEST(TensorStats, EmptyTensorsGiveTheDocumentedFiguresUnderEveryOption) {
  std::vector<at::ScalarType> types = kHashableTypes;
  types.push_back(at::kComplexFloat);
  for (auto type : types)
    for (const auto& [shape, t] : empty_tensors_of(type))
      for (bool torch_hash : {false, true}) {
        probe::StatsOptions options;
        options.torch_hash = torch_hash;
        const std::string what =
            at::toString(type) + std::string(" ") + shape + (torch_hash ? " torch_hash" : "");
        expect_empty_figures(probe::tensor_stats(t, {}, options), t, torch_hash, what);
        // As a shard at the global tensor's end, and in a StatsBatch with other entries.
        std::vector<std::int64_t> global = t.sizes().vec(), offset(global.size(), 0);
        global[0] += 2;
        offset[0] = global[0] - t.size(0);
        const probe::Shard shard{global, offset};
        const auto sharded = probe::tensor_stats(t, shard, options);
        expect_empty_figures(sharded, t, torch_hash, what + " shard");
        EXPECT_EQ(sharded.shard, shard) << what;
        probe::StatsBatch batch(options);
        batch.add(at::ones({2}));
        const std::size_t entry = batch.add(t);
        batch.resolve();
        expect_empty_figures(batch.stats(entry), t, torch_hash, what + " batch");
      }
}

// The device paths (the ATen fallback here, on CPU tensors; tests/cuda run the CUDA kernel)
// write an empty tensor's figures too, on the device, instead of an empty grid or amin's error.
TEST(TensorStats, DevicePathsWriteAnEmptyTensorsFigures) {
  using Access = probe::detail::StatsBatchAccess;
  for (auto type : {at::kFloat, at::kBFloat16, at::kLong, at::kBool})
    for (const auto& [shape, t] : empty_tensors_of(type))
      for (bool torch_hash : {false, true}) {
        const std::string what = at::toString(type) + std::string(" ") + shape;
        probe::detail::PreparedTensor prepared;
        prepared.data = t;
        at::Tensor packed = at::full({probe::detail::kPackedSlots}, 7, at::kLong);
        probe::detail::packed_figures_aten(prepared, torch_hash, packed);
        probe::TensorStats stats;
        stats.shape = t.sizes().vec();
        probe::detail::unpack_figures(packed.const_data_ptr<std::int64_t>(), torch_hash, stats);
        expect_empty_figures(stats, t, torch_hash, what + " aten");
        probe::StatsOptions options;
        options.torch_hash = torch_hash;
        probe::StatsBatch batch(options);
        const std::size_t entry = Access::add_through_device_buffer(batch, t);
        batch.resolve();
        expect_empty_figures(batch.stats(entry), t, torch_hash, what + " device buffer");
      }
}

TEST(TensorStats, FiguresAreBitwiseTheSameForAnyThreadCount) {
  at::Tensor t = at::randn({3, 1 << 19});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = probe::tensor_stats(t);
  at::set_num_threads(2);
  const auto two = probe::tensor_stats(t);
  at::set_num_threads(threads);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(one.norm), std::bit_cast<std::uint64_t>(two.norm));
  EXPECT_EQ(std::bit_cast<std::uint64_t>(one.mean), std::bit_cast<std::uint64_t>(two.mean));
  EXPECT_EQ(one.hash, two.hash);
  EXPECT_EQ(probe::tensor_stats(t).norm, one.norm);
}

TEST(TensorStats, ComplexTensorsHashAsTheirRealView) {
  at::Tensor z = at::randn({6, 4}, at::kComplexFloat);
  const auto s = probe::tensor_stats(z);
  EXPECT_EQ(s.dtype, "complex64");
  EXPECT_EQ(s.hash, probe::tensor_stats(at::view_as_real(z)).hash);
  EXPECT_EQ(s.hash, probe::tensor_stats(z.conj().conj()).hash);
  std::uint64_t halves = 0;
  for (std::int64_t r : {0, 3})
    halves += probe::tensor_stats(z.narrow(0, r, 3), probe::Shard::along({6, 4}, 0, r)).hash;
  EXPECT_EQ(halves, s.hash);
}

// Every figure of a sparse tensor is its dense equivalent's, bit for bit, though no dense copy
// is made: the zeros' hash terms come from the shape, their sums from replaying the kernel's
// order over the stored elements only.
void expect_same_figures(const probe::TensorStats& got, const probe::TensorStats& dense,
                         const std::string& what) {
  EXPECT_TRUE(got.supported()) << what << ": " << got.unsupported.value_or("");
  EXPECT_EQ(got.hash, dense.hash) << what;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(got.norm), std::bit_cast<std::uint64_t>(dense.norm))
      << what << " norm " << got.norm << " vs " << dense.norm;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(got.min), std::bit_cast<std::uint64_t>(dense.min))
      << what << " min " << got.min << " vs " << dense.min;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(got.max), std::bit_cast<std::uint64_t>(dense.max))
      << what << " max " << got.max << " vs " << dense.max;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(got.mean), std::bit_cast<std::uint64_t>(dense.mean))
      << what << " mean " << got.mean << " vs " << dense.mean;
  EXPECT_EQ(got.nan, dense.nan) << what;
  EXPECT_EQ(got.inf, dense.inf) << what;
  EXPECT_EQ(got.mhash, dense.mhash) << what;
  ASSERT_TRUE(got.l1 && dense.l1) << what;
  EXPECT_EQ(std::bit_cast<std::uint64_t>(*got.l1), std::bit_cast<std::uint64_t>(*dense.l1))
      << what << " l1 " << *got.l1 << " vs " << *dense.l1;
  EXPECT_EQ(got.dtype, dense.dtype) << what;
  EXPECT_EQ(got.shape, dense.shape) << what;
  EXPECT_EQ(got.shard, dense.shard) << what;
}

// A dense tensor with about `density` of its elements nonzero (0: none, 1: all).
at::Tensor sparse_pattern_of(at::ScalarType type, at::IntArrayRef shape, double density) {
  at::Tensor values = random_of(type, shape);
  if (type == at::kBool) values = at::ones(shape, at::kBool);
  // stored means nonzero
  else values = at::where(values == 0, at::ones({}, values.options()), values);
  at::Tensor keep = at::rand(shape, at::kDouble) < density;
  return at::where(keep, values, at::zeros({}, values.options()));
}

TEST(TensorStats, SparseTensorFiguresAreTheDenseEquivalentsBitwise) {
  at::manual_seed(11);
  for (auto type : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt, at::kLong,
                    at::kChar, at::kByte, at::kShort, at::kBool, at::kComplexFloat})
    for (const std::vector<std::int64_t>& shape :
         {std::vector<std::int64_t>{7}, {5, 9}, {3, 4, 5}, {3, 70001}})  // the last spans 4 chunks
      for (double density : {0.0, 0.01, 0.3, 1.0}) {
        const at::Tensor dense = sparse_pattern_of(type, shape, density);
        const std::string what = at::toString(type) + std::string(" ") + c10::str(dense.sizes()) +
                                 " density " + std::to_string(density);
        const auto sparse = probe::tensor_stats(dense.to_sparse());
        expect_same_figures(sparse, probe::tensor_stats(dense), what);
        EXPECT_EQ(sparse.nnz, dense.count_nonzero().item<std::int64_t>()) << what;
        EXPECT_FALSE(probe::tensor_stats(dense).nnz) << what;
        // Hybrid: dims after the first stored densely in each value (not for the large shape:
        // ATen's to_sparse(1) takes seconds there).
        if (shape.size() > 1 && dense.numel() < 1000)
          expect_same_figures(probe::tensor_stats(dense.to_sparse(1)), probe::tensor_stats(dense),
                              what + " hybrid");
        // As a shard of a larger global tensor: the global indices seed the hash and the runs.
        std::vector<std::int64_t> global = shape, offset(shape.size(), 0);
        global.back() += 3;
        offset.back() = 2;
        const probe::Shard shard{global, offset};
        expect_same_figures(probe::tensor_stats(dense.to_sparse(), shard),
                            probe::tensor_stats(dense, shard), what + " shard");
      }
}

TEST(TensorStats, SparseSpecialValuesDuplicatesAndNegativeZero) {
  // NaN and infinities among the stored values.
  at::Tensor dense = sparse_pattern_of(at::kFloat, {40, 33}, 0.2);
  dense[3][4] = std::numeric_limits<float>::quiet_NaN();
  dense[17][0] = -std::numeric_limits<float>::infinity();
  expect_same_figures(probe::tensor_stats(dense.to_sparse()), probe::tensor_stats(dense),
                      "nan/inf");
  // Uncoalesced, with duplicate indices: coalescing sums them, which is the dense equivalent.
  at::Tensor indices = at::tensor({0, 5, 5, 2, 9, 0, 5}, at::kLong).view({1, 7});
  at::Tensor values = at::tensor({1.5f, -2.0f, 0.25f, 3.0f, 7.0f, 0.5f, 1e-3f});
  at::Tensor repeated = at::sparse_coo_tensor(indices, values, {12});
  ASSERT_FALSE(repeated.is_coalesced());
  expect_same_figures(probe::tensor_stats(repeated),
                      probe::tensor_stats(repeated.coalesce().to_dense()), "duplicates");
  EXPECT_EQ(probe::tensor_stats(repeated).nnz, 4);  // 0, 2, 5, 9 once coalesced
  at::Tensor int_repeated =
      at::sparse_coo_tensor(indices.repeat({2, 1}), at::arange(7, at::kLong), {10, 10});
  expect_same_figures(probe::tensor_stats(int_repeated),
                      probe::tensor_stats(int_repeated.to_dense()), "int64 duplicates");
  // Duplicates that cancel, and a stored -0: the dense tensor holds +0 there (0 + value).
  at::Tensor cancel = at::sparse_coo_tensor(at::tensor({1, 1, 3}, at::kLong).view({1, 3}),
                                            at::tensor({2.0, -2.0, -0.0}, at::kDouble), {4});
  expect_same_figures(probe::tensor_stats(cancel), probe::tensor_stats(cancel.to_dense()),
                      "-0 and cancel");
  // Compressed layouts are read through their COO form.
  at::Tensor matrix = sparse_pattern_of(at::kFloat, {6, 8}, 0.3);
  expect_same_figures(probe::tensor_stats(matrix.to_sparse_csr()), probe::tensor_stats(matrix),
                      "csr");
  expect_same_figures(probe::tensor_stats(matrix.to_sparse_csc()), probe::tensor_stats(matrix),
                      "csc");
}

TEST(TensorStats, SparseTorchCompatibleHashIsTheDenseEquivalents) {
  probe::StatsOptions options;
  options.torch_hash = true;
  for (auto type : {at::kFloat, at::kDouble, at::kLong, at::kBool, at::kBFloat16})
    for (double density : {0.0, 0.1, 1.0}) {
      const at::Tensor dense = sparse_pattern_of(type, {9, 13}, density);
      const auto s = probe::tensor_stats(dense.to_sparse(), {}, options);
#if NUMPROBE_TORCH_AT_LEAST(2, 9)
      ASSERT_TRUE(s.torch_hash) << at::toString(type);
      EXPECT_EQ(*s.torch_hash, torch_hash_of(dense))
          << at::toString(type) << " density " << density;
#else
      EXPECT_FALSE(s.torch_hash);
#endif
    }
  at::Tensor negative_zero = at::sparse_coo_tensor(at::tensor({0, 2}, at::kLong).view({1, 2}),
                                                   at::tensor({-0.0f, 1.0f}), {3});
  const auto s = probe::tensor_stats(negative_zero, {}, options);
#if NUMPROBE_TORCH_AT_LEAST(2, 9)
  ASSERT_TRUE(s.torch_hash);
  EXPECT_EQ(*s.torch_hash, torch_hash_of(negative_zero.to_dense()));
#else
  EXPECT_FALSE(s.torch_hash);
#endif
}

TEST(TensorStats, UnhashableTensorsSaySoInsteadOfCrashing) {
  at::Tensor quantized = at::quantize_per_tensor(at::randn({4}), 0.1, 0, at::kQInt8);
  EXPECT_EQ(probe::tensor_stats(quantized).unsupported, "quantized dtype");
  at::Tensor meta = at::empty({2}, at::TensorOptions().device(at::kMeta));
  EXPECT_EQ(probe::tensor_stats(meta).unsupported, "meta tensor (no data)");
}

TEST(TensorStats, ShardThatDoesNotFitIsAnErrorNamingTheShapes) {
  try {
    probe::tensor_stats(at::randn({4, 3}), probe::Shard{{6, 3}, {4, 0}});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit in global shape [6,3]"), std::string::npos)
        << e.what();
  }
}

TEST(TensorStats, TorchCompatibleHashIsLeftOutWhereAtHashTensorHasNoKernel) {
  probe::StatsOptions options;
  options.torch_hash = true;
  const auto s = probe::tensor_stats(at::ones({3}).to(at::kFloat8_e4m3fn), {}, options);
  EXPECT_FALSE(s.torch_hash);
  EXPECT_NE(s.hash, 0u);
}

TEST(TensorStats, TorchCompatibleHashEqualsAtHashTensor) {
  probe::StatsOptions options;
  options.torch_hash = true;
  for (auto type : {at::kFloat, at::kBFloat16, at::kDouble, at::kInt, at::kBool}) {
    at::Tensor t = random_of(type, {33, 7});
    const auto s = probe::tensor_stats(t, {}, options);
#if NUMPROBE_TORCH_AT_LEAST(2, 9)
    ASSERT_TRUE(s.torch_hash);
    EXPECT_EQ(*s.torch_hash, torch_hash_of(t));
#else
    EXPECT_FALSE(s.torch_hash);  // LibTorch before 2.9 has no at::hash_tensor
#endif
  }
  EXPECT_FALSE(probe::tensor_stats(at::ones({2})).torch_hash);
}

// The ATen-op device fallback computes the same spec; run it on CPU against the CPU kernel.
TEST(TensorStats, AtenDeviceFallbackAgreesWithCpuKernel) {
  at::manual_seed(2);
  for (auto type : kHashableTypes) {
    at::Tensor whole = random_of(type, {10, 9});
    for (const auto& shard : {probe::Shard{}, probe::Shard{{30, 9}, {10, 0}},
                              probe::Shard{{10, 27}, {0, 9}}, probe::Shard{{20, 18}, {5, 3}}}) {
      probe::TensorStats meta;
      auto prepared = probe::detail::prepare(whole, shard, meta);
      ASSERT_TRUE(prepared);
      const bool torch_hash = probe::detail::has_torch_hash_kernel(type);
      at::Tensor packed = at::empty({probe::detail::kPackedSlots}, at::kLong);
      probe::detail::packed_figures_aten(*prepared, torch_hash, packed);
      probe::detail::unpack_figures(packed.const_data_ptr<std::int64_t>(), torch_hash, meta);
      const auto cpu = probe::tensor_stats(whole, shard);
      EXPECT_EQ(meta.hash, cpu.hash) << at::toString(type);
      EXPECT_NEAR(meta.norm, cpu.norm, 1e-12 * cpu.norm);
      EXPECT_EQ(meta.min, cpu.min);
      EXPECT_EQ(meta.max, cpu.max);
      EXPECT_EQ(meta.nan, cpu.nan);
      EXPECT_EQ(meta.inf, cpu.inf);
      EXPECT_NEAR(meta.mean, cpu.mean,
                  1e-12 * std::max(1.0, std::abs(cpu.max) + std::abs(cpu.min)));
      ASSERT_TRUE(meta.mhash && cpu.mhash && meta.l1 && cpu.l1) << at::toString(type);
      EXPECT_EQ(*meta.mhash, *cpu.mhash) << at::toString(type);
      EXPECT_NEAR(*meta.l1, *cpu.l1, 1e-12 * *cpu.l1) << at::toString(type);
      if (torch_hash) {
        ASSERT_TRUE(meta.torch_hash);
        EXPECT_EQ(*meta.torch_hash, torch_hash_of(whole));
      }
    }
  }
}

TEST(TensorStats, Float8ValuesDecodeExactly) {
  for (auto type :
       {at::kFloat8_e4m3fn, at::kFloat8_e5m2, at::kFloat8_e4m3fnuz, at::kFloat8_e5m2fnuz}) {
    at::Tensor all = at::arange(256, at::kInt).to(at::kByte).view(type);
    at::Tensor d = all.to(at::kDouble);
    at::Tensor finite = d.masked_select(~at::isnan(d));
    const auto s = probe::tensor_stats(all);
    EXPECT_EQ(s.nan, at::isnan(d).sum().item<std::int64_t>()) << at::toString(type);
    EXPECT_EQ(s.inf, at::isinf(d).sum().item<std::int64_t>()) << at::toString(type);
    EXPECT_EQ(s.min, finite.min().item<double>()) << at::toString(type);
    EXPECT_EQ(s.max, finite.max().item<double>()) << at::toString(type);
    const double mean = finite.sum().item<double>() / finite.numel();
    if (std::isnan(mean)) {  // e5m2 holds both infinities
      EXPECT_TRUE(std::isnan(s.mean));
    } else {
      EXPECT_EQ(s.mean, mean) << at::toString(type);
    }
  }
}

// The test vectors of docs/hash-spec.md, computed independently with Python's xxhash package.
TEST(TensorStats, HashSpecTestVectors) {
  auto hex = [](const at::Tensor& t, const probe::Shard& shard = {}) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx",
                  static_cast<unsigned long long>(probe::tensor_stats(t, shard).hash));
    return std::string(buf);
  };
  EXPECT_EQ(hex(at::tensor({1.0f, 2.0f, 3.0f})), "84d390c4bcab1c37");
  EXPECT_EQ(hex(at::tensor({1.0f, -2.0f}).to(at::kBFloat16)), "232a1db401293636");
  EXPECT_EQ(hex(at::arange(4, at::kLong)), "a61d02c53eab0cdf");
  EXPECT_EQ(hex(at::tensor({1, 0, 1}).to(at::kBool)), "a493f7ab00933d50");
  EXPECT_EQ(hex(at::tensor({0.5f}).to(at::kHalf)), "d07b779ec0e9fd91");
  EXPECT_EQ(hex(at::tensor({1.0, 2.0, 3.0, 4.0}, at::kDouble).view({2, 2})), "a550ab65782c24bd");
  at::Tensor full = at::arange(8, at::kFloat).view({4, 2});
  EXPECT_EQ(hex(full), "aea685ac8b7c8fdc");
  EXPECT_EQ(hex(full.narrow(0, 0, 2), probe::Shard::along({4, 2}, 0, 0)), "3b7bde38d43388c6");
  EXPECT_EQ(hex(full.narrow(0, 2, 2), probe::Shard::along({4, 2}, 0, 2)), "732aa773b7490716");
}

// A StatsBatch's device rows (here filled by the ATen path with CPU "device" tensors, in chunks
// of two rows) must come back to the right entries, whatever the mix of tensors, scalars and
// entries finished on the CPU, across several chunks, resolves and a clear().
TEST(StatsBatch, DeviceRowsComeBackToTheirEntries) {
  using Access = probe::detail::StatsBatchAccess;
  at::manual_seed(3);
  std::vector<at::Tensor> tensors{random_of(at::kFloat, {33, 5}), random_of(at::kBFloat16, {7}),
                                  random_of(at::kInt, {4, 4}), random_of(at::kHalf, {3, 9}).t()};
  tensors[0][2][1] = std::numeric_limits<float>::quiet_NaN();
  tensors[0][4][0] = -std::numeric_limits<float>::infinity();
  auto expect_figures = [&](probe::StatsBatch& batch, std::size_t entry, const at::Tensor& t) {
    const probe::TensorStats expected = probe::tensor_stats(t);
    const probe::TensorStats& got = batch.stats(entry);
    EXPECT_EQ(got.hash, expected.hash) << entry;
    EXPECT_EQ(got.shape, t.sizes().vec()) << entry;
    EXPECT_EQ(got.min, expected.min) << entry;
    EXPECT_EQ(got.max, expected.max) << entry;
    EXPECT_EQ(got.nan, expected.nan) << entry;
    EXPECT_EQ(got.inf, expected.inf) << entry;
  };
  probe::StatsBatch batch({}, /*rows_per_chunk=*/2);
  for (int round = 0; round < 2; ++round) {  // the second round reuses the chunks after clear()
    std::vector<std::size_t> device_entries;
    device_entries.push_back(Access::add_through_device_buffer(batch, tensors[0]));
    const std::size_t loss =
        Access::add_scalar_through_device_buffer(batch, at::scalar_tensor(0.1f));
    const std::size_t on_cpu = batch.add(tensors[1]);
    device_entries.push_back(Access::add_through_device_buffer(batch, tensors[1]));
    const std::size_t grad_norm =
        Access::add_scalar_through_device_buffer(batch, at::full({1, 1}, 1e300, at::kDouble));
    const std::size_t count = batch.add_scalar(at::scalar_tensor(7, at::kLong));  // read at once
    device_entries.push_back(Access::add_through_device_buffer(batch, tensors[2]));
    EXPECT_EQ(device_entries[0], 0U);
    EXPECT_FALSE(batch.ready(device_entries[0]));
    EXPECT_TRUE(batch.ready(on_cpu));
    EXPECT_TRUE(batch.ready(count));
    EXPECT_THROW(batch.stats(device_entries[0]), c10::Error);  // still "on the device"
    batch.resolve();
    for (std::size_t i = 0; i < device_entries.size(); ++i)
      expect_figures(batch, device_entries[i], tensors[i]);
    expect_figures(batch, on_cpu, tensors[1]);
    EXPECT_EQ(batch.scalar(loss), static_cast<double>(0.1f));
    EXPECT_EQ(batch.scalar(grad_norm), 1e300);
    EXPECT_EQ(batch.scalar(count), 7.0);
    // Entries added after a resolve() are read by the next one, from the rows after the last read.
    const std::size_t late = Access::add_through_device_buffer(batch, tensors[3]);
    const std::size_t late_scalar =
        Access::add_scalar_through_device_buffer(batch, at::scalar_tensor(-2.5));
    batch.resolve();
    expect_figures(batch, late, tensors[3]);
    EXPECT_EQ(batch.scalar(late_scalar), -2.5);
    EXPECT_EQ(batch.size(), 9U);
    batch.clear();
    EXPECT_EQ(batch.size(), 0U);
  }
}

TEST(StatsBatch, MisuseIsAClearError) {
  probe::StatsBatch batch;
  const std::size_t tensor = batch.add(at::ones({3}));
  const std::size_t scalar = batch.add_scalar(at::scalar_tensor(1.0));
  auto expect_error = [](auto&& fn, const std::string& text) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one saying '" << text << "'";
    } catch (const c10::Error& e) {
      const std::string message = e.what_without_backtrace();
      EXPECT_NE(message.find(text), std::string::npos) << message;
    }
  };
  expect_error([&] { batch.add_scalar(at::zeros({2})); }, "has 2 elements, not 1");
  expect_error([&] { batch.scalar(tensor); }, "is a tensor, not a scalar");
  expect_error([&] { batch.stats(scalar); }, "is a scalar, not a tensor");
  expect_error([&] { batch.stats(7); }, "has no entry 7");
}

// mhash holds the values, not their places: a permutation keeps it (and l1), the positional hash
// changes; one element moved by one ulp changes mhash, whatever the figures show.
TEST(TensorStats, OrderIndependentHashSeesValuesNotPlaces) {
  at::manual_seed(5);
  for (auto type : {at::kFloat, at::kBFloat16, at::kDouble, at::kHalf, at::kInt}) {
    const at::Tensor t = random_of(type, {64, 33});
    const at::Tensor permuted = t.flatten().flip(0).reshape({64, 33}).contiguous();
    const auto a = probe::tensor_stats(t), b = probe::tensor_stats(permuted);
    ASSERT_TRUE(a.mhash && b.mhash) << at::toString(type);
    EXPECT_NE(a.hash, b.hash) << at::toString(type);
    EXPECT_EQ(*a.mhash, *b.mhash) << at::toString(type);
    at::Tensor nudged = t.clone();
    auto flat = nudged.view(-1);
    if (at::isFloatingType(type)) flat[7] = at::nextafter(flat[7], flat[7] * 2 + 1);
    else flat[7] = flat[7] + 1;
    const auto c = probe::tensor_stats(nudged);
    EXPECT_NE(*a.mhash, *c.mhash) << at::toString(type);
  }
  const auto empty = probe::tensor_stats(at::empty({0, 3}));
  ASSERT_TRUE(empty.l1 && empty.mhash);
  EXPECT_EQ(*empty.l1, 0);
  EXPECT_EQ(*empty.mhash, 0u);
}
