// The probe side of the NumericsLogger interop test: trains the model tests/python/
// numerics_logger_run.py trained, from the weights and data it saved, under the probe with the
// torch-compatible hash, so diff_logs can pair the two logs record by record.
//   usage: numerics_logger_twin PYTHON_OUT_DIR RUN_DIR [--perturb]
// --perturb adds 1e-3 to one weight before training: every later output and gradient differs.
#include <probe/probe.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

namespace {

// The sizes of numerics_logger_run.py.
constexpr std::int64_t kIn = 8, kHidden = 16, kOut = 4;
constexpr int kSteps = 2, kMicrobatches = 4;
constexpr std::int64_t kMbSize = 3;
constexpr double kLr = 0.1;

struct MlpImpl : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(kIn, kHidden))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(kHidden, kOut))};
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
};
TORCH_MODULE(Mlp);

// Reads `t.numel()` float32 values into `t` (contiguous) from `in`.
void read_into(std::ifstream& in, torch::Tensor t, const std::string& what) {
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (in.gcount() != static_cast<std::streamsize>(t.nbytes()))
    throw std::runtime_error("short read of " + what);
}

std::ifstream open_input(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  return in;
}

// The output gradient numerics_logger_run.py seeds each backward with.
torch::Tensor output_grad_seed() {
  return torch::arange(kMbSize * kOut, torch::kFloat32).reshape({kMbSize, kOut}).div(10);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::cerr << "usage: numerics_logger_twin PYTHON_OUT_DIR RUN_DIR [--perturb]\n";
    return 2;
  }
  const std::filesystem::path python_dir = argv[1];
  const bool perturb = argc > 3 && std::string(argv[3]) == "--perturb";
  at::set_num_threads(1);  // as the Python side: CPU reduction order depends on it

  Mlp model;
  {
    torch::NoGradGuard no_grad;
    auto weights = open_input(python_dir / "weights.bin");
    for (auto& p : model->named_parameters()) read_into(weights, p.value(), p.key());
    if (weights.peek() != std::char_traits<char>::eof())
      throw std::runtime_error("weights.bin holds more than the model's parameters");
    if (perturb) model->fc1->weight[0][0].add_(1e-3);
  }

  probe::ProbeOptions options;
  options.run_dir = argv[2];
  options.torch_hash = true;                             // at::hash_tensor, NumericsLogger's hash
  options.kinds = probe::KindSet::parse("output,grad");  // what NumericsLogger logs
  options.setup = perturb ? "numerics_logger_twin --perturb" : "numerics_logger_twin";
  probe::Probe probe(options);
  probe.watch(*model);

  auto batches = open_input(python_dir / "batches.bin");
  for (int step = 0; step < kSteps; ++step) {
    probe.begin_step(step);
    auto full_batch = torch::empty({kMicrobatches * kMbSize, kIn});
    read_into(batches, full_batch, "batches.bin step " + std::to_string(step));
    auto microbatches = full_batch.split(kMbSize, 0);
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      auto out = probe.forward(mb, model, microbatches[static_cast<std::size_t>(mb)]);
      probe.backward(mb, out, output_grad_seed());
    }
    probe.end_step();
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
      p.sub_(p.grad().mul(kLr));
      p.mutable_grad().reset();
    }
  }
  std::cout << "probe log: " << probe.log_path().string() << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "numerics_logger_twin: " << e.what() << "\n";
  return 1;
}
