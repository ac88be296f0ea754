// Built with NDEBUG whatever the build type (probe/CMakeLists.txt): RecordFunction's layout and
// inputs() depend on it, and the release LibTorch the probe links is built with it.
#include "op_trace.h"

#include <ATen/SequenceNumber.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <memory>
#include <string_view>

#include "op_dump.h"

namespace probe::detail {
namespace {

std::atomic<OpTracer*> g_active_tracer{nullptr};

constexpr std::string_view kEvaluateFunction = "autograd::engine::evaluate_function: ";
constexpr std::string_view kProbeNamespace = "numprobe::";
// What Dynamo names a compiled graph's run (torch/_dynamo/convert_frame.py).
constexpr std::string_view kCompiledRegion = "Torch-Compiled Region";

// A backward node being evaluated on this thread: the forward op that created it, once its
// BACKWARD_FUNCTION RecordFunction (which carries the sequence number) has started.
struct NodeFrame {
  std::optional<OpTracer::ForwardOp> forward_op;
  bool from_evaluate_function = false;
};

struct ThreadTrace {
  std::uint64_t handle = 0;  // this thread's callback while traced frames are open
  int traced_frames = 0;
  OpContext forward;  // step and microbatch of the traced forward frames
  int op_depth = 0;   // ops started and not ended inside a traced region
  // The lowest sequence number no recorded forward op claimed yet: a node made between ops (a
  // custom autograd Function's, made before its forward runs) belongs to the next recorded op.
  std::int64_t seq_floor = 0;
  std::vector<NodeFrame> nodes;
};

ThreadTrace& thread_trace() {
  thread_local ThreadTrace t;
  return t;
}

// What a start callback saw, for its end callback.
struct OpObservation : at::ObserverContext {
  enum class What : std::uint8_t {
    evaluate_function,
    node,
    nested,
    skipped,
    recorded,
    dataless
  } what;
  bool pushed_node = false;
  Phase phase = Phase::forward;
  Split split;  // its scope's (forward), its forward op's (backward)
  OpContext context;
  std::string prefix;           // <scope>/<op> (forward), <forward op>/<op> (backward)
  std::int64_t seq_begin = -1;  // forward: sequence numbers its nodes take start here
  std::vector<std::optional<std::size_t>> inputs;
  std::vector<std::vector<std::size_t>> input_shards;  // split: each input's figures as shards
  // dump=1: the op's schema and its arguments as they were when it started (op_dump.h).
  bool dumping = false;
  std::string schema;
  std::vector<c10::IValue> arguments;
  explicit OpObservation(What w) : what(w) {}
};

void report_failure(const std::string& where) {
  static std::atomic<bool> reported{false};
  if (reported.exchange(true)) return;
  try {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "numprobe: op trace: %s failed, op records may be missing: %s\n",
                 where.c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "numprobe: op trace: %s failed, op records may be missing\n",
                 where.c_str());
  }
}

// The tensors of an IValue (a tensor, a list of tensors or optional tensors), in order; an
// undefined tensor is kept as such.
void append_tensors(std::vector<at::Tensor>& out, const c10::IValue& v) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef())
      if (e.isTensor()) out.push_back(e.toTensor());
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) append_tensors(out, e);
  }
}

// A split op's tensor as a shard along each dim: the piece `split.rank` of a whole `split.size`
// times as long there. Which dim (if any) the ranks split is the differ's to find, against the
// run it is compared with.
std::vector<std::size_t> shard_figures(const OpTracer& tracer, const at::Tensor& t, Split split) {
  std::vector<std::size_t> entries;
  if (!split.split() || !t.defined()) return entries;
  const std::vector<std::int64_t> sizes = t.sizes().vec();
  entries.reserve(sizes.size());
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    std::vector<std::int64_t> whole = sizes;
    whole[d] *= split.size;
    entries.push_back(tracer.sink().figures(
        t, Shard::along(std::move(whole), static_cast<int>(d), split.rank * sizes[d])));
  }
  return entries;
}

// The observer's own ATen calls (hashes, statistics, copies) are neither traced nor seen by a
// profiler, nor by a Python dispatch mode the op runs under: a user's mode would count them, a
// tracer's (FakeTensorMode while torch.compile traces) would reject a real tensor.
struct OwnCalls {
  at::DisableRecordFunctionGuard no_callbacks;
  c10::impl::ExcludeDispatchKeyGuard no_python{c10::python_ks};
};

// The op's schema and arguments, copied before it runs (an in-place op writes its input).
void keep_arguments(const at::RecordFunction& fn, OpObservation& obs) {
  OwnCalls own;
  obs.dumping = true;
  obs.schema = schema_of(fn);
  for (const c10::IValue& v : fn.inputs()) obs.arguments.push_back(dumpable(v));
}

