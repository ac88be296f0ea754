// numprobe._C: the C++ probe (probe::Probe, probe::Scope) for Python. The Python package
// (probe/python/numprobe) finds parameters, hooks modules and unwraps DTensors; every hash,
// statistic, log line and op record is made here, by the same library a LibTorch trainer links.
#include <ATen/record_function.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "probe/detail/probe_hooks.h"
#include "probe/probe.h"
#include "probe/scope.h"

namespace py = pybind11;
using Hooks = probe::detail::ProbeHooks;

namespace {

// Python passes a shard as (global_shape, offset) and a partial sum as (index, count); None:
// the whole tensor.
using PyShard = std::optional<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>>;
using PyPartial = std::optional<std::pair<std::int64_t, std::int64_t>>;

probe::Shard to_shard(const PyShard& s) {
  if (!s) return {};
  return probe::Shard{s->first, s->second};
}

probe::Partial to_partial(const PyPartial& p, const std::string& name) {
  if (!p) return {};
  return probe::Partial::of(p->first, p->second, "numprobe: '" + name + "' partial");
}

at::Tensor or_undefined(const std::optional<at::Tensor>& t) { return t ? *t : at::Tensor(); }

// One keyword argument as the option's type; a value of another type is a TypeError naming
// the option (pybind11's own says only which C++ type it wanted).
template <class T>
T option(const std::string& name, const py::handle& value, const char* expected) {
  try {
    return py::cast<T>(value);
  } catch (const py::cast_error&) {
    throw py::type_error("numprobe.Probe(): option '" + name + "' must be " + expected + ", not " +
                         std::string(py::str(py::type::handle_of(value).attr("__name__"))));
  }
}

// ProbeOptions from the environment (PROBE_*, RANK, WORLD_SIZE), then the keyword arguments
// the trainer passed, which win: they are what its code says.
probe::ProbeOptions options_from(const py::dict& kwargs) {
  probe::ProbeOptions o = probe::ProbeOptions::from_env();
  for (const auto& [key, value] : kwargs) {
    const std::string name = py::cast<std::string>(key);
    if (value.is_none()) continue;  // the default (or the environment's)
    const auto text = [&] { return option<std::string>(name, value, "a str"); };
    const auto path = [&] { return std::string(py::str(value)); };  // a str or an os.PathLike
    if (name == "enabled") o.enabled = option<bool>(name, value, "a bool");
    else if (name == "run_dir") o.run_dir = path();
    else if (name == "output_root") o.output_root = path();
    else if (name == "every") o.every = option<std::int64_t>(name, value, "an int");
    else if (name == "kinds") o.kinds = probe::KindSet::parse(text());
    else if (name == "rank") o.rank = option<int>(name, value, "an int");
    else if (name == "world_size") o.world_size = option<int>(name, value, "an int");
    else if (name == "setup") o.setup = text();
    else if (name == "torch_hash") o.torch_hash = option<bool>(name, value, "a bool");
    else if (name == "model_name") o.model_name = text();
    else if (name == "trace") o.trace = text();
    else if (name == "on_error") {
      const std::string mode = text();
      if (mode == "report") o.on_error = probe::ProbeOptions::OnError::report;
      else if (mode == "throw") o.on_error = probe::ProbeOptions::OnError::throw_error;
      else
        throw std::invalid_argument("numprobe: on_error='" + mode + "' is not 'report' or 'throw'");
    } else {
      throw py::type_error(
          "numprobe.Probe() got an unexpected option '" + name +
          "' (options: enabled, run_dir, output_root, every, kinds, rank, world_size, "
          "setup, torch_hash, model_name, trace, on_error)");
    }
  }
  return o;
}

// A probe::Scope Python opens and closes (the context manager numprobe.Scope). Scopes are a
// per-thread stack: closing one on another thread would pop that thread's.
class PyScope {
 public:
  PyScope(const std::string& name, bool root, int split_rank, int split_size) {
    if (root) scope_ = std::make_unique<probe::Scope>(probe::Scope::Root{}, name);
    else scope_ = std::make_unique<probe::Scope>(name, probe::Split{split_rank, split_size});
  }
  ~PyScope() {
    // Collected on another thread: leave that thread's stack alone (the frame stays open).
    if (scope_ && std::this_thread::get_id() != owner_) static_cast<void>(scope_.release());
  }
  PyScope(const PyScope&) = delete;
  PyScope& operator=(const PyScope&) = delete;

  void close() {
    if (scope_ && std::this_thread::get_id() != owner_)
      throw std::runtime_error("numprobe: scope '" + scope_->name() +
                               "' closed on another thread than it was opened on");
    if (scope_ && probe::current_scope() != scope_->name())
      throw std::runtime_error(
          "numprobe: scope '" + scope_->name() + "' closed while '" + probe::current_scope() +
          "' inside it is still open (scopes close in the reverse order they open)");
    scope_.reset();
  }
  std::string name() const { return scope_ ? scope_->name() : std::string(); }

