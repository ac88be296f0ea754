"""One side of the NumericsLogger interop test: trains a small MLP in Python and logs it the way
autoparallel's NumericsLogger does, then saves the weights and data the C++ side (the probe run,
tests/torch/numerics_logger_twin.cpp) trains the same model from.

usage: numerics_logger_run.py OUT_DIR
Writes OUT_DIR/diff.log (NumericsLogger lines), OUT_DIR/weights.bin (every parameter as float32,
in named_parameters() order, row-major) and OUT_DIR/batches.bin (every step's full batch,
float32, step after step). The sizes below are the C++ side's too.

The loop is autoparallel's examples/example_ds3_local_map.py: per microbatch a forward, a
backward, log_diff(out, prefix=f"mb{i} fwd out"); after the microbatches log_diff(v.grad,
prefix=f"grad {k}") per parameter. Then a plain SGD step. The backward seeds the output's
gradient with distinct values (output_grad_seed) where the example has torch.ones_like(out):
torch.hash_tensor XORs the elements, and with ones the gradient's columns repeat and cancel
(fc2's gradient hashes to 0 whatever its values).
"""
import os
import sys

import torch

IN, HIDDEN, OUT = 8, 16, 4
STEPS, MICROBATCHES, MB_SIZE = 2, 4, 3
LR = 0.1


# autoparallel/shardings/placement_options.py (meta-pytorch/autoparallel): hash_tensor() and
# NumericsLogger.log_diff() as written there (the DTensor case unwraps to the local shard).
def hash_tensor(t: torch.Tensor) -> str:
    if t.is_complex():
        return f"real={hash_tensor(t.real)}, imag={hash_tensor(t.imag)})"
    return f"{torch.hash_tensor(t)}"


def log_diff(path, t, prefix="?"):
    with open(path, "a") as f:
        f.write(f"[{prefix}] hash={hash_tensor(t)}, norm={torch.norm(t)}\n")


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(IN, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, OUT)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def output_grad_seed():
    return torch.arange(MB_SIZE * OUT, dtype=torch.float32).reshape(MB_SIZE, OUT).div(10)


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(1234)
    torch.set_num_threads(1)  # CPU reduction order depends on the thread count
    model = Mlp()
    with open(os.path.join(out_dir, "weights.bin"), "wb") as f:
        for _, p in model.named_parameters():
            f.write(p.detach().contiguous().numpy().tobytes())
    batches = [torch.randn(MICROBATCHES * MB_SIZE, IN) for _ in range(STEPS)]
    with open(os.path.join(out_dir, "batches.bin"), "wb") as f:
        for b in batches:
            f.write(b.contiguous().numpy().tobytes())
    log = os.path.join(out_dir, "diff.log")
    if os.path.exists(log):
        os.remove(log)
    for full_batch in batches:
        for i, x in enumerate(torch.split(full_batch, MB_SIZE, dim=0)):
            out = model(x)
            out.backward(output_grad_seed())
            log_diff(log, out, prefix=f"mb{i} fwd out")
        for k, v in model.named_parameters():
            log_diff(log, v.grad, prefix=f"grad {k}")
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(p.grad.mul(LR))
                p.grad = None
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
