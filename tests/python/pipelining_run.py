"""A tiny model trained with the probe on: --layout pp (two pipeline stages, one a rank,
torch.distributed.pipelining's Schedule1F1B over Gloo, numprobe.integrations.pipelining attached)
or --layout single (one process, probe.forward and probe.backward). Both take STEPS steps of
ACCUMULATION x CHUNKS microbatches and number chunk c of the g-th schedule.step() g * CHUNKS + c,
so the two logs pair record by record (tests/python/test_pipelining.py).

    python pipelining_run.py --layout single --out out/single --result out/single.json
    torchrun --standalone --nproc-per-node 2 pipelining_run.py --layout pp --out out/pp --result out/pp
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import numprobe
from numprobe.integrations.pipelining import PipelineAttachment

STEPS, ACCUMULATION, CHUNKS, ROWS = 2, 2, 2, 2


class Net(nn.Module):
    """Two parts; a stage keeps its own and sets the other to None, so its parameters keep the
    names they have in the whole model."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
        self.last = nn.Linear(16, 4)

    def forward(self, x):
        x = self.first(x) if self.first is not None else x
        return self.last(x) if self.last is not None else x


def batch(step, g):
    """Inputs and targets of the g-th schedule.step() of ``step``: CHUNKS microbatches of ROWS rows."""
    gen = torch.Generator().manual_seed(step * 100 + g)
    return torch.randn(CHUNKS * ROWS, 8, generator=gen), torch.randn(CHUNKS * ROWS, 4, generator=gen)


def loss_of(output, target):
    # The step's mean over every microbatch, as one process accumulates it.
    return F.mse_loss(output, target) / (ACCUMULATION * CHUNKS)


def single(out):
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = numprobe.Probe(out, setup="1 process", on_error="throw")
    probe.watch(model)
    probe.watch_optimizer(optimizer)
    for step in range(STEPS):
        probe.begin_step(step)
        for g in range(ACCUMULATION):
            inputs, targets = batch(step, g)
            for c in range(CHUNKS):
                mb, rows = g * CHUNKS + c, slice(c * ROWS, (c + 1) * ROWS)
                loss = loss_of(probe.forward(mb, model, inputs[rows]), targets[rows])
                probe.record("output", "loss", loss.detach(), microbatch=mb)
                probe.backward(mb, loss)
        optimizer.step()
        probe.end_step()
        optimizer.zero_grad()
    probe.close()
    return {}


def pipeline(out):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = Net()
    if rank == 0:
        model.last = None
    else:
        model.first = None
    stage = PipelineStage(model, rank, 2, torch.device("cpu"))
    loss_calls = []  # the microbatch each call of the loss function names (None: shape inference)

    def loss_fn(output, target):
        loss_calls.append(attachment.current_microbatch)
        return loss_of(output, target)

    schedule = Schedule1F1B(stage, n_microbatches=CHUNKS, loss_fn=loss_fn, scale_grads=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = numprobe.Probe(out, setup=f"pp 2 (Schedule1F1B, gloo), stage {rank}", on_error="throw")
    # g: the step loop's below, read when a chunk runs.
    attachment = PipelineAttachment(probe, schedule, lambda chunk: g * CHUNKS + chunk)
    probe.watch_optimizer(optimizer)
    for step in range(STEPS):
        probe.begin_step(step)
        for g in range(ACCUMULATION):
            inputs, targets = batch(step, g)
            if stage.is_first:
                schedule.step(inputs)
            else:
                schedule.step(target=targets, losses=[])
        optimizer.step()
        probe.end_step()
        optimizer.zero_grad()
    attachment.close()
    probe.close()
    hooks = len(model._forward_pre_hooks) + len(model._forward_hooks)
    wrapped = [name for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk")
               if name in vars(stage)] + [name for name in ("_maybe_compute_loss",) if name in vars(schedule)]
    return {"loss_calls": loss_calls, "hooks_left": hooks, "wrapped_left": wrapped}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layout", choices=["single", "pp"], required=True)
    p.add_argument("--out", required=True, help="the probe's run directory")
    p.add_argument("--result", required=True, help="where what the run saw goes (pp: a folder, rank<R>.json)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.layout == "single":
        with open(args.result, "w") as f:
            json.dump(single(args.out), f)
        return
    result = pipeline(args.out)
    os.makedirs(args.result, exist_ok=True)
    with open(os.path.join(args.result, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(result, f)
    # Gloo's threads may abort a finalizing interpreter (docs/python.md, leave_process_group);
    # every record is on disk by now.
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
