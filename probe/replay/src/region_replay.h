// One run's ops of a replay region re-run from their dumps: in float64 (the run's reference,
// with the bound a correct computation keeps to) and in the recorded dtypes.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dump_file.h"
#include "tolerance.h"

namespace probe::replay {

// The region cannot be replayed, and why (the verdict `not replayable`).
struct NotReplayable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One op record of the region with its dump.
struct RegionOp {
  std::string name;
  DumpedOp dump;
  std::optional<c10::FunctionSchema> schema;
  std::vector<std::optional<std::uint64_t>> inputs;  // the record's input hashes
  std::uint64_t output = 0;                          // the record's output hash
  std::size_t output_index = 0;                      // which of the op's outputs the record is
};

// A run's side of the region: its ops in execution order and the hash of the value it hands on.
// `handed_on`: that value where the run has no ops of its own (the other run's region starts from
// it), as the other run's dumps hold it.
struct RunRegion {
  std::vector<RegionOp> ops;
  std::uint64_t output = 0;
  at::Tensor handed_on;
};

struct RunReplay {
  at::Tensor recorded;   // the value handed on, as the run computed it
  at::Tensor reference;  // the same in float64 from the same inputs
  at::Tensor bound;      // per element, in units of the recorded dtype's unit roundoff
  std::vector<Family> families;
  std::optional<bool> replays_bitwise;  // the recorded dtypes' replay equals `recorded` bit for bit
  double replay_units = 0;              // where it does not: the largest difference, in units
};

// Throws NotReplayable (no schema, a random op, an op the dispatcher refuses, a dump that does not
// hold the region's output).
RunReplay replay_run(const RunRegion& region);

// The output index a record's name carries (`op#k.1` is output 1 of a multi-output op).
std::size_t output_index_of(const std::string& record_name);

}  // namespace probe::replay
