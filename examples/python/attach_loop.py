#!/usr/bin/env python3
"""A training loop as users write it, with numprobe attached in one line and nothing else changed.

    PROBE_DIR=out/single python examples/python/attach_loop.py --ga 8 --batch 1
    PROBE_DIR=out/ga     python examples/python/attach_loop.py --ga 4 --batch 2
    PROBE_DIR=out/ddp    torchrun --standalone --nproc-per-node 2 examples/python/attach_loop.py --ga 4 --batch 1
    PROBE_DIR=out/fsdp   torchrun --standalone --nproc-per-node 2 examples/python/attach_loop.py --fsdp --ga 4 --batch 1
    diff_logs out/single out/ddp

The line is ``numprobe.attach(model, optimizer)``: the loop below calls ``model(...)``,
``loss.backward()``, ``optimizer.step()``, ``scheduler.step()`` and ``optimizer.zero_grad()`` as
it would without it. Each step trains on ``--ga x --batch x world_size`` sequences of a fixed
synthetic set, dealt to the ranks by a ``DistributedSampler``; sequences have random lengths
(the rest is padding, label -100), and each microbatch's loss is its tokens' summed loss over
the tokens of the whole accumulation window on every rank, times the world size (DDP averages):
the per-token normalization of the Hugging Face Trainer.

Planted faults (``--fault``), each a bug real trainers shipped:
  ga-mean         each microbatch's token mean divided by the accumulation steps (transformers
                  before 4.46): microbatches with fewer tokens weigh more
  untied-head     the output head a copy of the embedding, not tied to it
  decay-norms     weight decay applied to the norm weights (a name filter that missed them)
  scheduler-early the learning-rate scheduler stepped once before the first update
  rank-unscaled   rank 1's loss not multiplied by the world size
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FAULTS = ["none", "ga-mean", "untied-head", "decay-norms", "scheduler-early", "rank-unscaled"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ga", type=int, default=2, help="microbatches per step and rank")
    p.add_argument("--batch", type=int, default=2, help="sequences per microbatch")
    p.add_argument("--seq", type=int, default=12)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    p.add_argument("--compile", choices=["none", "aot_eager", "inductor"], default="none")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--probe", type=int, default=1, help="0: train without numprobe")
    p.add_argument("--losses", default="", help="write each step's loss (repr) to this file")
    return p.parse_args(argv)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class TinyLM(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.dim)
        self.layers = nn.ModuleList(Block(args.dim) for _ in range(args.layers))
        self.norm = nn.LayerNorm(args.dim)
        self.head = nn.Linear(args.dim, args.vocab, bias=False)
        self.head.weight = self.embed.weight  # tied, as most language models are

    def forward(self, input_ids, labels=None):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x))
        return {"logits": logits}


def dataset(args, size):
    g = torch.Generator().manual_seed(1000 + args.seed)
    ids = torch.randint(0, args.vocab, (size, args.seq), generator=g)
    lengths = torch.randint(args.seq // 3, args.seq + 1, (size,), generator=g)
    labels = ids.clone()
    labels[torch.arange(args.seq)[None, :] >= lengths[:, None]] = -100
    return torch.utils.data.TensorDataset(ids, labels)


def token_loss_sum(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")


def main(argv=None):
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(args.seed)
    model = TinyLM(args)
    if args.fault == "untied-head":
        model.head.weight = nn.Parameter(model.embed.weight.detach().clone())
    if args.compile != "none":
        model = torch.compile(model, backend=args.compile)
    if world > 1 and args.fsdp:
        from torch.distributed.fsdp import fully_shard
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
    elif world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    # No weight decay on norms and biases, by name (a filter a wrapper's prefix can break).
    decayed = [p for n, p in model.named_parameters()
               if args.fault == "decay-norms" or not (n.endswith("bias") or "norm" in n.split("."))]
    rest = [p for p in model.parameters() if all(p is not q for q in decayed)]
    groups = [{"params": decayed, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    if args.optimizer == "adamw":
        optimizer = torch.optim.AdamW(groups, lr=args.lr)
    else:
        optimizer = torch.optim.SGD(groups, lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))

    if args.probe:
        import numprobe
        numprobe.attach(model, optimizer)  # the one line

    per_step = args.ga * args.batch * world
    data = dataset(args, per_step * args.steps)
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=world, rank=rank,
                                                              shuffle=False)
    loader = iter(torch.utils.data.DataLoader(data, batch_size=args.batch, sampler=sampler))
    if args.fault == "scheduler-early":
        scheduler.step()
    losses = []
    for step in range(args.steps):
        batches = [next(loader) for _ in range(args.ga)]
        tokens = torch.tensor(float(sum((labels[:, 1:] != -100).sum() for _, labels in batches)))
        if world > 1:
            dist.all_reduce(tokens)
        optimizer.zero_grad()
        step_loss = torch.zeros(())
        for ids, labels in batches:
            out = model(ids, labels=labels)
            logits = out["logits"][:, :-1]
            target = labels[:, 1:]
            if args.fault == "ga-mean":
                loss = token_loss_sum(logits, target) / (target != -100).sum() / args.ga
            else:
                loss = token_loss_sum(logits, target) / tokens
            if not (args.fault == "rank-unscaled" and rank == 1):
                loss = loss * world  # DDP (and FSDP2's reduce-scatter) average over the ranks
            loss.backward()
            step_loss += loss.detach()
        optimizer.step()
        scheduler.step()
        if world > 1:
            dist.all_reduce(step_loss)
        losses.append(step_loss.item() / world)
    if args.losses and rank == 0:
        with open(args.losses, "w") as f:
            f.write("\n".join(repr(x) for x in losses) + "\n")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
