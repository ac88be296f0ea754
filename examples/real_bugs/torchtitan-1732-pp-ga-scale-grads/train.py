"""torchtitan PR #1732 (issue #1733), a faithful minimal reproduction (README.md): under pipeline
parallelism with gradient accumulation, the schedule's scale_grads=True divided the accumulated
gradients by the number of pipeline microbatches at every schedule.step(), so the first
accumulation step's gradients were divided again by the later ones. The schedule torchtitan
built is copied below from 0.1.0 (--code buggy) and 0.2.0 (--code fixed); the schedule itself
is torch.distributed.pipelining's (torch 2.13, which still has scale_grads).

    PROBE_DIR=out/a python train.py --layout single
    PROBE_DIR=out/b torchrun --standalone --nproc-per-node 2 train.py --layout pp --code buggy
"""
import functools
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from repro_tiny import cross_entropy, torchtitan_args, torchtitan_step_loop  # noqa: E402


def rescale_accumulated_loss(unwrapped_loss_fn, accumulation_steps):
    """torchtitan/components/loss.py (0.1.0 and 0.2.0)."""
    @functools.wraps(unwrapped_loss_fn)
    def accumulated_loss_fn(*args, **kwargs):
        loss = unwrapped_loss_fn(*args, **kwargs)
        return loss / accumulation_steps
    return accumulated_loss_fn


def main():
    args = torchtitan_args(__doc__.split("\n\n")[0])
    # torchtitan/train.py (0.1.0, 0.2.0): the Trainer rescales its loss by the gradient-
    # accumulation steps before it builds the pipeline schedule with it.
    loss_fn = rescale_accumulated_loss(cross_entropy, args.ga)
    n_microbatches = args.microbatches
    if args.code == "buggy":
        # torchtitan/distributed/pipeline.py, build_pipeline_schedule (0.1.0):
        #     schedule = schedule_class(stages[0], n_microbatches=n_microbatches, loss_fn=loss_fn)
        # scale_grads left at its default, True: each schedule.step() divides every .grad by
        # n_microbatches.
        schedule_loss_fn, scale_grads = loss_fn, True
    else:
        # torchtitan/distributed/pipeline_parallel.py (0.2.0, PR #1732):
        #     loss_fn=rescale_accumulated_loss(loss_fn, n_microbatches), scale_grads=False,
        schedule_loss_fn, scale_grads = rescale_accumulated_loss(loss_fn, n_microbatches), False
    torchtitan_step_loop(args, schedule_loss_fn=schedule_loss_fn, scale_grads=scale_grads,
                         single_loss_scale=1.0 / (args.ga * args.microbatches),
                         setup=f"torchtitan-style GA {args.ga} x {args.microbatches} microbatches, SGD, code {args.code}")


if __name__ == "__main__":
    main()
