"""DeepSpeed issue #7837 / PR #7839, a faithful minimal reproduction (README.md): bf16 with ZeRO
stage 0 and a client torch optimizer went through FP16_UnfusedOptimizer, whose dynamic loss
scale (65536) divided gradients the engine had never scaled, and the engine skipped zero_grad
between steps. The engine's and the optimizer's lines that carry it are copied below from
DeepSpeed 0.18.5 (--code buggy) and 0.18.6 (--code fixed); one process, a bf16 model, SGD.

    PROBE_DIR=out/a python train.py --code buggy --losses out/a/losses.json
"""
import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from repro_tiny import build, cross_entropy, tokens, write_losses  # noqa: E402


class FP16_UnfusedOptimizer:
    """deepspeed/runtime/fp16/unfused_optimizer.py (0.18.5): fp32 copies of the low-precision
    weights are what the client optimizer steps; step() unscales their gradients by cur_scale.
    0.18.6 builds it with LossScaleConfig, which for bfloat16 (use_grad_scaling False) keeps
    cur_scale = 1.0. The overflow check, dynamic-scale updates (a window of 1000 steps) and the
    fused-LAMB path are left out."""

    def __init__(self, init_optimizer, static_loss_scale=1.0, dynamic_loss_scale=False,
                 dynamic_loss_args=None, clip_grad=0.0, code="fixed"):
        self.optimizer = init_optimizer
        self.fp16_groups = []
        self.fp32_groups = []
        for i, param_group in enumerate(self.optimizer.param_groups):
            self.fp16_groups.append(param_group['params'])
            fp32_group = [p.clone().float().detach() for p in param_group['params']]
            for p in fp32_group:
                p.requires_grad = True
            self.fp32_groups.append(fp32_group)
            param_group['params'] = self.fp32_groups[i]
        if code == "buggy":
            # 0.18.5: the engine passes dynamic_loss_scale=self.dynamic_loss_scale(), which is
            # float16_config.loss_scale == 0, true for a bf16 config too.
            if dynamic_loss_scale:
                self.dynamic_loss_scale = True
                if dynamic_loss_args is None:
                    self.cur_scale = 1.0 * 2**16
            else:
                self.dynamic_loss_scale = False
                self.cur_scale = static_loss_scale
        else:
            # 0.18.6: LossScaleConfig(low_precision_dtype=torch.bfloat16, ...): no grad scaling.
            self.dynamic_loss_scale = False
            self.cur_scale = 1.0
        self.clip_grad = clip_grad

    def zero_grad(self, set_to_none=True):
        for group in self.fp16_groups:
            for p in group:
                p.grad = None

    def step(self):
        for i, group in enumerate(self.fp16_groups):
            # copying gradients to fp32 to work with fp32 parameters
            for fp32_param, fp16_param in zip(self.fp32_groups[i], self.fp16_groups[i]):
                if fp16_param.grad is None:
                    fp32_param.grad = torch.zeros(fp16_param.size(), dtype=fp32_param.dtype, device=fp32_param.device)
                else:
                    fp32_param.grad = fp16_param.grad.to(fp32_param.dtype)
        self.unscale_and_clip_grads()
        self.optimizer.step()
        for fp32_group, fp16_group in zip(self.fp32_groups, self.fp16_groups):
            for fp32_param, fp16_param in zip(fp32_group, fp16_group):
                # remove the fp32 grad
                fp32_param.grad = None
                # copy data from fp32 to fp16
                fp16_param.data.copy_(fp32_param.data)

    def unscale_and_clip_grads(self, apply_scale=True):
        combined_scale = self.cur_scale  # clip_grad 0: no clipping
        if apply_scale:
            for group in self.fp32_groups:
                for param in group:
                    if param.grad is not None:
                        param.grad.data.mul_(1. / combined_scale)
        return combined_scale


class Engine:
    """deepspeed/runtime/engine.py: backward() and _take_model_step() for bf16, ZeRO stage 0."""

    def __init__(self, module, optimizer, code):
        self.module, self.optimizer, self.code = module, optimizer, code

    def bfloat16_enabled(self):
        return True

    def zero_optimization(self):
        return False  # ZeRO stage 0

    def backward(self, loss, gradient_accumulation_steps=1):
        # Not a ZeROOptimizer: no scale_if_loss; the loss goes to backward unscaled.
        loss = loss / gradient_accumulation_steps
        loss.backward()
        return loss

    def _take_model_step(self):
        self.optimizer.step()
        if self.bfloat16_enabled():
            if self.code == "buggy":
                # 0.18.5
                if self.zero_optimization() and hasattr(self.optimizer, "zero_grad"):
                    self.optimizer.zero_grad()
                else:
                    pass
            else:
                # 0.18.6
                if hasattr(self.optimizer, "zero_grad"):
                    self.optimizer.zero_grad()
                else:
                    self.zero_grad()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", choices=["buggy", "fixed"], required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--losses", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    import numprobe
    model = build(args.seed).to(torch.bfloat16)  # bf16: the engine casts the module
    client = torch.optim.SGD(model.parameters(), lr=args.lr)
    optimizer = FP16_UnfusedOptimizer(client, dynamic_loss_scale=True, code=args.code)
    engine = Engine(model, optimizer, args.code)
    probe = numprobe.Probe(setup=f"1 process, DeepSpeed bf16 ZeRO-0 unfused optimizer, code {args.code}")
    probe.watch(model)
    # The fp32 weights the client optimizer steps, and the gradients it reads: the step's records
    # are taken when it has stepped, before FP16_UnfusedOptimizer drops those gradients.
    for (name, _), master in zip(model.named_parameters(), optimizer.fp32_groups[0]):
        probe.watch_parameter(f"{name}.fp32", master)
    probe.watch_optimizer(client)
    client.register_step_post_hook(lambda *_: probe.end_step())
    losses = []
    for step in range(args.steps):
        probe.begin_step(step)
        batch = tokens(args.seed, step, 0, batch=4)
        logits = probe.forward(0, model, batch[:, :-1])
        loss = cross_entropy(logits, batch[:, 1:])
        with probe.backward_region(0):  # the engine runs the backward
            engine.backward(loss)
        engine._take_model_step()
        losses.append(loss.item())
        print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    probe.close()
    write_losses(args.losses, losses)


if __name__ == "__main__":
    main()
