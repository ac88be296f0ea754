"""numprobe's Python API: options, steps, records, scopes, errors, and that the observer does
not perturb the training it observes."""
import os

import pytest
import torch

import numprobe


def log_lines(probe):
    with open(probe.log_path) as f:
        return f.read().splitlines()


def records_of(lines, kind):
    return [line for line in lines if f" kind={kind} " in line]


def small_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Dropout(0.2), torch.nn.Linear(8, 2))


def train(model, steps, probe=None, microbatches=2):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if probe:
        probe.watch(model)
        probe.watch_optimizer(optimizer)
    losses = []
    for step in range(steps):
        if probe:
            probe.begin_step(step)
        for mb in range(microbatches):
            x = torch.randn(3, 4)
            out = probe.forward(mb, model, x) if probe else model(x)
            loss = out.square().mean()
            if probe:
                probe.tap("out.doubled", out * 2)
                probe.backward(mb, loss)
            else:
                loss.backward()
            losses.append(loss.detach())
        optimizer.step()
        if probe:
            probe.scalar("loss", losses[-1])
            probe.end_step()
        optimizer.zero_grad()
    return losses


def test_the_observer_changes_no_result_and_draws_no_random_number(tmp_path):
    plain = small_model()
    plain_losses = train(plain, 3)
    plain_rng = torch.get_rng_state()
    probed = small_model()
    probe = numprobe.Probe(tmp_path, on_error="throw")
    probed_losses = train(probed, 3, probe)
    assert torch.equal(torch.get_rng_state(), plain_rng)
    assert all(torch.equal(a, b) for a, b in zip(plain_losses, probed_losses))
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), probed.state_dict().values()))


def test_every_kind_is_recorded_with_its_microbatch(tmp_path):
    probe = numprobe.Probe(tmp_path, on_error="throw")
    train(small_model(), 2, probe)
    lines = log_lines(probe)
    assert lines[0].startswith("#numprobe ") and "rank=0 world_size=1" in lines[0]
    for kind in ("param", "rng", "input", "output", "tap", "output_grad", "mb_grad", "grad", "scalar", "optim"):
        assert records_of(lines, kind), kind
    mb_grads = records_of(lines, "mb_grad")
    assert len(mb_grads) == 2 * 2 * 4  # steps x microbatches x parameters
    assert {line.split(" mb=")[1].split()[0] for line in mb_grads} == {"0", "1"}
    optim = {line.split(" name=")[1].split()[0] for line in records_of(lines, "optim")}
    assert {"0.weight.exp_avg", "0.weight.exp_avg_sq", "0.weight.step"} <= optim
    # The update count is a scalar record, as LibTorch's AdamW step count is.
    step_line = next(line for line in records_of(lines, "optim") if " name=0.weight.step " in line)
    assert " value=1" in step_line


def test_options_and_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_KINDS", "param,grad")
    probe = numprobe.Probe(tmp_path / "env")
    train(small_model(), 1, probe)
    assert {line.split()[1] for line in log_lines(probe)[1:] if " kind=" in line} == {"kind=param", "kind=grad"}
    explicit = numprobe.Probe(tmp_path / "explicit", kinds="-mb_grad,-op", every=2)  # what the code says wins
    train(small_model(), 3, explicit)
    lines = [line for line in log_lines(explicit)[1:] if " kind=" in line]
    assert not records_of(lines, "mb_grad") and records_of(lines, "input")
    assert {line.split()[0] for line in lines} == {"step=0", "step=2"}
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ranked = numprobe.Probe(tmp_path / "ranked")
    assert (ranked.rank, ranked.world_size) == (1, 2) and ranked.log_path.endswith("rank1/diff.log")


def test_disabled_probe_records_nothing_and_still_trains(tmp_path):
    probe = numprobe.Probe(tmp_path, enabled=False)
    assert not probe.enabled and probe.log_path == ""
    losses = train(small_model(), 2, probe)
    assert len(losses) == 4 and not any(tmp_path.iterdir())


def test_bad_use_raises_clear_python_exceptions(tmp_path):
    with pytest.raises(TypeError, match="unexpected option 'kind'"):
        numprobe.Probe(tmp_path, kind="param")
    with pytest.raises(ValueError, match="PROBE_KINDS|kind"):
        numprobe.Probe(tmp_path, kinds="param,weights")
    with pytest.raises(ValueError, match="every"):
        numprobe.Probe(tmp_path, every=0)
    with pytest.raises(ValueError, match="trace"):
        numprobe.Probe(tmp_path, trace="steps=x")
    probe = numprobe.Probe(tmp_path / "run", on_error="throw")
    probe.begin_step(3)
    probe.end_step()
    with pytest.raises(ValueError, match="only go forward"):
        probe.begin_step(2)
    with pytest.raises(ValueError, match=">= 0"):
        probe.begin_step(-1)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        probe.watch(torch.zeros(3))
    with pytest.raises(TypeError, match="optimizer"):
        probe.watch_optimizer(object())
    with pytest.raises(ValueError, match="unknown kind"):
        probe.record("weights", "w", torch.zeros(2))
    with pytest.raises(ValueError, match="3 elements"):
        probe.scalar("loss", torch.zeros(3))
    with pytest.raises(TypeError, match="option 'every' must be an int, not str"):
        numprobe.Probe(tmp_path, every="2")
    with pytest.raises(TypeError, match="takes a tensor or None"):
        probe.record("tap", "w", [1.0])
    with pytest.raises(TypeError, match="must be an integer"):
        probe.forward(0.5, torch.nn.Identity(), torch.zeros(1))
    with pytest.raises(ValueError, match="does not exist|error"):
        numprobe.diff(tmp_path / "missing", tmp_path / "run")


