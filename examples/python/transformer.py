#!/usr/bin/env python3
"""A small transformer trainer on CPU (Gloo) under four parallelism setups, probed by numprobe.

    python transformer.py --setup single --out out/single
    torchrun --standalone --nproc-per-node 2 transformer.py --setup fsdp --out out/fsdp
    torchrun --standalone --nproc-per-node 2 transformer.py --setup tp [--sp] --out out/tp
    torchrun --standalone --nproc-per-node 4 transformer.py --setup fsdp-tp --tp 2 [--sp] --out out/2d
    diff_logs out/single out/tp

Setups: `single` (one process, every microbatch), `fsdp` (FSDP2 `fully_shard`, data parallel over
all ranks), `tp` (DTensor tensor parallel over all ranks, every rank sees the same data; `--sp`
adds sequence parallel on the norms as torchtitan does), `fsdp-tp` (a dp x tp mesh: tensor
parallel inside, FSDP2 over dp).

`--dtype bfloat16` trains as torchtitan does by default: FSDP2's
`MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`, float32 master weights and
optimizer, bfloat16 forward and backward, each microbatch's gradient cast to float32 before its
reduction and accumulation; the loss in float32. `single` and `tp` get the same policy from
FSDP2 over a data-parallel mesh of one rank, so every setup casts and reduces alike.

Every setup starts from the same global weights (the full model is built with the same seed on
every rank, then sharded) and trains on the same data (microbatch `mb` of step `s` is drawn from
its own generator seeded by (seed, s, mb)); a data-parallel rank r of dp trains global
microbatches r, r+dp, ...; every microbatch's loss is divided by --microbatches and gradients are
summed, never averaged, over ranks, so a step's summed gradient is single's.

Planted faults (--fault): `tp-norm-unreduced` (tp/fsdp-tp with --sp: the norms compute on local
sequence shards and hand each rank's partial weight gradient back as if it were the reduced one),
`shard-offset` (tp/fsdp-tp: every rank loads rank 0's rows of layers.0.attention.wq.weight).

`--compile aot_eager|inductor` compiles each block in place with `fullgraph=True` (after tensor
parallel, before FSDP2, as torchtitan does): its taps become graph operators. `--taps none` drops
every tap (block outputs and the row-parallel products): the probe watches and wraps the forward
only, as a user's first try does.

A size where one single-process step takes well over 100 ms on one core (for overhead figures):
    --dim 256 --layers 4 --heads 8 --vocab 1024 --seq 64 --batch 2   (about 220 ms a step)
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

SETUPS = ["single", "fsdp", "tp", "fsdp-tp"]
FAULTS = ["none", "tp-norm-unreduced", "shard-offset"]
SHARD_OFFSET_PARAM = "layers.0.attention.wq.weight"

numprobe = None  # imported only when --probe 1, so the trainer runs without the package


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setup", choices=SETUPS, default="single")
    p.add_argument("--tp", type=int, default=0, help="tensor-parallel degree (tp: all ranks; fsdp-tp: default 2)")
    p.add_argument("--sp", action="store_true", help="sequence parallel on the norms (tp, fsdp-tp)")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch", type=int, default=2, help="sequences per microbatch")
    p.add_argument("--microbatches", type=int, default=4, help="global microbatches per step")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default="out/transformer", help="the probe's run directory")
    p.add_argument("--probe", type=int, choices=[0, 1], default=1)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--compile", choices=["none", "aot_eager", "inductor"], default="none",
                   help="torch.compile each block (fullgraph) with this backend")
    p.add_argument("--taps", choices=["all", "none"], default="all",
                   help="none: the probe watches and wraps the forward only, as a user's first try")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="the forward and backward's dtype (masters, optimizer and reductions stay float32)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------- model

class RMSNorm(nn.Module):
    """RMSNorm in plain ops, which DTensor runs on sequence shards (SequenceParallel)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.local_shards = False  # set by the tp-norm-unreduced fault

    def forward(self, x):
        if self.local_shards and isinstance(x, DTensor):
            return self.forward_on_local_shards(x)
        return self.normalize(x) * self.weight

    def normalize(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward_on_local_shards(self, x):
        # The bug: the weight's local replica is used on this rank's sequence shard only, and
        # to_local() without grad_placements=[Partial()] declares its gradient Replicate, so
        # each rank's partial gradient is taken for the whole (reduced) one.
        out = self.normalize(x.to_local()) * self.weight.to_local()
        return DTensor.from_local(out, x.device_mesh, x.placements, run_check=False)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: under tensor parallel each rank holds a column shard, i.e. some of the heads.
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        causal = torch.ones(s, s, dtype=torch.bool).triu(1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(-1)
        return self.wo((attn @ v).transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.up(x)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward(dim, 4 * dim)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab, args.dim)
        self.layers = nn.ModuleList(Block(args.dim, args.heads) for _ in range(args.layers))
        self.norm = RMSNorm(args.dim)
        self.output = nn.Linear(args.dim, args.vocab, bias=False)
        self.sequence_mesh = None  # the TP mesh under sequence parallel: block outputs are shards
        self.taps = args.taps == "all"

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if self.taps:
                tap(f"layers.{i}", self.as_global(h))
        return self.output(self.norm(h))

    def as_global(self, h):
        # Under sequence parallel a block's output is this rank's sequence shard; the probe
        # records it at its global offset only when told so.
        if self.sequence_mesh is None or isinstance(h, DTensor):
            return h
        return DTensor.from_local(h, self.sequence_mesh, [Shard(1)], run_check=False)


def tap(name, tensor):
    if numprobe:
        numprobe.tap(name, tensor)


def tap_row_parallel_products(model):
    """Taps the products that tensor parallel splits over its ranks: each rank's summand (a
    Partial DTensor) is what diff_logs needs to tell the reduction's summation order from a
    bug. Registered before parallelize_module, these hooks run before RowwiseParallel's, which
    reduce the output; without tensor parallel they tap the whole product."""
    for i, block in enumerate(model.layers):
        for name in ("attention.wo", "feed_forward.down"):
            hook = lambda module, args, out, path=f"layers.{i}.{name}": tap(path, out)
            block.get_submodule(name).register_forward_hook(hook)


# ----------------------------------------------------------------------------------- parallelism

class Layout:
    """Where this process sits: its data-parallel rank among dp, and the meshes it uses."""

    def __init__(self, rank=0, world=1, dp=1, tp=1, dp_mesh=None, tp_mesh=None):
        self.rank, self.world, self.dp, self.tp = rank, world, dp, tp
        self.dp_rank = rank // tp  # the mesh is (dp, tp) with tp inner
        self.dp_mesh, self.tp_mesh = dp_mesh, tp_mesh

    def my_microbatches(self, microbatches):
        return range(self.dp_rank, microbatches, self.dp)


def tp_degree(args, world):
    if args.setup == "tp":
        if args.tp not in (0, world):
            raise SystemExit(f"--setup tp uses every rank: --tp {args.tp} on {world} ranks (fsdp-tp mixes dp in)")
        return world
    if args.setup == "fsdp-tp":
        return args.tp or 2
    return 1


def init_layout(args):
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.setup == "single":
        if world != 1:
            raise SystemExit("--setup single runs as one process")
        if args.dtype == "float32":
            return Layout()
        # Mixed precision from FSDP2 over one rank: a process group of its own, no launcher.
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    tp = tp_degree(args, world)
    if world % tp:
        raise SystemExit(f"{world} ranks do not split into tp {tp}")
    mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    return Layout(rank, world, world // tp, tp, mesh["dp"], mesh["tp"])


def check_sizes(args, layout):
    tp = layout.tp
    for what, n in [("heads", args.heads), ("dim", args.dim), ("vocab", args.vocab), ("seq", args.seq)]:
        if n % tp:
            raise SystemExit(f"--{what} {n} does not split over tp {tp}")
    if args.sp and tp == 1:
        raise SystemExit("--sp needs --setup tp or fsdp-tp")
    if args.fault == "tp-norm-unreduced" and not args.sp:
        raise SystemExit("--fault tp-norm-unreduced needs --sp")
    if args.fault == "shard-offset" and tp == 1:
        raise SystemExit("--fault shard-offset needs --setup tp or fsdp-tp")


def block_tp_plan(sp):
    """torchtitan's plan for a block: heads and the MLP hidden dim split over tp."""
    plan = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1) if sp else Replicate()),
        "feed_forward.up": ColwiseParallel(),
        "feed_forward.down": RowwiseParallel(output_layouts=Shard(1) if sp else Replicate()),
    }
    if sp:
        # Norms and residuals see sequence shards; gather the sequence before each TP region.
        plan["attention_norm"] = SequenceParallel()
        plan["ffn_norm"] = SequenceParallel()
        plan["attention"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        plan["feed_forward"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return plan


def root_tp_plan():
    """Under sequence parallel: embeddings come out as sequence shards, the output gathers them."""
    return {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }


def apply_tp(model, mesh, sp):
    for block in model.layers:
        parallelize_module(block, mesh, block_tp_plan(sp))
    if sp:
        parallelize_module(model, mesh, root_tp_plan())
        model.sequence_mesh = mesh


def mixed_precision(args):
    if args.dtype == "float32":
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def apply_fsdp(model, mesh, policy):
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # Microbatch losses are already divided by their global count: sum over ranks.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def parallelize(model, args, layout, full_wq):
    if layout.tp > 1:
        apply_tp(model, layout.tp_mesh, args.sp)
    if args.fault == "shard-offset":
        plant_shard_offset_fault(model, full_wq)  # a TP checkpoint load, before FSDP shards dp
    if args.compile != "none":  # each block in place, after TP and before FSDP, as torchtitan does
        for block in model.layers:
            block.compile(backend=args.compile, fullgraph=True)
    # Mixed precision is FSDP2's: over a data-parallel mesh of one rank where the setup has none.
    if args.setup in ("fsdp", "fsdp-tp") or args.dtype != "float32":
        apply_fsdp(model, layout.dp_mesh, mixed_precision(args))


# ---------------------------------------------------------------------------------------- faults

def plant_norm_fault(model):
    for module in model.modules():
        if isinstance(module, RMSNorm):
            module.local_shards = True


def plant_shard_offset_fault(model, full_weight):
    """A checkpoint loader that forgets the shard offset: every rank gets rank 0's rows."""
    param = model.get_parameter(SHARD_OFFSET_PARAM)
    local = param.to_local()
    with torch.no_grad():
        local.copy_(full_weight[: local.shape[0]])


# ------------------------------------------------------------------------------------------ data

def microbatch_tokens(args, step, mb):
    """Tokens [batch, seq + 1] of global microbatch mb: the same in every setup and rank."""
    g = torch.Generator().manual_seed((args.seed * 1_000_003 + step) * 1_009 + mb)
    return torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g)


def microbatch_loss(logits, targets, microbatches):
    # In float32 whatever the compute dtype (torchtitan's loss casts its logits too).
    logits = logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)) / microbatches


