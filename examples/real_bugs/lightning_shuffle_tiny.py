"""A tiny language model trained for several epochs over a shuffled dataset by the Trainer of
whichever ``pytorch_lightning`` release comes first on ``PYTHONPATH``, as that release ships it,
with numprobe attached in one line: ``callbacks=[NumprobeCallback()]``
(``numprobe.integrations.pytorch_lightning``). One process, or ``torchrun`` (DDP over Gloo, the
CPU backend; Lightning reads the ranks from torchrun's environment).

No global seed: ``seed_everything`` is not called, so Lightning knows of none (``PL_GLOBAL_SEED``
unset). Processes started without a seed each draw their own random numbers, different on every
run; so that the runs repeat, each process seeds torch with ``--seed`` plus its rank instead
(``torch.manual_seed``), before the module is built: rank 0 draws what a single process draws,
and DDP starts every rank from rank 0's weights. The ``DataLoader`` shuffles (``shuffle=True``, a
``RandomSampler`` with no generator of its own), and Lightning replaces its sampler for DDP; one
step per epoch over a dataset of ``--batch`` x ranks full-length token sequences, so that every
step holds every sample, whatever the layout. Each step's loss (rank 0's) is written to
``--losses``: the curve a person would compare.

    PROBE_DIR=out/a python examples/real_bugs/<bug>/train.py --batch 4 --losses out/a/losses.json
    PROBE_DIR=out/b torchrun --standalone --nproc-per-node 2 examples/real_bugs/<bug>/train.py --batch 2
"""
import argparse
import json
import os

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
    import pytorch_lightning as pl
    from numprobe.integrations.pytorch_lightning import NumprobeCallback
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))

    class LitLM(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Net()
            self.losses = []

        def training_step(self, batch, batch_idx):
            loss = next_token_loss(self.net, batch[0])
            self.losses.append(float(loss))
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=args.lr)

    torch.manual_seed(args.seed + rank)  # each process its own random numbers; no global seed
    module = LitLM()
    ids = sequences(args.batch * world, args.seq, args.seed)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=args.batch, shuffle=True)
    trainer = pl.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=world,
                         strategy="ddp" if world > 1 else "auto", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=[NumprobeCallback()])  # the one line
    trainer.fit(module, loader)
    if args.losses and rank == 0:
        with open(args.losses, "w") as f:
            json.dump(module.losses, f)
