#!/usr/bin/env python3
"""A Lightning ``Trainer`` as it ships, numprobe attached by one callback:

    PROBE_DIR=out/single python examples/python/lightning_train.py --ga 2 --batch 2
    PROBE_DIR=out/ddp    torchrun --standalone --nproc-per-node 2 examples/python/lightning_train.py --ga 1 --batch 2
    diff_logs out/single out/ddp

The line is ``callbacks=[NumprobeCallback()]``. A tiny language model on synthetic token sequences
(no download); Lightning divides each loss by ``accumulate_grad_batches`` and DDP (over Gloo)
averages. Two choices keep the layouts the same training, as a comparison needs:
- the samples are dealt to the ranks by a ``DistributedSampler`` without shuffling
  (``use_distributed_sampler=False``): Lightning's own shuffles every training set under DDP, so
  each step of a DDP run would hold other samples than one process's (diff_logs: ``[data]``);
- every sequence is full length (``--padded`` gives them random lengths): the loss is each
  microbatch's token mean, which weighs a step's tokens otherwise when the microbatches are grouped
  otherwise and hold different token counts (diff_logs: the step's gradients differ).

Planted faults (``--fault``):
  decay-norms      weight decay applied to the norm weights too (a name filter that missed them)
  scheduler-early  the learning-rate scheduler stepped once before the first update
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

FAULTS = ["none", "decay-norms", "scheduler-early"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ga", type=int, default=2, help="accumulate_grad_batches")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--padded", action="store_true", help="sequences of random lengths (the rest ignored)")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--probe", type=int, default=1, help="0: train without numprobe")
    p.add_argument("--losses", default="", help="write the loss of each step (repr) to this file")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import lightning as L
    from lightning.pytorch.strategies import DDPStrategy
    world = int(os.environ.get("WORLD_SIZE", "1"))

    class Net(nn.Module):
        def __init__(self, vocab=64, dim=32):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.norm = nn.LayerNorm(dim)
            self.up = nn.Linear(dim, 2 * dim)
            self.down = nn.Linear(2 * dim, dim)
            self.head = nn.Linear(dim, vocab)

        def forward(self, ids):
            x = self.embed(ids)
            x = x + self.down(F.gelu(self.up(self.norm(x))))
            return self.head(x)

    class LitLM(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Net()
            self.losses = []

        def training_step(self, batch, batch_idx):
            ids, labels = batch
            logits = self.net(ids)[:, :-1]
            loss = F.cross_entropy(logits.flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
            self.losses.append(loss.detach())
            return loss

        def configure_optimizers(self):
            decayed = [p for n, p in self.named_parameters()
                       if args.fault == "decay-norms" or not (n.endswith("bias") or "norm" in n.split("."))]
            rest = [p for p in self.parameters() if all(p is not q for q in decayed)]
            optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                                           {"params": rest, "weight_decay": 0.0}], lr=args.lr)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
            if args.fault == "scheduler-early":
                scheduler.step()
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    torch.manual_seed(args.seed)
    module = LitLM()
    g = torch.Generator().manual_seed(1000 + args.seed)
    size = args.steps * args.ga * args.batch * world
    ids = torch.randint(0, 64, (size, args.seq), generator=g)
    lengths = torch.randint(args.seq // 3, args.seq + 1, (size,), generator=g)
    labels = ids.masked_fill(torch.arange(args.seq)[None, :] >= lengths[:, None], -100) if args.padded else ids
    data = torch.utils.data.TensorDataset(ids, labels)
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=world, rank=int(os.environ.get("RANK", "0")), shuffle=False)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, sampler=sampler)
    callbacks = []
    if args.probe:
        from numprobe.integrations.lightning import NumprobeCallback
        callbacks.append(NumprobeCallback())  # the one line
    trainer = L.Trainer(accelerator="cpu", devices=world, num_nodes=1, max_steps=args.steps,
                        accumulate_grad_batches=args.ga, callbacks=callbacks, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        use_distributed_sampler=False,
                        strategy=DDPStrategy(process_group_backend="gloo") if world > 1 else "auto")
    trainer.fit(module, loader)
    if args.losses and trainer.global_rank == 0:
        with open(args.losses, "w") as f:
            f.write("\n".join(repr(float(x)) for x in module.losses) + "\n")


if __name__ == "__main__":
    main()
