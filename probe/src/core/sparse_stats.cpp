#include "sparse_stats.h"

#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "probe/hash_spec.h"

namespace probe::kernels {
namespace {

constexpr int kLanes = 8;  // the CPU kernel's lanes (docs/hash-spec.md)

// A chunk of zeros of the widest element: stands in for any chunk of an all-zero tensor.
alignas(64) const unsigned char kZeroChunk[kChunkElements * 8] = {};

template <class T>
T load(const unsigned char* bytes) {
  T v;
  std::memcpy(&v, bytes, sizeof v);
  return v;
}

// An element's stored bits, zero-extended (little-endian, as the kernels read them).
std::uint64_t element_bits(const unsigned char* b, int size) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, b, static_cast<std::size_t>(size));
  return bits;
}

// An element's value, decoded as the kernels decode it (stats_element.h).
double element_value(ElementType type, const unsigned char* b) {
  switch (type) {
    case ElementType::float32: return bits_to_float(load<std::uint32_t>(b));
    case ElementType::float64: return bits_to_double(load<std::uint64_t>(b));
    case ElementType::float16: return half_to_float(load<std::uint16_t>(b));
    case ElementType::bfloat16: return bfloat16_to_float(load<std::uint16_t>(b));
    case ElementType::float8_e4m3fn:
    case ElementType::float8_e5m2:
    case ElementType::float8_e4m3fnuz:
    case ElementType::float8_e5m2fnuz:
    case ElementType::float8_e8m0fnu: return float8_to_double(b[0], type);
    case ElementType::int8: return static_cast<double>(load<std::int8_t>(b));
    case ElementType::uint8: return static_cast<double>(b[0]);
    case ElementType::int16: return static_cast<double>(load<std::int16_t>(b));
    case ElementType::uint16: return static_cast<double>(load<std::uint16_t>(b));
    case ElementType::int32: return static_cast<double>(load<std::int32_t>(b));
    case ElementType::uint32: return static_cast<double>(load<std::uint32_t>(b));
    case ElementType::int64: return static_cast<double>(load<std::int64_t>(b));
    case ElementType::uint64: return static_cast<double>(load<std::uint64_t>(b));
    case ElementType::boolean: return static_cast<double>(b[0]);
  }
  return 0;
}

// Replays chunk_stats' order over the stored elements: lanes of the current stats_run call
// (segment), segments of the current chunk, chunks. Skipped zeros would have added +0.
class DenseOrder {
 public:
  void add(std::int64_t chunk, std::int64_t segment, int lane, double x, std::uint64_t hash,
           std::uint64_t value_hash) {
    if (chunk != chunk_) {
      end_chunk();
      chunk_ = chunk;
      segment_ = segment;
    } else if (segment != segment_) {
      end_segment();
      segment_ = segment;
    }
    lanes_[static_cast<std::size_t>(lane)].add(x, hash, value_hash);
    open_ = true;
  }

  std::vector<StatsPartial> finish() {
    end_chunk();
    return std::move(chunks_);
  }

 private:
  void end_segment() {
    if (!open_) return;
    StatsPartial segment;  // Lanes::reduce: lanes merged in order into a fresh partial
    for (auto& lane : lanes_) {
      segment.merge(lane);
      lane = StatsPartial{};
    }
    chunk_partial_.merge(segment);
    open_ = false;
  }
  void end_chunk() {
    end_segment();
    if (chunk_ >= 0) chunks_.push_back(chunk_partial_);
    chunk_partial_ = StatsPartial{};
  }

  std::int64_t chunk_ = -1, segment_ = -1;
  bool open_ = false;
  std::array<StatsPartial, kLanes> lanes_{};
  StatsPartial chunk_partial_;
  std::vector<StatsPartial> chunks_;
};

}  // namespace

std::uint64_t zero_chunk_hash(const ContiguousLayout& layout, std::int64_t chunk) {
  return layout.chunk_stats(chunk, kZeroChunk).hash;
}

TensorStats sparse_stats(const ContiguousLayout& layout, const SparseElements& stored,
                         std::uint64_t zero_hash) {
  const int size = element_size(stored.type);
  const auto* values = static_cast<const unsigned char*>(stored.values);
  const std::int64_t numel = layout.numel();
  const std::int64_t blocks = stored.block_elements > 0 ? numel / stored.block_elements : 0;
  static constexpr unsigned char kZero[8] = {};
  DenseOrder order;
  std::uint64_t stored_zero_terms = 0;  // what the stored positions' zeros add to zero_hash
  std::int64_t previous = -1;
  for (std::int64_t k = 0; k < stored.nnz && stored.block_elements > 0; ++k) {
    const std::int64_t block = stored.block_index[k];
    if (block <= previous || block >= blocks)
      throw std::invalid_argument("numprobe: sparse block index " + std::to_string(block) + " at " +
                                  std::to_string(k) + " is out of range [0, " +
                                  std::to_string(blocks) + ") or not ascending (coalesce first)");
    previous = block;
    for (std::int64_t j = 0; j < stored.block_elements; ++j) {
      const std::int64_t local = block * stored.block_elements + j;
      const unsigned char* bytes = values + (k * stored.block_elements + j) * size;
      double x = element_value(stored.type, bytes);
      if (x == 0) {  // -0 too: the dense tensor holds 0 + value there
        x = 0;
        bytes = kZero;
      }
      const std::uint64_t global = layout.global_index(local);
      const std::int64_t segment = layout.segment_first(local);
      order.add(local / kChunkElements, segment, static_cast<int>((local - segment) % kLanes), x,
                hash_spec::element_hash(bytes, size, global),
                value_term(element_bits(bytes, size)));
      stored_zero_terms += hash_spec::element_hash(kZero, size, global);
    }
  }
  std::vector<StatsPartial> chunks = order.finish();
  // The implicit zeros, merged last: their hash terms, and a 0 for min and max.
  StatsPartial zeros;
  zeros.hash = zero_hash - stored_zero_terms;
  const std::int64_t implicit = numel - stored.nnz * stored.block_elements;
  zeros.mhash = static_cast<std::uint64_t>(implicit) * value_term(0);
  if (implicit > 0) zeros.min = zeros.max = 0;
  chunks.push_back(zeros);
  return finish_stats(chunks, numel);
}

}  // namespace probe::kernels
