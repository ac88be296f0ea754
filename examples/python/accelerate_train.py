#!/usr/bin/env python3
"""An Accelerate loop as its docs write it, numprobe attached in one line to what
``accelerator.prepare`` returned:

    PROBE_DIR=out/single python examples/python/accelerate_train.py --ga 2 --batch 2
    PROBE_DIR=out/ddp    torchrun --standalone --nproc-per-node 2 examples/python/accelerate_train.py --ga 1 --batch 2
    diff_logs out/single out/ddp

The line is ``numprobe.attach(model, optimizer)``. Under ``accelerator.accumulate(model)`` the
prepared optimizer's ``step()`` is called every microbatch and steps the torch optimizer only at
the end of the window: numprobe's step is the torch optimizer's. ``accelerator.backward`` divides
each loss by the accumulation steps; DDP averages.

Planted fault (``--fault``):
  decay-norms      weight decay applied to the norm weights too (a name filter that missed them)
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

FAULTS = ["none", "decay-norms"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ga", type=int, default=2, help="gradient_accumulation_steps")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--padded", action="store_true",
                   help="sequences of random lengths: each microbatch's token mean then weighs a step's "
                        "tokens otherwise when the step is split into other microbatches")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--probe", type=int, default=1, help="0: train without numprobe")
    p.add_argument("--losses", default="", help="write each microbatch's loss (repr) to this file")
    return p.parse_args(argv)


class Net(nn.Module):
    def __init__(self, vocab=64, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        x = x + self.down(F.gelu(self.up(self.norm(x))))
        return self.head(x)


def main(argv=None):
    args = parse_args(argv)
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    world = int(os.environ.get("WORLD_SIZE", "1"))
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.ga)
    set_seed(args.seed)
    model = Net()
    decayed = [p for n, p in model.named_parameters()
               if args.fault == "decay-norms" or not (n.endswith("bias") or "norm" in n.split("."))]
    rest = [p for p in model.parameters() if all(p is not q for q in decayed)]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                                   {"params": rest, "weight_decay": 0.0}], lr=args.lr)
    g = torch.Generator().manual_seed(1000 + args.seed)
    size = args.steps * args.ga * args.batch * world
    ids = torch.randint(0, 64, (size, args.seq), generator=g)
    lengths = torch.randint(args.seq // 3, args.seq + 1, (size,), generator=g)
    labels = ids.masked_fill(torch.arange(args.seq)[None, :] >= lengths[:, None], -100) if args.padded else ids
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids, labels), batch_size=args.batch)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if args.probe:
        import numprobe
        numprobe.attach(model, optimizer)  # the one line
    losses = []
    for ids, labels in loader:
        with accelerator.accumulate(model):
            logits = model(ids)[:, :-1]
            loss = F.cross_entropy(logits.flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.detach())
    if args.losses and accelerator.is_main_process:
        with open(args.losses, "w") as f:
            f.write("\n".join(repr(float(x)) for x in losses) + "\n")
    accelerator.wait_for_everyone()
    if world > 1:
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
