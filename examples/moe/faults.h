// --fault: each reproduces a classic divergence that diff_logs must name (docs/examples.md,
// Faults). Parsed and checked before the probe makes its run directory; applied where the
// training code reaches the point it breaks. --die-after-step (a killed rank) is here too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "data_parallel.h"
#include "parallel.h"

namespace torch::nn {
class Module;
}

namespace moe {

struct Fault {
  enum class Kind {
    none,
    grads_none,
    rng_per_rank,
    nan,
    skip_reduce,
    init,
    lr,
    grad_scale,
    op,
    op_backward,
    op_wrong,
    op_lowp,
    // Under tensor / sequence parallelism only (accepted, and without effect, elsewhere).
    out_scale,
    tp_no_reduce,
    sp_norm_unreduced,
    sp_dropout_seed,
    // Under expert parallelism only.
    ep_permute,
    ep_grad_scale,
    // Under pipelining only: grads-none where a pipeline schedule runs the backward.
    pp_grads_none
  } kind = Kind::none;
  std::int64_t step = -1;
  // op, op_backward, op_wrong, op_lowp, tp_no_reduce, ep_permute, ep_grad_scale
  std::int64_t layer = -1;
  std::string param;
  double factor = 1;  // lr, grad_scale, out_scale

  static Fault parse(const std::string& text);

  // skip-reduce: the parameter whose gradient is not reduced; "" otherwise.
  std::string unreduced_param() const;
  // rng-per-rank: the rank, mixed into the dropout seeds; 0 otherwise.
  std::int64_t dropout_rank_salt(const ProcessGroups& groups) const;
  // lr: the factor on the learning rate of `step`'s update, if this fault scales it.
  std::optional<double> lr_factor(std::int64_t step) const;
};

// A fault that names no parameter of the model is an error; one that cannot fire in this run
// is worth a warning (a comparison would otherwise show "equal" for a fault the user thinks is on).
void check_fault(const Fault& fault, const Config& c, const ProcessGroups& groups);

// op / op-backward / op-wrong / op-lowp: the model computes that layer's softmax another way
// (model_args.h, AltSoftmax); out-scale: that layer's output is scaled.
void apply_op_fault(const Fault& fault, ModelArgs& model);

// tp-no-reduce=<layer>: that layer's attention output goes on unreduced (each rank its own
// partial product); sp-dropout-seed: every rank's dropout mask cut at the first shard's positions.
class TensorParallel;
void apply_tensor_parallel_fault(const Fault& fault, TensorParallel& tp);

// ep-permute=<layer>: that layer's combine adds each expert's returned rows to its tokens in
// reverse order.
class ExpertParallel;
void apply_expert_parallel_fault(const Fault& fault, ExpertParallel& ep);

// ep-grad-scale=<layer>: after the reduction, that layer's routed experts' gradients divided by
// the expert-parallel degree (as if averaged over the ranks that dispatched to them).
void scale_expert_gradients_if_due(const Fault& fault, std::vector<Param>& params,
                                   const ProcessGroups& groups);

// init=<param>: that parameter (if this stage holds it) drawn from another seed (seed + 1).
void apply_init_fault(const Fault& fault, torch::nn::Module& model, std::uint64_t seed);

// nan=<step>:<param>: at that step a NaN enters the parameter's gradient on the first
// data-parallel rank that holds it, before the gradient reduction spreads it.
void inject_nan_if_due(const Fault& fault, std::int64_t step, std::vector<Param>& params,
                       const ProcessGroups& groups);

// grad-scale=<step>:<param>:<factor>: data-parallel rank 0's gradient of `param` at `step` times
// `factor`, before the reduction (one rank's contribution wrong; with one rank, the gradient).
void scale_gradient_if_due(const Fault& fault, std::int64_t step, std::vector<Param>& params,
                           const ProcessGroups& groups);

// --die-after-step N: --die-rank SIGKILLs itself in step N+1, after its collectives and before
// it logs the step, so its peers log a step it does not (tests).
void die_if_due(const Config& c, std::int64_t step, const ProcessGroups& groups);

}  // namespace moe
