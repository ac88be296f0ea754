"""numprobe.attach: the probe on a training loop as it ships, with no change to the loop.

Steps come from the optimizer's own step hook, microbatches from the root module's forwards
between two optimizer steps, per-microbatch gradients and the backward region from autograd
(whoever calls ``backward``), record names from the forward's argument names and output fields,
and each microbatch's samples from the rows of its inputs, so that the differ pairs microbatches
by the samples they hold instead of by ids a user computes (docs/python.md, "Attach")."""
import dataclasses
import inspect
import warnings
import weakref
from collections.abc import Mapping

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from . import _C
from ._dtensor import is_dtensor
from ._probe import Probe, _in_backward, _index

Kind = _C.Kind

# The record name of one sample (one row of a microbatch's inputs): the differ pairs
# microbatches by the hashes of these records (docs/diff-logs.md, "Microbatches matched by their
# samples"). Dotted under the package's name, so that no argument of a model's forward shadows it.
SAMPLE_RECORD = "numprobe.sample"

# The attachments not closed yet: `numprobe.attach(model, optimizer)` is one line whose result a
# user need not keep (the hooks hold the attachment weakly, so that close() ends it for good).
_live = set()


def attach(model, optimizer=None, *, step=0, **options):
    """Attaches a probe to ``model`` and ``optimizer`` (one, a list, or None) as the training loop
    already runs them, and returns the :class:`Attachment`; ``close()`` removes every hook.

    ``options`` are :class:`numprobe.Probe`'s (``run_dir``, ``kinds``, ``every``, ``trace``, ...;
    the ``PROBE_*`` environment sets those not passed). ``step``: the id of the first step."""
    return Attachment(model, optimizer, step=step, **options)


