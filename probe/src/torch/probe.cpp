#include "probe/probe.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/module.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "optimizer_lookup.h"
#include "run_dir.h"
#include "op_dump.h"
#include "op_trace.h"
#include "probe/log_io.h"

namespace probe {
namespace {

std::atomic<Probe*> g_active_probe{nullptr};

// What the log format cannot hold is refused where it is passed, not when a reader fails.
void check_microbatch(std::int64_t microbatch) {
  if (microbatch < 0)
    throw std::invalid_argument("numprobe: microbatch " + std::to_string(microbatch) +
                                ": microbatch ids are >= 0 (the global id of the microbatch)");
}
void check_name(const std::string& name, const char* what) {
  if (name.empty())
    throw std::invalid_argument(std::string("numprobe: ") + what + "(): empty name");
}
void check_partial(const Partial& partial, const std::string& name) {
  if (!partial.empty())
    Partial::of(partial.index, partial.count, "numprobe: '" + name + "' partial");
}
// Covered microbatches (docs/log-format.md): none, or at least two ascending ids >= 0 that
// include the record's own.
void check_covers(const std::vector<std::int64_t>& covers, std::optional<std::int64_t> microbatch,
                  const std::string& name) {
  if (covers.empty()) return;
  bool ascending = covers.front() >= 0;
  for (std::size_t i = 1; i < covers.size(); ++i)
    ascending = ascending && covers[i - 1] < covers[i];
  const bool has_own =
      microbatch && std::find(covers.begin(), covers.end(), *microbatch) != covers.end();
  if (covers.size() < 2 || !ascending || !has_own)
    throw std::invalid_argument(
        "numprobe: '" + name +
        "': covered microbatches must be two or more ascending ids >= 0 that include the "
        "record's microbatch");
}

struct WatchedParameter {
  std::string name;
  at::Tensor parameter;
  Shard shard;
  Partial mb_grad_partial;         // its per-microbatch gradient is this summand of a partial sum
  MicrobatchCover mb_grad_covers;  // what one backward's gradient covers (unset: its microbatch)
  std::optional<unsigned> hook;
};

struct WatchedOptimizer {
  const torch::optim::Optimizer* optimizer;
  OptimizerStateReader reader;
};

struct PendingRecord {
  Record record;
  Partial partial;                   // set on the figures once they are computed
  std::optional<std::size_t> entry;  // its figures (or scalar value) in the step's StatsBatch
  std::vector<std::optional<std::size_t>> input_entries;  // an op's inputs, for their hashes
  // A split op's output and inputs as shards along each dim (Record::split).
  std::vector<std::size_t> output_shards;
  std::vector<std::vector<std::size_t>> input_shards;
};

}  // namespace

struct detail::ProbeImpl {
  ProbeOptions options;
  std::filesystem::path run_dir, log_path;
  std::unique_ptr<LogWriter> writer;
  // Set once the log failed (on_error = report): hooks on other threads read it, so the writer
  // itself stays (it refuses further writes) and this flag stops recording.
  std::atomic<bool> stopped{false};
  std::string error;  // why, guarded by `mutex`

  std::mutex mutex;  // autograd may run hooks on its device threads
  std::vector<WatchedParameter> parameters;
  std::vector<WatchedOptimizer> optimizers;
  // A parameter's other names (Probe::tie), ascending: its param records carry them.
  std::map<std::string, std::vector<std::string>> tied;
  std::vector<PendingRecord> records;
  StatsBatch batch;  // the figures of the step's records; kept across steps for its device buffer
  std::int64_t step = 0;
  std::optional<std::int64_t> last_ended_step;  // steps may not go backwards within one log
  std::optional<std::int64_t> forward_microbatch, backward_microbatch;
  bool step_compiled = false;  // note_compiled() since the step began
  // number_repeated_keys' open-addressing table, kept across steps: no allocation per record.
  struct KeySlot {
    std::int64_t record = -1;  // index of the key's first record in the step
    int seen = 0;
  };
  std::vector<KeySlot> key_slots;
  std::string step_lines;  // end_step's formatted records, reused from step to step
  std::unique_ptr<detail::OpTracer> tracer;   // only with a trace setting
  std::unique_ptr<detail::DumpWriter> dumps;  // only with a trace setting that dumps
  std::optional<detail::OpTracer::BackwardRegion> backward_region;  // between begin/end_backward

