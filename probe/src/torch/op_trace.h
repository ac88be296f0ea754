// The op trace behind kind `op` (docs/log-format.md, "Op records"): RecordFunction callbacks,
// registered on a thread only while a traced scope is open there or a traced backward runs, that
// record the outermost ATen op's tensor outputs and its inputs' hashes. Backward ops are named
// after the forward op whose autograd node runs them, found by sequence number as the profiler
// links them. Private to the library; Probe owns the one active tracer.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "probe/record.h"
#include "probe/scope.h"
#include "probe/shard.h"
#include "probe/trace_spec.h"

namespace probe::detail {

// One open probe::Scope on a thread.
struct ScopeFrame {
  std::string name;     // joined name
  bool root = false;    // children do not join it
  bool traced = false;  // ops directly inside are recorded (set by scope_entered)
  Split split;          // its own, or the enclosing scope's
  // A module scope of compiled code (numprobe::scope_open): the ATen ops dispatched inside are
  // the compiler's (decomposed, fused), not the model's; its graph's node records stand for them.
  bool compiled = false;
};
std::vector<ScopeFrame>& scope_frames();  // this thread's, innermost last
// Called by Scope right after pushing its frame / right before popping it.
void scope_entered();
void scope_left();

// A compiled graph's module scopes: opened and closed by its numprobe::scope_open/scope_close
// calls, in its order of effects. `path` is the module's whole name (it does not join).
void open_compiled_scope(const std::string& path);
void close_compiled_scope(const std::string& path);  // the innermost, if it is `path`'s
// A compiled graph's node (numprobe::node): op `op` (`aten::gelu`) of the innermost scope took
// `inputs` and returned `outputs`; recorded as a forward op where the trace selects its scope.
void record_compiled_node(const std::string& op, const std::vector<at::Tensor>& inputs,
                          const std::vector<at::Tensor>& outputs);

// Where an op runs: the step and the microbatch the probe is in.
struct OpContext {
  std::int64_t step = 0;
  std::optional<std::int64_t> microbatch;
};

// Where an op record's figures are in the step's batch: its output's, its inputs' (nullopt: no
// hash), and in a split scope the same as shards along each dim (Record::split).
struct OpEntries {
  std::optional<std::size_t> output;
  std::vector<std::optional<std::size_t>> inputs;
  std::vector<std::size_t> output_shards;
  std::vector<std::vector<std::size_t>> input_shards;
};

class OpTracer {
 public:
  struct Sink {  // the probe's side
    // The step and current microbatch of `phase` (forward: the latest forward's; backward: the
    // running backward's).
    std::function<OpContext(Phase)> context;
    // Starts computing a tensor's figures (as `shard` of a whole where one is given); returns
    // its entry in the step's batch.
    std::function<std::size_t(const at::Tensor&, const Shard&)> figures;
    // A record whose figures are entry `entries.output` (none: the record says `none`).
    std::function<void(Record, OpEntries entries)> push;
    // Saves an op's dump (`bytes` makes it) of `step`; returns its path relative to the rank's
    // directory, or "" where none was saved (the cap reached, a failure: said once).
    std::function<std::string(std::int64_t step, const std::function<std::vector<char>()>& bytes)>
        dump;
    // Whether dumps are still written (not yet stopped by the cap or a failure).
    std::function<bool()> dumping;
  };

  // Becomes the process's active tracer (the latest constructed).
  OpTracer(TraceSpec spec, Sink sink);
  ~OpTracer();
  OpTracer(const OpTracer&) = delete;
  OpTracer& operator=(const OpTracer&) = delete;

  const TraceSpec& spec() const { return spec_; }

  // While alive, a backward of `microbatch` at `step` is traced (if the setting says so).
  class BackwardRegion {
   public:
    BackwardRegion() = default;
    BackwardRegion(BackwardRegion&&) noexcept;
    ~BackwardRegion();

   private:
    friend class OpTracer;
    OpTracer* tracer_ = nullptr;
    std::uint64_t handle_ = 0;
  };
  BackwardRegion backward(std::int64_t step, std::int64_t microbatch);

  // The step ended: forget its forward ops and occurrence counters.
  void end_step();

  // Internal to the callbacks (op_trace.cpp).
  struct ForwardOp {
    std::int64_t seq_end = 0;  // the op created autograd nodes with sequence numbers [key, seq_end)
    std::string name;          // its record name, <scope>/<op>#<k>
    Split split;               // its scope's: its backward ops run split alike
  };
  std::optional<ForwardOp> forward_op_of(std::uint64_t thread, std::int64_t seq);
  void add_forward_op(std::uint64_t thread, std::int64_t seq_begin, ForwardOp op);
  std::string numbered(Phase phase, std::optional<std::int64_t> mb, const std::string& name);
  std::optional<OpContext> backward_context();
  const Sink& sink() const { return sink_; }
  // Records a compiled graph's node (record_compiled_node) in the innermost traced scope.
  void record_node(const std::string& op, const std::vector<at::Tensor>& inputs,
                   const std::vector<at::Tensor>& outputs);

 private:
  TraceSpec spec_;
  Sink sink_;
  std::mutex mutex_;  // backward ops may run on autograd's device threads
  std::map<std::pair<std::uint64_t, std::int64_t>, ForwardOp> forward_ops_;
  std::unordered_map<std::string, int> occurrences_;
  std::optional<OpContext> backward_;
};

}  // namespace probe::detail