void record_input_tensors(const OpTracer& tracer, const std::vector<at::Tensor>& tensors,
                          OpObservation& obs) {
  obs.inputs.reserve(tensors.size());
  OwnCalls own;
  for (const at::Tensor& t : tensors) {
    obs.inputs.push_back(t.defined() ? std::optional(tracer.sink().figures(t, {})) : std::nullopt);
    if (obs.split.split()) obs.input_shards.push_back(shard_figures(tracer, t, obs.split));
  }
}

void record_inputs(const OpTracer& tracer, const at::RecordFunction& fn, OpObservation& obs) {
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& v : fn.inputs()) append_tensors(tensors, v);
  record_input_tensors(tracer, tensors, obs);
}

// Records of each tensor output: `name`, or `name.<i>` when the op returns several; `dump` the
// op's dump ("" for none).
void push_outputs(OpTracer& tracer, const std::vector<at::Tensor>& outputs,
                  const OpObservation& obs, const std::string& name, const std::string& dump) {
  OwnCalls own;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    Record r;
    r.kind = Kind::op;
    r.name = outputs.size() == 1 ? name : name + "." + std::to_string(i);
    r.microbatch = obs.context.microbatch;
    r.phase = obs.phase;
    r.dump = dump;
    OpEntries entries{std::nullopt, obs.inputs, {}, obs.input_shards};
    if (outputs[i].defined()) entries.output = tracer.sink().figures(outputs[i], {});
    else r.state = Record::State::none;
    if (obs.split.split()) {
      r.split.rank = obs.split.rank;
      r.split.size = obs.split.size;
      entries.output_shards = shard_figures(tracer, outputs[i], obs.split);
    }
    tracer.sink().push(std::move(r), std::move(entries));
  }
}

void record_outputs(OpTracer& tracer, const at::RecordFunction& fn, OpObservation& obs,
                    const std::string& name) {
  std::vector<at::Tensor> outputs;
  for (const c10::IValue& v : fn.outputs()) append_tensors(outputs, v);
  std::string dump;  // one dump per op, named by each of its output records
  if (obs.dumping) {
    OwnCalls own;
    dump = tracer.sink().dump(obs.context.step, [&] {
      return dump_bytes(obs.schema, name, std::move(obs.arguments), fn.outputs());
    });
  }
  push_outputs(tracer, outputs, obs, name, dump);
}

// Whether one of `values` is a tensor without data: a tensor subclass that Python dispatches (a
// DTensor, whose op runs again below on its local tensors), or a meta or fake tensor (DTensor's
// sharding propagation, run once per op signature: not part of the computation).
// A template: RecordFunction's inputs() and outputs() are ranges of other types across versions.
template <class Values>
bool has_dataless_tensor(const Values& values) {
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& v : values) append_tensors(tensors, v);
  return std::any_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) {
    return t.defined() && (t.key_set().has(c10::DispatchKey::Python) || t.is_meta());
  });
}

std::unique_ptr<at::ObserverContext> start_op(OpTracer& tracer, const at::RecordFunction& fn) {
  using What = OpObservation::What;
  ThreadTrace& tt = thread_trace();
  const std::string_view name = fn.name();
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    auto obs = std::make_unique<OpObservation>(What::node);
    if (tt.nodes.empty() || !tt.nodes.back().from_evaluate_function || tt.nodes.back().forward_op) {
      tt.nodes.push_back({});
      obs->pushed_node = true;
    }
    if (fn.seqNr() >= 0)
      tt.nodes.back().forward_op = tracer.forward_op_of(fn.forwardThreadId(), fn.seqNr());
    return obs;
  }
  if (name.substr(0, kEvaluateFunction.size()) == kEvaluateFunction) {
    tt.nodes.push_back({std::nullopt, true});
    return std::make_unique<OpObservation>(What::evaluate_function);
  }
  // The probe's own operators (numprobe::tap in a compiled graph) record; they compute nothing.
  if (name.substr(0, kProbeNamespace.size()) == kProbeNamespace)
    return std::make_unique<OpObservation>(What::dataless);
  const bool in_backward = !tt.nodes.empty();
  // A compiled graph's run is no op of the model: the ops in it are the compiler's (its node
  // records stand for the model's), and its backward is AOTAutograd's, not traced.
  if (tt.op_depth == 0 && !in_backward &&
      name.substr(0, kCompiledRegion.size()) == kCompiledRegion) {
    ++tt.op_depth;
    return std::make_unique<OpObservation>(What::skipped);
  }
  const auto& frames = scope_frames();
  // Passed through, not counted as an op: the ops a DTensor op runs on its local tensors are
  // the outermost ones with data, and are recorded in its place.
  if (tt.op_depth == 0 && has_dataless_tensor(fn.inputs()))
    return std::make_unique<OpObservation>(What::dataless);
  if (tt.op_depth++ > 0) return std::make_unique<OpObservation>(What::nested);
  // An untraced scope inside a traced one, or compiled code (its graph's nodes record instead).
  if (!in_backward && (frames.empty() || !frames.back().traced || frames.back().compiled))
    return std::make_unique<OpObservation>(What::skipped);

  auto obs = std::make_unique<OpObservation>(What::recorded);
  if (in_backward) {
    const auto context = tracer.backward_context();
    const auto& forward_op = tt.nodes.back().forward_op;
    if (!context || !forward_op) {
      obs->what = What::skipped;  // a node of an untraced forward op (or AccumulateGrad)
      return obs;
    }
    obs->phase = Phase::backward;
    obs->split = forward_op->split;
    obs->context = *context;
    obs->prefix = forward_op->name + "/" + std::string(name);
  } else {
    obs->phase = Phase::forward;
    obs->split = frames.back().split;
    obs->context = tt.forward;
    obs->prefix = frames.back().name + "/" + std::string(name);
    obs->seq_begin = std::min(tt.seq_floor, static_cast<std::int64_t>(at::sequence_number::peek()));
  }
  if (obs->phase == Phase::backward || tracer.spec().traces_forward()) {
    record_inputs(tracer, fn, *obs);
    // Arguments are copied only while a dump can still be written.
    if (tracer.spec().dumps() && tracer.sink().dumping()) keep_arguments(fn, *obs);
  }
  return obs;
}

