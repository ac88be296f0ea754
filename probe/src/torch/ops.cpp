// The probe's recording points as dispatcher operators, so that a compiler tracing a model
// (torch.compile: Dynamo, AOTAutograd, Inductor) keeps them in its graph as calls, not as Python
// it cannot follow: `numprobe::tap`, and for op traces of compiled code the module scopes
// (`scope_open`, `scope_close`) and the graph's nodes (`node`). The operators return nothing and
// mutate nothing: to AOTAutograd such a call is dead code unless it is declared to have a side
// effect, which the Python package does (numprobe/_ops.py), ordered among the graph's other
// effects so that a node is recorded inside its scope; the Meta kernels below are what a
// tracer's fake tensors run.
//
// The kernel records into the active probe (probe::tap): a compiled graph holds no reference
// to a Probe object, and the probe may be constructed after the graph was compiled.
#include <ATen/record_function.h>
#include <torch/library.h>

#include <string>

#include "op_trace.h"
#include "probe/probe.h"

namespace {

// `global_shape` empty: the tensor is whole. `partial_count` <= 1: it is no partial sum.
void tap_kernel(c10::string_view name, const at::Tensor& t, c10::IntArrayRef global_shape,
                c10::IntArrayRef offset, std::int64_t partial_index, std::int64_t partial_count) {
  // The probe's own ATen calls (figures, detach) are no ops of the model.
  at::DisableRecordFunctionGuard untraced;
  const std::string tap_name(name.data(), name.size());
  probe::Shard shard;
  if (!global_shape.empty()) shard = probe::Shard{global_shape.vec(), offset.vec()};
  probe::Partial partial;
  if (partial_count > 1)
    partial = probe::Partial::of(partial_index, partial_count, "numprobe::tap '" + tap_name + "'");
  probe::note_compiled();  // eager taps do not come here: a compiled graph calls it
  probe::tap(tap_name, t, shard, partial);
}

std::string text(c10::string_view s) { return std::string(s.data(), s.size()); }

void scope_open_kernel(c10::string_view path) { probe::detail::open_compiled_scope(text(path)); }
void scope_close_kernel(c10::string_view path) { probe::detail::close_compiled_scope(text(path)); }

void node_kernel(c10::string_view op, at::TensorList inputs, at::TensorList outputs) {
  at::DisableRecordFunctionGuard untraced;
  probe::detail::record_compiled_node(text(op), inputs.vec(), outputs.vec());
}

// Shapes only (meta tensors while a graph is traced): nothing to record.
void tap_meta(c10::string_view, const at::Tensor&, c10::IntArrayRef, c10::IntArrayRef, std::int64_t,
              std::int64_t) {}
void node_meta(c10::string_view, at::TensorList, at::TensorList) {}

}  // namespace

TORCH_LIBRARY(numprobe, m) {
  m.def(
      "tap(str name, Tensor t, int[] global_shape=[], int[] offset=[], int partial_index=0, "
      "int partial_count=1) -> ()");
  m.def("scope_open(str path) -> ()");
  m.def("scope_close(str path) -> ()");
  m.def("node(str op, Tensor[] inputs, Tensor[] outputs) -> ()");
}

TORCH_LIBRARY_IMPL(numprobe, CompositeExplicitAutograd, m) {
  m.impl("tap", tap_kernel);
  m.impl("node", node_kernel);
  m.impl("scope_open", scope_open_kernel);
  m.impl("scope_close", scope_close_kernel);
}

TORCH_LIBRARY_IMPL(numprobe, Meta, m) {
  m.impl("tap", tap_meta);
  m.impl("node", node_meta);
}
