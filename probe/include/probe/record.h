// One line of a diff.log: what was observed, when, and its figures (docs/log-format.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "probe/tensor_stats_record.h"

namespace probe {

// The kinds a log can hold. Their order within a step is their Phase's (phase_of): a step's
// parameters, then forward, backward and step end. Values are never renumbered: new kinds go
// at the end.
enum class Kind : std::uint8_t {
  rng,          // RNG-state fingerprint taken before a microbatch's forward
  input,        // a microbatch's forward input
  output,       // a microbatch's forward output
  tap,          // a named intermediate tensor (probe::tap)
  output_grad,  // gradient w.r.t. a forward output
  mb_grad,      // one microbatch's gradient contribution to a parameter
  grad,         // a parameter's accumulated .grad() at end_step
  scalar,       // a named value per step (loss, grad_norm, lr)
  param,        // a parameter's value at begin_step: the weights this step's forward reads
  optim,        // an optimizer state tensor (<param>.<state>) or step count after the update
  op,           // an ATen op's output inside a traced region (forward or backward: see phase)
};
inline constexpr int kKindCount = 11;

std::string_view kind_name(Kind kind);
std::optional<Kind> parse_kind(std::string_view name);
// A set of kinds as a bit per Kind, from "all" or a comma-separated list of kind names; a
// leading '-' removes a kind from "all" ("-mb_grad", "-mb_grad,-tap"). The one syntax of
// PROBE_KINDS, --probe-kinds and diff_logs --kinds. Throws std::invalid_argument naming the
// bad kind, or for a list that selects no kind.
std::uint32_t parse_kind_mask(std::string_view text);
inline constexpr std::uint32_t kAllKinds = (1u << kKindCount) - 1;

// step_begin: what a step starts from (its parameters), before its first forward.
enum class Phase : std::uint8_t { step_begin, forward, backward, step_end };
// The phase a kind is recorded in; an `op` record carries its own (Record::phase).
Phase phase_of(Kind kind);
Phase phase_of(const struct Record& record);
std::string_view phase_name(Phase phase);
std::optional<Phase> parse_phase(std::string_view name);

// An op record of a split scope (format 7, docs/log-format.md "Split scopes"): the op ran on
// rank `rank` of `size`, and its output and inputs are hashed as shards too, once per dim d: the
// hash (hash spec v1) the tensor has as the piece [rank * extent, (rank + 1) * extent) of dim d
// of a tensor `size` times as long there. Empty for an input without a hash or a 0-dim tensor.
struct OpSplit {
  std::int64_t rank = 0;
  std::int64_t size = 0;  // 0: the op ran in no split scope
  std::vector<std::uint64_t> output;
  std::vector<std::vector<std::uint64_t>> inputs;
  bool empty() const { return size == 0; }
};

struct Record {
  std::int64_t step = 0;
  Kind kind = Kind::scalar;
  std::string name;
  std::optional<std::int64_t> microbatch;  // global microbatch id, where it applies
  // Empty, or the global microbatches the record covers, ascending, `microbatch` the first:
  // a gradient from one backward over several microbatches' tokens (an expert's, under expert
  // parallelism). docs/log-format.md, "Covered microbatches".
  std::vector<std::int64_t> covers;

  enum class State : std::uint8_t {
    tensor,  // `stats` holds the tensor's figures (stats.unsupported may be set)
    none,    // the tensor was undefined (e.g. a gradient never computed)
    scalar,  // `value` holds a scalar
  };
  State state = State::tensor;
  TensorStats stats;
  double value = 0;
  // `op` records only: the phase the op ran in, and the hash (hash spec v1) of each tensor input
  // in argument order, nullopt for an input without one (undefined, unsupported dtype).
  std::optional<Phase> phase;
  std::vector<std::optional<std::uint64_t>> inputs;
  OpSplit split;
  // `op` records of a trace with dump=1: the file, relative to the rank's directory, that holds
  // the op's schema, arguments and outputs (docs/log-format.md, "Op dumps"); empty: none.
  std::string dump;
  // `param` records only (format 10): the parameter's other names, ascending (tied weights: one
  // tensor a model holds under several names, such as a head tied to its embedding).
  std::vector<std::string> tied;

  // Member by member, every field (see TensorStats' swap).
  friend void swap(Record& a, Record& b) noexcept {
    using std::swap;
    swap(a.step, b.step);
    swap(a.kind, b.kind);
    a.name.swap(b.name);
    swap(a.microbatch, b.microbatch);
    a.covers.swap(b.covers);
    swap(a.state, b.state);
    swap(a.stats, b.stats);
    swap(a.value, b.value);
    swap(a.phase, b.phase);
    a.inputs.swap(b.inputs);
    swap(a.split.rank, b.split.rank);
    swap(a.split.size, b.split.size);
    a.split.output.swap(b.split.output);
    a.split.inputs.swap(b.split.inputs);
    a.dump.swap(b.dump);
    a.tied.swap(b.tied);
  }
};

}  // namespace probe
