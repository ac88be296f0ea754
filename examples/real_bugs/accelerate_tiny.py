"""A tiny language model trained by a loop written as Accelerate's documentation writes one, with
the ``accelerate`` release that comes first on ``PYTHONPATH``, numprobe attached in one line to the
prepared model and optimizer: ``numprobe.attach(model, optimizer)``.

The loop accumulates with ``accelerator.accumulate(model)`` and steps the optimizer, the prepared
learning-rate scheduler and ``zero_grad`` every batch, as Accelerate's examples do (the prepared
objects act only where gradients sync). Data: synthetic full-length token sequences in order.
Each step's mean microbatch loss is written to ``--losses``: the curve a person would compare.

    PROBE_DIR=out/a python examples/real_bugs/<bug>/train.py --ga 2 --batch 2 --losses out/a/losses.json
"""
import argparse
import json

import torch

from tiny_lm import Net, next_token_loss, sequences


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3, help="optimizer steps")
    p.add_argument("--ga", type=int, default=1, help="gradient_accumulation_steps")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--sync-each-batch", action="store_true",
                   help="GradientAccumulationPlugin(sync_each_batch=True): gradients synchronized at every\n"
                        "microbatch (memory for communication), the optimizer still stepping every --ga")
    p.add_argument("--losses", default="", help="write each step's mean microbatch loss here")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import numprobe
    from accelerate import Accelerator
    if args.sync_each_batch:
        from accelerate.utils import GradientAccumulationPlugin
        plugin = GradientAccumulationPlugin(num_steps=args.ga, sync_each_batch=True)
        accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    else:
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.ga)
    torch.manual_seed(args.seed)
    net = Net()
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr)
    # A linear decay over the run's optimizer steps.
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / (args.steps + 1)))
    ids = sequences(args.steps * args.ga * args.batch, args.seq, args.seed)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=args.batch)
    net, optimizer, loader, scheduler = accelerator.prepare(net, optimizer, loader, scheduler)
    numprobe.attach(net, optimizer)  # the one line
    losses = []
    for (batch,) in loader:
        with accelerator.accumulate(net):
            loss = next_token_loss(net, batch)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        losses.append(float(loss))
    if args.losses:
        per_step = [sum(losses[i:i + args.ga]) / args.ga for i in range(0, len(losses), args.ga)]
        with open(args.losses, "w") as f:
            json.dump(per_step, f)