def test_a_log_that_cannot_be_written_stops_recording_not_training(tmp_path, capfd):
    blocker = tmp_path / "file"
    blocker.write_text("")
    probe = numprobe.Probe(blocker / "run")  # a directory under a file: cannot be made
    assert not probe.enabled and "cannot" in probe.log_error
    assert len(train(small_model(), 1, probe)) == 2
    assert "numprobe stopped recording" in capfd.readouterr().err


def test_unsupported_dtypes_are_recorded_as_unsupported(tmp_path):
    probe = numprobe.Probe(tmp_path, on_error="throw")
    probe.begin_step(0)
    probe.record("tap", "quantized", torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8), microbatch=0)
    probe.record("tap", "meta", torch.ones(3, device="meta"), microbatch=0)
    probe.record("tap", "nothing", None, microbatch=0)
    probe.end_step()
    lines = log_lines(probe)
    assert any(" name=quantized " in line and " unsupported=quantized" in line for line in lines)
    assert any(" name=meta " in line and " unsupported=meta" in line for line in lines)
    assert any(" name=nothing " in line and " none" in line for line in lines)


def test_scopes_nest_and_name_taps_of_the_active_probe(tmp_path):
    with numprobe.Scope("layers.3") as outer:
        with numprobe.Scope("attention") as inner:
            assert inner.name == "layers.3.attention" == numprobe.current_scope()
        assert outer.name == "layers.3"
    assert numprobe.current_scope() == ""
    outer, inner = numprobe.Scope("a"), numprobe.Scope("b")
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match="reverse order"):
        outer.__exit__(None, None, None)
    inner.__exit__(None, None, None)
    outer.__exit__(None, None, None)
    with pytest.raises(ValueError):
        numprobe.Scope("")
    numprobe.tap("nowhere", torch.ones(2))  # no probe yet in this process is fine either way
    probe = numprobe.Probe(tmp_path, on_error="throw")
    probe.begin_step(0)
    numprobe.tap("module.level", torch.ones(2))
    probe.end_step()
    assert any(" kind=tap name=module.level " in line for line in log_lines(probe))


def test_diff_returns_the_json_document(tmp_path):
    a, b = numprobe.Probe(tmp_path / "a"), numprobe.Probe(tmp_path / "b")
    train(small_model(), 2, a)
    train(small_model(), 2, b)
    del a, b
    result = numprobe.diff(tmp_path / "a", tmp_path / "b", steps="0:1", html=str(tmp_path / "r.html"))
    assert result["exit_code"] == 0 and result["result"] == "equal"
    assert result["records_compared"] > 0 and "RESULT: equal" in result["text"]
    assert (tmp_path / "r.html").stat().st_size > 1000


def test_close_removes_every_hook(tmp_path):
    model = small_model()
    with numprobe.Probe(tmp_path, trace="steps=0;scopes=.*") as probe:
        probe.watch(model)
        hooked = sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())
        assert hooked > 0 and all(p._backward_hooks for p in model.parameters())
    assert sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules()) == 0
    assert not any(p._backward_hooks for p in model.parameters())


def test_a_backward_that_other_code_runs_carries_the_microbatch_of_its_region(tmp_path):
    # A trainer's own backward call (DeepSpeed's engine.backward(loss)) inside backward_region:
    # the gradients carry the region's microbatch, not the last forward's.
    probe = numprobe.Probe(tmp_path, on_error="throw")
    model = small_model()
    probe.watch(model)
    probe.begin_step(0)
    losses = {mb: probe.forward(mb, model, torch.ones(2, 4)).square().mean() for mb in (3, 1)}
    for mb, loss in losses.items():
        with probe.backward_region(mb):
            loss.backward()
    with pytest.raises(ValueError, match="backward_region"):
        with probe.backward_region(-1):
            pass
    probe.end_step()
    probe.close()
    mbs = [line.split(" mb=")[1].split()[0] for line in records_of(log_lines(probe), "mb_grad")]
    assert mbs == ["3"] * 4 + ["1"] * 4


def test_a_later_pipeline_stage_names_its_microbatch_and_records_no_input(tmp_path):
    # What a pipeline attachment calls for a stage after the first: its taps carry the
    # microbatch's id; the model's input and RNG state are the first stage's records.
    probe = numprobe.Probe(tmp_path, on_error="throw")
    stage = torch.nn.Linear(4, 4)
    probe.begin_step(0)
    for mb in (5, 2):
        scope = probe._continue_forward(probe._c.model_name, mb, stage)
        try:
            numprobe.tap("stage.out", stage(torch.ones(2, 4)))
        finally:
            scope.close()
    probe.end_step()
    probe.close()
    lines = log_lines(probe)
    assert not records_of(lines, "input") and not records_of(lines, "rng")
    assert [line.split(" mb=")[1].split()[0] for line in records_of(lines, "tap")] == ["5", "2"]
