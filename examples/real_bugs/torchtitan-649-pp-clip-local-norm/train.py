"""torchtitan issue #596 / PR #649, a faithful minimal reproduction (README.md): under pipeline
parallelism each stage clipped its gradients by the norm of its own parameters' gradients, not by
the norm of the whole model's. The clipping lines are copied below from torchtitan 0.0.2's
train.py (--code buggy) and 0.1.0's torchtitan/utils.py clip_grad_norm_ (--code fixed); the
schedule is torch.distributed.pipelining's, one stage per rank.

    PROBE_DIR=out/a python train.py --layout single
    PROBE_DIR=out/b torchrun --standalone --nproc-per-node 2 train.py --layout pp --code buggy
"""
import math
import pathlib
import sys

import torch
from torch import distributed as dist
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from repro_tiny import cross_entropy, torchtitan_args, torchtitan_step_loop  # noqa: E402


@torch.no_grad()
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None, pp_mesh=None):
    """torchtitan/utils.py (0.1.0, PR #649); `pp_mesh` is the pipeline stages' process group here
    (0.1.0 takes the mesh and calls pp_mesh.get_group())."""
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm(grads, norm_type, error_if_nonfinite, foreach)

    if pp_mesh is not None:
        if isinstance(total_norm, DTensor):
            total_norm = total_norm.full_tensor()
        if math.isinf(norm_type):
            dist.all_reduce(total_norm, op=dist.ReduceOp.MAX, group=pp_mesh)
        else:
            total_norm **= norm_type
            dist.all_reduce(total_norm, op=dist.ReduceOp.SUM, group=pp_mesh)
            total_norm **= 1.0 / norm_type

    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def main():
    args = torchtitan_args(__doc__.split("\n\n")[0], ga=1, max_norm=0.2)

    def clip(params, pp_group):
        if args.layout == "pp" and args.code == "buggy":
            # train.py (0.0.2): model_parts holds this rank's stage only.
            model_parts = [params]
            for m in model_parts:
                norm = torch.nn.utils.clip_grad_norm_(m, args.max_norm, foreach=True)
        else:
            # train.py (0.1.0): clip_grad_norm_([p for m in model_parts for p in m.parameters()],
            #     job_config.training.max_norm, foreach=True,
            #     pp_mesh=pp_mesh if parallel_dims.pp_enabled else None)
            norm = clip_grad_norm_(params, args.max_norm, foreach=True, pp_mesh=pp_group)
        print(f"grad norm used for clipping {float(norm):.6f} (max_norm {args.max_norm})", flush=True)

    # The schedule's loss is the mean cross entropy of a microbatch and scale_grads its default
    # (True): with one accumulation step each step's gradient is the microbatches' mean, as the
    # single process's (each microbatch's loss divided by their count).
    torchtitan_step_loop(args, schedule_loss_fn=cross_entropy, scale_grads=True, clip=clip,
                         single_loss_scale=1.0 / (args.ga * args.microbatches),
                         setup=f"torchtitan-style {args.microbatches} microbatches, clip {args.max_norm}, SGD, code {args.code}")


if __name__ == "__main__":
    main()
