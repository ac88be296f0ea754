"""Megatron-LM issue #906, a faithful minimal reproduction (README.md): with context parallelism
the loss function multiplies each rank's loss by the context-parallel size, and the DDP
gradient buffers, all-reduced over the data-parallel x context-parallel group, were scaled by
1/dp instead of 1/(dp x cp): every gradient cp times too large. Copied below: pretrain_gpt.py's
loss_func and schedules.forward_step's normalization (core_r0.8.0), and the scaling factor of
megatron/core/distributed/distributed_data_parallel.py from core_r0.8.0 (--code buggy) and
core_r0.9.0 (--code fixed, commit 3bdcbbbe). Gloo, plain tensors as Megatron keeps them.

    PROBE_DIR=out/a python train.py --layout single
    PROBE_DIR=out/b torchrun --standalone --nproc-per-node 4 train.py --layout dp-cp --cp 2 --code buggy
"""
import argparse
import pathlib
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from repro_tiny import Pieces, build, leave, tokens, write_losses  # noqa: E402


class Sequence(torch.nn.Module):
    """The model on this rank's part of the sequence. Its tokens and logits are handed to the
    probe as DTensor views, Shard(1) over the context-parallel ranks, so that their records are
    pieces of the whole sequence's."""

    def __init__(self, model, mesh):
        super().__init__()
        self.model, self.mesh = model, mesh

    def forward(self, ids):
        if self.mesh is None:
            return self.model(ids)
        from torch.distributed.tensor import DTensor, Shard
        out = self.model(ids.to_local())
        return DTensor.from_local(out, self.mesh, [Shard(1)], run_check=False)


def loss_func(loss_mask, output_tensor, context_parallel_size, cp_group):
    """pretrain_gpt.py, loss_func (core_r0.8.0; the NaN check and reporting left out)."""
    losses = output_tensor.float()
    loss_mask = loss_mask.view(-1).float()
    total_tokens = loss_mask.sum()
    loss = torch.cat([torch.sum(losses.view(-1) * loss_mask).view(1), total_tokens.view(1)])

    if context_parallel_size > 1:
        torch.distributed.all_reduce(loss, group=cp_group)

    local_num_tokens = loss[1].clone().detach().to(torch.int)
    return loss[0] * context_parallel_size, local_num_tokens


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layout", choices=["single", "dp-cp"], required=True)
    p.add_argument("--cp", type=int, default=2)
    p.add_argument("--code", choices=["buggy", "fixed"], default="fixed")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--microbatches", type=int, default=4, help="global microbatches a step")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--losses", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    import numprobe

    if args.layout == "single":
        world, cp, rank, cp_mesh, cp_group = 1, 1, 0, None, None
    else:
        from torch.distributed.device_mesh import init_device_mesh
        dist.init_process_group("gloo")
        world, cp, rank = dist.get_world_size(), args.cp, dist.get_rank()
        mesh = init_device_mesh("cpu", (world // cp, cp), mesh_dim_names=("dp", "cp"))
        cp_mesh = mesh["cp"]
        cp_group = cp_mesh.get_group()
    dp = world // cp
    dp_rank, cp_rank = rank // cp, rank % cp
    num_microbatches = args.microbatches // dp  # this data-parallel rank's

    model = build(args.seed)
    net = Sequence(model, cp_mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    probe = numprobe.Probe(setup=f"Megatron-style dp {dp} x cp {cp} (gloo), code {args.code}")
    from torch.distributed.tensor import Partial
    pieces = Pieces(probe, model, cp_mesh, placement=lambda name: None,
                    mb_placement=lambda name: Partial() if cp > 1 else None)

    # megatron/core/distributed/distributed_data_parallel.py: the DDP buffers' scaling factor
    # (config.calculate_per_token_loss False).
    if args.code == "buggy":
        # core_r0.8.0:
        #     target_gradient_scaling_factor = 1.0 / parallel_state.get_data_parallel_world_size()
        gradient_scaling_factor = 1.0 / dp
    else:
        # core_r0.9.0:
        #     target_gradient_scaling_factor = 1.0 / parallel_state.get_data_parallel_world_size(
        #         with_context_parallel=True)
        gradient_scaling_factor = 1.0 / (dp * cp)

    chunk = args.seq // cp
    curve = []
    for step in range(args.steps):
        pieces.begin_step(step)
        ce_sum = torch.zeros(1)
        for mb in range(dp_rank, args.microbatches, dp):
            batch = tokens(args.seed, step, mb, seq=args.seq)
            # This rank's part of the sequence (contiguous: the model has no attention, so
            # Megatron's load-balanced chunk order for causal attention is left out).
            ids = batch[:, :-1][:, cp_rank * chunk:(cp_rank + 1) * chunk]
            labels = batch[:, 1:][:, cp_rank * chunk:(cp_rank + 1) * chunk]
            if cp_mesh is not None:
                from torch.distributed.tensor import DTensor, Shard
                ids = DTensor.from_local(ids, cp_mesh, [Shard(1)], run_check=False)
            logits = probe.forward(mb, net, ids)
            if cp_mesh is not None:
                logits = logits.to_local()
            per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                                        reduction="none")
            output_tensor, num_tokens = loss_func(torch.ones_like(per_token), per_token, cp, cp_group)
            # megatron/core/pipeline_parallel/schedules.py, forward_step (core_r0.8.0):
            output_tensor /= num_tokens
            output_tensor /= num_microbatches
            ce_sum += per_token.detach().sum() / num_tokens
            pieces.microbatch = mb
            probe.backward(mb, output_tensor)
            pieces.microbatch = None
        # finish_grad_sync: each buffer scaled, then all-reduced over the data-parallel group
        # with context parallel (param_and_grad_buffer.py, start_grad_sync).
        for param in model.parameters():
            if gradient_scaling_factor != 1.0:
                param.grad *= gradient_scaling_factor
            if world > 1:
                dist.all_reduce(param.grad)
        optimizer.step()
        pieces.end_step()
        optimizer.zero_grad()
        if world > 1:
            dist.all_reduce(ce_sum)
        curve.append(float(ce_sum) / args.microbatches)
        if rank == 0:
            print(f"step {step} loss {curve[-1]:.6f}", flush=True)
    probe.close()
    if rank == 0:
        write_losses(args.losses, curve)
    leave()


if __name__ == "__main__":
    main()