  bool recording() const { return writer && !stopped.load(std::memory_order_relaxed); }

  // The microbatch a gradient arriving now belongs to: the running backward's, else the latest
  // forward's. Called with `mutex` held.
  std::optional<std::int64_t> gradient_microbatch() const {
    return backward_microbatch ? backward_microbatch : forward_microbatch;
  }

  bool wants(Kind kind) const {
    return recording() && options.kinds.contains(kind) && step % options.every == 0;
  }

  // A log that cannot be written must not end the training it observes (on_error = report):
  // say so once, with the path and the reason, and record nothing more.
  void stop_recording(const std::string& message, const std::string& outcome) {
    {
      std::lock_guard lock(mutex);
      error = message;
    }
    stopped.store(true);
    std::fprintf(stderr, "%s; numprobe stopped recording, training goes on (%s)\n", message.c_str(),
                 outcome.c_str());
  }

  // Stamped with the step under the lock: a hook on another thread sees begin/end_step's step.
  void push(PendingRecord r) {
    std::lock_guard lock(mutex);
    r.record.step = step;
    if (r.record.kind == Kind::param)
      if (auto it = tied.find(r.record.name); it != tied.end()) r.record.tied = it->second;
    records.push_back(std::move(r));
  }

  // A key (kind, mb, name) recorded again in the step (a tap name every layer uses, a loss per
  // microbatch under one name, a second backward of one microbatch) gets "#1", "#2", ...
  // appended in record order, where a reader would reject a duplicate. Done once a step, not
  // per record: a per-record map cost 5% of a training step (docs/perf.md).
  void number_repeated_keys(std::vector<PendingRecord>& step_records) {
    std::size_t capacity = 64;
    while (capacity < 2 * step_records.size()) capacity *= 2;
    key_slots.assign(capacity, KeySlot{});
    for (std::size_t i = 0; i < step_records.size(); ++i) {
      Record& r = step_records[i].record;
      std::size_t h = std::hash<std::string>{}(r.name) ^ (static_cast<std::size_t>(r.kind) << 56);
      if (r.microbatch) h ^= static_cast<std::size_t>(*r.microbatch + 1) * 0x9e3779b97f4a7c15ULL;
      for (std::size_t s = h & (capacity - 1);; s = (s + 1) & (capacity - 1)) {
        KeySlot& slot = key_slots[s];
        if (slot.record < 0) {
          slot = {static_cast<std::int64_t>(i), 1};
          break;
        }
        const Record& first = step_records[static_cast<std::size_t>(slot.record)].record;
        if (first.kind == r.kind && first.microbatch == r.microbatch && first.name == r.name) {
          r.name += "#" + std::to_string(slot.seen++);
          break;
        }
      }
    }
  }

  // `covers` (checked): the record's microbatch is the first it covers.
  void add(Kind kind, const std::string& name, std::optional<std::int64_t> microbatch,
           const at::Tensor& t, const Shard& shard, Partial partial = {},
           std::vector<std::int64_t> covers = {}) {
    if (!wants(kind)) return;
    PendingRecord r;
    r.partial = partial;
    r.record.kind = kind;
    r.record.name = name;
    r.record.microbatch = covers.empty() ? microbatch : covers.front();
    r.record.covers = std::move(covers);
    if (!t.defined()) {
      r.record.state = Record::State::none;
    } else {
      // Observation only: no autograd graph, and the figures are computed from the data as is.
      at::NoGradGuard no_grad;
      r.entry = batch.add(t.detach(), shard);
    }
    push(std::move(r));
  }

