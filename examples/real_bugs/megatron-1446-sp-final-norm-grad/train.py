"""Megatron-LM issue #1446 (TransformerEngine PR #1528), a faithful minimal reproduction
(README.md): with tensor and sequence parallelism, TransformerEngine 1.13-2.0's LayerNorm set
the `sequence_parallel` flag on its parameters in reset_parameters(), which its base class's
__init__ calls before the flag exists, so the flag was never set; Megatron's
finalize_model_grads all-reduces over the tensor-parallel group only the flagged norm
parameters, and final_layernorm (TENorm) kept each rank's partial gradient. The norm's lines are
copied below from TE 2.0 (--code buggy) and 2.1 (--code fixed), beside Megatron core_r0.11.0's
_allreduce_layernorm_grads and the sequence-parallel mappings (reduced to what a tiny MLP
model needs). Gloo, plain tensors as Megatron keeps them.

    PROBE_DIR=out/a python train.py --layout single
    PROBE_DIR=out/b torchrun --standalone --nproc-per-node 2 train.py --layout tp-sp --code buggy
"""
import argparse
import pathlib
import sys
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from repro_tiny import Pieces, TinyLM, cross_entropy, leave, tokens, write_losses  # noqa: E402

CODE = "fixed"
GROUP = None  # the tensor-parallel group


# ------------------------------------------------------------------- TransformerEngine's LayerNorm

class _LayerNormOp(nn.Module):
    """transformer_engine/pytorch/ops/basic/layer_norm.py (2.0), reduced: __init__ makes the
    weight and bias and calls self.reset_parameters() (the CUDA kernels: F.layer_norm here)."""

    def __init__(self, normalized_shape, *, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(normalized_shape))
        self.bias = nn.Parameter(torch.empty(normalized_shape))
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.weight.fill_(1.0)
            self.bias.zero_()

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class LayerNorm(_LayerNormOp):
    """transformer_engine/pytorch/module/layernorm.py, LayerNorm."""

    def __init__(self, normalized_shape, eps: float = 1e-5, sequence_parallel: Optional[bool] = None):
        # Initialize layer norm operation
        super().__init__(normalized_shape, eps=eps)

        # Flag for sequence parallelism (custom Megatron-LM integration)
        self.sequence_parallel: Optional[bool] = sequence_parallel
        if CODE == "fixed":
            # PR #1528 (TE 2.1):
            if sequence_parallel is not None:
                self.weight.sequence_parallel = sequence_parallel
                self.bias.sequence_parallel = sequence_parallel

    def reset_parameters(self, defer_init: Optional[bool] = None) -> None:
        # Reset parameters
        super().reset_parameters()

        # Set flag for sequence parallelism (custom Megatron-LM integration)
        # (called from _LayerNormOp.__init__, before self.sequence_parallel exists: no flag)
        if getattr(self, "sequence_parallel", None) is not None:
            self.weight.sequence_parallel = self.sequence_parallel
            self.bias.sequence_parallel = self.sequence_parallel


# ----------------------------------------------- Megatron's sequence-parallel mappings (dim 1 here)

def _split(x):
    chunk = x.shape[1] // dist.get_world_size(GROUP)
    r = dist.get_rank(GROUP)
    return x[:, r * chunk:(r + 1) * chunk].contiguous()


def _gather(x):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(GROUP))]
    dist.all_gather(parts, x.contiguous(), group=GROUP)
    return torch.cat(parts, dim=1)


def _reduce_scatter(x):
    x = x.clone()
    dist.all_reduce(x, group=GROUP)  # Gloo: a sum, then this rank's part
    return _split(x)


class ScatterToSequenceParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _split(x)

    @staticmethod
    def backward(ctx, g):
        return _gather(g)


class GatherFromSequenceParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tensor_parallel_output_grad):
        ctx.tensor_parallel_output_grad = tensor_parallel_output_grad
        return _gather(x)

    @staticmethod
    def backward(ctx, g):
        if ctx.tensor_parallel_output_grad:
            return _reduce_scatter(g), None
        return _split(g), None


class ReduceScatterToSequenceParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _reduce_scatter(x)

    @staticmethod
    def backward(ctx, g):
        return _gather(g)


# ------------------------------------------------------------------------------- the TP+SP model

