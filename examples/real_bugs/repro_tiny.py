"""What the corpus' faithful minimal reproductions share: a tiny language model (hidden 32, two
blocks), synthetic token microbatches, the probe's records of a layout whose parameters are plain
tensors that hold pieces of the global ones (Megatron-LM keeps its tensor- and sequence-parallel
layout in parameter attributes, not in DTensor placements), and a torchtitan-style training step
over a pipeline schedule of torch.distributed.pipelining, with the probe attached to it
(numprobe.integrations.pipelining).

Each reproduction's train.py holds the lines of the original that carried the bug next to the
fixed ones; this module holds only what every layout needs to train the same model on the same
data and to be compared with diff_logs. Nothing is downloaded."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64
DIM = 32
LAYERS = 2


class Block(nn.Module):
    """A pre-norm MLP block: x + fc2(gelu(fc1(norm(x))))."""

    def __init__(self, dim=DIM):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim, bias=False)
        self.fc2 = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class TinyLM(nn.Module):
    """Embedding, LAYERS blocks, a final LayerNorm and an output head. A pipeline stage is the
    whole model with the parts of other stages set to None (as torchtitan splits its models), so
    its parameters keep the names they have in the whole model."""

    def __init__(self, dim=DIM, layers=LAYERS, vocab=VOCAB, norm=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleDict({str(i): Block(dim) for i in range(layers)})
        self.final_layernorm = norm(dim) if norm else nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, x):
        h = self.embed(x) if self.embed is not None else x
        for layer in self.layers.values():
            h = layer(h)
        if self.final_layernorm is not None:
            h = self.final_layernorm(h)
        return self.output(h) if self.output is not None else h


def build(seed, **kwargs):
    """The whole model, the same in every layout and rank (one seed)."""
    torch.manual_seed(seed)
    return TinyLM(**kwargs)


def stage_of(model, stage, stages=2):
    """Pipeline stage `stage` of `stages` (the blocks split evenly), in place."""
    per = len(model.layers) // stages
    keep = {str(i) for i in range(stage * per, (stage + 1) * per)}
    for name in list(model.layers):
        if name not in keep:
            del model.layers[name]
    if stage != 0:
        model.embed = None
    if stage != stages - 1:
        model.final_layernorm = None
        model.output = None
    return model


def tokens(seed, step, mb, batch=2, seq=16):
    """Tokens [batch, seq + 1] of global microbatch `mb` of `step`: the same in every layout."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 1_009 + mb)
    return torch.randint(0, VOCAB, (batch, seq + 1), generator=g)


