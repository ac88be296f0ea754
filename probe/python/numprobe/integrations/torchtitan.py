"""numprobe attached to torchtitan's Trainer (torchtitan 0.3), without editing torchtitan.

    from numprobe.integrations.torchtitan import ProbedTrainer
    config = ProbedTrainer.Config(..., probe=ProbeConfig(enable=True, run_dir="out/fsdp"))
    trainer = config.build()        # or --probe.enable --probe.run_dir out/fsdp on the CLI
    trainer.train()

ProbedTrainer is torchtitan's Trainer with one config section more (``probe``); with it enabled
every step records, as numprobe.Probe does for a hand-written loop (docs/python.md): the weights
at the step's start, each gradient-accumulation microbatch's input, output (the logits) and loss
and the per-microbatch gradients, the accumulated (clipped) gradients, every inner optimizer's
state and the learning rate of the update taken (before the LR schedulers step), and in the
run's header the layout and this rank's coordinates on torchtitan's mesh.

attach(trainer, probe) does the same for any object with the Trainer's ``model_parts``,
``optimizers``, ``parallel_dims`` and ``step`` (a loop of one's own that drives torchtitan's
model, parallelize and optimizer code); ProbedTrainer calls it.

Microbatches are numbered globally, as the differ pairs them across layouts: microbatch i of a
step on the data-parallel (``batch`` mesh) rank r of d is ``i * d + r``, so a run with one rank
and d times the gradient-accumulation steps numbers the same samples alike when its data loader
yields them in that order.

Under pipeline parallelism each of the schedule's microbatches is one of the data loader's
(torchtitan fetches ``local_batch_size / pipeline_parallel_microbatch_size`` of them per
forward_backward_step), so i counts them through the step: chunk c of the g-th
forward_backward_step with n chunks is i = g * n + c. Every schedule torchtitan builds is
attached (numprobe.integrations.pipelining), single-stage (GPipe, 1F1B), looped (Interleaved1F1B, LoopedBFS) and zero-bubble ones
whose weight gradients come in a pass of their own: the first stage records the model's input and
RNG state, the last its output (the logits) and each microbatch's loss, every stage the
per-microbatch gradients of its parameters, each under the id of the microbatch it runs.
"""
import contextlib
from dataclasses import dataclass, field

import torch

import numprobe
from numprobe.integrations.pipelining import PipelineAttachment

from torchtitan.trainer import Trainer


@dataclass(kw_only=True, slots=True)
class ProbeConfig:
    """The ``probe`` section of ProbedTrainer.Config (``--probe.enable`` and so on)."""

    enable: bool = False
    """Record this run (rank<R>/diff.log under run_dir)."""
    run_dir: str = ""
    """Where the logs go; empty: PROBE_DIR, else a new numbered directory under ./out."""
    kinds: str = "all"
    """Which record kinds: "all", "param,grad", "-mb_grad" (numprobe.Probe's kinds)."""
    every: int = 1
    """Record every N-th step."""
    trace: str = ""
    """An op trace (PROBE_TRACE's form); empty: none, or PROBE_TRACE's."""


def describe(parallel_dims):
    """The run's layout and this rank's coordinates on every mesh dimension larger than one,
    for the header's setup text: 'torchtitan partial_dtensor fsdp 2 x tp 2; rank fsdp 1 tp 0'."""
    pd = parallel_dims
    degrees = [(n, d) for n, d in (("pp", pd.pp), ("dp_replicate", pd.dp_replicate), ("fsdp", pd.dp_shard),
                                   ("cp", pd.cp), ("tp", pd.tp), ("ep", pd.ep)) if d > 1]
    layout = " x ".join(f"{n} {d}" for n, d in degrees) or "one rank"
    coordinates = []
    for name, _ in degrees:
        mesh = _mesh(pd, name)
        if mesh is not None:
            coordinates.append(f"{name} {mesh.get_local_rank()}")
    where = f"; rank {' '.join(coordinates)}" if coordinates else ""
    return f"torchtitan {pd.spmd_backend} {layout}{where}"


def _mesh(parallel_dims, name):
    # fsdp is the partial_dtensor backend's name for dp_shard (x cp); the others name it dp_shard.
    for candidate in ((name,) if name != "fsdp" else ("fsdp", "dp_shard")):
        try:
            mesh = parallel_dims.get_optional_mesh(candidate)
        except (KeyError, ValueError, RuntimeError):
            mesh = None
        if mesh is not None:
            return mesh
    return None


# torchtitan's data-parallel mesh dim names (the dense mesh's and partial_dtensor's).
_DATA_PARALLEL_DIMS = ("dp_replicate", "dp_shard", "fsdp")


