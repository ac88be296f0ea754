"""numprobe.attach on a training loop as users write it (examples/python/attach_loop.py): one line,
no change to the loop; records named by the forward's fields; samples recorded; every optimizer
setting recorded; layouts that must agree compare clean, and the bugs real trainers shipped are
headlined at their records."""
import re
import sys

import pytest
import torch

import numprobe
from conftest import ROOT, diff_logs, headline, run

EXAMPLE = ROOT / "examples" / "python" / "attach_loop.py"


def train(tmp_path, name, *flags, ranks=1, probe=1):
    out = tmp_path / name
    losses = tmp_path / f"{name}.losses"
    cmd = [sys.executable, EXAMPLE] if ranks == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", EXAMPLE]
    run(cmd + ["--probe", str(probe), "--losses", losses, *flags], env={"PROBE_DIR": str(out)})
    return out, losses.read_text()


def log_lines(run_dir, rank=0):
    return (run_dir / f"rank{rank}" / "diff.log").read_text().splitlines()


class TinyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(4, 8)
        self.drop = torch.nn.Dropout(0.25)
        self.down = torch.nn.Linear(8, 3)

    def forward(self, x, scale=None):
        h = self.drop(torch.tanh(self.up(x)))
        return {"logits": self.down(h), "hidden": h}


def tiny_loop(attach_dir=None, zero_grad_first=True, hand_over=True):
    torch.manual_seed(0)
    model = TinyMLP()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95))
    attachment = numprobe.attach(model, optimizer if hand_over else None, run_dir=attach_dir,
                                 on_error="throw") if attach_dir else None
    g = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(3):
        if zero_grad_first:
            optimizer.zero_grad()
        for _ in range(2):
            x = torch.randn(3, 4, generator=g)
            loss = model(x)["logits"].square().mean()
            loss.backward()
            losses.append(loss.detach())
        optimizer.step()
        if not zero_grad_first:
            optimizer.zero_grad()
        with torch.no_grad():  # an evaluation between steps: no microbatch
            model(torch.randn(1, 4, generator=g))
    if attachment:
        attachment.close()
    return losses, [p.detach().clone() for p in model.parameters()], torch.get_rng_state()


def test_attach_changes_no_result_and_draws_no_random_number(tmp_path):
    plain = tiny_loop()
    probed = tiny_loop(tmp_path / "run")
    assert all(torch.equal(a, b) for a, b in zip(plain[0], probed[0]))
    assert all(torch.equal(a, b) for a, b in zip(plain[1], probed[1]))
    assert torch.equal(plain[2], probed[2])


@pytest.mark.parametrize("zero_grad_first", [True, False])
def test_attach_records_steps_named_fields_samples_and_every_setting(tmp_path, zero_grad_first):
    tiny_loop(tmp_path / "run", zero_grad_first)
    lines = log_lines(tmp_path / "run")
    steps = sorted({int(l.split()[0][5:]) for l in lines if l.startswith("step=")})
    assert steps == [0, 1, 2]
    text = "\n".join(lines)
    # Inputs by the forward's parameter names, outputs by their fields.
    assert re.search(r"^step=0 kind=input name=x mb=0 ", text, re.M)
    assert re.search(r"^step=0 kind=output name=logits mb=1 ", text, re.M)
    assert re.search(r"^step=0 kind=output_grad name=logits mb=1 ", text, re.M)
    # Three rows a microbatch: three samples.
    assert len(re.findall(r"^step=0 kind=input name=numprobe\.sample(#\d+)? mb=0 ", text, re.M)) == 3
    # Two microbatches per step (the evaluation under no_grad is none), their gradients tagged.
    assert re.search(r"^step=2 kind=mb_grad name=up\.weight mb=1 ", text, re.M)
    assert not re.search(r"kind=mb_grad name=up\.weight mb=2 ", text)
    # The step's gradients before zero_grad, wherever the loop puts it.
    assert not re.search(r"kind=grad name=\S+ none", text)
    # Every setting of the optimizer's group, per parameter.
    for setting in ("lr", "weight_decay", "betas.0", "betas.1", "eps", "amsgrad", "maximize"):
        assert re.search(rf"^step=0 kind=optim name=up\.weight\.{re.escape(setting)} value=", text, re.M), setting
    assert re.search(r"name=up\.weight\.betas\.0 value=0\.8\b", text)
    assert not re.search(r"name=up\.weight\.foreach ", text)