 private:
  std::unique_ptr<probe::Scope> scope_;
  std::thread::id owner_ = std::this_thread::get_id();
};

// The observer's own ATen calls (a DTensor's offsets, detaching a tapped tensor) are no ops of
// the model: while one of these is held on a thread, no op there is traced.
class Untraced {
 public:
  void enter() { guard_ = std::make_unique<at::DisableRecordFunctionGuard>(); }
  void exit() { guard_.reset(); }

 private:
  std::unique_ptr<at::DisableRecordFunctionGuard> guard_;
};

void bind_probe(py::module_& m) {
  py::class_<probe::Probe>(m, "Probe")
      .def(py::init([](const py::kwargs& kwargs) {
        return std::make_unique<probe::Probe>(options_from(kwargs));
      }))
      .def_property_readonly("enabled", &probe::Probe::enabled)
      .def_property_readonly("log_error", &probe::Probe::log_error)
      .def_property_readonly("log_path",
                             [](const probe::Probe& p) { return p.log_path().string(); })
      .def_property_readonly("run_dir", [](const probe::Probe& p) { return p.run_dir().string(); })
      .def_property_readonly("step", &probe::Probe::step)
      .def_property_readonly("rank", [](const probe::Probe& p) { return p.options().rank; })
      .def_property_readonly("world_size",
                             [](const probe::Probe& p) { return p.options().world_size; })
      .def_property_readonly("model_name",
                             [](const probe::Probe& p) { return p.options().model_name; })
      .def_property_readonly("tracing",
                             [](const probe::Probe& p) {
                               return p.enabled() && !p.options().trace.empty() &&
                                      p.options().kinds.contains(probe::Kind::op);
                             })
      .def("records", &probe::Probe::records)
      .def("kinds_contain",
           [](const probe::Probe& p, probe::Kind k) { return p.options().kinds.contains(k); })
      .def("tie", &probe::Probe::tie)
      .def("begin_step", &probe::Probe::begin_step)
      .def("end_step", &probe::Probe::end_step, py::call_guard<py::gil_scoped_release>())
      .def("begin_forward",
           [](probe::Probe& p, const std::string& name, std::int64_t mb,
              const std::vector<at::Tensor>& inputs, const std::vector<PyShard>& shards,
              const std::vector<PyPartial>& partials) {
             std::vector<probe::Shard> s;
             for (const auto& shard : shards) s.push_back(to_shard(shard));
             std::vector<probe::Partial> ps;
             for (const auto& partial : partials) ps.push_back(to_partial(partial, name));
             p.begin_forward(name, mb, inputs, s, ps);
           })
      .def("record_output", &probe::Probe::record_output)
      .def("note_compiled", &probe::Probe::note_compiled)
      .def("begin_backward", &Hooks::begin_backward)
      .def("end_backward", &Hooks::end_backward)
      .def("continue_forward", &Hooks::continue_forward)
      .def("tap",
           [](probe::Probe& p, const std::string& name, const at::Tensor& t, const PyShard& shard,
              const PyPartial& partial) {
             p.tap(name, t, to_shard(shard), to_partial(partial, name));
           })
      .def("scalar", py::overload_cast<const std::string&, double>(&probe::Probe::scalar))
      .def("scalar",
           py::overload_cast<const std::string&, const at::Tensor&>(&probe::Probe::scalar))
      .def("record_scalar",
           py::overload_cast<probe::Probe&, probe::Kind, const std::string&, double>(
               &Hooks::record_scalar))
      .def("record_scalar",
           py::overload_cast<probe::Probe&, probe::Kind, const std::string&, const at::Tensor&>(
               &Hooks::record_scalar))
      .def("record",
           [](probe::Probe& p, probe::Kind kind, const std::string& name,
              std::optional<std::int64_t> mb, const std::optional<at::Tensor>& t,
              const PyShard& shard, const PyPartial& partial) {
             p.record(kind, name, mb, or_undefined(t), to_shard(shard), to_partial(partial, name));
           })
      .def("record_mb_grad", [](probe::Probe& p, const std::string& name, const at::Tensor& grad,
                                const PyShard& shard, const PyPartial& partial) {
        Hooks::record_mb_grad(p, name, grad, to_shard(shard), to_partial(partial, name));
      });
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "numprobe's C++ probe; use the numprobe package";
  py::enum_<probe::Kind> kind(m, "Kind");
  for (int k = 0; k < probe::kKindCount; ++k) {
    const auto value = static_cast<probe::Kind>(k);
    kind.value(std::string(probe::kind_name(value)).c_str(), value);
  }
  bind_probe(m);
  py::class_<PyScope>(m, "Scope")
      .def(py::init<const std::string&, bool, int, int>(), py::arg("name"), py::kw_only(),
           py::arg("root") = false, py::arg("split_rank") = 0, py::arg("split_size") = 1)
      .def("close", &PyScope::close)
      .def_property_readonly("name", &PyScope::name);
  py::class_<Untraced>(m, "Untraced")
      .def(py::init<>())
      .def("__enter__", &Untraced::enter)
      .def("__exit__", [](Untraced& u, const py::args&) { u.exit(); });
  m.def("current_scope", &probe::current_scope);
  m.attr("torch_version") = TORCH_VERSION;
}
