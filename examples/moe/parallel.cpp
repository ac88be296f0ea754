#include "parallel.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <stdexcept>

namespace moe {

struct Group::Backend {
  c10::intrusive_ptr<c10d::Backend> pg;
};

Group::Group() = default;
Group::Group(std::shared_ptr<Backend> backend, int rank, int size)
    : backend_(std::move(backend)), rank_(rank), size_(size) {}
Group::~Group() = default;

void Group::all_reduce_sum(at::Tensor& t) {
  if (!backend_) return;
  std::vector<at::Tensor> tensors{t};
  backend_->pg->allreduce(tensors)->wait();
}

void Group::all_gather(at::Tensor& out, at::Tensor& in) {
  if (!backend_) {
    out.copy_(in);
    return;
  }
  backend_->pg->_allgather_base(out, in)->wait();
}

void Group::reduce_scatter_sum(at::Tensor& out, at::Tensor& in) {
  if (!backend_) {
    out.copy_(in);
    return;
  }
  backend_->pg->_reduce_scatter_base(out, in)->wait();
}

void Group::all_to_all(at::Tensor& out, at::Tensor& in, std::vector<std::int64_t> out_rows,
                       std::vector<std::int64_t> in_rows) {
  if (!backend_) {
    out.copy_(in);
    return;
  }
  backend_->pg->alltoall_base(out, in, out_rows, in_rows)->wait();
}

void Group::send(at::Tensor& t, int dst, int tag) {
  std::vector<at::Tensor> tensors{t};
  backend_->pg->send(tensors, dst, tag)->wait();
}

void Group::recv(at::Tensor& t, int src, int tag) {
  std::vector<at::Tensor> tensors{t};
  backend_->pg->recv(tensors, src, tag)->wait();
}

void Group::barrier() {
  if (backend_) backend_->pg->barrier()->wait();
}

namespace {

// Long enough for a slow CI machine, short enough that a killed rank's peers give up (torchrun
// normally stops them first).
constexpr std::chrono::seconds kTimeout{180};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::stoi(v) : fallback;
}

std::string env_str(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : fallback;
}

Group make_group(const c10::intrusive_ptr<c10d::Store>& root, const std::string& name, int rank,
                 int size, const std::string& device, bool backend_at_one_rank) {
  if (size == 1 && !backend_at_one_rank) return Group();
  auto store = c10::make_intrusive<c10d::PrefixStore>(name, root);
  auto backend = std::make_shared<Group::Backend>();
  if (device == "cpu") {
    auto options = c10d::ProcessGroupGloo::Options::create(kTimeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    options->threads = 1;
    backend->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  } else {
#ifdef USE_C10D_NCCL
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = kTimeout;
    backend->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#else
    throw std::runtime_error("--device " + device +
                             ": this build has no NCCL (needs a CUDA LibTorch)");
#endif
  }
  return Group(std::move(backend), rank, size);
}

}  // namespace

ProcessGroups init_process_groups(int stages, int tp, int ep, const std::string& device,
                                  bool backend_at_one_rank) {
  ProcessGroups g;
  g.world_size = env_int("WORLD_SIZE", 1);
  g.rank = env_int("RANK", 0);
  if (stages < 1 || g.world_size % stages != 0)
    throw std::invalid_argument("--stages " + std::to_string(stages) +
                                " does not divide the world size " + std::to_string(g.world_size));
  if (tp < 1 || (g.world_size / stages) % tp != 0)
    throw std::invalid_argument("--tp " + std::to_string(tp) + " does not divide the " +
                                std::to_string(g.world_size / stages) +
                                " rank(s) of a pipeline stage (world size " +
                                std::to_string(g.world_size) + ")");
  g.stages = stages;
  g.tp_size = tp;
  g.dp_size = g.world_size / stages / tp;
  g.tp_rank = g.rank % tp;
  g.dp_rank = g.rank / tp % g.dp_size;
  g.stage = g.rank / tp / g.dp_size;
  if (ep < 1 || g.dp_size % ep != 0)
    throw std::invalid_argument("--ep " + std::to_string(ep) + " does not divide the " +
                                std::to_string(g.dp_size) + " data-parallel rank(s) of a stage");
  g.ep_size = ep;
  g.ep_rank = g.dp_rank % ep;
  if (g.world_size == 1 && !backend_at_one_rank) return g;

  const std::string host = env_str("MASTER_ADDR", "127.0.0.1");
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env_int("MASTER_PORT", 29500));
  store_options.timeout = kTimeout;
  // torchrun's agent already serves a TCPStore at MASTER_ADDR:MASTER_PORT: every rank is a
  // client. Otherwise rank 0 hosts it, as torch.distributed's env:// rendezvous does.
  if (env_str("TORCHELASTIC_USE_AGENT_STORE", "") == "True") {
    store_options.isServer = false;
    store_options.waitWorkers = false;
  } else {
    store_options.isServer = g.rank == 0;
    store_options.numWorkers = g.world_size;
    store_options.multiTenant = true;
  }
  c10::intrusive_ptr<c10d::Store> tcp = c10::make_intrusive<c10d::TCPStore>(host, store_options);
  // The agent's store outlives worker restarts: keep each attempt's keys apart.
  auto root = c10::make_intrusive<c10d::PrefixStore>(
      "numprobe/attempt_" + env_str("TORCHELASTIC_RESTART_COUNT", "0"), tcp);

  g.backend_name = device == "cpu" ? "gloo" : "nccl";
  g.world = make_group(root, "world", g.rank, g.world_size, device, backend_at_one_rank);
  // Every rank creates the groups it belongs to, each named after the coordinates its members
  // share.
  const std::string at_tp = tp == 1 ? "" : "_tp" + std::to_string(g.tp_rank);
  g.dp = make_group(root, "dp" + std::to_string(g.stage) + at_tp, g.dp_rank, g.dp_size, device,
                    backend_at_one_rank);
  g.pp = make_group(root, "pp" + std::to_string(g.dp_rank) + at_tp, g.stage, g.stages, device,
                    backend_at_one_rank);
  g.tp = make_group(root, "tp" + std::to_string(g.stage) + "_" + std::to_string(g.dp_rank),
                    g.tp_rank, g.tp_size, device, backend_at_one_rank);
  if (ep == 1) {
    g.edp = g.dp;  // every rank holds every expert: no groups beyond those of an existing setup
    return g;
  }
  const std::string at_stage = std::to_string(g.stage) + "_";
  g.ep = make_group(root, "ep" + at_stage + std::to_string(g.dp_rank / ep) + at_tp, g.ep_rank, ep,
                    device, backend_at_one_rank);
  g.edp = make_group(root, "edp" + at_stage + std::to_string(g.ep_rank) + at_tp, g.dp_rank / ep,
                     g.dp_size / ep, device, backend_at_one_rank);
  return g;
}

}  // namespace moe