def test_an_optimizer_never_handed_over_is_adopted_at_its_first_step(tmp_path):
    # A trainer that makes its optimizer itself and never passes it on (transformers 4.49's
    # callbacks get none): the log is the one of the optimizer handed over, byte for byte.
    tiny_loop(tmp_path / "given")
    tiny_loop(tmp_path / "adopted", hand_over=False)
    assert log_lines(tmp_path / "adopted") == log_lines(tmp_path / "given")
    # An optimizer of another model is not adopted.
    model, other = TinyMLP(), TinyMLP()
    attachment = numprobe.attach(model, run_dir=tmp_path / "other", on_error="throw")
    optimizer = torch.optim.SGD(other.parameters(), lr=0.1)
    model(torch.ones(1, 4))["logits"].sum().backward()
    other(torch.ones(1, 4))["logits"].sum().backward()
    optimizer.step()
    assert attachment.step == 0 and not attachment._optimizers
    attachment.close()


def test_close_removes_every_hook(tmp_path):
    from torch.optim.optimizer import _global_optimizer_post_hooks
    global_hooks = len(_global_optimizer_post_hooks)
    model = TinyMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    attachment = numprobe.attach(model, optimizer, run_dir=tmp_path / "run")
    attachment.close()
    assert not model._forward_pre_hooks and not model._forward_hooks
    assert not optimizer._optimizer_step_post_hooks
    assert len(_global_optimizer_post_hooks) == global_hooks
    assert all(not p._backward_hooks for p in model.parameters() if p._backward_hooks is not None)


class Scaled(torch.nn.Module):
    """A forward that takes numbers beside its tensor, as the Trainer passes num_items_in_batch."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x, count, scale=1.0, seed=None):
        return (self.w * x).sum() * scale / count


def test_number_arguments_are_recorded_and_one_beyond_int64_is_skipped(tmp_path):
    model = Scaled()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    attachment = numprobe.attach(model, optimizer, run_dir=tmp_path / "run")
    loss = model(torch.arange(3.0), 7, scale=0.5, seed=2**70)  # the last is no int64
    loss.backward()
    optimizer.step()
    attachment.close()
    text = (tmp_path / "run" / "rank0" / "diff.log").read_text()
    assert "kind=input name=count mb=0 " in text and "dtype=int64 shape=[]" in text
    assert "kind=input name=scale mb=0 " in text and "dtype=float64 shape=[]" in text
    assert "name=seed" not in text


LAYOUTS = [
    ("ga4x2", ["--ga", "4", "--batch", "2"], 1),
    ("ddp2", ["--ga", "4", "--batch", "1"], 2),
    ("fsdp2", ["--fsdp", "--ga", "4", "--batch", "1"], 2),
]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("single")
    return train(tmp, "single", "--ga", "8", "--batch", "1")[0]


@pytest.mark.parametrize("name,flags,ranks", LAYOUTS, ids=[l[0] for l in LAYOUTS])
def test_layouts_compare_clean_against_one_process(tmp_path, single, name, flags, ranks):
    out, _ = train(tmp_path, name, *flags, ranks=ranks)
    code, report = diff_logs(single, out)
    assert code in (0, 4), f"{name}: exit {code}, headline {headline(report)}"


def test_accumulation_1x8_against_4x2_sets_aside_the_regrouped_microbatches(tmp_path):
    base, _ = train(tmp_path, "ga1", "--ga", "1", "--batch", "8")
    test, _ = train(tmp_path, "ga4", "--ga", "4", "--batch", "2")
    code, report = diff_logs(base, test)
    assert code in (0, 4), headline(report)
    assert report["regrouped_records"]["pairs"] > 0


FAULTS = [
    # (fault, layout flags, ranks, the headline it must have)
    ("rank-unscaled", ["--ga", "4", "--batch", "1"], 2, r"^(output_grad logits mb \d+|mb_grad \S+ mb \d+|grad \S+)$"),
    ("decay-norms", ["--ga", "4", "--batch", "1"], 2, r"^optim \S*norm\S*\.weight_decay$"),
    ("scheduler-early", ["--ga", "4", "--batch", "1"], 2, r"^optim \S+\.lr$"),
    ("untied-head", ["--ga", "4", "--batch", "1"], 2, r"head\.weight"),
    ("ga-mean", ["--ga", "8", "--batch", "1"], 1, r"^(output_grad logits mb \d+|mb_grad \S+ mb \d+)$"),
]


@pytest.mark.parametrize("fault,flags,ranks,expected", FAULTS, ids=[f[0] for f in FAULTS])
def test_faults_are_headlined_at_their_records(tmp_path, single, fault, flags, ranks, expected):
    out, _ = train(tmp_path, fault, *flags, "--fault", fault, ranks=ranks)
    code, report = diff_logs(single, out)
    assert code == 1, f"{fault}: exit {code}"
    assert re.search(expected, headline(report) or ""), f"{fault}: headline {headline(report)}"
    if fault == "untied-head":  # told as untied, not as a name the runs do not share
        likely = report["likely_causes"][0]
        assert likely["rule"] == "untied", likely
        # The tied run lists the head among the embedding's names, and the head starts as its copy.
        assert "lists head.weight as another name of param embed.weight (tied=), and at step 0 it " \
               "holds bit for bit the values of param embed.weight" in likely["message"], likely