void end_op(OpTracer& tracer, const at::RecordFunction& fn, OpObservation& obs) {
  using What = OpObservation::What;
  ThreadTrace& tt = thread_trace();
  switch (obs.what) {
    case What::evaluate_function:
      if (!tt.nodes.empty()) tt.nodes.pop_back();
      return;
    case What::node:
      if (obs.pushed_node && !tt.nodes.empty()) tt.nodes.pop_back();
      return;
    case What::dataless: return;
    case What::nested: --tt.op_depth; return;
    case What::skipped:
      if (--tt.op_depth == 0 && tt.nodes.empty())
        tt.seq_floor = static_cast<std::int64_t>(at::sequence_number::peek());
      return;
    case What::recorded: break;
  }
  --tt.op_depth;
  if (has_dataless_tensor(fn.outputs())) return;  // a factory op of fake tensors: not numbered
  const std::string name = tracer.numbered(obs.phase, obs.context.microbatch, obs.prefix);
  if (obs.phase == Phase::forward) {
    const auto seq_end = static_cast<std::int64_t>(at::sequence_number::peek());
    tt.seq_floor = seq_end;
    if (seq_end > obs.seq_begin)
      tracer.add_forward_op(fn.threadId(), obs.seq_begin, {seq_end, name, obs.split});
    if (!tracer.spec().traces_forward()) return;
  }
  record_outputs(tracer, fn, obs, name);
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  OpTracer* tracer = g_active_tracer.load(std::memory_order_acquire);
  if (!tracer) return nullptr;
  try {
    return start_op(*tracer, fn);
  } catch (...) {
    report_failure("the start of " + std::string(fn.name()));
    return nullptr;
  }
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  OpTracer* tracer = g_active_tracer.load(std::memory_order_acquire);
  if (!tracer || !ctx) return;
  try {
    end_op(*tracer, fn, static_cast<OpObservation&>(*ctx));
  } catch (...) {
    report_failure("the end of " + std::string(fn.name()));
  }
}

std::uint64_t add_callback() {
  return at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_start, &on_end)
          .needsInputs(true)
          .needsOutputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

}  // namespace

std::vector<ScopeFrame>& scope_frames() {
  thread_local std::vector<ScopeFrame> frames;
  return frames;
}

void scope_entered() {
  OpTracer* tracer = g_active_tracer.load(std::memory_order_acquire);
  if (!tracer) return;  // no op trace: all a scope costs
  ScopeFrame& frame = scope_frames().back();
  ThreadTrace& tt = thread_trace();
  if (tt.traced_frames == 0) {
    const OpContext context = tracer->sink().context(Phase::forward);
    const TraceSpec& spec = tracer->spec();
    if (!spec.traces_step(context.step) || !spec.traces_microbatch(context.microbatch)) return;
    if (!spec.traces_forward() && !spec.traces_backward()) return;
    tt.forward = context;
  }
  frame.traced = tracer->spec().traces_scope(frame.name);
  if (frame.traced && tt.traced_frames++ == 0) {
    tt.seq_floor = static_cast<std::int64_t>(at::sequence_number::peek());
    if (tt.handle == 0) tt.handle = add_callback();
  }
}

void scope_left() {
  ScopeFrame& frame = scope_frames().back();
  if (!frame.traced) return;
  ThreadTrace& tt = thread_trace();
  if (--tt.traced_frames == 0 && tt.handle != 0) {
    at::removeCallback(tt.handle);
    tt.handle = 0;
    tt.op_depth = 0;
  }
}

