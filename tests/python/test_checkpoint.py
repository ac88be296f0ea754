"""Activation checkpointing: the forward recomputed in backward records nothing again, so a
checkpointed run compares equal with the plain one."""
import pathlib

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import numprobe


class Mlp(torch.nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.mode = mode

    def block(self, x):
        y = self.fc1(x)
        numprobe.tap("fc1", y)  # before the block's last saved tensor: the recompute reaches it
        return torch.nn.functional.gelu(y)

    def forward(self, x):
        if self.mode == "plain":
            h = self.block(x)
        else:
            h = checkpoint(self.block, x, use_reentrant=self.mode == "reentrant")
        return self.fc2(h)


def train(run_dir, mode, trace=None):
    torch.manual_seed(0)
    model = Mlp(mode)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = numprobe.Probe(run_dir, rank=0, world_size=1, trace=trace)
    probe.watch(model)
    probe.watch_optimizer(opt)
    for step in range(2):
        probe.begin_step(step)
        for mb in range(2):
            x = torch.randn(5, 8, generator=torch.Generator().manual_seed(10 * step + mb), requires_grad=True)
            out = probe.forward(mb, model, x)
            probe.backward(mb, out.square().mean())
        opt.step()
        probe.end_step()
        opt.zero_grad()
    probe.close()


@pytest.mark.parametrize("mode", ["non-reentrant", "reentrant"])
def test_checkpointed_run_compares_equal_with_the_plain_one(tmp_path, mode):
    train(tmp_path / "plain", "plain")
    train(tmp_path / "checkpointed", mode)
    taps = [line for line in (tmp_path / "checkpointed" / "rank0" / "diff.log").read_text().splitlines()
            if " kind=tap " in line]
    assert len(taps) == 4, taps  # 2 steps x 2 microbatches, none from a recompute
    r = numprobe.diff(tmp_path / "plain", tmp_path / "checkpointed")
    assert r["exit_code"] == 0, r["text"]


@pytest.mark.parametrize("mode", ["non-reentrant"])
def test_an_op_trace_survives_the_recompute(tmp_path, mode):
    """The recompute's ops are not traced again, and the backward ops after it still are: the
    checkpointed run's op records are the plain run's. (The reentrant form runs the region as
    one autograd Function, whose ops nest inside it: its trace differs from the plain run's.)"""
    trace = "steps=0;mb=0"
    train(tmp_path / "plain", "plain", trace)
    train(tmp_path / "checkpointed", mode, trace)
    ops = lambda run: [line.split(" hash=")[0] for line in (tmp_path / run / "rank0" / "diff.log").read_text().splitlines()
                       if " kind=op " in line]
    assert any("phase=backward" in line for line in ops("plain")), ops("plain")
    assert ops("checkpointed") == ops("plain")
    r = numprobe.diff(tmp_path / "plain", tmp_path / "checkpointed")
    assert r["exit_code"] == 0, r["text"]
