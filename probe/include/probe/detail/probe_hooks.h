// What the Python package calls on a Probe beyond a trainer's API (probe/probe.h): it runs
// autograd itself, reads optimizer state itself and hooks gradients itself. Not for trainers.
#pragma once

#include <cstdint>
#include <string>

#include "probe/probe.h"

namespace probe::detail {

struct ProbeHooks {
  // Names the backward's microbatch and starts tracing backward ops (when the trace setting
  // says so); end_backward stops it. One at a time, on one thread.
  static void begin_backward(Probe& p, std::int64_t microbatch) { p.begin_backward(microbatch); }
  static void end_backward(Probe& p) { p.end_backward(); }
  // A pipeline stage after the first runs the forward of `microbatch` on: its taps, ops and
  // gradients carry the id; nothing is recorded (the inputs and RNG state are the first stage's).
  static void continue_forward(Probe& p, const std::string& name, std::int64_t microbatch) {
    p.continue_forward(name, microbatch);
  }
  // A scalar record of another kind: an optimizer's update count (`optim`).
  static void record_scalar(Probe& p, Kind kind, const std::string& name, double value) {
    p.record_scalar(kind, name, value);
  }
  static void record_scalar(Probe& p, Kind kind, const std::string& name, const at::Tensor& value) {
    p.record_scalar(kind, name, value);
  }
  // A parameter's gradient from the package's own hook: kind `mb_grad`, the running
  // backward's microbatch.
  static void record_mb_grad(Probe& p, const std::string& name, const at::Tensor& grad,
                             const Shard& shard, Partial partial) {
    p.record_mb_grad(name, grad, shard, partial);
  }
};

}  // namespace probe::detail
