// The CUDA kernel's order of work, replayed on the CPU (cuda/stats_reference.h, built from the
// same __host__ __device__ code as stats_cuda.cu), against the CPU kernel behind tensor_stats().
// Exact figures (hash, min, max, NaN and Inf counts) must be equal; the fp64 sums may differ by
// the reduction-order bound documented in docs/cuda.md, which cuda_order_error_bound() states.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/stats_kernel.h"
#include "cuda/stats_reference.h"

namespace {

using probe::kernels::ElementType;
using probe::kernels::StatsPartial;
namespace tile = probe::kernels::cuda_tile;

const ElementType kAllTypes[] = {ElementType::float32,         ElementType::float64,
                                 ElementType::float16,         ElementType::bfloat16,
                                 ElementType::float8_e4m3fn,   ElementType::float8_e5m2,
                                 ElementType::float8_e4m3fnuz, ElementType::float8_e5m2fnuz,
                                 ElementType::float8_e8m0fnu,  ElementType::int8,
                                 ElementType::uint8,           ElementType::int16,
                                 ElementType::uint16,          ElementType::int32,
                                 ElementType::uint32,          ElementType::int64,
                                 ElementType::uint64,          ElementType::boolean};

bool is_floating(ElementType t) { return t <= ElementType::float8_e8m0fnu; }

// `n` elements of `type`: raw random bits (NaN, Inf, extremes included) or, with `finite`,
// ordinary values (normal floats scaled by 3, small integers, 0/1 bools).
std::vector<unsigned char> make_data(ElementType type, std::int64_t n, bool finite,
                                     std::mt19937_64& rng) {
  const int size = probe::kernels::element_size(type);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n * size));
  std::normal_distribution<double> normal(0.0, 3.0);
  for (std::int64_t i = 0; i < n; ++i) {
    unsigned char* e = bytes.data() + i * size;
    std::uint64_t bits = rng();
    if (type == ElementType::boolean) bits &= 1;
    if (finite) {
      const double x = normal(rng);
      switch (type) {
        case ElementType::float32: {
          float f = float(x);
          std::memcpy(&bits, &f, 4);
          break;
        }
        case ElementType::float64: std::memcpy(&bits, &x, 8); break;
        case ElementType::bfloat16: {
          float f = float(x);
          std::uint32_t u;
          std::memcpy(&u, &f, 4);
          bits = u >> 16;
          break;
        }
        case ElementType::float16:
          bits = (bits & 0x83ff) | (std::uint64_t(rng() % 30) << 10);
          break;
        case ElementType::float8_e4m3fn:
        case ElementType::float8_e4m3fnuz: bits = (bits & 0x87) | ((rng() % 15) << 3); break;
        case ElementType::float8_e5m2:
        case ElementType::float8_e5m2fnuz: bits = (bits & 0x83) | ((rng() % 31) << 2); break;
        case ElementType::float8_e8m0fnu: bits &= 0x7f; break;
        default: bits = static_cast<std::uint64_t>(static_cast<std::int64_t>(x * 30)); break;
      }
      if ((type == ElementType::float8_e4m3fnuz || type == ElementType::float8_e5m2fnuz) &&
          (bits & 0xff) == 0x80)
        bits = 0;
    }
    std::memcpy(e, &bits, static_cast<std::size_t>(size));
  }
  return bytes;
}

StatsPartial cpu_partial(const probe::kernels::ContiguousLayout& layout) {
  StatsPartial total;
  for (std::int64_t c = 0; c < layout.chunk_count(); ++c) total.merge(layout.chunk_stats(c));
  return total;
}

// Longest chain of floating additions in either order, times 2^-53 (docs/cuda.md): the CPU
// kernel adds at most 8192 per lane, 8 lanes, the runs of a chunk and the chunks in sequence;
// the CUDA kernel at most 128 per thread, two 8-level trees per block... The relative error of
// a sum of squares (non-negative terms) and the error of a sum relative to the sum of |x| are
// each below this.
double cuda_order_error_bound(ElementType type, std::int64_t numel, std::int64_t run_length) {
  const std::int64_t chunk = std::min<std::int64_t>(numel, probe::kernels::kChunkElements);
  const std::int64_t runs_per_chunk =
      chunk / std::max<std::int64_t>(1, std::min(run_length, chunk)) + 1;
  const double cpu_depth =
      double(chunk / 8 + 8 + runs_per_chunk) +
      double((numel + probe::kernels::kChunkElements - 1) / probe::kernels::kChunkElements);
  const int group = tile::kGroupBytes / probe::kernels::element_size(type);
  const double tiles = double((numel + group * tile::kBlockThreads * tile::kGroupsPerThread - 1) /
                              (group * tile::kBlockThreads * tile::kGroupsPerThread));
  const double gpu_depth =
      group * tile::kGroupsPerThread + 8 + std::ceil(tiles / tile::kMergeThreads) + 8;
  return (cpu_depth + gpu_depth) * 0x1p-53;
}