def step_loss(losses, layout):
    """The step's loss, bitwise the same in every setup: each microbatch's loss lands in its own
    slot (a sum with zeros elsewhere is exact), then the slots are summed in one fixed order."""
    if layout.dp > 1:
        dist.all_reduce(losses, group=layout.dp_mesh.get_group())
    return losses.sum()


# -------------------------------------------------------------------------------------- training

class NoProbe:
    """Probe's training calls without recording anything (--probe 0)."""

    def watch(self, model): pass
    def watch_optimizer(self, optimizer): pass
    def begin_step(self, step): pass
    def forward(self, mb, model, tokens): return model(tokens)
    def backward(self, mb, loss): loss.backward()
    def scalar(self, name, value): pass
    def end_step(self): pass


def describe(args, layout):
    sizes = f"dim {args.dim} layers {args.layers} heads {args.heads} vocab {args.vocab} seq {args.seq} batch {args.batch}"
    sp = " sp" if args.sp else ""
    return (f"transformer {args.setup}{sp} x{layout.world} ({layout.dp} dp x {layout.tp} tp, gloo), "
            f"{args.dtype}, {args.optimizer} lr {args.lr}, {args.microbatches} microbatches, {sizes}, "
            f"seed {args.seed}, fault {args.fault}")


def make_probe(args, layout):
    global numprobe
    if not args.probe:
        return NoProbe()
    import numprobe as module
    numprobe = module
    return numprobe.Probe(run_dir=args.out, setup=describe(args, layout))


