// probe::ProbeOptions: what a Probe records and where, set in code or from the environment
// (PROBE_* variables, RANK, WORLD_SIZE). Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "probe/record.h"

namespace probe {

// A set of record kinds.
class KindSet {
 public:
  static KindSet all() { return KindSet((1u << kKindCount) - 1); }
  static KindSet none() { return KindSet(0); }
  // "all", or a comma-separated list of kind names; a leading '-' removes a kind from "all"
  // ("-mb_grad"). Throws std::invalid_argument naming the bad kind.
  static KindSet parse(const std::string& text);

  bool contains(Kind k) const { return bits_ & bit(k); }
  KindSet with(Kind k) const { return KindSet(bits_ | bit(k)); }
  KindSet without(Kind k) const { return KindSet(bits_ & ~bit(k)); }
  friend bool operator==(KindSet, KindSet) = default;

 private:
  friend struct ProbeOptions;  // from_env names PROBE_KINDS in its errors
  explicit KindSet(std::uint32_t bits) : bits_(bits) {}
  static std::uint32_t bit(Kind k) { return 1u << static_cast<unsigned>(k); }
  std::uint32_t bits_;
};

struct ProbeOptions {
  bool enabled = true;
  // Where rank<R>/diff.log goes. Empty: the next free <output_root>/<N>, the same N for every
  // rank of one torchrun launch.
  std::filesystem::path run_dir;
  std::filesystem::path output_root = "out";
  std::int64_t every = 1;  // record steps where step % every == 0
  KindSet kinds = KindSet::all();
  int rank = -1;                     // -1: $RANK (torchrun), else 0
  int world_size = -1;               // -1: $WORLD_SIZE, else 1
  std::string setup;                 // free text for the log header ("zero3 x4, seed 42")
  bool torch_hash = false;           // also log at::hash_tensor (Python tooling's hash)
  std::string model_name = "model";  // record name of forward() inputs and outputs
  // Op trace (kind `op`): which steps, scopes, phases and microbatches record every ATen op
  // (probe/trace_spec.h, docs/log-format.md). Empty: no op is traced, and no callback is set.
  std::string trace;
  // A log that cannot be created or written (a full disk, a file-size limit, a run directory
  // that cannot be made): `report` prints the error once on stderr (the path and the reason),
  // stops recording and lets training go on, every complete step staying readable; `throw`
  // throws it from the call that hit it (Probe's constructor, end_step()), for tests and CI.
  enum class OnError { report, throw_error };
  OnError on_error = OnError::report;

  // `defaults` overridden by PROBE_ENABLE, PROBE_DIR, PROBE_EVERY, PROBE_KINDS,
  // PROBE_TORCH_HASH, PROBE_ON_ERROR (report or throw), PROBE_SETUP, PROBE_TRACE, RANK and
  // WORLD_SIZE where set. Throws std::invalid_argument naming the variable for a bad value.
  static ProbeOptions from_env(ProbeOptions defaults);
  static ProbeOptions from_env() { return from_env(ProbeOptions()); }
};

}  // namespace probe