  // A scalar record: `value`, or a one-element `tensor` whose value is read back at end_step.
  void add_scalar(const std::string& name, double value, const at::Tensor& tensor,
                  Kind kind = Kind::scalar) {
    PendingRecord r;
    r.record.kind = kind;
    r.record.name = name;
    r.record.state = Record::State::scalar;
    r.record.value = value;
    if (tensor.defined()) r.entry = batch.add_scalar(tensor);  // the batch reads a detached copy
    push(std::move(r));
  }

  // A split op record's hashes as shards (all of a tensor's or none: an unsupported dtype has
  // none).
  void resolve_shard_hashes(PendingRecord& r) {
    const auto hashes = [this](const std::vector<std::size_t>& entries) {
      std::vector<std::uint64_t> out;
      for (std::size_t e : entries) {
        const TensorStats& s = batch.stats(e);
        if (!s.supported()) return std::vector<std::uint64_t>{};
        out.push_back(s.hash);
      }
      return out;
    };
    r.record.split.output = hashes(r.output_shards);
    for (const auto& input : r.input_shards) r.record.split.inputs.push_back(hashes(input));
  }

  // The op trace's access to the step: its context, the batch and the record list.
  detail::OpTracer::Sink op_sink() {
    detail::OpTracer::Sink sink;
    sink.context = [this](Phase phase) {
      std::lock_guard lock(mutex);
      return detail::OpContext{step,
                               phase == Phase::backward ? backward_microbatch : forward_microbatch};
    };
    sink.figures = [this](const at::Tensor& t, const Shard& shard) {
      at::NoGradGuard no_grad;
      return batch.add(t.detach(), shard);
    };
    sink.dump = [this](std::int64_t step, const std::function<std::vector<char>()>& bytes) {
      return dumps ? dumps->save(step, bytes) : std::string();
    };
    sink.dumping = [this] { return dumps && dumps->open(); };
    sink.push = [this](Record record, detail::OpEntries e) {
      PendingRecord r{std::move(record),
                      Partial{},
                      e.output,
                      std::move(e.inputs),
                      std::move(e.output_shards),
                      std::move(e.input_shards)};
      push(std::move(r));
    };
    return sink;
  }

  // Every watched parameter's value: what this step starts from. One read per parameter, at
  // the time of the call (a device read is queued on the current stream, before any update).
  void record_parameters() {
    if (!wants(Kind::param)) return;
    for (const auto& p : snapshot_parameters())
      add(Kind::param, p.name, std::nullopt, p.parameter, p.shard);
  }

  // Each watched optimizer's state of each watched parameter, in parameter order (the state
  // map's own order differs between runs): `<param>.<state>` tensors, then `<param>.step` and
  // `<param>.lr`.
  void record_optimizer_state() {
    if (!wants(Kind::optim)) return;
    std::vector<WatchedOptimizer> watched;
    {
      std::lock_guard lock(mutex);
      watched = optimizers;
    }
    std::vector<std::unordered_map<const c10::TensorImpl*, double>> lr;
    for (const auto& o : watched) lr.push_back(detail::learning_rates(*o.optimizer));
    for (const auto& p : snapshot_parameters()) {
      for (std::size_t i = 0; i < watched.size(); ++i) {
        const auto& o = watched[i];
        // The learning rate of the update just taken, also where it keeps no state (SGD without
        // momentum): a schedule that differs shows at the step it differs.
        if (const auto state = detail::optimizer_state_of(*o.optimizer, o.reader, p.parameter)) {
          for (const auto& [state_name, t] : state->tensors) {
            if (!t.defined()) continue;  // a state this configuration does not use
            // State shaped like a sharded parameter is sharded like it (ZeRO).
            const bool like_parameter = !p.shard.empty() && t.sizes().equals(p.parameter.sizes());
            add(Kind::optim, p.name + "." + state_name, std::nullopt, t,
                like_parameter ? p.shard : Shard{});
          }
          if (state->step)
            add_scalar(p.name + ".step", static_cast<double>(*state->step), {}, Kind::optim);
        }
        const auto rate = lr[i].find(p.parameter.unsafeGetTensorImpl());
        if (rate != lr[i].end()) add_scalar(p.name + ".lr", rate->second, {}, Kind::optim);
      }
    }
  }

