// Process groups for the example's setups, over real c10d backends (Gloo on CPU, NCCL when
// built with CUDA), from torchrun's environment. This header keeps c10d out of the trainer's
// translation unit: the trainer sees ranks, groups and a handful of collectives.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moe {

// One process group (or none: a group of one without a backend, where every collective is the
// identity).
class Group {
 public:
  struct Backend;
  Group();  // a group of one
  Group(std::shared_ptr<Backend> backend, int rank, int size);
  ~Group();

  int rank() const { return rank_; }
  int size() const { return size_; }

  void all_reduce_sum(at::Tensor& t);
  // out [size * n, ...] <- every rank's in [n, ...], in rank order.
  void all_gather(at::Tensor& out, at::Tensor& in);
  // out [n, ...] <- rows [rank*n, (rank+1)*n) of the sum over ranks of in [size * n, ...].
  void reduce_scatter_sum(at::Tensor& out, at::Tensor& in);
  // Rows of in (dim 0) in blocks of in_rows[r] rows go to rank r; out receives out_rows[r] rows
  // from rank r, in rank order.
  void all_to_all(at::Tensor& out, at::Tensor& in, std::vector<std::int64_t> out_rows,
                  std::vector<std::int64_t> in_rows);
  void send(at::Tensor& t, int dst, int tag);
  void recv(at::Tensor& t, int src, int tag);
  void barrier();

 private:
  std::shared_ptr<Backend> backend_;
  int rank_ = 0, size_ = 1;
};

// A world of S pipeline stages x D data-parallel replicas x T tensor-parallel ranks,
// rank = (stage * D + dp_rank) * T + tp_rank: a tensor-parallel group is T neighbouring ranks
// (as Megatron orders them); with T = 1, rank = stage * D + dp_rank. Expert parallelism of
// degree E takes its ranks from the data-parallel ones: E neighbouring dp ranks split the routed
// experts (ep_rank = dp_rank % E), and the D / E ranks of one ep_rank hold the same experts.
struct ProcessGroups {
  int rank = 0, world_size = 1;
  int stage = 0, stages = 1;
  int dp_rank = 0, dp_size = 1;
  int tp_rank = 0, tp_size = 1;
  int ep_rank = 0, ep_size = 1;
  std::string backend_name = "none";
  Group world;  // every rank
  Group dp;     // the ranks of this stage and tensor-parallel rank (gradient reduction)
  Group pp;     // the ranks holding this data-parallel replica's stages at this tp rank (send/recv)
  Group tp;     // the ranks that split this stage's modules of this replica
  Group ep;     // the dp ranks whose routed experts make up the whole set (token dispatch)
  Group edp;    // the dp ranks holding this rank's experts (their gradient reduction); dp at E = 1
};

// Reads RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun) and connects to the store: as a
// client of the launcher's store when TORCHELASTIC_USE_AGENT_STORE=True, else rank 0 hosts it.
// Without torchrun (no WORLD_SIZE) or with one process: groups of one, no store (unless
// backend_at_one_rank).
// `device` is "cpu" (Gloo) or "cuda" (NCCL; needs a CUDA build). `backend_at_one_rank` builds
// every group through the backend even when it has one rank, so that a single GPU runs NCCL.
// `tp`: the tensor-parallel degree (it divides world_size / stages); `ep`: the expert-parallel
// degree (it divides the data-parallel one).
ProcessGroups init_process_groups(int stages, int tp, int ep, const std::string& device,
                                  bool backend_at_one_rank = false);

}  // namespace moe
