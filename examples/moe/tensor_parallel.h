// Megatron-style tensor parallelism over ProcessGroups::tp, optionally with sequence
// parallelism: which parameters are split and how, and the collectives at the edges of the
// tensor-parallel regions as autograd functions.
//
// Attention's wq and wkv_b are column-parallel over heads, wo row-parallel; the shared expert's
// w1 and w3 column-parallel, w2 row-parallel. Everything else (embedding, norms, wkv_a and
// kv_norm, router, routed experts, output projection) is replicated. A region's input enters
// through enter() (only the branch that runs column-parallel ops: a replicated branch beside it
// keeps its whole gradient) and a row-parallel output leaves through leave(). Under sequence
// parallelism the activations between regions are sequence shards [B, T/tp, dim]: norms,
// dropout, the residual adds, the router and the routed experts run on this rank's tokens, so
// their weights' gradients are partial sums over the tp ranks, all-reduced before the update.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "parallel.h"
#include "probe/partial.h"
#include "probe/scope.h"
#include "probe/shard.h"

namespace moe {

// How one parameter is held under tensor parallelism.
struct TpLayout {
  // column: dim 0 of [out, in]; row: dim 1
  enum class Split { none, column, row } split = Split::none;
  // Replicated, but computed from this rank's sequence shard (sp): each rank's gradient is one
  // summand of the whole gradient.
  bool partial_grad = false;
  int dim() const { return split == Split::row ? 1 : 0; }
};
TpLayout tp_layout(const std::string& name, bool sequence_parallel);

class TensorParallel {
 public:
  TensorParallel(Group& group, bool sequence_parallel);

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  bool sequence_parallel() const { return sp_; }
  probe::Partial partial() const { return probe::Partial{rank(), size()}; }
  // For the probe's op trace: the model's scopes run split over the tp ranks.
  probe::Split split() const { return probe::Split{rank(), size()}; }

  // Into a tensor-parallel region, before its column-parallel ops. sp: all-gather along the
  // sequence (backward: reduce-scatter of the partial gradients); otherwise the identity
  // (backward: their all-reduce).
  at::Tensor enter(const at::Tensor& x) const;
  // Out of one, after a row-parallel op: the sum of every rank's partial product. sp: its
  // sequence shard (reduce-scatter; backward: all-gather); otherwise all of it (all-reduce;
  // backward: the identity).
  at::Tensor leave(const at::Tensor& partial) const;
  // sp: the whole sequence for a computation every rank repeats (the output projection):
  // all-gather, backward: this rank's slice of the (identical) gradient. Otherwise the identity.
  at::Tensor gather_for_replicated(const at::Tensor& x) const;
  // sp: this rank's sequence shard (dim 1) of `x`, or the shard of rank `of_rank`.
  at::Tensor sequence_shard(const at::Tensor& x) const { return sequence_shard(x, rank()); }
  at::Tensor sequence_shard(const at::Tensor& x, int of_rank) const;
  // Where a sequence shard [B, T/tp, ...] sits in the whole [B, T, ...], for the probe.
  probe::Shard shard_of_sequence(const at::Tensor& shard) const;

  // Faults (faults.h): layer whose attention output is not reduced; every rank's dropout mask
  // cut at the first shard's positions.
  std::int64_t unreduced_attention_layer = -1;
  bool dropout_of_first_shard = false;

 private:
  Group* group_;
  bool sp_;
};

}  // namespace moe