  // The watched parameters, copied under the lock (hooks read the list on other threads).
  std::vector<WatchedParameter> snapshot_parameters() {
    std::lock_guard lock(mutex);
    return parameters;
  }

  void rng_fingerprint(std::int64_t microbatch, const std::vector<at::Tensor>& inputs) {
    if (!wants(Kind::rng)) return;
    std::vector<c10::Device> devices{c10::Device(c10::kCPU)};
    for (const auto& t : inputs)
      if (t.defined() && !t.is_cpu() &&
          std::find(devices.begin(), devices.end(), t.device()) == devices.end())
        devices.push_back(t.device());
    for (const auto& device : devices) {
      // Reading the state consumes no randomness.
      auto generator = at::globalContext().defaultGenerator(device);
      at::Tensor state;
      {
        std::lock_guard lock(generator.mutex());
        state = generator.get_state();
      }
      add(Kind::rng, device.str(), microbatch, state, {});
    }
  }
};

Probe::Probe(ProbeOptions options) : impl_(std::make_shared<detail::ProbeImpl>()) {
  auto& o = impl_->options;
  o = std::move(options);
  if (o.rank < 0) o.rank = 0;
  if (o.world_size < 0) o.world_size = 1;
  if (o.every < 1) throw std::invalid_argument("numprobe: ProbeOptions::every must be >= 1");
  if (!o.enabled) return;
  if (o.rank >= o.world_size)
    throw std::invalid_argument("numprobe: rank " + std::to_string(o.rank) +
                                " is outside world size " + std::to_string(o.world_size));
  try {
    impl_->run_dir = o.run_dir.empty() ? next_free_run_dir(o.output_root) : o.run_dir;
    impl_->log_path = impl_->run_dir / ("rank" + std::to_string(o.rank)) / "diff.log";
    log_format::Header header;
    header.rank = o.rank;
    header.world_size = o.world_size;
    header.torch_version = TORCH_VERSION;
    header.setup = o.setup;
    impl_->writer = std::make_unique<LogWriter>(impl_->log_path, header);
  } catch (const std::exception& e) {  // I/O: the run directory or the log file
    if (o.on_error == ProbeOptions::OnError::throw_error) throw;
    impl_->writer.reset();
    impl_->stop_recording(e.what(), "no log was written");
    return;
  }
  StatsOptions stats_options;
  stats_options.torch_hash = o.torch_hash;
  impl_->batch = StatsBatch(stats_options);
  start_op_trace();
  g_active_probe.store(this);
}

void Probe::start_op_trace() {
  TraceSpec spec;
  try {
    spec = TraceSpec::parse(impl_->options.trace);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("numprobe: ProbeOptions::trace: ") + e.what());
  }
  if (!spec.enabled() || !impl_->options.kinds.contains(Kind::op)) return;
  if (spec.dumps())
    impl_->dumps =
        std::make_unique<detail::DumpWriter>(impl_->log_path.parent_path(), spec.dump_cap_bytes());
  impl_->tracer = std::make_unique<detail::OpTracer>(std::move(spec), impl_->op_sink());
}

Probe::~Probe() {
  impl_->backward_region.reset();  // it refers to the tracer
  impl_->tracer.reset();           // before the records it pushes into go
  for (auto& p : impl_->parameters)
    if (p.hook) p.parameter.remove_hook(*p.hook);
  Probe* self = this;
  g_active_probe.compare_exchange_strong(self, nullptr);
}