class Attachment:
    """A probe attached to a model and its optimizers by hooks alone:

    - a step begins at the first forward of ``model`` after the previous step ended (or after
      attach), and ends when every attached optimizer has stepped (its step post-hook): its
      gradients and optimizer state are recorded then, before any ``zero_grad``; an optimizer
      not handed over that steps the model's parameters is attached at its first step;
    - each forward of ``model`` with gradients enabled is one microbatch, numbered
      ``k * world_size + rank`` for the rank's k-th forward of the step; forwards under
      ``torch.no_grad()`` (evaluation) and activation checkpointing's recompute are not;
    - the backward of a microbatch begins when autograd reaches one of its outputs, whoever
      called ``backward``; its ops are traced when the trace setting says so;
    - inputs are named by the forward's parameter names (``input_ids``), outputs by their fields
      (``loss``, ``logits``), tuple positions only where nothing else names them;
    - every row of the inputs that share the batch dimension is one sample, recorded as
      ``input numprobe.sample`` (the hash of that row's bytes, of every such input).
    """

    def __init__(self, model, optimizer=None, *, step=0, forward_hooks=True, **options):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"numprobe.attach() takes a torch.nn.Module, not {type(model).__name__}")
        self.probe = Probe(**options)
        self._optimizers = [_torch_optimizer(o) for o in _as_list(optimizer)]
        self._next_step = _index(step, "attach", "step")
        self._in_step = False
        self._stepped = set()       # id() of the optimizers that stepped in this step
        self._forwards = 0          # this rank's forwards of the step so far
        self._open = None           # (microbatch, scope) of the forward running now
        self._held_microbatch = None  # the microbatch whose outputs come next
        self._held = False          # an integration holds the microbatch open (hold_microbatch)
        self._forward_stack = []    # per running call of the root module: whether it counts
        self._samples_warned = False
        self._backward_open = None  # the microbatch whose backward region is open
        self._signatures = {}
        self._handles = []
        # Set by an integration whose trainer compiles the model it hands over (a wrapper the
        # model does not know of): each step is then noted as one that ran compiled code.
        self.compiled = False
        if not self.probe.enabled:
            return
        inner = _unwrapped_module(model)
        self.probe.watch(inner)
        for o in self._optimizers:
            self.probe.watch_optimizer(o, hyperparameters=True)
        ref = weakref.ref(self)
        # forward_hooks=False: an integration that holds each microbatch itself (hold_microbatch)
        # and records no output of the root module.
        # Under torch.compile the hooks of a compiled module are traced with it: disabled for the
        # compiler, they run as they are, on real tensors (traced, their state would recompile
        # the graph at every call).
        if forward_hooks:
            self._handles.append(model.register_forward_pre_hook(
                torch.compiler.disable(_weakly(ref, Attachment._before_forward)), with_kwargs=True))
            self._handles.append(model.register_forward_hook(
                torch.compiler.disable(_weakly(ref, Attachment._after_forward)), with_kwargs=True,
                always_call=True))
        for o in self._optimizers:
            self._hook_step(o)
        # An optimizer over the model's parameters that nobody handed over (a trainer makes its
        # own, and transformers 4.49's never passes it to callbacks) is adopted at its first
        # step, through torch's hook on every optimizer's step.
        self._parameter_ids = {id(p) for p in inner.parameters()}
        self._handles.append(register_optimizer_step_post_hook(
            lambda opt, args, kwargs: _with(ref, lambda a: a._adopt(opt))))
        _live.add(self)

    enabled = property(lambda self: self.probe.enabled)
    step = property(lambda self: self._next_step - 1 if self._in_step else self._next_step,
                    doc="The step recorded now (or the next one, between steps).")

    def close(self):
        """Ends a step left open (its records are written), removes every hook; the log stays."""
        if self._in_step:
            self._end_step()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.probe.close()
        _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def scalar(self, name, value):
        """A named value of the current step (a number or a one-element tensor)."""
        self.probe.scalar(name, value)

    def watch_optimizer(self, optimizer):
        """Attaches another optimizer (one created after attach, as a trainer's lazily made one)."""
        optimizer = _torch_optimizer(optimizer)
        if any(o is optimizer for o in self._optimizers):
            return
        self._optimizers.append(optimizer)
        if self.probe.enabled:
            self.probe.watch_optimizer(optimizer, hyperparameters=True)
            self._hook_step(optimizer)

    def _adopt(self, optimizer):
        """An optimizer that just stepped: attached, and its step counted, where it updates
        parameters of the model and is not attached yet."""
        if any(o is optimizer for o in self._optimizers) or not any(
                id(p) in self._parameter_ids for group in optimizer.param_groups for p in group["params"]):
            return
        self.watch_optimizer(optimizer)
        self._optimizer_stepped(optimizer)  # its own hook, added now, may not run this time

    def _hook_step(self, optimizer):
        ref = weakref.ref(self)
        self._handles.append(optimizer.register_step_post_hook(
            lambda opt, args, kwargs: _with(ref, lambda a: a._optimizer_stepped(opt))))

    # --- steps ---------------------------------------------------------------------------

    def _begin_step(self):
        self.probe.begin_step(self._next_step)
        self._next_step += 1
        self._in_step = True
        self._stepped.clear()
        self._forwards = 0

    def _end_step(self):
        self._close_held()
        self._close_backward()
        self._forward_stack.clear()  # a forward interrupted before its post-hook ran
        self.probe.end_step()
        self._in_step = False

    def _optimizer_stepped(self, optimizer):
        if not self._in_step:
            return  # a step without a forward seen (the loop's first, before attach): nothing to end
        self._stepped.add(id(optimizer))
        if all(id(o) in self._stepped for o in self._optimizers):
            self._end_step()

    # --- forwards ------------------------------------------------------------------------

    def _before_forward(self, module, args, kwargs):
        # An evaluation (no gradients) and activation checkpointing's recompute are no
        # microbatches; a call of the root module inside its own forward is part of the outer one.
        counted = torch.is_grad_enabled() and not _in_backward()
        outermost = counted and not any(self._forward_stack)
        self._forward_stack.append(counted)
        if outermost and self._open is None and not self._held:
            self._start_microbatch(self._named_inputs(module, args, kwargs), module)

    def _after_forward(self, module, args, kwargs, output):
        if not self._forward_stack:
            return  # hooked while this forward was running
        counted = self._forward_stack.pop()
        if counted and not any(self._forward_stack):
            self._record_outputs(output)

    def _start_microbatch(self, named_inputs, module=None):
        """A microbatch's forward begins: its RNG state, inputs ((name, tensor) pairs) and samples
        are recorded, and its scope opens (op traces)."""
        if not self.probe.enabled:
            return
        if not self._in_step:
            self._begin_step()
        self._close_scope()
        probe = self.probe
        microbatch = self._forwards * probe.world_size + probe.rank
        self._forwards += 1
        self._close_backward()
        probe._c.begin_forward(probe._c.model_name, microbatch, [], [], [])  # the RNG state
        with probe._untraced():
            _record_device_rng(probe, microbatch, named_inputs)
            for name, t in named_inputs:
                probe._record(Kind.input, name, microbatch, t)
            self._record_samples(microbatch, named_inputs)
        if self.compiled:
            probe._c.note_compiled()
        elif module is not None:
            probe._note_if_compiled(module)
        self._open = (microbatch, _C.Scope(probe._c.model_name, root=True))
        self._held_microbatch = microbatch

    def hold_microbatch(self, named_inputs, module=None):
        """For an integration whose trainer hands the batch to a step function of its own
        (Lightning's ``training_step``): starts the microbatch with ``named_inputs`` and holds it
        open until ``release_microbatch()``; the root module's forwards inside it record their
        outputs under it instead of starting microbatches of their own."""
        self._close_held()
        self._start_microbatch(named_inputs, module)
        self._held = self._open is not None

    def backward_root(self, loss):
        """The tensor a held microbatch's backward starts from (its loss, as the trainer passes it
        to ``backward``): autograd reaching it opens the microbatch's backward region."""
        if self._held:
            self._close_scope()
            self._hook_backward(loss, self._held_microbatch)

    def release_microbatch(self):
        self._close_held()

    def _close_held(self):
        self._close_scope()
        self._held = False

    def _close_scope(self):
        if self._open is not None:
            _, scope = self._open
            self._open = None
            scope.close()

    def _record_outputs(self, output):
        """The root module's forward returned ``output`` (a tensor, a ModelOutput, a dict, ...):
        its tensors are recorded by field name, and autograd reaching any of them opens the
        microbatch's backward region."""
        microbatch = self._held_microbatch
        if microbatch is None:
            return
        if not self._held:
            self._close_scope()
            self._held_microbatch = None
        probe = self.probe
        probe._hook_unsharded_params()
        for name, t in _named_leaves(output, "output"):
            probe._record_output(name, microbatch, t)
            self._hook_backward(t, microbatch)

    def _hook_backward(self, t, microbatch):
        if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None:
            ref = weakref.ref(self)
            t.register_hook(lambda grad: _with(ref, lambda a: a._backward_reached(microbatch)))

    def _named_inputs(self, module, args, kwargs):
        """(name, tensor) of every tensor among the forward's arguments, named by its parameter."""
        signature = self._signature(module)
        arguments = None
        if signature is not None:
            try:
                arguments = signature.bind_partial(*args, **kwargs).arguments
            except TypeError:
                arguments = None
        if arguments is None:  # not bindable: positions, then keywords
            arguments = {f"input.{i}": a for i, a in enumerate(args)}
            arguments.update(kwargs)
        named = []
        for name, value in arguments.items():
            parameter = signature.parameters.get(name) if signature is not None else None
            if parameter is not None and parameter.kind is inspect.Parameter.VAR_KEYWORD:
                named.extend(_named_leaves(value, None, numbers=True))  # **kwargs: each by its own key
            else:
                named.extend(_named_leaves(value, name, keep_prefix=True, numbers=True))
        return named

    def _signature(self, module):
        """The signature of the forward a wrapper runs (DistributedDataParallel's and
        torch.compile's take ``*args, **kwargs``): the wrapped module's."""
        key = id(module)
        if key not in self._signatures:
            try:
                self._signatures[key] = inspect.signature(_innermost(module).forward)
            except (TypeError, ValueError, AttributeError):
                self._signatures[key] = None
        return self._signatures[key]

    def _record_samples(self, microbatch, named):
        """One record per sample: row i of every input whose first dimension is the batch's."""
        if not self.probe._c.records(Kind.input):
            return
        batch = [t for _, t in named if t.dim() >= 1 and t.layout == torch.strided and not is_dtensor(t)
                 and not t.is_quantized]
        if not batch or batch[0].shape[0] == 0:
            return
        rows, device = batch[0].shape[0], batch[0].device
        # Flattened to one row of bytes per sample (a view as uint8 of each contiguous row), of
        # the inputs on the first one's device that share its first dimension.
        pieces = [t.detach().reshape(rows, -1).contiguous() for t in batch
                  if t.shape[0] == rows and t.device == device and t[0].numel() > 0]
        try:
            as_bytes = torch.cat([p.view(torch.uint8) for p in pieces], dim=1)
        except (RuntimeError, TypeError) as e:  # a dtype with no byte view: no samples, training goes on
            if not self._samples_warned:
                self._samples_warned = True
                warnings.warn(f"numprobe: the inputs' rows cannot be read as bytes ({e}); microbatches are "
                              "not matched by their samples")
            return
        for i in range(rows):
            self.probe._c.record(Kind.input, SAMPLE_RECORD, microbatch, as_bytes[i], None, None)

    # --- backward ------------------------------------------------------------------------

    def _backward_reached(self, microbatch):
        """Autograd reached an output of ``microbatch``: its backward region opens (gradients
        tagged with it, ops traced) and closes when this backward pass ends."""
        if self._backward_open == microbatch:
            return
        self._close_backward()
        self._backward_open = microbatch
        self.probe._hook_unsharded_params()
        self.probe._c.begin_backward(microbatch)
        ref = weakref.ref(self)
        torch.autograd.Variable._execution_engine.queue_callback(
            lambda: _with(ref, lambda a: a._close_backward(microbatch)))

    def _close_backward(self, microbatch=None):
        if self._backward_open is None or (microbatch is not None and microbatch != self._backward_open):
            return
        self._backward_open = None
        self.probe._c.end_backward()


