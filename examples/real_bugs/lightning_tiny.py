"""A tiny language model trained by the Trainer of whichever ``pytorch_lightning`` release comes
first on ``PYTHONPATH``, as that release ships it, with numprobe attached in one line:
``callbacks=[NumprobeCallback()]`` (``numprobe.integrations.pytorch_lightning``).

The LightningModule is written as Lightning's documentation allows: ``training_step(self, batch)``,
without ``batch_idx`` (``--batch-idx``: with it); ``--val-every N`` validates every N training
batches. Data: synthetic full-length token sequences dealt in order (no shuffling),
so that one microbatch of 4 and two of 2 hold the same samples per step; nothing is downloaded.
The mean loss of each step's microbatches is written to ``--losses``: the curve a person would
compare.

    PROBE_DIR=out/a python examples/real_bugs/<bug>/train.py --ga 2 --batch 2 --losses out/a/losses.json
"""
import argparse
import json

import torch

from tiny_lm import Net, next_token_loss, sequences


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3, help="optimizer steps")
    p.add_argument("--ga", type=int, default=1, help="accumulate_grad_batches")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-idx", action="store_true",
                   help="training_step(self, batch, batch_idx) instead of training_step(self, batch)")
    p.add_argument("--val-every", type=int, default=0,
                   help="validate every this many training batches (val_check_interval; 0: never)")
    p.add_argument("--losses", default="", help="write each step's mean microbatch loss here")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import pytorch_lightning as pl
    from numprobe.integrations.pytorch_lightning import NumprobeCallback

    class LitLM(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Net()
            self.losses = []

        def _train_loss(self, batch):
            loss = next_token_loss(self.net, batch[0])
            self.losses.append(float(loss))
            return loss

        if args.batch_idx:
            def training_step(self, batch, batch_idx):
                return self._train_loss(batch)
        else:
            def training_step(self, batch):  # no batch_idx: the documentation allows it
                return self._train_loss(batch)

        def validation_step(self, batch, batch_idx):
            return next_token_loss(self.net, batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=args.lr)

    torch.manual_seed(args.seed)
    module = LitLM()
    ids = sequences(args.steps * args.ga * args.batch, args.seq, args.seed)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=args.batch)
    validation = {}
    if args.val_every:
        validation = dict(val_check_interval=args.val_every, limit_val_batches=1, num_sanity_val_steps=0)
    trainer = pl.Trainer(max_steps=args.steps, accumulate_grad_batches=args.ga, accelerator="cpu",
                         devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[NumprobeCallback()], **validation)  # the one line
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids[:2]), batch_size=2)
    trainer.fit(module, loader, val if args.val_every else None)
    if args.losses:
        per_step = [sum(module.losses[i:i + args.ga]) / args.ga for i in range(0, len(module.losses), args.ga)]
        with open(args.losses, "w") as f:
            json.dump(per_step, f)