bool Probe::enabled() const { return impl_->recording(); }
std::string Probe::log_error() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->error;
}
const ProbeOptions& Probe::options() const { return impl_->options; }
const std::filesystem::path& Probe::log_path() const { return impl_->log_path; }
const std::filesystem::path& Probe::run_dir() const { return impl_->run_dir; }
std::int64_t Probe::step() const { return impl_->step; }

void Probe::watch(const torch::nn::Module& module, const std::string& prefix,
                  const std::vector<std::pair<std::string, Shard>>& shards) {
  const auto parameters = module.named_parameters(/*recurse=*/true);
  // A shard description naming no parameter would leave that shard logged as a whole tensor.
  for (const auto& [shard_name, s] : shards) {
    bool found = false;
    for (const auto& item : parameters) found = found || prefix + item.key() == shard_name;
    if (!found)
      throw std::invalid_argument("numprobe: watch(): shard given for '" + shard_name +
                                  "', which is no parameter of the module (names are prefix + "
                                  "named_parameters() names, prefix '" +
                                  prefix + "')");
  }
  // LibTorch lists a tensor registered under two names (tied weights) under both: the first
  // is watched, the others are its other names.
  std::unordered_map<const c10::TensorImpl*, std::string> first_name;
  for (const auto& item : parameters) {
    const std::string name = prefix + item.key();
    const auto [first, is_new] = first_name.try_emplace(item.value().unsafeGetTensorImpl(), name);
    if (!is_new) {
      tie(name, first->second);
      continue;
    }
    Shard shard;
    for (const auto& [shard_name, s] : shards)
      if (shard_name == name) shard = s;
    watch_parameter(name, item.value(), shard);
  }
}

void Probe::tie(const std::string& alias, const std::string& name) {
  if (!enabled()) return;
  check_name(alias, "tie");
  check_name(name, "tie");
  if (alias == name)
    throw std::invalid_argument("numprobe: tie(): '" + name + "' cannot be its own other name");
  std::lock_guard lock(impl_->mutex);
  auto& names = impl_->tied[name];
  const auto at = std::lower_bound(names.begin(), names.end(), alias);
  if (at == names.end() || *at != alias) names.insert(at, alias);
}

void Probe::watch_parameter(const std::string& name, const at::Tensor& parameter, Shard shard,
                            Partial mb_grad_partial, MicrobatchCover mb_grad_covers) {
  if (!enabled()) return;
  if (name.empty()) throw std::invalid_argument("numprobe: watch_parameter(): empty name");
  if (!shard.empty())
    shard.check_fits(parameter.sizes().vec(), "numprobe: parameter '" + name + "'");
  check_partial(mb_grad_partial, name);
  std::lock_guard lock(impl_->mutex);
  auto& parameters = impl_->parameters;
  auto same_name = std::find_if(parameters.begin(), parameters.end(),
                                [&](const WatchedParameter& p) { return p.name == name; });
  if (same_name != parameters.end()) {
    // watch() again: the same tensor stays watched once; a new tensor under the name (a
    // rebuilt model) replaces the old one, whose hook goes and which is no longer kept alive.
    if (same_name->parameter.unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl() &&
        same_name->shard == shard && same_name->mb_grad_partial == mb_grad_partial)
      return;
    if (same_name->hook) same_name->parameter.remove_hook(*same_name->hook);
    same_name->parameter = parameter;
    same_name->shard = std::move(shard);
    same_name->mb_grad_partial = mb_grad_partial;
    same_name->mb_grad_covers = std::move(mb_grad_covers);
    same_name->hook.reset();
  } else {
    parameters.push_back(WatchedParameter{name, parameter, std::move(shard), mb_grad_partial,
                                          std::move(mb_grad_covers), std::nullopt});
    same_name = std::prev(parameters.end());
  }
  // A parameter frozen now gets no mb_grad hook (its .grad() is still recorded at end_step).
  if (!parameter.requires_grad() || !impl_->options.kinds.contains(Kind::mb_grad)) return;
  const std::size_t index = static_cast<std::size_t>(same_name - parameters.begin());
  // Runs before accumulation into .grad(), once per backward: one microbatch's contribution.
  // Holds the probe weakly: autograd may run a hook after the probe is gone.
  same_name->hook = parameter.register_hook(
      [weak = std::weak_ptr<detail::ProbeImpl>(impl_), index](const at::Tensor& grad) {
        const auto impl = weak.lock();
        if (!impl) return;
        std::optional<std::int64_t> mb;
        Shard shard;
        Partial partial;
        std::string name;
        MicrobatchCover cover;
        {
          std::lock_guard lock(impl->mutex);
          if (!impl->wants(Kind::mb_grad)) return;  // a step not recorded: copy nothing
          mb = impl->gradient_microbatch();
          const auto& watched = impl->parameters[index];
          name = watched.name;
          shard = watched.shard;
          partial = watched.mb_grad_partial;
          cover = watched.mb_grad_covers;
        }
        // The trainer's function, called without the probe's lock: it may ask the probe things.
        std::vector<std::int64_t> covers = cover && mb ? cover(*mb) : std::vector<std::int64_t>{};
        check_covers(covers, mb, name);
        impl->add(Kind::mb_grad, name, mb, grad, shard, partial, std::move(covers));
      });
}