struct Case {
  std::vector<std::int64_t> local_shape;
  probe::Shard shard;
};

void expect_reference_matches_cpu(ElementType type, const Case& c, bool finite,
                                  std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::int64_t n = 1;
  for (auto d : c.local_shape) n *= d;
  const auto data = make_data(type, n, finite, rng);
  probe::kernels::ContiguousLayout layout(type, data.data(), c.local_shape, c.shard);
  const StatsPartial cpu = cpu_partial(layout);
  const StatsPartial gpu = tile::reference_partial(type, tile::run_layout_of(layout), data.data());
  const std::string what = "type " + std::to_string(int(type)) + " n=" + std::to_string(n) +
                           (c.shard.empty() ? "" : " sharded") + (finite ? " finite" : " raw bits");
  EXPECT_EQ(gpu.hash, cpu.hash) << what;
  EXPECT_EQ(gpu.nan, cpu.nan) << what;
  EXPECT_EQ(gpu.inf, cpu.inf) << what;
  EXPECT_EQ(gpu.min, cpu.min) << what;
  EXPECT_EQ(gpu.max, cpu.max) << what;
  const double bound = cuda_order_error_bound(type, n, layout.run_length());
  if (std::isnan(cpu.sum_squares) || std::isinf(cpu.sum_squares)) {
    EXPECT_EQ(std::isnan(gpu.sum_squares), std::isnan(cpu.sum_squares)) << what;
    EXPECT_EQ(std::isinf(gpu.sum_squares), std::isinf(cpu.sum_squares)) << what;
  } else {
    EXPECT_LE(std::abs(gpu.sum_squares - cpu.sum_squares), bound * cpu.sum_squares) << what;
  }
  if (finite) {  // sum |x| <= n max|x| bounds either order's error
    const double sum_abs = double(n) * std::max(std::abs(cpu.min), std::abs(cpu.max));
    EXPECT_LE(std::abs(gpu.sum - cpu.sum), bound * sum_abs) << what;
  }
  if (!is_floating(type)) {
    EXPECT_EQ(gpu.nan + gpu.inf, 0) << what;
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (std::int64_t n : {1, 7, 16, 100, 4096 + 3, 32768, 3 * 8192 + 17, 200001})
    out.push_back({{n}, {}});
  out.push_back({{10, 9}, {{30, 9}, {10, 0}}});              // rows: one run, offset base
  out.push_back({{10, 9}, {{10, 27}, {0, 9}}});              // columns: runs of 9
  out.push_back({{20, 18}, {{40, 36}, {5, 3}}});             // a block
  out.push_back({{300, 5, 7}, {{600, 10, 7}, {17, 5, 0}}});  // runs of 35 across tiles
  out.push_back({{64, 3, 2}, {{64, 9, 4}, {0, 6, 1}}});      // runs of 2, two outer dims
  out.push_back({{4000, 33}, {{4000, 99}, {0, 33}}});        // multi-tile, many runs
  return out;
}

}  // namespace

TEST(CudaReference, ExactFiguresEqualTheCpuKernelAndSumsAgreeWithinTheOrderBound) {
  std::uint64_t seed = 1;
  for (auto type : kAllTypes)
    for (const auto& c : cases())
      for (bool finite : {true, false}) expect_reference_matches_cpu(type, c, finite, seed++);
}

TEST(CudaReference, TreeReduceIsTheShuffleDownTree) {
  // Lane 0 of a shfl_down tree over 8 lanes computes ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)).
  StatsPartial v[8];
  const double x[8] = {1e16, 1, -1e16, 1, 3, 1, 5, 1};
  for (int i = 0; i < 8; ++i) v[i].sum = x[i];
  tile::tree_reduce(v, 8);
  EXPECT_EQ(v[0].sum, ((x[0] + x[4]) + (x[2] + x[6])) + ((x[1] + x[5]) + (x[3] + x[7])));
}

