// Data parallelism over the ranks of one pipeline stage (ProcessGroups::dp): ddp keeps whole
// parameters and all-reduces their gradients; zero3 keeps rows [rank*n, (rank+1)*n) of every
// parameter (dim 0), all-gathers them before the forward, frees them after the backward and
// reduce-scatters the gradients into the shards. Under expert parallelism a routed expert's
// weights are replicated over the ranks holding the same experts (ProcessGroups::edp) only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "parallel.h"
#include "probe/partial.h"
#include "probe/shard.h"

namespace torch::nn {
class Module;
}

namespace moe {

// One parameter as this rank holds it.
struct Param {
  std::string name;
  at::Tensor compute;  // the module's parameter: what the forward reads and the backward fills
  at::Tensor owned;    // what this rank keeps and updates: `compute` itself, or its zero3 shard,
                       // or (another dtype) the float32 master of either
  // where `owned` sits in the whole parameter (tp, ep, zero3); empty when whole
  probe::Shard shard;
  // where `compute` sits in it (a tensor- or expert-parallel slice); empty when whole
  probe::Shard slice;
  bool expert = false;  // a routed expert's, split over the expert-parallel ranks (ep > 1)
  std::vector<std::int64_t> full_shape;  // `compute`'s shape
  // Not empty: its gradient on this rank is this summand of the tp ranks' (sp, computed on
  // sequence shards): all-reduced over them, and each per-microbatch gradient is this summand.
  probe::Partial mb_grad_partial;
};

// The model's parameters in named_parameters() order, tensor- and expert-parallel ones as the
// slices parallelize_tensors and parallelize_experts left (slice); under zero3 each sharded
// along dim 0 of what the rank computes with over the ranks that replicate it, and that tensor
// released until materialize_parameters. With a `dtype` other than the parameters' (float32), each
// rank keeps float32 masters and the model computes with `dtype` copies of them.
std::vector<Param> hold_parameters(torch::nn::Module& model, ProcessGroups& groups, bool zero3,
                                   bool sequence_parallel, at::ScalarType dtype);

// The data-parallel ranks that hold `p` alike: edp for a routed expert's, dp for the rest.
Group& replicas_of(const Param& p, ProcessGroups& groups);

// What the forward computes with, from what each rank owns: under zero3 every parameter whole
// again (all-gathered from the shards); in another dtype the masters cast to it (element-wise:
// the same bits in every layout); otherwise nothing to do.
void materialize_parameters(std::vector<Param>& params, ProcessGroups& groups, bool zero3);
// zero3: the whole tensors and their gradients freed; each rank keeps its shard.
void release_parameters(std::vector<Param>& params);

// Gradients computed in another dtype are cast to the masters' (float32) first: every reduction
// sums float32. sp: gradients computed from sequence shards all-reduced over the tp ranks first
// (but norm weights' when `norms_unreduced`, the sp-norm-unreduced fault). Then over replicas_of:
// ddp: all-reduce; zero3: reduce-scatter into the shard's gradient; pp: each stage owns its
// parameters, nothing to do.
// `unreduced` names a parameter whose gradient stays local (the skip-reduce fault; "" for none).
void reduce_gradients(std::vector<Param>& params, ProcessGroups& groups, bool zero3,
                      const std::string& unreduced, bool norms_unreduced = false);

void zero_grad(std::vector<Param>& params);

}  // namespace moe
