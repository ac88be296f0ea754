"""torch.compile with the probe: taps are operators of the graph (numprobe::tap), so a model
with taps compiles with fullgraph=True and no graph break, records what eager records, and a
comparison of an eager run with a compiled one allows for the fused kernels' rounding."""
import pathlib

import pytest
import torch
import torch._dynamo

import numprobe

STEPS = 3


class Mlp(torch.nn.Module):
    """Two linear layers, a GELU tapped between them. `constant`: the compiled code multiplies
    the GELU by it (a compile that changes the math); eager code never does."""

    def __init__(self, constant=1.0):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.fc2 = torch.nn.Linear(32, 4)
        self.constant = constant

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        if torch.compiler.is_compiling() and self.constant != 1.0:
            h = h * self.constant
        numprobe.tap("fc1.gelu", h)
        return self.fc2(h)


def train(run_dir, backend=None, constant=1.0, seed=0, optimizer="sgd", trace=None):
    """STEPS steps of one microbatch; `backend` None: eager. `trace`: the probe's op trace."""
    torch.manual_seed(seed)
    model = Mlp(constant)
    opt = (torch.optim.SGD(model.parameters(), lr=0.1) if optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=0.01))
    probe = numprobe.Probe(run_dir, rank=0, world_size=1, trace=trace)
    probe.watch(model)
    probe.watch_optimizer(opt)
    run = model if backend is None else torch.compile(model, backend=backend, fullgraph=True)
    torch._dynamo.utils.counters.clear()
    for step in range(STEPS):
        probe.begin_step(step)
        x = torch.randn(6, 8, generator=torch.Generator().manual_seed(100 * seed + step))
        out = probe.forward(0, run, x)
        probe.backward(0, out.square().mean())
        opt.step()
        probe.end_step()
        opt.zero_grad()
    probe.close()
    torch._dynamo.reset()  # the next model compiles afresh
    return dict(torch._dynamo.utils.counters["graph_break"])


def op_names(run_dir, phase):
    log = pathlib.Path(run_dir, "rank0", "diff.log").read_text().splitlines()
    return [line.split(" name=")[1].split(" ")[0] for line in log
            if " kind=op " in line and f" phase={phase} " in line]


def tap_lines(run_dir):
    log = pathlib.Path(run_dir, "rank0", "diff.log").read_text().splitlines()
    return [line for line in log if " kind=tap " in line]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_fullgraph_with_taps_has_no_graph_break(tmp_path, backend):
    breaks = train(tmp_path / "compiled", backend)
    assert breaks == {}, f"graph breaks under {backend}: {breaks}"
    # The operator returns nothing: without its declared effect AOTAutograd would drop it.
    assert len(tap_lines(tmp_path / "compiled")) == STEPS
    ends = [line for line in pathlib.Path(tmp_path, "compiled", "rank0", "diff.log").read_text().splitlines()
            if line.startswith("#end ")]
    assert len(ends) == STEPS and all(line.endswith(" compiled=1") for line in ends), ends


def test_aot_eager_records_what_eager_records(tmp_path):
    train(tmp_path / "eager")
    train(tmp_path / "compiled", "aot_eager")
    assert not any("compiled" in line for line in (tmp_path / "eager" / "rank0" / "diff.log").read_text().splitlines())
    r = numprobe.diff(tmp_path / "eager", tmp_path / "compiled")
    assert r["exit_code"] == 0, r["text"]
    assert tap_lines(tmp_path / "eager") == tap_lines(tmp_path / "compiled")


@pytest.mark.parametrize("seed,optimizer", [(0, "sgd"), (5, "adamw")])
def test_eager_against_inductor_is_noise(tmp_path, seed, optimizer):
    """Inductor's fused GELU computes the same function rounded otherwise: not a bug."""
    train(tmp_path / "eager", seed=seed, optimizer=optimizer)
    train(tmp_path / "compiled", "inductor", seed=seed, optimizer=optimizer)
    r = numprobe.diff(tmp_path / "eager", tmp_path / "compiled")
    if r["exit_code"] == 0:
        pytest.skip("this CPU's inductor kernels rounded the GELU as eager's did")
    assert r["exit_code"] == 4, r["text"]