void Probe::watch_optimizer(const torch::optim::Optimizer& optimizer) {
  if (!enabled()) return;
  OptimizerStateReader reader = optimizer_state_reader(optimizer);  // throws for an unknown class
  std::lock_guard lock(impl_->mutex);
  for (auto& o : impl_->optimizers)
    if (o.optimizer == &optimizer) return;
  impl_->optimizers.push_back(WatchedOptimizer{&optimizer, std::move(reader)});
}

void Probe::begin_step(std::int64_t step) {
  set_step(step);
  if (enabled()) impl_->record_parameters();
}

void Probe::set_step(std::int64_t step) {
  std::lock_guard lock(impl_->mutex);
  if (step < 0)
    throw std::invalid_argument("numprobe: begin_step(" + std::to_string(step) +
                                "): steps are >= 0");
  if (impl_->last_ended_step && step <= *impl_->last_ended_step)
    throw std::invalid_argument("numprobe: begin_step(" + std::to_string(step) + ") after step " +
                                std::to_string(*impl_->last_ended_step) +
                                " ended: steps only go forward within one log (a resumed run "
                                "writes a new run directory)");
  impl_->step = step;
  impl_->forward_microbatch.reset();
  impl_->backward_microbatch.reset();
}

void Probe::end_step() {
  detail::ProbeImpl& impl = *impl_;
  if (!enabled()) {
    std::lock_guard lock(impl.mutex);
    impl.last_ended_step = impl.step++;  // the same step rules, on or off
    return;
  }
  if (impl.wants(Kind::grad))
    for (const auto& p : impl.snapshot_parameters())
      impl.add(Kind::grad, p.name, std::nullopt, p.parameter.grad(), p.shard);
  impl.record_optimizer_state();

  std::vector<PendingRecord> records;
  std::int64_t step = 0;
  bool compiled = false;
  {
    std::lock_guard lock(impl.mutex);
    records.swap(impl.records);
    impl.records.reserve(records.size());  // steps repeat: no regrowing (and moving) next step
    // The step ends here, whatever the write below does (an I/O error throws from it).
    step = impl.step;
    impl.last_ended_step = step;
    ++impl.step;
    impl.forward_microbatch.reset();
    impl.backward_microbatch.reset();
    compiled = impl.step_compiled;
    impl.step_compiled = false;
  }
  if (impl.tracer) impl.tracer->end_step();
  impl.number_repeated_keys(records);
  // Tensor figures and scalar tensors come back in one copy per device: one host sync a step.
  impl.batch.resolve();
  std::string& lines = impl.step_lines;  // one buffer for the step, its capacity kept
  lines.clear();
  for (auto& r : records) {
    for (const auto& input : r.input_entries) {  // before any entry's figures move out
      const TensorStats* in = input ? &impl.batch.stats(*input) : nullptr;
      r.record.inputs.push_back(in && in->supported() ? std::optional(in->hash) : std::nullopt);
    }
    if (!r.record.split.empty()) impl.resolve_shard_hashes(r);
    if (r.entry && r.record.state == Record::State::scalar)
      r.record.value = impl.batch.scalar(*r.entry);
    else if (r.entry) r.record.stats = std::move(impl.batch.stats(*r.entry));
    if (r.record.state == Record::State::tensor) r.record.stats.partial = r.partial;
    log_format::append_record(lines, r.record);
    lines += '\n';
  }
  impl.batch.clear();
  try {
    impl.writer->write_step(step, lines, records.size(), compiled);
  } catch (const LogWriteError& e) {
    if (impl.options.on_error == ProbeOptions::OnError::throw_error) throw;
    impl.stop_recording(e.what(), e.stop_line_written
                                      ? "the log keeps the steps before " + std::to_string(step) +
                                            " and ends with a line giving this reason"
                                      : "the log keeps the steps before " + std::to_string(step) +
                                            "; no room was left to record the reason in it");

    // Nothing more is written: the op trace would only hash ops into records that are dropped.
    impl.backward_region.reset();
    impl.tracer.reset();
  }
}

