"""PyTorch issue #78807, a faithful minimal reproduction (README.md): the foreach ("multi-tensor")
Adam of torch 1.12 with amsgrad=True never updated its max_exp_avg_sq state. The optimizer below
is torch 1.12's Adam step with its _multi_tensor_adam, copied; --code buggy keeps 1.12's amsgrad
line, --code fixed has the in-place one of PR #82523 (torch 1.13). numprobe attached in one line.

    PROBE_DIR=out/a python train.py --code buggy --losses out/a/losses.json
"""
import argparse
import math
import pathlib
import sys
from typing import List

import torch
from torch import Tensor

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from repro_tiny import build, cross_entropy, tokens, write_losses  # noqa: E402


def _multi_tensor_adam(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor],
                       exp_avg_sqs: List[Tensor], max_exp_avg_sqs: List[Tensor], state_steps: List[Tensor],
                       *, amsgrad: bool, beta1: float, beta2: float, lr: float, weight_decay: float,
                       eps: float, maximize: bool, code: str):
    """torch 1.12.1 torch/optim/adam.py, _multi_tensor_adam (the amsgrad lines per --code)."""
    if len(params) == 0:
        return

    # update steps
    torch._foreach_add_(state_steps, 1)

    if maximize:
        grads = torch._foreach_neg(tuple(grads))  # type: ignore[assignment]

    bias_correction1 = [1 - beta1 ** step.item() for step in state_steps]
    bias_correction2 = [1 - beta2 ** step.item() for step in state_steps]
    if weight_decay != 0:
        torch._foreach_add_(grads, params, alpha=weight_decay)

    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)

    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)

    if amsgrad:
        # Maintains the maximum of all 2nd moment running avg. till now
        if code == "buggy":
            # torch 1.12: a new list of new tensors; the state's tensors keep their zeros.
            max_exp_avg_sqs = torch._foreach_maximum(max_exp_avg_sqs, exp_avg_sqs)  # type: ignore[assignment]
        else:
            # PR #82523 (torch 1.13): in place, into the state.
            torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs)

        # Use the max. for normalizing running avg. of gradient
        max_exp_avg_sq_sqrt = torch._foreach_sqrt(max_exp_avg_sqs)
        bias_correction_sqrt = [math.sqrt(bc) for bc in bias_correction2]
        torch._foreach_div_(max_exp_avg_sq_sqrt, bias_correction_sqrt)
        denom = torch._foreach_add(max_exp_avg_sq_sqrt, eps)
    else:
        exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)
        bias_correction_sqrt = [math.sqrt(bc) for bc in bias_correction2]
        torch._foreach_div_(exp_avg_sq_sqrt, bias_correction_sqrt)
        denom = torch._foreach_add(exp_avg_sq_sqrt, eps)

    step_size = [(lr / bc) * -1 for bc in bias_correction1]
    torch._foreach_addcdiv_(params, exp_avgs, denom, step_size)


class Adam(torch.optim.Optimizer):
    """torch 1.12's Adam with foreach=True: its step() gathers the state as 1.12's does."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, code="fixed"):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=False))
        self.code = code

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params_with_grad, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps = [], [], [], [], [], []
            beta1, beta2 = group['betas']
            for p in group['params']:
                if p.grad is not None:
                    params_with_grad.append(p)
                    grads.append(p.grad)
                    state = self.state[p]
                    # Lazy state initialization
                    if len(state) == 0:
                        state['step'] = torch.tensor(0.)
                        state['exp_avg'] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        state['exp_avg_sq'] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        if group['amsgrad']:
                            state['max_exp_avg_sq'] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    exp_avgs.append(state['exp_avg'])
                    exp_avg_sqs.append(state['exp_avg_sq'])
                    if group['amsgrad']:
                        max_exp_avg_sqs.append(state['max_exp_avg_sq'])
                    state_steps.append(state['step'])
            _multi_tensor_adam(params_with_grad, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                               amsgrad=group['amsgrad'], beta1=beta1, beta2=beta2, lr=group['lr'],
                               weight_decay=group['weight_decay'], eps=group['eps'], maximize=group['maximize'],
                               code=self.code)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", choices=["buggy", "fixed"], required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--losses", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    import numprobe
    model = build(args.seed)
    optimizer = Adam(model.parameters(), lr=args.lr, amsgrad=True, code=args.code)
    numprobe.attach(model, optimizer, setup=f"1 process, torch 1.12 foreach Adam amsgrad, code {args.code}")
    losses = []
    for step in range(args.steps):
        total = 0.0
        for mb in range(args.microbatches):
            batch = tokens(args.seed, step, mb)
            loss = cross_entropy(model(batch[:, :-1]), batch[:, 1:]) / args.microbatches
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(total)
        print(f"step {step} loss {total:.6f}", flush=True)
    write_losses(args.losses, losses)


if __name__ == "__main__":
    main()
