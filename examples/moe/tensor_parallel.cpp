#include "tensor_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace moe {

TpLayout tp_layout(const std::string& name, bool sequence_parallel) {
  using Split = TpLayout::Split;
  auto ends = [&](const char* suffix) { return name.ends_with(suffix); };
  TpLayout l;
  if (ends("attention.wq.weight") || ends("attention.wkv_b.weight") ||
      ends("shared_experts.w1.weight") || ends("shared_experts.w3.weight"))
    l.split = Split::column;
  else if (ends("attention.wo.weight") || ends("shared_experts.w2.weight")) l.split = Split::row;
  // Under sp these see only this rank's tokens: norms, wkv_a (it runs before the gather), the
  // embedding, the router and the routed experts. The output projection sees every token.
  else if (sequence_parallel && !name.starts_with("output.")) l.partial_grad = true;
  return l;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [B, T, ...] <-> [T, B, ...]: the sequence dim leading, so that a collective's chunks (dim 0)
// are sequence shards; applied again, the layout the model computes in.
at::Tensor swap_batch_and_sequence(const at::Tensor& x) { return x.transpose(0, 1).contiguous(); }

at::Tensor gather_sequence(Group& g, const at::Tensor& shard) {
  auto in = swap_batch_and_sequence(shard);
  auto sizes = in.sizes().vec();
  sizes[0] *= g.size();
  auto out = at::empty(sizes, in.options());
  g.all_gather(out, in);
  return swap_batch_and_sequence(out);
}

at::Tensor reduce_scatter_sequence(Group& g, const at::Tensor& whole) {
  auto in = swap_batch_and_sequence(whole);
  auto sizes = in.sizes().vec();
  sizes[0] /= g.size();
  auto out = at::empty(sizes, in.options());
  g.reduce_scatter_sum(out, in);
  return swap_batch_and_sequence(out);
}

at::Tensor all_reduce(Group& g, const at::Tensor& x) {
  auto out = x.contiguous().clone();
  g.all_reduce_sum(out);
  return out;
}

// The group rides in the autograd context as an integer: the process groups outlive every
// backward the trainer runs.
Group& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<Group*>(ctx->saved_data["group"].toInt());
}
void keep_group(AutogradContext* ctx, Group* g) {
  ctx->saved_data["group"] = reinterpret_cast<std::int64_t>(g);
}

// Identity forward, all-reduce backward (Megatron's copy_to_tensor_model_parallel_region).
struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g) {
    keep_group(ctx, g);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduce(group_of(ctx), grads[0]), at::Tensor()};
  }
};

// All-reduce forward, identity backward (reduce_from_tensor_model_parallel_region).
struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, Group* g) {
    return all_reduce(*g, x);
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

// All-gather along the sequence forward, reduce-scatter backward (sp's entry into a region).
struct GatherFromSequence : torch::autograd::Function<GatherFromSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g) {
    keep_group(ctx, g);
    return gather_sequence(*g, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {reduce_scatter_sequence(group_of(ctx), grads[0]), at::Tensor()};
  }
};

// Reduce-scatter along the sequence forward, all-gather backward (sp's exit from a region).
struct ReduceScatterToSequence : torch::autograd::Function<ReduceScatterToSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g) {
    keep_group(ctx, g);
    return reduce_scatter_sequence(*g, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gather_sequence(group_of(ctx), grads[0]), at::Tensor()};
  }
};

// All-gather along the sequence forward; backward, this rank's slice of a gradient every rank
// computed the same (a replicated computation after the gather).
struct GatherForReplicated : torch::autograd::Function<GatherForReplicated> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g) {
    keep_group(ctx, g);
    ctx->saved_data["length"] = x.size(1);
    return gather_sequence(*g, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto n = ctx->saved_data["length"].toInt();
    return {grads[0].narrow(1, group_of(ctx).rank() * n, n).contiguous(), at::Tensor()};
  }
};

}  // namespace

TensorParallel::TensorParallel(Group& group, bool sequence_parallel)
    : group_(&group), sp_(sequence_parallel) {}

at::Tensor TensorParallel::enter(const at::Tensor& x) const {
  return sp_ ? GatherFromSequence::apply(x, group_) : CopyToRegion::apply(x, group_);
}

at::Tensor TensorParallel::leave(const at::Tensor& partial) const {
  return sp_ ? ReduceScatterToSequence::apply(partial, group_)
             : ReduceFromRegion::apply(partial, group_);
}

at::Tensor TensorParallel::gather_for_replicated(const at::Tensor& x) const {
  return sp_ ? GatherForReplicated::apply(x, group_) : x;
}

at::Tensor TensorParallel::sequence_shard(const at::Tensor& x, int of_rank) const {
  const auto n = x.size(1) / size();
  return x.narrow(1, of_rank * n, n).contiguous();
}

probe::Shard TensorParallel::shard_of_sequence(const at::Tensor& shard) const {
  auto whole = shard.sizes().vec();
  whole[1] *= size();
  return probe::Shard::along(whole, 1, rank() * shard.size(1));
}

}  // namespace moe