void Probe::begin_forward(const std::string& name, std::int64_t microbatch,
                          const std::vector<at::Tensor>& inputs) {
  begin_forward(name, microbatch, inputs, {}, {});
}

void Probe::begin_forward(const std::string& name, std::int64_t microbatch,
                          const std::vector<at::Tensor>& inputs, const std::vector<Shard>& shards,
                          const std::vector<Partial>& partials) {
  if (!enabled()) return;
  check_microbatch(microbatch);
  check_name(name, "forward");
  if ((!shards.empty() && shards.size() != inputs.size()) ||
      (!partials.empty() && partials.size() != inputs.size()))
    throw std::invalid_argument(
        "numprobe: forward '" + name + "': " + std::to_string(inputs.size()) + " inputs but " +
        std::to_string(shards.size()) + " shards and " + std::to_string(partials.size()) +
        " partials (none, or one per input)");
  {
    std::lock_guard lock(impl_->mutex);
    impl_->forward_microbatch = microbatch;
    impl_->backward_microbatch.reset();
  }
  impl_->rng_fingerprint(microbatch, inputs);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string input_name = inputs.size() == 1 ? name : name + "." + std::to_string(i);
    const Partial partial = partials.empty() ? Partial{} : partials[i];
    check_partial(partial, input_name);
    impl_->add(Kind::input, input_name, microbatch, inputs[i], shards.empty() ? Shard{} : shards[i],
               partial);
  }
}

void Probe::continue_forward(const std::string& name, std::int64_t microbatch) {
  if (!enabled()) return;
  check_microbatch(microbatch);
  check_name(name, "forward");
  std::lock_guard lock(impl_->mutex);
  impl_->forward_microbatch = microbatch;
  impl_->backward_microbatch.reset();
}

void Probe::record_output(const std::string& name, std::int64_t microbatch,
                          const at::Tensor& output) {
  if (!enabled()) return;
  check_microbatch(microbatch);
  impl_->add(Kind::output, name, microbatch, output, {});
  // A leaf output (a parameter returned as is) would keep every forward's hook for good.
  if (output.defined() && output.requires_grad() && !output.is_leaf() &&
      impl_->wants(Kind::output_grad)) {
    output.register_hook(
        [weak = std::weak_ptr<detail::ProbeImpl>(impl_), name, microbatch](const at::Tensor& grad) {
          if (const auto impl = weak.lock())
            impl->add(Kind::output_grad, name, microbatch, grad, {});
        });
  }
}

void Probe::set_backward_microbatch(std::int64_t microbatch) {
  check_microbatch(microbatch);
  std::lock_guard lock(impl_->mutex);
  impl_->backward_microbatch = microbatch;
}