def make_optimizer(args, model):
    if args.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=args.lr)
    return torch.optim.SGD(model.parameters(), lr=args.lr)


def train_step(step, model, optimizer, probe, args, layout):
    probe.begin_step(step)
    losses = torch.zeros(args.microbatches)
    for mb in layout.my_microbatches(args.microbatches):
        tokens = microbatch_tokens(args, step, mb)
        logits = probe.forward(mb, model, tokens[:, :-1])
        loss = microbatch_loss(logits, tokens[:, 1:], args.microbatches)
        probe.backward(mb, loss)
        losses[mb] = loss.detach()
    optimizer.step()
    loss = step_loss(losses, layout)
    probe.scalar("loss", loss)
    probe.end_step()
    optimizer.zero_grad()
    return loss.item()


def build_model(args, layout):
    # The whole model on every rank from one seed, sharded afterwards: every setup starts
    # from the same global weights.
    torch.manual_seed(args.seed)
    model = Transformer(args)
    full_wq = model.get_parameter(SHARD_OFFSET_PARAM).detach().clone()
    if args.taps == "all":
        tap_row_parallel_products(model)
    if args.fault == "tp-norm-unreduced":
        plant_norm_fault(model)
    parallelize(model, args, layout, full_wq)
    return model


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)  # one thread: CPU reductions in one fixed order
    layout = init_layout(args)
    check_sizes(args, layout)
    model = build_model(args, layout)
    optimizer = make_optimizer(args, model)
    probe = make_probe(args, layout)
    probe.watch(model)
    probe.watch_optimizer(optimizer)
    times = []
    for step in range(args.steps):
        start = time.perf_counter()
        loss = train_step(step, model, optimizer, probe, args, layout)
        times.append(time.perf_counter() - start)
        if layout.rank == 0:
            print(f"step {step} loss {loss:.6f} time {times[-1] * 1e3:.1f} ms", flush=True)
    if layout.rank == 0:
        print(f"median step time {statistics.median(times) * 1e3:.1f} ms over {len(times)} steps", flush=True)
    probe.close()
    if dist.is_initialized():
        leave_process_group()


def leave_process_group():
    """Ends a distributed run without interpreter finalization. Gloo's worker threads can drop a
    finished collective's last reference after the caller's wait() returned; when its tensors
    belong to Python objects, that takes the GIL, and during finalization taking it exits the
    thread through a noexcept frame: "terminate called without an active exception", SIGABRT,
    after a run that trained and logged everything (pytorch/pytorch#190489; seen about once in
    30 runs on a loaded 2-core machine). Every log line is on disk by now (each step is flushed
    when it ends), so nothing is lost by leaving with os._exit."""
    dist.barrier()  # no rank closes its connections while a peer still needs them
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