def cross_entropy(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def write_losses(path, losses):
    if path:
        with open(path, "w") as f:
            json.dump([float(x) for x in losses], f)


def leave():
    """Ends a distributed run without interpreter finalization (examples/python/transformer.py,
    leave_process_group: Gloo's threads may abort a finalizing interpreter); every step of the
    log is on disk by now."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ------------------------------------------------------------- pieces of plain-tensor parameters

class Pieces:
    """The probe's records of parameters that are plain tensors holding pieces of the global
    ones (Megatron-LM's layout): each is recorded as a DTensor view of what it is, made from its
    local tensor on `mesh` (`placement(name)` for its value and its step gradient,
    `mb_placement(name)` for a microbatch's gradient; None: the whole tensor), so diff_logs
    composes the ranks' pieces before it compares them with one process's tensors.

    begin_step() records the values, a hook on each parameter each microbatch's gradient (the
    microbatch named by `microbatch`), end_step() the gradients the optimizer reads."""

    def __init__(self, probe, model, mesh=None, placement=lambda name: None, mb_placement=None):
        self.probe, self.mesh = probe, mesh
        self.placement = placement
        self.mb_placement = mb_placement or placement
        self.params = [(n, p) for n, p in model.named_parameters()]
        self.microbatch = None
        for name, p in self.params:
            p.register_hook(lambda g, name=name: self._mb_grad(name, g))

    def _view(self, t, placement):
        if t is None or placement is None or self.mesh is None:
            return t
        from torch.distributed.tensor import DTensor
        return DTensor.from_local(t.detach(), self.mesh, [placement], run_check=False)

    def _mb_grad(self, name, g):
        if self.microbatch is not None:
            self.probe.record("mb_grad", name, self._view(g, self.mb_placement(name)), microbatch=self.microbatch)
        return None

    def begin_step(self, step):
        self.probe.begin_step(step)
        for name, p in self.params:
            self.probe.record("param", name, self._view(p, self.placement(name)))

    def end_step(self):
        for name, p in self.params:
            self.probe.record("grad", name, self._view(p.grad, self.placement(name)))
        self.probe.end_step()


# ------------------------------------------------- a torchtitan-style step: GA x pipeline microbatches

def torchtitan_step_loop(args, *, schedule_loss_fn=None, scale_grads=True, clip=None, single_loss_scale=None,
                         setup=""):
    """Trains as torchtitan's Trainer.train_step does (zero_grad, gradient-accumulation
    microbatches through forward_backward_step, clip_grad_norm_, optimizer step), SGD, in one of
    two layouts: `--layout single` (one process, every microbatch; each microbatch's loss is the
    mean cross entropy times `single_loss_scale`) or `--layout pp` (two pipeline stages, one per
    rank, torch.distributed.pipelining's Schedule1F1B over Gloo, args.microbatches chunks per
    schedule.step(), args.ga schedule.step() calls per optimizer step; the schedule's loss_fn is
    `schedule_loss_fn(pred, labels)` and its scale_grads `scale_grads`). `clip(params, pp_group)`
    clips the step's gradients (None: no clipping). Microbatch i of a step holds the same
    sequences in both layouts. Writes each step's mean cross entropy to args.losses."""
    import numprobe
    from numprobe.integrations.pipelining import PipelineAttachment
    torch.set_num_threads(1)
    n, ga = args.microbatches, args.ga
    ce_values = []  # each microbatch's mean cross entropy, as the curve a person would compare

    def batch_of(step, g):
        return torch.cat([tokens(args.seed, step, g * n + c) for c in range(n)])

    if args.layout == "single":
        model = build(args.seed)
        probe = numprobe.Probe(setup=f"1 process, {setup}")
        probe.watch(model)
        params, group, last = list(model.parameters()), None, True
    else:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        model = stage_of(build(args.seed), rank, world)
        stage = PipelineStage(model, rank, world, torch.device("cpu"))

        def loss_fn(pred, labels):
            if pipeline.current_microbatch is not None:  # not the schedule's shape inference
                ce_values.append(cross_entropy(pred, labels).item())
            return schedule_loss_fn(pred, labels)

        schedule = Schedule1F1B(stage, n_microbatches=n, loss_fn=loss_fn, scale_grads=scale_grads)
        probe = numprobe.Probe(setup=f"pp {world} (Schedule1F1B, gloo), stage {rank}, {setup}")
        # Chunk c of the g-th schedule.step() of a step (g: the step loop's below, read when the
        # chunk runs) is global microbatch g * n + c, as in the single layout.
        pipeline = PipelineAttachment(probe, schedule, lambda chunk: g * n + chunk)
        params, group, last = list(model.parameters()), dist.group.WORLD, stage.is_last
    optimizer = torch.optim.SGD(params, lr=args.lr)
    probe.watch_optimizer(optimizer)
    steps_ce = []
    for step in range(args.steps):
        optimizer.zero_grad()
        if args.layout == "single":
            probe.begin_step(step)
            for g in range(ga):
                batch = batch_of(step, g)
                for c in range(n):
                    mb, rows = g * n + c, batch[2 * c:2 * c + 2]
                    logits = probe.forward(mb, model, rows[:, :-1])
                    ce = cross_entropy(logits, rows[:, 1:])
                    ce_values.append(ce.item())
                    loss = ce * single_loss_scale
                    probe.record("output", "loss", loss.detach(), microbatch=mb)
                    probe.backward(mb, loss)
        else:
            probe.begin_step(step)
            for g in range(ga):
                batch = batch_of(step, g)
                inputs, labels = batch[:, :-1], batch[:, 1:]
                targets, losses = (labels, []) if stage.is_last else (None, None)
                if stage.is_first:
                    schedule.step(inputs, target=targets, losses=losses)
                else:
                    schedule.step(target=targets, losses=losses)
        if clip is not None:
            clip(params, group)
        optimizer.step()
        probe.end_step()
        if last:
            steps_ce.append(sum(ce_values) / len(ce_values))
            ce_values.clear()
            print(f"step {step} loss {steps_ce[-1]:.6f}", flush=True)
    probe.close()
    if last:
        write_losses(args.losses, steps_ce)
    leave()


def torchtitan_args(description, ga=2, max_norm=0.0):
    import argparse
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--layout", choices=["single", "pp"], required=True)
    p.add_argument("--code", choices=["buggy", "fixed"], default="fixed")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ga", type=int, default=ga, help="gradient-accumulation steps (schedule.step() calls a step)")
    p.add_argument("--microbatches", type=int, default=2, help="pipeline microbatches per schedule.step()")
    p.add_argument("--max-norm", type=float, default=max_norm)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--losses", default="")
    return p.parse_args()