void open_compiled_scope(const std::string& path) {
  auto& frames = scope_frames();
  ScopeFrame frame;
  // "": the graph's own region, named as the scope it runs in.
  frame.name = path.empty() && !frames.empty() ? frames.back().name : path;
  frame.root = path.empty() && !frames.empty() && frames.back().root;
  frame.split = frames.empty() ? Split{} : frames.back().split;
  frame.compiled = true;
  // Outside every scope nothing is traced, compiled or not.
  const bool outside = frames.empty() && path.empty();
  frames.push_back(std::move(frame));
  if (!outside) scope_entered();
}

void close_compiled_scope(const std::string& path) {
  auto& frames = scope_frames();
  if (frames.empty() || !frames.back().compiled) return;
  if (!path.empty() && frames.back().name != path) return;
  scope_left();
  frames.pop_back();
}

void record_compiled_node(const std::string& op, const std::vector<at::Tensor>& inputs,
                          const std::vector<at::Tensor>& outputs) {
  OpTracer* tracer = g_active_tracer.load(std::memory_order_acquire);
  if (!tracer) return;
  try {
    tracer->record_node(op, inputs, outputs);
  } catch (...) {
    report_failure("a compiled node's record");
  }
}

void OpTracer::record_node(const std::string& op, const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& outputs) {
  const auto& frames = scope_frames();
  if (frames.empty() || !frames.back().traced || !spec_.traces_forward()) return;
  OpObservation obs(OpObservation::What::recorded);
  obs.phase = Phase::forward;
  obs.split = frames.back().split;
  obs.context = thread_trace().forward;
  record_input_tensors(*this, inputs, obs);
  push_outputs(*this, outputs, obs,
               numbered(Phase::forward, obs.context.microbatch, frames.back().name + "/" + op), "");
}

OpTracer::OpTracer(TraceSpec spec, Sink sink) : spec_(std::move(spec)), sink_(std::move(sink)) {
  g_active_tracer.store(this, std::memory_order_release);
}

OpTracer::~OpTracer() {
  OpTracer* self = this;
  g_active_tracer.compare_exchange_strong(self, nullptr);
}

OpTracer::BackwardRegion::BackwardRegion(BackwardRegion&& o) noexcept
    : tracer_(std::exchange(o.tracer_, nullptr)), handle_(std::exchange(o.handle_, 0)) {}

OpTracer::BackwardRegion::~BackwardRegion() {
  if (!tracer_) return;
  if (handle_ != 0) {
    at::removeCallback(handle_);
    thread_trace().handle = 0;
  }
  std::lock_guard lock(tracer_->mutex_);
  tracer_->backward_.reset();
}

OpTracer::BackwardRegion OpTracer::backward(std::int64_t step, std::int64_t microbatch) {
  BackwardRegion region;
  if (!spec_.traces_backward() || !spec_.traces_step(step) || !spec_.traces_microbatch(microbatch))
    return region;
  {
    std::lock_guard lock(mutex_);
    if (forward_ops_.empty()) return region;  // no traced forward op made a node to run
    backward_ = OpContext{step, microbatch};
  }
  region.tracer_ = this;
  // Autograd's device threads inherit this thread's callbacks (its thread-local state).
  ThreadTrace& tt = thread_trace();
  if (tt.handle == 0) region.handle_ = tt.handle = add_callback();
  return region;
}

void OpTracer::end_step() {
  std::lock_guard lock(mutex_);
  forward_ops_.clear();
  occurrences_.clear();
}

std::optional<OpTracer::ForwardOp> OpTracer::forward_op_of(std::uint64_t thread, std::int64_t seq) {
  std::lock_guard lock(mutex_);
  auto it = forward_ops_.upper_bound({thread, seq});
  if (it == forward_ops_.begin()) return std::nullopt;
  --it;
  if (it->first.first != thread || seq >= it->second.seq_end) return std::nullopt;
  return it->second;
}

void OpTracer::add_forward_op(std::uint64_t thread, std::int64_t seq_begin, ForwardOp op) {
  std::lock_guard lock(mutex_);
  forward_ops_[{thread, seq_begin}] = std::move(op);
}

std::string OpTracer::numbered(Phase phase, std::optional<std::int64_t> mb,
                               const std::string& name) {
  std::string key =
      std::to_string(static_cast<int>(phase)) + ":" + (mb ? std::to_string(*mb) : "-") + ":" + name;
  std::lock_guard lock(mutex_);
  return name + "#" + std::to_string(occurrences_[key]++);
}

std::optional<OpContext> OpTracer::backward_context() {
  std::lock_guard lock(mutex_);
  return backward_;
}

}  // namespace probe::detail