def test_a_compile_that_changes_the_math_is_a_bug(tmp_path):
    train(tmp_path / "eager")
    train(tmp_path / "compiled", "inductor", constant=1 + 1e-4)
    r = numprobe.diff(tmp_path / "eager", tmp_path / "compiled")
    assert r["exit_code"] == 1, r["text"]
    assert "FIRST UNEXPLAINED DIVERGENCE  step 0  forward  mb 0  tap fc1.gelu" in r["text"], r["text"]


def test_compiled_taps_of_a_probe_that_is_gone_record_nothing(tmp_path):
    """The graph outlives the probe it was compiled under: its taps find no active probe."""
    model = Mlp()
    run = torch.compile(model, backend="aot_eager", fullgraph=True)
    probe = numprobe.Probe(tmp_path / "run", rank=0, world_size=1)
    probe.begin_step(0)
    probe.forward(0, run, torch.randn(2, 8))
    probe.end_step()
    probe.close()
    del probe
    run(torch.randn(2, 8))  # no error, nothing recorded anywhere
    torch._dynamo.reset()
    assert len(tap_lines(tmp_path / "run")) == 1


TRACED = [("aot_eager", lambda: numprobe.traced_backend("aot_eager")), ("inductor", lambda: "inductor")]


@pytest.mark.parametrize("name,backend", TRACED, ids=[n for n, _ in TRACED])
def test_a_traced_compiled_forward_records_its_nodes_as_eager_names_its_ops(tmp_path, name, backend):
    """Under an op trace the graph's nodes are op records named as eager's (module scope, ATen
    name), one per node; the backward graph records none; still no graph break."""
    train(tmp_path / "eager", trace="steps=0")
    breaks = train(tmp_path / "compiled", backend(), trace="steps=0")
    assert breaks == {}, f"graph breaks under {name}: {breaks}"
    eager = op_names(tmp_path / "eager", "forward")
    assert eager == ["fc1/aten::linear#0", "model/aten::gelu#0", "fc2/aten::linear#0"], eager
    assert op_names(tmp_path / "compiled", "forward") == eager
    assert op_names(tmp_path / "compiled", "backward") == []
    assert op_names(tmp_path / "eager", "backward"), "the eager backward is traced"


def test_untraced_compiles_record_no_nodes(tmp_path):
    train(tmp_path / "compiled", "inductor")
    assert op_names(tmp_path / "compiled", "forward") == []


def test_traced_aot_eager_against_traced_eager_is_equal(tmp_path):
    train(tmp_path / "eager", trace="steps=0")
    train(tmp_path / "compiled", numprobe.traced_backend("aot_eager"), trace="steps=0")
    r = numprobe.diff(tmp_path / "eager", tmp_path / "compiled")
    assert r["exit_code"] == 0, r["text"]


def test_traced_inductor_names_the_fused_node_as_the_root_cause(tmp_path):
    train(tmp_path / "eager", trace="steps=0")
    train(tmp_path / "compiled", "inductor", trace="steps=0")
    r = numprobe.diff(tmp_path / "eager", tmp_path / "compiled")
    if r["exit_code"] == 0:
        pytest.skip("this CPU's inductor kernels rounded the GELU as eager's did")
    assert r["exit_code"] == 4, r["text"]
    assert "model/aten::gelu#0" in r["text"], r["text"]


@pytest.mark.parametrize("constant", [1 + 1e-3, 1 + 1e-5])
def test_a_traced_compile_that_adds_an_op_is_a_bug_naming_it(tmp_path, constant):
    """The compiled graph's extra multiplication is an op of one run only whose output differs
    from its input by more than rounding: a bug, named, even where the network's amplification
    of the fused GELU's rounding would explain the outputs' difference. (The limit: a change
    larger than the GELU pair's noise ceiling, 10 x 2u = 1.2e-6 here, plus 2u.)"""
    train(tmp_path / "eager", trace="steps=0")
    train(tmp_path / "compiled", "inductor", constant=constant, trace="steps=0")
    r = numprobe.diff(tmp_path / "eager", tmp_path / "compiled")
    assert r["exit_code"] == 1, r["text"]
    assert "[different_ops]" in r["text"] and "model/aten::mul#0" in r["text"], r["text"]