def _as_list(optimizer):
    if optimizer is None:
        return []
    if isinstance(optimizer, (list, tuple)):
        return list(optimizer)
    return [optimizer]


def _torch_optimizer(optimizer):
    """The torch.optim optimizer inside a trainer's wrapper (Accelerate's AcceleratedOptimizer,
    Lightning's LightningOptimizer hold it as ``.optimizer``): its step hooks fire only when the
    wrapper really steps (not on accumulation microbatches)."""
    # AcceleratedOptimizer subclasses torch.optim.Optimizer without being one (no hooks of its own).
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer):
            break
        optimizer = inner
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"numprobe.attach(): the optimizer must be a torch.optim.Optimizer (or hold one as "
                        f".optimizer), not {type(optimizer).__name__}")
    return optimizer


def _innermost(model):
    """The module inside DistributedDataParallel's and torch.compile's wrappers."""
    from torch.nn.parallel import DistributedDataParallel
    for _ in range(8):
        if isinstance(model, DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, torch.nn.Module):
            model = model._orig_mod
        else:
            break
    return model


def _unwrapped_module(model):
    """The module whose parameters a wrapper holds under its own prefix (DistributedDataParallel's
    ``module.``); torch.compile's and checkpointing's segments the probe drops by name."""
    from torch.nn.parallel import DistributedDataParallel
    while isinstance(model, DistributedDataParallel):
        model = model.module
    return model


