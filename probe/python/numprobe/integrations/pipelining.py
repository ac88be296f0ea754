"""numprobe attached to a torch.distributed.pipelining schedule, without editing it.

    from numprobe.integrations.pipelining import PipelineAttachment
    pipeline = PipelineAttachment(probe, schedule, lambda chunk: g * n_microbatches + chunk)
    probe.begin_step(step)
    for g in range(accumulation_steps):
        schedule.step(...)          # every chunk's records carry its global microbatch id
    optimizer.step()
    probe.end_step()

A schedule runs its stages' chunks (its microbatches) in an order of its own, forwards and
backwards interleaved, so no call of the training loop's surrounds one microbatch. Every stage's
``forward_one_chunk``, ``backward_one_chunk`` and ``backward_weight_one_chunk`` (the zero-bubble
schedules' separate weight-gradient pass) and the schedule's loss are wrapped on their instances
(put back by close()): each chunk's records carry the global id ``microbatch_of(chunk)`` names.
The first stage records the model's input and RNG state, the last its output and each
microbatch's loss (``output loss``, as the schedule's loss_fn returns it), every stage the
per-microbatch gradients of its own parameters. Single-stage (GPipe, 1F1B), looped
(Interleaved1F1B, LoopedBFS) and zero-bubble schedules alike.
"""
import functools

import torch


class PipelineAttachment:
    """The probe's hooks on ``schedule`` (a torch.distributed.pipelining schedule, one stage or
    several per rank); it watches every stage's module.

    ``microbatch_of(chunk)`` is the global id of chunk ``chunk`` of the schedule.step() running
    now, numbered so that the same id holds the same samples in every layout (chunk c of the g-th
    schedule.step() of a step of n chunks each: g * n + c), or None for a chunk that is no
    training microbatch (an evaluation's), which then runs unrecorded. ``current_microbatch`` is
    the id of the chunk whose forward or loss runs now, else None (a loss_fn can tell the
    schedule's loss of a microbatch from its shape inference, which calls it on empty tensors)."""

    def __init__(self, probe, schedule, microbatch_of):
        self.probe = probe
        self.current_microbatch = None
        self._microbatch_of = microbatch_of
        self._scope = None  # the forward scope open in a stage's module
        self._handles = []
        self._patched = []  # (object, attribute) of the methods wrapped here
        stages = getattr(schedule, "_stages", None) or [schedule._stage]
        for stage in stages:
            self._patch(stage, "forward_one_chunk", self._forward_chunk)
            self._patch(stage, "backward_one_chunk", self._backward_chunk)
            self._patch(stage, "backward_weight_one_chunk", self._backward_chunk)
        self._patch(schedule, "_maybe_compute_loss", functools.partial(self._loss_of_chunk, schedule))
        for stage in stages:
            probe.watch(stage.submod)
            self._handles.append(stage.submod.register_forward_pre_hook(
                functools.partial(self._before_forward, stage), with_kwargs=True))
            self._handles.append(stage.submod.register_forward_hook(
                functools.partial(self._after_forward, stage), with_kwargs=True, always_call=True))

    def close(self):
        """Removes the hooks and puts the schedule's methods back (the probe stays open)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for owner, attribute in self._patched:
            owner.__dict__.pop(attribute, None)  # the class's method again
        self._patched = []

    def _patch(self, owner, attribute, wrap):
        setattr(owner, attribute, wrap(getattr(owner, attribute)))
        self._patched.append((owner, attribute))

    def _forward_chunk(self, forward):
        def forward_one_chunk(chunk, *args, **kwargs):
            self.current_microbatch = self._microbatch_of(chunk)
            try:
                return forward(chunk, *args, **kwargs)
            finally:
                self.current_microbatch = None

        return forward_one_chunk

    def _backward_chunk(self, backward):
        # The input-gradient pass and, in zero-bubble schedules, the weight-gradient pass apart:
        # the per-microbatch gradients come in whichever computes them.
        def backward_chunk(chunk, *args, **kwargs):
            microbatch = self._microbatch_of(chunk)
            if microbatch is None or not self.probe.enabled:
                return backward(chunk, *args, **kwargs)
            with self.probe.backward_region(microbatch):
                return backward(chunk, *args, **kwargs)

        return backward_chunk

    def _loss_of_chunk(self, schedule, compute):
        # The schedule computes the last stage's loss right after its forward, into its list.
        def maybe_compute_loss(stage, output, target_mbs, chunk, *args, **kwargs):
            losses = schedule._internal_losses
            before = len(losses)
            microbatch = self.current_microbatch = self._microbatch_of(chunk)
            try:
                result = compute(stage, output, target_mbs, chunk, *args, **kwargs)
            finally:
                self.current_microbatch = None
            if microbatch is not None and len(losses) > before and isinstance(losses[-1], torch.Tensor):
                self.probe.record("output", "loss", losses[-1].detach(), microbatch=microbatch)
            return result

        return maybe_compute_loss

    # The model's input is the first stage's, its output the last's; a later stage's forward
    # goes on with the microbatch the first began.
    def _before_forward(self, stage, module, args, kwargs):
        if self.current_microbatch is None or not self.probe.enabled or self._scope is not None:
            return
        name = self.probe._c.model_name
        if stage.is_first:
            self._scope = self.probe._begin_forward(name, self.current_microbatch, module, (args, kwargs))
        else:
            self._scope = self.probe._continue_forward(name, self.current_microbatch, module)

    def _after_forward(self, stage, module, args, kwargs, output):
        if self._scope is None:
            return
        self._scope.close()
        self._scope = None
        if stage.is_last:
            self.probe._end_forward(self.probe._c.model_name, self.current_microbatch, output)
        else:
            self.probe._hook_unsharded_params()  # FSDP2 unsharded them for this forward