TEST(CudaReference, Float8DefinitionMatchesTheFormatsExtremes) {
  using probe::kernels::float8_to_double;
  EXPECT_EQ(float8_to_double(0x7e, ElementType::float8_e4m3fn), 448.0);
  EXPECT_TRUE(std::isnan(float8_to_double(0x7f, ElementType::float8_e4m3fn)));
  EXPECT_EQ(float8_to_double(0x01, ElementType::float8_e4m3fn), 0x1p-9);
  EXPECT_EQ(float8_to_double(0x7b, ElementType::float8_e5m2), 57344.0);
  EXPECT_EQ(float8_to_double(0x7c, ElementType::float8_e5m2), probe::kernels::kInf);
  EXPECT_EQ(float8_to_double(0x7f, ElementType::float8_e4m3fnuz), 240.0);
  EXPECT_TRUE(std::isnan(float8_to_double(0x80, ElementType::float8_e5m2fnuz)));
  EXPECT_EQ(float8_to_double(0x00, ElementType::float8_e8m0fnu), 0x1p-127);
  EXPECT_EQ(float8_to_double(0xfe, ElementType::float8_e8m0fnu), 0x1p127);
}

TEST(CudaReference, GridDependsOnlyOnTheElementCountAndType) {
  EXPECT_EQ(tile::kTileElements<ElementType::float32>, 8192);
  EXPECT_EQ(tile::kTileElements<ElementType::bfloat16>, 16384);
  EXPECT_EQ(tile::tile_count<ElementType::float32>(0), 0);
  EXPECT_EQ(tile::tile_count<ElementType::float32>(8193), 2);
  EXPECT_EQ(tile::tile_count<ElementType::uint8>(std::int64_t{512} << 20), 16384);
}

// A strided view read in place (load_strided) gives its contiguous copy's figures bit for bit: the
// kernel folds the same logical elements in the same order, only the addresses differ.
TEST(CudaReference, StridedViewsReadInPlaceEqualTheirContiguousCopy) {
  std::mt19937_64 rng(11);
  constexpr std::int64_t kRows = 137, kCols = 211;  // 28,907 float32: four tiles
  const auto storage = make_data(ElementType::float32, kRows * kCols + 64, true, rng);
  const auto* base = reinterpret_cast<const std::uint32_t*>(storage.data());
  struct View {
    const char* name;
    std::int64_t offset;
    std::vector<std::int64_t> size, stride;
  };
  const View views[] = {
      {"transpose", 0, {kCols, kRows}, {1, kCols}},
      {"every third column of a slice", 5, {kRows, 60}, {kCols, 3}},
      {"broadcast row", 7 * kCols, {40, kCols}, {0, 1}},
      {"permuted 3-d", 3, {7, 11, 13}, {1, 7 * 13, 7}},
      {"odd offset, inner stride 1", 1, {kRows - 1, kCols - 2}, {kCols, 1}},
  };
  for (const View& v : views) {
    tile::MemoryLayout memory;
    memory.dims = static_cast<int>(v.size.size());
    std::int64_t n = 1;
    for (int d = 0; d < memory.dims; ++d) {
      memory.size[d] = v.size[static_cast<std::size_t>(d)];
      memory.stride[d] = v.stride[static_cast<std::size_t>(d)];
      n *= memory.size[d];
    }
    // The contiguous copy, gathered with an odometer over the logical indices.
    std::vector<std::uint32_t> copy;
    std::vector<std::int64_t> index(v.size.size(), 0);
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t off = v.offset;
      for (std::size_t d = 0; d < index.size(); ++d) off += index[d] * v.stride[d];
      copy.push_back(base[off]);
      for (std::size_t d = index.size(); d-- > 0;) {
        if (++index[d] < v.size[d]) break;
        index[d] = 0;
      }
    }
    probe::kernels::ContiguousLayout layout(ElementType::float32, copy.data(), v.size, {});
    const auto run_layout = tile::run_layout_of(layout);
    const StatsPartial expected =
        tile::reference_partial(ElementType::float32, run_layout, copy.data());
    const StatsPartial in_place =
        tile::reference_partial(ElementType::float32, run_layout, base + v.offset, memory);
    EXPECT_EQ(in_place.hash, expected.hash) << v.name;
    EXPECT_EQ(in_place.sum_squares, expected.sum_squares) << v.name;
    EXPECT_EQ(in_place.sum, expected.sum) << v.name;
    EXPECT_EQ(in_place.min, expected.min) << v.name;
    EXPECT_EQ(in_place.max, expected.max) << v.name;
    EXPECT_EQ(in_place.hash, cpu_partial(layout).hash) << v.name;
  }
}
