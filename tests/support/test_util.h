// What every numprobe test suite needs: scratch directories, whole files read and written, and
// records built in one line. Torch-free (the core only), so the core, differ and LibTorch
// tests all share it; the differ's own helpers (runs written rank by rank, comparisons, class
// counts) are in tests/differ/differ_test_util.h, the LibTorch tests' (random tensors of every
// dtype, probe options) in torch_test_util.h.
#pragma once

#include <bit>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "probe/log_io.h"
#include "probe/record.h"

namespace test_util {

using probe::Kind;
using probe::Record;

// An empty directory of the system's temporary directory, unique to this process and `name`.
inline std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("numprobe_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The file's bytes ("" when it cannot be read).
inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes `text` as the whole file, creating its directory.
inline void write_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// Every record of a diff.log, through the probe's own reader.
inline std::vector<Record> read_records(const std::filesystem::path& path) {
  probe::LogReader reader(path);
  std::vector<Record> records;
  while (auto r = reader.next()) records.push_back(std::move(*r));
  return records;
}

// A float32[4,2] tensor record with the given hash and norm (min -1, max 1, mean 0).
inline Record tensor(std::int64_t step, Kind kind, const std::string& name, std::uint64_t hash,
                     double norm, std::optional<std::int64_t> mb = std::nullopt) {
  Record r;
  r.step = step;
  r.kind = kind;
  r.name = name;
  r.microbatch = mb;
  r.stats.hash = hash;
  r.stats.norm = norm;
  r.stats.min = -1;
  r.stats.max = 1;
  r.stats.mean = 0;
  r.stats.dtype = "float32";
  r.stats.shape = {4, 2};
  // The values' order-independent hash: the norm stands for the values here, so records whose
  // hashes differ with equal norms hold the same values elsewhere (moved).
  r.stats.mhash = std::bit_cast<std::uint64_t>(norm) * 0x9e3779b97f4a7c15ULL;
  return r;
}

// `r` as rows row0 .. row0 + rows - 1 of its tensor (a shard along dim 0).
inline Record sharded(Record r, std::int64_t row0, std::int64_t rows) {
  r.stats.shard = probe::Shard{r.stats.shape, {row0, 0}};
  r.stats.shape[0] = rows;
  return r;
}

// A tensor that was undefined (a gradient never computed).
inline Record none(std::int64_t step, Kind kind, const std::string& name) {
  Record r;
  r.step = step;
  r.kind = kind;
  r.name = name;
  r.state = Record::State::none;
  return r;
}

inline Record scalar(std::int64_t step, const std::string& name, double v) {
  Record r;
  r.step = step;
  r.kind = Kind::scalar;
  r.name = name;
  r.state = Record::State::scalar;
  r.value = v;
  return r;
}

}  // namespace test_util
