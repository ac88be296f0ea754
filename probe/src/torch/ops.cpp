// The probe's recording points as dispatcher operators, `numprobe::tap`, so that a compiler
// tracing a model (torch.compile: Dynamo, AOTAutograd, Inductor) keeps them in its graph as
// calls, not as Python it cannot follow. The operator returns nothing and mutates nothing: to
// AOTAutograd such a call is dead code unless it is declared to have a side effect, which the
// Python package does (numprobe/_ops.py); the Meta kernel below is what a tracer's fake tensors
// run.
//
// The kernel records into the active probe (probe::tap): a compiled graph holds no reference
// to a Probe object, and the probe may be constructed after the graph was compiled.
#include <ATen/record_function.h>
#include <torch/library.h>

#include <string>

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
  if (partial_count > 1) partial = probe::Partial::of(partial_index, partial_count, "numprobe::tap '" + tap_name + "'");
  probe::note_compiled();  // eager taps do not come here: a compiled graph calls it
  probe::tap(tap_name, t, shard, partial);
}

// Shapes only (meta tensors while a graph is traced): nothing to record.
void tap_meta(c10::string_view, const at::Tensor&, c10::IntArrayRef, c10::IntArrayRef, std::int64_t,
              std::int64_t) {}

}  // namespace

TORCH_LIBRARY(numprobe, m) {
  m.def("tap(str name, Tensor t, int[] global_shape=[], int[] offset=[], int partial_index=0, "
        "int partial_count=1) -> ()");
}

TORCH_LIBRARY_IMPL(numprobe, CompositeExplicitAutograd, m) { m.impl("tap", tap_kernel); }

TORCH_LIBRARY_IMPL(numprobe, Meta, m) { m.impl("tap", tap_meta); }
