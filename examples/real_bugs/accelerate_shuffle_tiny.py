"""A tiny language model trained for several epochs over a shuffled dataset by a loop written as
Accelerate's documentation writes one, with the ``accelerate`` release that comes first on
``PYTHONPATH``, numprobe attached in one line to the prepared model and optimizer:
``numprobe.attach(model, optimizer)``. One process, or ``torchrun`` (Gloo, the CPU backend).

Randomness is seeded as Accelerate's documentation offers it: ``set_seed(seed,
device_specific=True)``, which adds each process's index to the seed (each rank its own random
numbers), before the model is built; the prepared model starts from rank 0's weights, which DDP
broadcasts. The ``DataLoader`` shuffles (``shuffle=True``, a ``RandomSampler`` with no generator
of its own); one step per epoch over a dataset of ``--batch`` x ranks full-length token
sequences, so that every step holds every sample, whatever the layout. Each step's loss is
written to ``--losses``: the curve a person would compare.

    PROBE_DIR=out/a python examples/real_bugs/<bug>/train.py --batch 4 --losses out/a/losses.json
    PROBE_DIR=out/b torchrun --standalone --nproc-per-node 2 examples/real_bugs/<bug>/train.py --batch 2
"""
import argparse
import json

import torch

from tiny_lm import Net, next_token_loss, sequences


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3, help="epochs (one optimizer step each)")
    p.add_argument("--batch", type=int, default=2, help="batch per process")
    p.add_argument("--seq", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--losses", default="", help="write each step's loss (rank 0's) here")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import numprobe
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    accelerator = Accelerator(cpu=True)
    set_seed(args.seed, device_specific=True)
    net = Net()
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr)
    ids = sequences(args.batch * accelerator.num_processes, args.seq, args.seed)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=args.batch, shuffle=True)
    net, optimizer, loader = accelerator.prepare(net, optimizer, loader)
    numprobe.attach(net, optimizer)  # the one line
    losses = []
    for _ in range(args.epochs):
        for (batch,) in loader:
            loss = next_token_loss(net, batch)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(float(loss))
    if args.losses and accelerator.is_main_process:
        with open(args.losses, "w") as f:
            json.dump(losses, f)
