"""The smallest Python trainer with numprobe attached: examples/quickstart/quickstart.cpp in
Python. A two-layer MLP with dropout, gradient accumulation over microbatches, the probe
recording every step into <run_dir>/rank0/diff.log.

    python examples/python/quickstart.py [RUN_DIR] [STEPS] [adamw|sgd]

With sgd its log's records are those of the C++ quickstart, byte for byte (same seed, same
model, same ops). With adamw (the default in both) they differ from the first update by
design: Python's AdamW computes its moving average with lerp_, LibTorch's with mul_ and add_,
which round differently; diff_logs names it [optimizer].
"""
import sys

import torch
import torch.nn.functional as F

import numprobe


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.dropout = torch.nn.Dropout(0.1)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        hidden = F.gelu(self.fc1(x))
        numprobe.tap("fc1.gelu", hidden)  # any intermediate tensor, by name
        return self.fc2(self.dropout(hidden))


def main(run_dir="out/quickstart-py", steps=3, optimizer_name="adamw"):
    if optimizer_name not in ("adamw", "sgd"):
        sys.exit(f"quickstart.py: optimizer '{optimizer_name}' is not adamw or sgd")
    microbatches = 2
    torch.manual_seed(42)
    torch.set_num_threads(1)  # CPU reduction order depends on the thread count

    # PROBE_ENABLE, PROBE_KINDS, ... still apply; what is passed here wins.
    probe = numprobe.Probe(run_dir, setup=f"quickstart.py: 1 process, {microbatches} microbatches, {optimizer_name}")

    model = Mlp()
    probe.watch(model)  # mb_grad hooks on every parameter, grad records at end_step
    if optimizer_name == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    probe.watch_optimizer(optimizer)  # AdamW: exp_avg, exp_avg_sq and step of every parameter

    for step in range(steps):
        probe.begin_step(step)  # param records: the weights this step's forward reads
        optimizer.zero_grad()
        step_loss = torch.zeros([])
        for mb in range(microbatches):
            x = torch.randn(8, 16)
            target = torch.randint(0, 4, (8,))
            logits = probe.forward(mb, model, x)  # input, output, rng; output_grad in backward
            loss = F.cross_entropy(logits, target) / microbatches
            probe.backward(mb, loss)  # mb_grad records carry this microbatch id
            step_loss += loss.detach()
        probe.scalar("loss", step_loss)
        optimizer.step()
        probe.end_step()  # grad and optim records, one flush: the step is now on disk
        print(f"step {step} loss {step_loss.item():g}")
    if probe.enabled:
        print(f"probe log: {probe.log_path}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args else "out/quickstart-py", int(args[1]) if len(args) > 1 else 3,
         args[2] if len(args) > 2 else "adamw")
