// The smallest trainer with numprobe attached: a two-layer MLP with dropout, gradient
// accumulation over microbatches, and the probe recording every step into
// <run_dir>/rank0/diff.log.   usage: numprobe_quickstart [RUN_DIR] [STEPS] [adamw|sgd]
// examples/python/quickstart.py is the same trainer in Python: with sgd its log's records are
// the same, byte for byte (with adamw they differ by design: LibTorch's AdamW and Python's
// round differently, docs/python.md).
#include <probe/probe.h>
#include <torch/torch.h>

#include <fstream>
#include <iostream>

struct MlpImpl : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(16, 32))};
  torch::nn::Dropout dropout{register_module("dropout", torch::nn::Dropout(0.1))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(32, 4))};

  torch::Tensor forward(torch::Tensor x) {
    auto hidden = torch::gelu(fc1(x));
    probe::tap("fc1.gelu", hidden);  // any intermediate tensor, by name
    return fc2(dropout(hidden));
  }
};
TORCH_MODULE(Mlp);

int main(int argc, char** argv) {
  const std::string run_dir = argc > 1 ? argv[1] : "out/quickstart";
  const int steps = argc > 2 ? std::stoi(argv[2]) : 3;
  const std::string optimizer_name = argc > 3 ? argv[3] : "adamw";
  if (optimizer_name != "adamw" && optimizer_name != "sgd") {
    std::cerr << "numprobe_quickstart: optimizer '" << optimizer_name << "' is not adamw or sgd\n";
    return 2;
  }
  const int microbatches = 2;
  torch::manual_seed(42);
  at::set_num_threads(1);  // CPU reduction order depends on the thread count

  auto options = probe::ProbeOptions::from_env();  // PROBE_ENABLE, PROBE_KINDS, ... still apply
  options.run_dir = run_dir;
  options.setup =
      "quickstart: 1 process, " + std::to_string(microbatches) + " microbatches, " + optimizer_name;
  probe::Probe probe(options);

  Mlp model;
  probe.watch(*model);  // mb_grad hooks on every parameter, grad records at end_step
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (optimizer_name == "sgd")
    optimizer =
        std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(1e-2));
  else
    optimizer = std::make_unique<torch::optim::AdamW>(model->parameters(),
                                                      torch::optim::AdamWOptions(1e-2));
  probe.watch_optimizer(*optimizer);  // AdamW: exp_avg, exp_avg_sq and step of every parameter

  for (int step = 0; step < steps; ++step) {
    probe.begin_step(step);  // param records: the weights this step's forward reads
    optimizer->zero_grad();
    torch::Tensor step_loss = torch::zeros({});
    for (int mb = 0; mb < microbatches; ++mb) {
      auto x = torch::randn({8, 16});
      auto target = torch::randint(0, 4, {8});
      auto logits = probe.forward(mb, model, x);  // input, output, rng; output_grad in backward
      auto loss = torch::nn::functional::cross_entropy(logits, target) / microbatches;
      probe.backward(mb, loss);  // mb_grad records carry this microbatch id
      step_loss += loss.detach();
    }
    probe.scalar("loss", step_loss);
    optimizer->step();
    probe.end_step();  // grad and optim records, one flush: the step is now on disk
    std::cout << "step " << step << " loss " << step_loss.item<double>() << "\n";
  }
  if (probe.enabled()) std::cout << "probe log: " << probe.log_path().string() << "\n";
  return 0;
}