class TensorSequenceParallel(nn.Module):
    """The model's forward under tensor parallel with sequence parallel, as Megatron lays it
    out: the embedding's output scattered over the sequence, each block's norm on the rank's
    tokens (its fused norm's parameters flagged sequence_parallel, as
    TELayerNormColumnParallelLinear flags them), fc1 column-parallel on the gathered sequence,
    fc2 row-parallel and reduce-scattered, final_layernorm (TENorm: TE's LayerNorm) on the rank's
    tokens, the sequence gathered for the output head (replicated here; Megatron's is
    vocab-parallel)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        m = self.model
        h = ScatterToSequenceParallelRegion.apply(m.embed(ids))
        for block in m.layers.values():
            x = GatherFromSequenceParallelRegion.apply(block.norm(h), True)
            y = F.linear(F.gelu(F.linear(x, block.fc1.weight)), block.fc2.weight)
            h = h + ReduceScatterToSequenceParallelRegion.apply(y)
        h = GatherFromSequenceParallelRegion.apply(m.final_layernorm(h), False)
        return m.output(h)


def shard_for_tensor_parallel(model, rank, tp):
    """Column-parallel fc1 (rows), row-parallel fc2 (columns): this rank's slices."""
    for block in model.layers.values():
        rows = block.fc1.weight.shape[0] // tp
        block.fc1.weight = nn.Parameter(block.fc1.weight.detach()[rank * rows:(rank + 1) * rows].clone())
        block.fc2.weight = nn.Parameter(block.fc2.weight.detach()[:, rank * rows:(rank + 1) * rows].clone())
        for p in block.norm.parameters():
            p.sequence_parallel = True


def _allreduce_layernorm_grads(model, tp_world_size, sequence_parallel=True, qk_layernorm=False):
    """megatron/core/distributed/finalize_model_grads.py (core_r0.11.0), reduced to one model
    chunk without DTensor grads."""
    # All-reduce layernorm parameters across model parallel nodes
    # when sequence parallelism is used
    if tp_world_size > 1 and (sequence_parallel or qk_layernorm):
        params = []
        grads = []
        for name, param in model.named_parameters():
            if (
                param.requires_grad
                and getattr(param, 'sequence_parallel', False)
                or 'q_layernorm' in name
                or 'k_layernorm' in name
            ):
                params.append(param)
                grads.append(param.grad.data)
        if grads:
            coalesced = _flatten_dense_tensors(grads)
            torch.distributed.all_reduce(coalesced, group=GROUP)
            for buf, synced in zip(grads, _unflatten_dense_tensors(coalesced, grads)):
                buf.copy_(synced)


def main():
    global CODE, GROUP
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layout", choices=["single", "tp-sp"], required=True)
    p.add_argument("--code", choices=["buggy", "fixed"], default="fixed")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--losses", default="")
    args = p.parse_args()
    CODE = args.code
    torch.set_num_threads(1)
    import numprobe
    from torch.distributed.tensor import Partial, Replicate, Shard

    tp, rank, mesh = 1, 0, None
    if args.layout == "tp-sp":
        from torch.distributed.device_mesh import init_device_mesh
        dist.init_process_group("gloo")
        tp, rank = dist.get_world_size(), dist.get_rank()
        mesh = init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
        GROUP = mesh.get_group()
    # Megatron's TENorm: te.pytorch.LayerNorm(hidden_size, eps, sequence_parallel=config.sequence_parallel)
    torch.manual_seed(args.seed)
    model = TinyLM(norm=lambda dim: LayerNorm(dim, eps=1e-5, sequence_parallel=tp > 1))
    net = model
    if tp > 1:
        shard_for_tensor_parallel(model, rank, tp)
        net = TensorSequenceParallel(model)
        print(f"rank {rank}: final_layernorm.weight.sequence_parallel = "
              f"{getattr(model.final_layernorm.weight, 'sequence_parallel', None)}", flush=True)

    def placement(name):
        if tp == 1:
            return None
        if ".fc1." in name:
            return Shard(0)
        if ".fc2." in name:
            return Shard(1)
        return Replicate()

    def mb_placement(name):  # a microbatch's gradient of a norm on the rank's tokens: a summand
        if tp > 1 and (".norm." in name or name.startswith("final_layernorm.")):
            return Partial()
        return placement(name)

    probe = numprobe.Probe(setup=f"Megatron-style tp {tp}{' + sp' if tp > 1 else ''} (gloo), code {args.code}")
    pieces = Pieces(probe, model, mesh, placement=placement, mb_placement=mb_placement)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    curve = []
    for step in range(args.steps):
        pieces.begin_step(step)
        total = 0.0
        for mb in range(args.microbatches):
            batch = tokens(args.seed, step, mb)
            logits = probe.forward(mb, net, batch[:, :-1])
            loss = cross_entropy(logits, batch[:, 1:]) / args.microbatches
            pieces.microbatch = mb
            probe.backward(mb, loss)
            pieces.microbatch = None
            total += loss.item()
        _allreduce_layernorm_grads(model, tp)  # finalize_model_grads, before the optimizer
        optimizer.step()
        pieces.end_step()
        optimizer.zero_grad()
        curve.append(total)
        if rank == 0:
            print(f"step {step} loss {total:.6f}", flush=True)
    probe.close()
    if rank == 0:
        write_losses(args.losses, curve)
    leave()


if __name__ == "__main__":
    main()
