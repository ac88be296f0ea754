// numprobe._C: the C++ probe (probe::Probe, probe::Scope) for Python. The Python package
// (probe/python/numprobe) finds parameters, hooks modules and unwraps DTensors; every hash,
// statistic, log line and op record is made here, by the same library a LibTorch trainer links.
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "probe/probe.h"
#include "probe/scope.h"

namespace py = pybind11;

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

// ProbeOptions from the environment (PROBE_*, RANK, WORLD_SIZE), then the keyword arguments
// the trainer passed, which win: they are what its code says.
probe::ProbeOptions options_from(const py::dict& kwargs) {
  probe::ProbeOptions o = probe::ProbeOptions::from_env();
  for (const auto& [key, value] : kwargs) {
    const std::string name = py::cast<std::string>(key);
    if (value.is_none()) continue;  // the default (or the environment's)
    if (name == "enabled") o.enabled = py::cast<bool>(value);
    else if (name == "run_dir") o.run_dir = py::cast<std::string>(py::str(value));
    else if (name == "output_root") o.output_root = py::cast<std::string>(py::str(value));
    else if (name == "every") o.every = py::cast<std::int64_t>(value);
    else if (name == "kinds") o.kinds = probe::KindSet::parse(py::cast<std::string>(value));
    else if (name == "rank") o.rank = py::cast<int>(value);
    else if (name == "world_size") o.world_size = py::cast<int>(value);
    else if (name == "setup") o.setup = py::cast<std::string>(value);
    else if (name == "torch_hash") o.torch_hash = py::cast<bool>(value);
    else if (name == "model_name") o.model_name = py::cast<std::string>(value);
    else if (name == "trace") o.trace = py::cast<std::string>(value);
    else if (name == "on_error") {
      const std::string mode = py::cast<std::string>(value);
      if (mode == "report") o.on_error = probe::ProbeOptions::OnError::report;
      else if (mode == "throw") o.on_error = probe::ProbeOptions::OnError::throw_error;
      else throw std::invalid_argument("numprobe: on_error='" + mode + "' is not 'report' or 'throw'");
    } else {
      throw py::type_error("numprobe.Probe() got an unexpected option '" + name +
                           "' (options: enabled, run_dir, output_root, every, kinds, rank, world_size, "
                           "setup, torch_hash, model_name, trace, on_error)");
    }
  }
  return o;
}

// A probe::Scope Python opens and closes (the context manager numprobe.Scope).
class PyScope {
 public:
  PyScope(const std::string& name, bool root, int split_rank, int split_size) {
    if (root) scope_.emplace(probe::Scope::Root{}, name);
    else scope_.emplace(name, probe::Split{split_rank, split_size});
  }
  void close() { scope_.reset(); }
  std::string name() const { return scope_ ? scope_->name() : std::string(); }

 private:
  std::optional<probe::Scope> scope_;
};

void bind_probe(py::module_& m) {
  py::class_<probe::Probe>(m, "Probe")
      .def(py::init([](const py::kwargs& kwargs) { return std::make_unique<probe::Probe>(options_from(kwargs)); }))
      .def_property_readonly("enabled", &probe::Probe::enabled)
      .def_property_readonly("log_error", &probe::Probe::log_error)
      .def_property_readonly("log_path", [](const probe::Probe& p) { return p.log_path().string(); })
      .def_property_readonly("run_dir", [](const probe::Probe& p) { return p.run_dir().string(); })
      .def_property_readonly("step", &probe::Probe::step)
      .def_property_readonly("rank", [](const probe::Probe& p) { return p.options().rank; })
      .def_property_readonly("world_size", [](const probe::Probe& p) { return p.options().world_size; })
      .def_property_readonly("model_name", [](const probe::Probe& p) { return p.options().model_name; })
      .def_property_readonly("tracing", [](const probe::Probe& p) {
        return p.enabled() && !p.options().trace.empty() && p.options().kinds.contains(probe::Kind::op);
      })
      .def("records", &probe::Probe::records)
      .def("begin_step", &probe::Probe::begin_step)
      .def("end_step", &probe::Probe::end_step, py::call_guard<py::gil_scoped_release>())
      .def("begin_forward",
           [](probe::Probe& p, const std::string& name, std::int64_t mb, const std::vector<at::Tensor>& inputs,
              const std::vector<PyShard>& shards, const std::vector<PyPartial>& partials) {
             std::vector<probe::Shard> s;
             for (const auto& shard : shards) s.push_back(to_shard(shard));
             std::vector<probe::Partial> ps;
             for (const auto& partial : partials) ps.push_back(to_partial(partial, name));
             p.begin_forward(name, mb, inputs, s, ps);
           })
      .def("record_output", &probe::Probe::record_output)
      .def("begin_backward", &probe::Probe::begin_backward)
      .def("end_backward", &probe::Probe::end_backward)
      .def("tap",
           [](probe::Probe& p, const std::string& name, const at::Tensor& t, const PyShard& shard,
              const PyPartial& partial) { p.tap(name, t, to_shard(shard), to_partial(partial, name)); })
      .def("scalar", py::overload_cast<const std::string&, double>(&probe::Probe::scalar))
      .def("scalar", py::overload_cast<const std::string&, const at::Tensor&>(&probe::Probe::scalar))
      .def("record_scalar", py::overload_cast<probe::Kind, const std::string&, double>(&probe::Probe::record_scalar))
      .def("record_scalar",
           py::overload_cast<probe::Kind, const std::string&, const at::Tensor&>(&probe::Probe::record_scalar))
      .def("record",
           [](probe::Probe& p, probe::Kind kind, const std::string& name, std::optional<std::int64_t> mb,
              const std::optional<at::Tensor>& t, const PyShard& shard, const PyPartial& partial) {
             p.record(kind, name, mb, or_undefined(t), to_shard(shard), to_partial(partial, name));
           })
      .def("record_mb_grad", [](probe::Probe& p, const std::string& name, const at::Tensor& grad,
                                const PyShard& shard, const PyPartial& partial) {
        p.record_mb_grad(name, grad, to_shard(shard), to_partial(partial, name));
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
      .def(py::init<const std::string&, bool, int, int>(), py::arg("name"), py::arg("root") = false,
           py::arg("split_rank") = 0, py::arg("split_size") = 1)
      .def("close", &PyScope::close)
      .def_property_readonly("name", &PyScope::name);
  m.def("current_scope", &probe::current_scope);
}