def _named_leaves(value, prefix, keep_prefix=False, numbers=False):
    """(name, tensor) for every tensor in ``value``: named by its dict keys (a ModelOutput's
    fields), dataclass fields and namedtuple fields; tuple and list positions where nothing else
    names it. A lone tensor is ``prefix`` itself; below the top, names join with '.'.
    ``keep_prefix``: ``prefix`` starts every name (an argument's), not only positional ones.
    ``numbers``: a Python int or float is a leaf too, as a 0-dim tensor of its value (a forward's
    arguments: a loss normalizer such as the Trainer's ``num_items_in_batch`` is often one, and
    a layout that computes it otherwise must show there, not only in the loss)."""
    named = []
    _collect(value, [prefix] if prefix is not None else [], keep_prefix or prefix is None, named, 0,
             numbers)
    return named


def _collect(value, path, named_path, out, depth, numbers=False):
    if isinstance(value, torch.Tensor):
        out.append((".".join(path) or "input", value))
        return
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        # float64/int64: the value exactly as Python holds it (no RNG, no device, no sync).
        dtype = torch.float64 if isinstance(value, float) else torch.int64
        try:
            out.append((".".join(path) or "input", torch.tensor(value, dtype=dtype)))
        except (OverflowError, ValueError, RuntimeError):
            pass  # an int beyond int64 is no record, and never a failed forward
        return
    if depth > 8:
        return
    children = None
    if isinstance(value, Mapping):
        children = [(str(k), v) for k, v in value.items()]
        keyed = True
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
        keyed = True
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        children = list(zip(value._fields, value))
        keyed = True
    elif isinstance(value, (tuple, list)):
        children = [(str(i), v) for i, v in enumerate(value)]
        keyed = False
    if not children:
        return
    for key, child in children:
        # A keyed field names itself; a position needs the name above it.
        base = path if (named_path or not keyed) else []
        _collect(child, base + [key], True, out, depth + 1, numbers)


def _record_device_rng(probe, microbatch, named):
    """The generator state of each accelerator device the inputs are on (the CPU one is the
    C++ probe's begin_forward): reading it consumes no randomness."""
    if not probe._c.records(Kind.rng):
        return
    devices = []
    for _, t in named:
        if t.device.type == "cuda" and t.device not in devices:
            devices.append(t.device)
    for device in devices:
        state = torch.cuda.get_rng_state(device)
        probe._c.record(Kind.rng, str(device), microbatch, state, None, None)


def _weakly(ref, method):
    def hook(*args):
        attachment = ref()
        if attachment is not None:
            return method(attachment, *args)
        return None
    return hook


def _with(ref, fn):
    attachment = ref()
    if attachment is not None:
        fn(attachment)
