#include "data_parallel.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <stdexcept>

#include "expert_parallel.h"
#include "tensor_parallel.h"

namespace moe {

Group& replicas_of(const Param& p, ProcessGroups& groups) {
  return p.expert ? groups.edp : groups.dp;
}

namespace {

void release(Param& p, at::ScalarType dtype) {
  p.compute.mutable_grad().reset();
  p.compute.set_data(at::empty({0}, p.owned.options().dtype(dtype).requires_grad(false)));
}

// Where a tensor-parallel parameter's slice sits, and whether its gradient is a summand.
void place_for_tensor_parallel(Param& p, const ProcessGroups& groups, bool sequence_parallel) {
  if (groups.tp_size == 1) return;
  const TpLayout layout = tp_layout(p.name, sequence_parallel);
  if (layout.split != TpLayout::Split::none) {
    auto whole = p.full_shape;
    whole[layout.dim()] *= groups.tp_size;
    p.slice = probe::Shard::along(whole, layout.dim(), groups.tp_rank * p.full_shape[layout.dim()]);
    p.shard = p.slice;
  }
  if (layout.partial_grad) p.mb_grad_partial = probe::Partial{groups.tp_rank, groups.tp_size};
}

// A routed expert's weights: this rank's experts, rows [ep_rank*n, (ep_rank+1)*n) of dim 0.
void place_for_expert_parallel(Param& p, const ProcessGroups& groups) {
  if (groups.ep_size == 1 || !is_expert_parameter(p.name)) return;
  p.expert = true;
  auto whole = p.full_shape;
  whole[0] *= groups.ep_size;
  p.slice = probe::Shard::along(whole, 0, groups.ep_rank * p.full_shape[0]);
  p.shard = p.slice;
}

// zero3: this rank keeps rows [rank*n, (rank+1)*n) of every parameter, over its replicas.
void shard(Param& p, ProcessGroups& groups, at::ScalarType dtype) {
  const Group& replicas = replicas_of(p, groups);
  const auto rows = p.full_shape.at(0), ranks = static_cast<std::int64_t>(replicas.size());
  if (rows % ranks != 0)
    throw std::invalid_argument("zero3: " + p.name + " has " + std::to_string(rows) +
                                " rows, not divisible by " + std::to_string(ranks) +
                                " ranks (choose sizes that are)");
  const auto n = rows / ranks, begin = replicas.rank() * n;
  p.owned = p.owned.detach().narrow(0, begin, n).clone().requires_grad_(true);
  p.shard = probe::Shard::along(p.full_shape, 0, begin);
  if (!p.slice.empty()) {  // rows of a tensor- or expert-parallel slice: offsets add up
    p.shard.global_shape = p.slice.global_shape;
    p.shard.offset[0] += p.slice.offset[0];
    for (std::size_t d = 1; d < p.shard.offset.size(); ++d) p.shard.offset[d] = p.slice.offset[d];
  }
  release(p, dtype);
}

// zero3: the rank's rows of the summed gradient become its shard's gradient; under the
// skip-reduce fault, its rows of its own local gradient.
void reduce_scatter_gradient(Param& p, at::Tensor& grad, ProcessGroups& groups, bool skip) {
  at::Tensor shard_grad;
  if (skip) {
    // `grad` is the slice's: rows from the slice's start, not the whole's.
    const auto rows_begin = p.shard.offset[0] - (p.slice.empty() ? 0 : p.slice.offset[0]);
    shard_grad = grad.narrow(0, rows_begin, p.owned.size(0)).clone();
  } else {
    shard_grad = at::empty_like(p.owned);
    auto full = grad.contiguous();
    replicas_of(p, groups).reduce_scatter_sum(shard_grad, full);
  }
  p.owned.mutable_grad() = shard_grad;
}

// Mixed precision: `owned` stays the float32 master, the module's parameter becomes its
// `dtype` copy (refreshed by materialize_parameters each step).
void compute_in(Param& p, at::ScalarType dtype) {
  if (p.compute.scalar_type() == dtype) return;
  if (p.owned.is_same(p.compute)) p.owned = p.compute.detach().clone().requires_grad_(true);
  at::NoGradGuard no_grad;
  p.compute.set_data(p.compute.detach().to(dtype));
}

}  // namespace

std::vector<Param> hold_parameters(torch::nn::Module& model, ProcessGroups& groups, bool zero3,
                                   bool sequence_parallel, at::ScalarType dtype) {
  std::vector<Param> params;
  for (auto& item : model.named_parameters()) {
    Param p;
    p.name = item.key();
    p.compute = item.value();
    p.full_shape = p.compute.sizes().vec();
    place_for_tensor_parallel(p, groups, sequence_parallel);
    place_for_expert_parallel(p, groups);
    p.owned = p.compute;
    compute_in(p, dtype);
    if (zero3) shard(p, groups, dtype);
    params.push_back(std::move(p));
  }
  return params;
}

void materialize_parameters(std::vector<Param>& params, ProcessGroups& groups, bool zero3) {
  at::NoGradGuard no_grad;
  for (auto& p : params) {
    const auto dtype = p.compute.scalar_type();
    if (!zero3) {
      if (!p.owned.is_same(p.compute)) p.compute.set_data(p.owned.detach().to(dtype));
      continue;
    }
    auto full = at::empty(p.full_shape, p.owned.options().requires_grad(false));
    auto mine = p.owned.detach();
    replicas_of(p, groups).all_gather(full, mine);
    p.compute.set_data(full.to(dtype));
  }
}

void release_parameters(std::vector<Param>& params) {
  for (auto& p : params) release(p, p.compute.scalar_type());
}

void reduce_gradients(std::vector<Param>& params, ProcessGroups& groups, bool zero3,
                      const std::string& unreduced, bool norms_unreduced) {
  for (auto& p : params) {
    auto grad = p.compute.grad();
    if (!grad.defined()) continue;
    grad = grad.to(p.owned.scalar_type());  // itself when the dtypes agree
    if (!p.mb_grad_partial.empty() && !(norms_unreduced && p.name.ends_with("norm.weight")))
      groups.tp.all_reduce_sum(grad);
    const bool skip = p.name == unreduced;
    if (zero3) reduce_scatter_gradient(p, grad, groups, skip);
    else if (!skip) replicas_of(p, groups).all_reduce_sum(grad);
    if (!zero3 && !p.owned.is_same(p.compute)) p.owned.mutable_grad() = grad;
  }
}

void zero_grad(std::vector<Param>& params) {
  for (auto& p : params) {
    p.compute.mutable_grad().reset();
    p.owned.mutable_grad().reset();
  }
}

}  // namespace moe
