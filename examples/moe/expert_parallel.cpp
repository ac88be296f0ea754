#include "expert_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>

namespace moe {

bool is_expert_parameter(const std::string& name) {
  return name.find(".moe.experts.") != std::string::npos;
}

std::vector<std::int64_t> covered_microbatches(const ProcessGroups& groups, std::int64_t per_rank,
                                               std::int64_t mb) {
  const std::int64_t place = mb - groups.dp_rank * per_rank;  // among this rank's microbatches
  const std::int64_t first_dp_rank = groups.dp_rank - groups.ep_rank;
  std::vector<std::int64_t> covers;
  for (std::int64_t r = 0; r < groups.ep_size; ++r)
    covers.push_back((first_dp_rank + r) * per_rank + place);
  return covers;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor exchange(Group& g, const at::Tensor& in, const std::vector<std::int64_t>& out_rows,
                    const std::vector<std::int64_t>& in_rows) {
  auto sizes = in.sizes().vec();
  sizes[0] = 0;
  for (auto n : out_rows) sizes[0] += n;
  auto out = at::empty(sizes, in.options());
  auto contiguous = in.contiguous();
  g.all_to_all(out, contiguous, out_rows, in_rows);
  return out;
}

// All-to-all forward; backward, the gradients the same way back. The group rides in the
// autograd context as an integer: the process groups outlive every backward the trainer runs.
struct AllToAll : torch::autograd::Function<AllToAll> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Group* g,
                            std::vector<std::int64_t> out_rows, std::vector<std::int64_t> in_rows) {
    ctx->saved_data["group"] = reinterpret_cast<std::int64_t>(g);
    ctx->saved_data["out_rows"] = out_rows;
    ctx->saved_data["in_rows"] = in_rows;
    return exchange(*g, x, out_rows, in_rows);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto& g = *reinterpret_cast<Group*>(ctx->saved_data["group"].toInt());
    const auto out_rows = ctx->saved_data["out_rows"].toIntVector();
    const auto in_rows = ctx->saved_data["in_rows"].toIntVector();
    return {exchange(g, grads[0], in_rows, out_rows), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

ExpertParallel::ExpertParallel(Group& group, std::int64_t n_experts)
    : group_(&group), n_experts_(n_experts) {
  if (n_experts % group.size() != 0)
    throw std::invalid_argument("--ep " + std::to_string(group.size()) + " does not divide the " +
                                std::to_string(n_experts) + " experts");
}

ExpertParallel::Received ExpertParallel::dispatch(const at::Tensor& rows,
                                                  const std::vector<std::int64_t>& counts) const {
  // Every rank's count per expert: what each destination receives from each source (on the
  // rows' device: NCCL gathers device tensors).
  auto mine = at::tensor(counts, at::kLong).to(rows.device());
  auto gathered = at::empty({size() * n_experts_}, mine.options());
  group_->all_gather(gathered, mine);
  const auto all = gathered.cpu();
  const auto* c = all.const_data_ptr<std::int64_t>();

  Received r;
  r.counts.assign(size(), std::vector<std::int64_t>(experts_per_rank(), 0));
  r.from_rank.assign(size(), 0);
  r.to_rank.assign(size(), 0);
  for (int s = 0; s < size(); ++s) {
    for (std::int64_t e = 0; e < experts_per_rank(); ++e) {
      r.counts[s][e] = c[s * n_experts_ + first_expert() + e];
      r.from_rank[s] += r.counts[s][e];
    }
  }
  for (std::int64_t e = 0; e < n_experts_; ++e) r.to_rank[e / experts_per_rank()] += counts[e];
  r.rows = AllToAll::apply(rows, group_, r.from_rank, r.to_rank);
  return r;
}

at::Tensor ExpertParallel::combine(const at::Tensor& outputs, const Received& received) const {
  return AllToAll::apply(outputs, group_, received.to_rank, received.from_rank);
}

}  // namespace moe