void Probe::backward(std::int64_t microbatch, const at::Tensor& root, const at::Tensor& grad) {
  set_backward_microbatch(microbatch);
  // This call's own region: backward() may run on several threads at once.
  std::optional<detail::OpTracer::BackwardRegion> traced;
  if (impl_->tracer) traced.emplace(impl_->tracer->backward(step(), microbatch));
  if (grad.defined()) torch::autograd::backward({root}, {grad});
  else torch::autograd::backward({root});
}

void Probe::begin_backward(std::int64_t microbatch) {
  set_backward_microbatch(microbatch);
  impl_->backward_region.reset();  // one left open by a backward that threw
  if (impl_->tracer) impl_->backward_region.emplace(impl_->tracer->backward(step(), microbatch));
}

void Probe::end_backward() { impl_->backward_region.reset(); }

void Probe::record_mb_grad(const std::string& name, const at::Tensor& grad, const Shard& shard,
                           Partial partial) {
  if (!records(Kind::mb_grad)) return;
  check_name(name, "record_mb_grad");
  check_partial(partial, name);
  std::optional<std::int64_t> mb;
  {
    std::lock_guard lock(impl_->mutex);
    mb = impl_->gradient_microbatch();
  }
  impl_->add(Kind::mb_grad, name, mb, grad, shard, partial);
}

bool Probe::records(Kind kind) const { return impl_->wants(kind); }

void Probe::tap(const std::string& name, const at::Tensor& t, const Shard& shard, Partial partial) {
  if (!enabled()) return;
  check_name(name, "tap");
  check_partial(partial, name);
  std::optional<std::int64_t> mb;
  {
    std::lock_guard lock(impl_->mutex);
    mb = impl_->forward_microbatch;
  }
  impl_->add(Kind::tap, name, mb, t, shard, partial);
}

void Probe::note_compiled() {
  if (!enabled()) return;
  std::lock_guard lock(impl_->mutex);
  impl_->step_compiled = true;
}

void Probe::scalar(const std::string& name, double value) {
  record_scalar(Kind::scalar, name, value);
}

void Probe::scalar(const std::string& name, const at::Tensor& value) {
  record_scalar(Kind::scalar, name, value);
}

void Probe::record_scalar(Kind kind, const std::string& name, double value) {
  if (!impl_->wants(kind)) return;
  check_name(name, "scalar");
  impl_->add_scalar(name, value, {}, kind);
}

void Probe::record_scalar(Kind kind, const std::string& name, const at::Tensor& value) {
  if (!impl_->wants(kind)) return;
  check_name(name, "scalar");
  // No elements (a per-expert figure of an expert that received no tokens): no value to read,
  // so the record carries the empty tensor's figures instead, which is what was passed.
  if (value.defined() && value.numel() == 0) return impl_->add(kind, name, std::nullopt, value, {});
  TORCH_CHECK(value.numel() == 1, "numprobe: scalar '", name, "' has ", value.numel(), " elements");
  impl_->add_scalar(name, 0, value, kind);
}

void Probe::record(Kind kind, const std::string& name, std::optional<std::int64_t> microbatch,
                   const at::Tensor& t, const Shard& shard, Partial partial,
                   std::vector<std::int64_t> covers) {
  if (!enabled()) return;
  check_name(name, "record");
  check_partial(partial, name);
  if (microbatch) check_microbatch(*microbatch);
  check_covers(covers, microbatch, name);
  impl_->add(kind, name, microbatch, t, shard, partial, std::move(covers));
}

void tap(const std::string& name, const at::Tensor& t, const Shard& shard, Partial partial) {
  if (Probe* p = g_active_probe.load(std::memory_order_acquire)) p->tap(name, t, shard, partial);
}

void note_compiled() {
  if (Probe* p = g_active_probe.load(std::memory_order_acquire)) p->note_compiled();
}

}  // namespace probe
