// Expert parallelism (DeepSeek-V3 / torchtitan style) over ProcessGroups::ep: the routed experts
// split over the group's ranks, each rank's tokens dispatched to the ranks of their experts by
// all-to-all and combined back by the reverse one, as autograd functions. The router and the
// shared expert stay replicated.
//
// The group's ranks are data-parallel ranks running their i-th microbatches together: one
// dispatch carries the tokens of i-th microbatches of every rank of the group, so an expert's
// gradient from one backward covers all of them (covered_microbatches).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "parallel.h"

namespace moe {

// A routed expert's weight (`layers.<i>.moe.experts.w1|w2|w3`, experts along dim 0).
bool is_expert_parameter(const std::string& name);

// The global microbatches the gradient of an expert covers in the backward of global
// microbatch `mb` on this rank, `per_rank` microbatches to a data-parallel rank: the
// microbatch at the same place on every rank of its expert-parallel group.
std::vector<std::int64_t> covered_microbatches(const ProcessGroups& groups, std::int64_t per_rank,
                                               std::int64_t mb);

class ExpertParallel {
 public:
  ExpertParallel(Group& group, std::int64_t n_experts);

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  std::int64_t experts_per_rank() const { return n_experts_ / size(); }
  std::int64_t first_expert() const { return rank() * experts_per_rank(); }

  // What a dispatch brought to this rank: every source rank's rows for its experts, source by
  // source, each source's grouped by expert; counts[source][local expert] rows each.
  struct Received {
    at::Tensor rows;
    std::vector<std::vector<std::int64_t>> counts;
    std::vector<std::int64_t> from_rank;  // rows from each source
    std::vector<std::int64_t> to_rank;    // rows this rank sent to each destination
  };
  // `rows`: this rank's tokens grouped by expert (ascending), counts[e] rows for expert e of
  // the whole set. Backward: the reverse all-to-all of the rows' gradients.
  Received dispatch(const at::Tensor& rows, const std::vector<std::int64_t>& counts) const;
  // The experts' outputs, laid out as `received.rows`, back to the ranks they came from: this
  // rank's rows in the order it dispatched them.
  at::Tensor combine(const at::Tensor& outputs, const Received& received) const;

  // The ep-permute fault (faults.h): the layer whose combine adds each expert's returned rows to
  // its tokens in reverse order.
  std::int64_t permuted_layer = -1;

 private:
  Group* group_;
  std::int64_t n_experts_;
};

}  // namespace moe