class Attachment:
    """The probe's hooks on a torchtitan trainer; begin_step() before each train_step(),
    microbatch() around each forward_backward_step(); the optimizers' step ends the step."""

    def __init__(self, trainer, probe):
        self.probe = probe
        batch = trainer.parallel_dims.get_optional_mesh("batch") if trainer.parallel_dims.dp_enabled else None
        self._dp_degree, self._dp_rank = (batch.size(), batch.get_local_rank()) if batch is not None else (1, 0)
        if trainer.parallel_dims.spmd_backend == "full_dtensor":
            # Every activation is a DTensor over the whole mesh: the batch dim Shard(0) over the
            # data-parallel dims, the loss Partial there, the unsharded parameters' gradients
            # labelled Replicate though each rank holds its own rows' contribution. Along those
            # dims each rank's piece is its own microbatch, recorded as such.
            probe._own_microbatch_dims = _DATA_PARALLEL_DIMS
        self._index = 0  # this rank's microbatch within the step
        self._base = None  # _index at the start of the forward_backward_step running now
        self._microbatch = None  # the global id of the microbatch whose forward runs now
        self._scope = None
        self._handles = []
        self._pipeline = None  # the schedule's attachment, under pipeline parallelism
        for part in trainer.model_parts:
            probe.watch(part)
        if trainer.parallel_dims.pp_enabled:
            # The schedule's chunks name their microbatches; an evaluation's (outside
            # forward_backward_step) name none.
            self._pipeline = PipelineAttachment(
                probe, trainer.pp_schedule, lambda chunk: None if self._base is None else self._global(chunk))
        else:
            for part in trainer.model_parts:
                self._handles.append(part.register_forward_pre_hook(self._before_forward, with_kwargs=True))
                self._handles.append(part.register_forward_hook(self._after_forward, with_kwargs=True,
                                                                always_call=True))
        for optimizer in trainer.optimizers.optimizers:
            probe.watch_optimizer(optimizer)
        # After every inner optimizer stepped and before the LR schedulers do: the recorded
        # learning rate is the one of the update just taken.
        self._handles.append(trainer.optimizers.register_step_post_hook(lambda *_: self.end_step()))

    def begin_step(self, step):
        self._index = 0
        self.probe.begin_step(step)

    def end_step(self):
        self.probe.end_step()

    @contextlib.contextmanager
    def microbatch(self, count=1):
        """One forward_backward_step: a gradient-accumulation microbatch's forward (pre/post
        hooks), loss and backward, or under pipeline parallelism the schedule's ``count``
        microbatches. Yields the global id of the first."""
        self._base = self._index
        if self._pipeline is None:
            self._microbatch = self._global(0)
        try:
            yield self._global(0)
        finally:
            self.probe._c.end_backward()
            self._microbatch = self._base = None
            self._index += count

    def record_loss(self, loss):
        """The microbatch's loss as torchtitan returns it (this rank's sum over the global count
        of valid tokens), an output record of the microbatch. (Under pipeline parallelism each
        microbatch's loss is recorded as the schedule computes it, and the sum returned is not.)"""
        if self._microbatch is not None and isinstance(loss, torch.Tensor):
            self.probe.record("output", "loss", loss.detach(), microbatch=self._microbatch)

    def close(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._pipeline is not None:
            self._pipeline.close()
            self._pipeline = None
        self.probe.close()

    def _global(self, chunk):
        return (self._base + chunk) * self._dp_degree + self._dp_rank

    # A forward outside microbatch() (an evaluation, a validator) is not a training microbatch.
    # (Under pipeline parallelism the schedule's attachment hooks the stages instead.)
    def _before_forward(self, module, args, kwargs):
        if self._microbatch is None or not self.probe.enabled or self._scope is not None:
            return
        self._scope = self.probe._begin_forward(self._name(), self._microbatch, module, (args, kwargs))

    def _after_forward(self, module, args, kwargs, output):
        if self._scope is None:
            return
        self._scope.close()
        self._scope = None
        self.probe._end_forward(self._name(), self._microbatch, output)
        # The loss and backward follow inside torchtitan's step: the per-microbatch gradients
        # carry this microbatch's id (microbatch() ends the region).
        self.probe._c.begin_backward(self._microbatch)

    def _name(self):
        return self.probe._c.model_name


def attach(trainer, probe=None, **options):
    """Attaches ``probe`` (a numprobe.Probe; by default one made from ``options`` with this
    rank's layout as its setup) to ``trainer``; returns the Attachment."""
    if probe is None:
        options.setdefault("setup", describe(trainer.parallel_dims))
        probe = numprobe.Probe(**options)
    return Attachment(trainer, probe)


class ProbedTrainer(Trainer):
    """torchtitan's Trainer with the probe attached when ``config.probe.enable``."""

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        probe: ProbeConfig = field(default_factory=ProbeConfig)

    def __init__(self, config):
        super().__init__(config)
        self.probe_attachment = None
        if config.probe.enable:
            self.probe_attachment = attach(self, **_probe_options(config.probe))

    def train_step(self, data_iterator):
        if self.probe_attachment is not None:
            self.probe_attachment.begin_step(self.step)
        return super().train_step(data_iterator)

    def forward_backward_step(self, *, input_dict, labels, global_valid_tokens):
        if self.probe_attachment is None:
            return super().forward_backward_step(input_dict=input_dict, labels=labels,
                                                 global_valid_tokens=global_valid_tokens)
        count = len(input_dict) if isinstance(input_dict, list) else 1  # the pipeline's microbatches
        with self.probe_attachment.microbatch(count):
            loss = super().forward_backward_step(input_dict=input_dict, labels=labels,
                                                 global_valid_tokens=global_valid_tokens)
            self.probe_attachment.record_loss(loss)
        return loss

    def close(self):
        if self.probe_attachment is not None:
            self.probe_attachment.close()
            self.probe_attachment = None
        super().close()


def _probe_options(config):
    options = {"kinds": config.kinds, "every": config.every}
    if config.run_dir:
        options["run_dir"] = config.run_dir
    if config.trace:
        options["trace"] = config.trace
    return options
