"""numprobe.Probe: the C++ probe with Python's modules, optimizers and DTensors.

The C++ probe (numprobe._C.Probe) hashes, computes the statistics, numbers repeated names and
writes the log; this class decides what to record and when, as probe::Probe does for LibTorch
modules, so that the two write the same records for the same training."""
import contextlib
import operator
import sys
import threading
import weakref

import torch
from torch.utils._pytree import tree_leaves

from . import _C, _compile, _ops
from ._dtensor import Unrecordable, is_dtensor, local_piece, warn_unrecordable
from ._fsdp import fsdp_params, unsharded_param

Kind = _C.Kind
_active = None  # weakref to the most recently constructed enabled probe (numprobe.tap)


class Probe:
    """Records, per step, a hash and health statistics of every watched parameter's value,
    every microbatch's forward input and output, output gradient and per-microbatch parameter
    gradient, the accumulated gradients, the optimizer's state, taps and scalars, into
    ``<run_dir>/rank<R>/diff.log``.

    Options are named as the C++ ``ProbeOptions``' fields: ``enabled``, ``run_dir``,
    ``output_root``, ``every``, ``kinds`` (``"all"``, ``"param,grad"``, ``"-mb_grad"``),
    ``rank``, ``world_size``, ``setup``, ``torch_hash``, ``model_name``, ``trace``,
    ``on_error`` (``"report"`` or ``"throw"``). The environment (PROBE_ENABLE, PROBE_DIR,
    PROBE_EVERY, PROBE_KINDS, PROBE_TORCH_HASH, PROBE_ON_ERROR, PROBE_SETUP, PROBE_TRACE, and
    torchrun's RANK and WORLD_SIZE) sets those not passed.
    """

    def __init__(self, run_dir=None, **options):
        global _active
        self._c = _C.Probe(run_dir=None if run_dir is None else str(run_dir), **options)
        self._params = {}  # name -> _Watched, in watch order
        self._optimizers = []
        self._with_hyperparameters = set()  # id() of the optimizers whose settings are recorded
        self._handles = []  # module hooks (scopes)
        # id(module) -> whether it runs compiled code, found once a step: a walk of every
        # submodule per microbatch costs ~1 us a module once torch._dynamo is loaded.
        self._compiled = {}
        self._scoped_modules = weakref.WeakSet()
        self._threads = threading.local()  # .scopes: the module scopes open on a thread
        self._tracing = self._c.tracing
        # Mesh dim names along which each rank's per-microbatch DTensors are its own microbatch
        # (local_piece's own_dims; a trainer integration sets them, torchtitan's full_dtensor).
        self._own_microbatch_dims = ()
        if self._c.enabled:
            _active = weakref.ref(self)
        # Compiled code's op records: Inductor inserts them while a traced probe is open.
        self._node_records = self._c.enabled and self._tracing
        if self._node_records:
            _compile.install()

    # What the C++ probe knows.
    enabled = property(lambda self: self._c.enabled, doc="Whether it records (enabled, and its log has not failed).")
    log_error = property(lambda self: self._c.log_error, doc="Why recording stopped, or ''.")
    log_path = property(lambda self: self._c.log_path, doc="<run_dir>/rank<R>/diff.log ('' when disabled).")
    run_dir = property(lambda self: self._c.run_dir)
    step = property(lambda self: self._c.step, doc="The current step.")
    rank = property(lambda self: self._c.rank)
    world_size = property(lambda self: self._c.world_size)

    def close(self):
        """Removes every hook the probe installed (it stops watching; its log stays as
        written). Also what leaving ``with numprobe.Probe(...) as probe:`` does."""
        for w in self._params.values():
            w.remove()
        for handle in self._handles:
            handle.remove()
        self._params, self._optimizers, self._handles = {}, [], []
        self._with_hyperparameters = set()
        self._scoped_modules = weakref.WeakSet()  # watch() again scopes them again
        if self._node_records:
            self._node_records = False
            _compile.uninstall()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def watch(self, module, prefix=""):
        """Watches every parameter of ``module``, named ``prefix`` + its named_parameters()
        name without the segments wrappers add (activation checkpointing's
        ``_checkpoint_wrapped_module``, torch.compile's ``_orig_mod``, FSDP1's
        ``_fsdp_wrapped_module``), so a wrapped and a plain model name them alike: its value at
        begin_step, its per-microbatch gradient (a tensor hook, before accumulation), its .grad
        at end_step. A parameter under several names (tied weights: a head tied to its
        embedding) is watched under the first, and its param records list the others
        (``tied=``). DTensor parameters (tensor parallel, FSDP2) are
        recorded as their local shard with its global offset. Under FSDP2 the per-microbatch
        gradient is taken from the unsharded parameter, before the reduce-scatter. With an op
        trace set, every submodule's forward opens a scope named after it."""
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"numprobe: watch() takes a torch.nn.Module, not {type(module).__name__}")
        if not self._c.enabled:
            return
        sharded = fsdp_params(module)
        first_name = {}  # a tensor under several names (tied weights): watched under the first
        for name, parameter in module.named_parameters(remove_duplicate=False):
            name = prefix + _unwrapped(name)
            first = first_name.setdefault(id(parameter), name)
            if first != name:
                self._c.tie(name, first)
                continue
            fsdp = sharded.get(id(parameter))
            if self._watch(name, parameter, hook=fsdp is None) and fsdp is not None:
                self._hook_unsharded(name, *fsdp)
        if self._tracing:
            self._scope_modules(module, prefix)

    def watch_parameter(self, name, parameter):
        """Watches one tensor as a parameter named ``name`` (see watch())."""
        if not isinstance(parameter, torch.Tensor):
            raise TypeError(f"numprobe: watch_parameter('{name}') takes a tensor, not {type(parameter).__name__}")
        if self._c.enabled:
            self._watch(name, parameter, hook=True)

    def watch_optimizer(self, optimizer, hyperparameters=False):
        """Records, at every end_step(), the state of ``optimizer`` (any torch.optim optimizer)
        for each watched parameter it holds: each state tensor as ``<param>.<state>``
        (exp_avg, exp_avg_sq, momentum_buffer, ...), its update count as ``<param>.step`` and its
        group's learning rate as ``<param>.lr``. With ``hyperparameters``, every other setting its
        group holds too (``<param>.weight_decay``, ``<param>.betas.0``, ``<param>.eps``,
        ``<param>.momentum``, ...; numbers and flags, not the implementation switches such as
        ``foreach``), so that a setting one run applies to other parameters than the other is told
        at its record. Call optimizer.step() before end_step()."""
        if not (hasattr(optimizer, "state") and hasattr(optimizer, "param_groups")):
            raise TypeError(f"numprobe: watch_optimizer() takes a torch.optim optimizer, not {type(optimizer).__name__}")
        if self._c.enabled and all(o is not optimizer for o in self._optimizers):
            self._optimizers.append(optimizer)
        if self._c.enabled and hyperparameters:
            self._with_hyperparameters.add(id(optimizer))

    def begin_step(self, step):
        """Names the step (>= 0, and only forward: ValueError otherwise) and records every
        watched parameter's value: the weights this step's forward reads."""
        self._c.begin_step(_index(step, "begin_step", "step"))
        self._compiled.clear()  # a module may have been compiled since
        if self._c.records(Kind.param):
            for w in self._params.values():
                self._record(Kind.param, w.name, None, w.parameter)

    def end_step(self):
        """Records every watched parameter's .grad (or none) and the watched optimizers' state,
        then writes the step (one flush; the step's only host sync). Call it after the step's
        backward passes and optimizer.step()."""
        if self._c.enabled:
            if self._c.records(Kind.grad):
                for w in self._params.values():
                    self._record(Kind.grad, w.name, None, w.parameter.grad)
            if self._optimizers and self._c.records(Kind.optim):
                self._record_optimizer_state()
        self._c.end_step()

    def forward(self, microbatch, module, *args, **kwargs):
        """Runs ``module(*args, **kwargs)`` for global microbatch ``microbatch`` and returns its
        output, recording the RNG fingerprint and the tensor inputs before it and the tensor
        outputs (and their gradients, in backward) after it."""
        return self.forward_named(self._c.model_name, microbatch, module, *args, **kwargs)

    def forward_named(self, name, microbatch, module, *args, **kwargs):
        """forward() under another record name (a pipeline stage's)."""
        microbatch = _index(microbatch, "forward", "microbatch")
        if not self._c.enabled:
            return module(*args, **kwargs)
        scope = self._begin_forward(name, microbatch, module, (args, kwargs))
        try:
            output = module(*args, **kwargs)
        finally:
            scope.close()
        self._end_forward(name, microbatch, output)
        return output

    def _begin_forward(self, name, microbatch, module, inputs):
        """What forward_named does before the module runs; returns the scope to close after it.
        (Also what a trainer integration's forward pre-hook calls.)"""
        pieces = [self._input_piece(name, t) for t in _tensors(inputs)]
        shards = [s for _, s, _ in pieces]
        partials = [p for _, _, p in pieces]
        self._c.begin_forward(name, microbatch, [t for t, _, _ in pieces],
                              shards if any(shards) else [], partials if any(partials) else [])
        self._note_if_compiled(module)
        return _C.Scope(name, root=True)

    def _continue_forward(self, name, microbatch, module):
        """A pipeline stage after the first: the forward of global microbatch ``microbatch`` goes
        on in ``module``, its taps, ops and gradients carrying that id; the model's inputs and RNG
        state are the first stage's records, not this one's. Returns the scope to close after it."""
        self._c.continue_forward(name, microbatch)
        self._note_if_compiled(module)
        return _C.Scope(name, root=True)

    def _note_if_compiled(self, module):
        compiled = self._compiled.get(id(module))
        if compiled is None:
            compiled = self._compiled[id(module)] = _compiled(module)
        if compiled:
            self._c.note_compiled()

    def _end_forward(self, name, microbatch, output):
        """What forward_named does after the module ran: its outputs' records."""
        self._hook_unsharded_params()
        outputs = _tensors(output)
        for i, t in enumerate(outputs):
            self._record_output(name if len(outputs) == 1 else f"{name}.{i}", microbatch, t)

    def backward(self, microbatch, loss, grad=None):
        """``loss.backward(grad)`` for global microbatch ``microbatch``: its per-microbatch
        gradient records carry that id, and its ops are traced when the trace setting says so."""
        with self.backward_region(_index(microbatch, "backward", "microbatch")):
            torch.autograd.backward(loss, grad)

    @contextlib.contextmanager
    def backward_region(self, microbatch):
        """A ``with`` block whose backward passes are global microbatch ``microbatch``'s, as in
        backward(), for a backward that other code runs (a trainer's ``engine.backward(loss)``,
        a pipeline schedule's)."""
        self._hook_unsharded_params()
        self._c.begin_backward(_index(microbatch, "backward_region", "microbatch"))
        try:
            yield
        finally:
            self._c.end_backward()

    def tap(self, name, t, shard=None, partial=None):
        """A named intermediate tensor of the current forward microbatch. A DTensor is recorded
        as its local piece; a plain tensor that is a piece of a global one says where it sits,
        ``shard=(global_shape, offset)``, or which summand it is, ``partial=(index, count)``.
        A forward recomputed in backward (activation checkpointing) records nothing again.
        In code torch.compile traces, the tap is an operator of the graph that records into
        the active probe when the graph runs."""
        if torch.compiler.is_compiling():
            _ops.tap(name, t, shard, partial)
            return
        if not self._c.enabled or _in_backward():
            return
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"numprobe: tap('{name}') takes a tensor, not {type(t).__name__}")
        with self._untraced():
            if is_dtensor(t):
                piece = self._piece(name, t, Kind.tap)
                if piece is None:
                    return
                t, shard, partial = piece
            self._c.tap(name, t, shard, partial)

    def scalar(self, name, value):
        """A named value of this step (loss, grad norm, lr): a number, or a one-element tensor
        whose value is read with the step's figures at end_step (no host sync now)."""
        if not self._c.enabled:
            return
        if isinstance(value, torch.Tensor):
            if is_dtensor(value):
                value, _, partial = local_piece(value)
                if partial is not None:
                    raise ValueError(f"numprobe: scalar '{name}' is a partial sum (a DTensor with a Partial "
                                     "placement): record its full_tensor()")
            if value.numel() > 1:
                raise ValueError(f"numprobe: scalar '{name}' has {value.numel()} elements (a scalar has one; "
                                 "tap() records a tensor)")
            self._c.scalar(name, value.detach())
        else:
            self._c.scalar(name, float(value))

    def record(self, kind, name, t, microbatch=None):
        """Any tensor under an explicit kind (``"tap"``, ``"output"``, ...), for trainers with
        their own hooks."""
        try:
            kind = Kind.__members__[kind] if isinstance(kind, str) else Kind(kind)
        except KeyError:
            raise ValueError(f"numprobe: record(): unknown kind '{kind}' (kinds: {', '.join(Kind.__members__)})") from None
        if microbatch is not None:
            microbatch = _index(microbatch, "record", "microbatch")
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"numprobe: record('{name}') takes a tensor or None, not {type(t).__name__}")
        if self._c.enabled:
            with self._untraced():
                self._record(kind, name, microbatch, t)

    # --- recording ---------------------------------------------------------------------

    def _record(self, kind, name, microbatch, t):
        if t is None:
            self._c.record(kind, name, microbatch, None, None, None)
            return
        piece = self._piece(name, t, kind)
        if piece is not None:
            self._c.record(kind, name, microbatch, *piece)

    def _piece(self, name, t, kind=None):
        """local_piece(t), or None (and a warning) for placements the log cannot describe.
        A per-microbatch record's DTensor is its rank's own microbatch along the probe's
        own-microbatch mesh dims (local_piece)."""
        own = self._own_microbatch_dims if kind in _PER_MICROBATCH else ()
        try:
            return local_piece(t, own)
        except Unrecordable as e:
            warn_unrecordable(name, e)
            return None

    def _input_piece(self, name, t):
        piece = self._piece(name, t, Kind.input)
        return piece if piece is not None else (t._local_tensor, None, None)  # then as a whole

    def _untraced(self):
        """While an op trace is set, the observer's own ATen calls are not traced."""
        return _C.Untraced() if self._tracing else _NOTHING

    def _record_output(self, name, microbatch, t):
        if not is_dtensor(t):
            self._c.record_output(name, microbatch, t)  # its gradient by a C++ hook
            return
        with self._untraced():
            self._record(Kind.output, name, microbatch, t)
        # A leaf output (a parameter returned as is) would keep every forward's hook for good.
        if t.requires_grad and t.grad_fn is not None and self._c.records(Kind.output_grad):
            ref = weakref.ref(self)
            t.register_hook(lambda grad: _with(ref, lambda p: p._record(Kind.output_grad, name, microbatch, grad)))

    def _record_optimizer_state(self):
        # In parameter order, as the C++ probe: the state map's own order differs between runs.
        groups = [_groups_by_parameter(o) for o in self._optimizers]
        for w in self._params.values():
            for optimizer, by_parameter in zip(self._optimizers, groups):
                state = optimizer.state.get(w.parameter)
                if state:
                    self._record_state(w.name, state)
                group = by_parameter.get(id(w.parameter))
                if group is None:
                    continue
                self._record_lr(w.name, group.get("lr"))
                if id(optimizer) in self._with_hyperparameters:
                    self._record_hyperparameters(w.name, group)

    def _record_state(self, name, state):
        for key, value in state.items():
            if key != "step" and isinstance(value, torch.Tensor):
                self._record(Kind.optim, f"{name}.{key}", None, value)
        step = state.get("step")
        if isinstance(step, torch.Tensor):
            self._c.record_scalar(Kind.optim, f"{name}.step", local_piece(step)[0].detach())
        elif step is not None:
            self._c.record_scalar(Kind.optim, f"{name}.step", float(step))

    def _record_lr(self, name, rate):
        # The learning rate of the update just taken (a tensor when the optimizer keeps it as one).
        if isinstance(rate, torch.Tensor):
            self._c.record_scalar(Kind.optim, f"{name}.lr", local_piece(rate)[0].reshape(-1)[0].detach())
        elif isinstance(rate, (int, float)):
            self._c.record_scalar(Kind.optim, f"{name}.lr", float(rate))

    def _record_hyperparameters(self, name, group):
        for key, value in _hyperparameters(group):
            self._c.record_scalar(Kind.optim, f"{name}.{key}", value)

    # --- hooks ---------------------------------------------------------------------------

    def _watch(self, name, parameter, hook):
        old = self._params.get(name)
        if old is not None and old.parameter is parameter:
            return False  # watching again is harmless
        if old is not None:
            old.remove()  # a new tensor under the name (a rebuilt model) replaces the old one
        watched = _Watched(name, parameter)
        if hook and parameter.requires_grad and self._c.kinds_contain(Kind.mb_grad):
            watched.handles.append(parameter.register_hook(_mb_grad_hook(weakref.ref(self), name)))
        self._params[name] = watched
        return True

    def _hook_unsharded(self, name, owner, fsdp_param):
        """FSDP2: the sharded parameter's .grad comes after the reduce-scatter (every rank's
        microbatches summed), so each backward's contribution is taken from the unsharded
        parameter, which FSDP2 makes at its first all-gather: hooked once it exists
        (_hook_unsharded_params), by a forward pre-hook of the module that owns it, which runs
        after FSDP2's own (the all-gather), and after each forward and before each backward of
        the probe's. torch.compile traces the module's hooks, where registering a tensor hook
        is a graph break: traced, the pre-hook does nothing and the probe's calls hook it."""
        if not self._c.kinds_contain(Kind.mb_grad):
            return
        watched, ref = self._params[name], weakref.ref(self)
        watched.fsdp_param = fsdp_param

        def hook_unsharded(*_):
            if not torch.compiler.is_compiling():
                _with(ref, lambda p: p._hook_unsharded_param(watched))

        watched.handles.append(owner.register_forward_pre_hook(hook_unsharded))

    def _hook_unsharded_params(self):
        for watched in self._params.values():
            if watched.fsdp_param is not None:
                self._hook_unsharded_param(watched)

    def _hook_unsharded_param(self, watched):
        param = unsharded_param(watched.fsdp_param)
        if param is None or param is watched.unsharded:
            return
        watched.unsharded = param
        watched.handles.append(param.register_hook(_mb_grad_hook(weakref.ref(self), watched.name)))

    def _scope_modules(self, module, prefix):
        """Each submodule's forward inside a scope named after it (op records' names)."""
        ref = weakref.ref(self)
        for raw, sub in module.named_modules(prefix=prefix.rstrip(".")):
            # A wrapped module's scope is its wrapper's (the same path once unwrapped).
            path = _unwrapped(raw)
            if not path or sub in self._scoped_modules or raw.rsplit(".", 1)[-1] in _WRAPPERS:
                continue
            self._scoped_modules.add(sub)
            open_scope, close_scope = _scope_hooks(ref, path)
            self._handles.append(sub.register_forward_pre_hook(open_scope))
            self._handles.append(sub.register_forward_hook(close_scope, always_call=True))

    def _scope_stack(self):
        stack = getattr(self._threads, "scopes", None)
        if stack is None:
            stack = self._threads.scopes = []
        return stack

    def _open_scope(self, path):
        stack = self._scope_stack()
        if _in_backward():
            # Activation checkpointing's recompute: its ops are no backward ops of the module
            # (the forward traced them already), so they are not traced.
            stack.append((path, _Recompute()))
            return
        parent = stack[-1][0] if stack else ""
        # Scopes join with '.': open the part of the path below the enclosing module's.
        relative = path[len(parent) + 1:] if parent and path.startswith(parent + ".") else path
        stack.append((path, _C.Scope(relative)))

    def _close_scope(self, path):
        stack = self._scope_stack()
        if stack and stack[-1][0] == path:
            stack.pop()[1].close()


class _Recompute:
    """A module's forward recomputed in backward: untraced until it returns (close)."""
    __slots__ = ("_untraced",)

    def __init__(self):
        self._untraced = _C.Untraced()
        self._untraced.__enter__()

    def close(self):
        self._untraced.__exit__(None, None, None)


class _Watched:
    """A watched parameter and its hooks; under FSDP2 (with mb_grad recorded) its FSDPParam and the
    unsharded parameter its gradient hook is on."""
    __slots__ = ("name", "parameter", "handles", "fsdp_param", "unsharded")

    def __init__(self, name, parameter):
        self.name, self.parameter, self.handles = name, parameter, []
        self.fsdp_param = self.unsharded = None

    def remove(self):
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def _mb_grad_hook(ref, name):
    """Runs before accumulation into .grad, once per backward: one microbatch's contribution.
    Holds the probe weakly: autograd may run a hook after the probe is gone."""
    def hook(grad):
        probe = ref()
        if probe is None or not probe._c.records(Kind.mb_grad):
            return None
        with probe._untraced():
            piece = probe._piece(name, grad, Kind.mb_grad)
            if piece is not None:
                probe._c.record_mb_grad(name, *piece)
        return None
    return hook


_NOTHING = contextlib.nullcontext()


_PER_MICROBATCH = (Kind.input, Kind.output, Kind.output_grad, Kind.mb_grad, Kind.tap)

# The attribute names under which wrappers hold the module they wrap.
_WRAPPERS = ("_checkpoint_wrapped_module", "_orig_mod", "_fsdp_wrapped_module")


def _unwrapped(name):
    """A parameter or module path without the wrappers' segments."""
    return ".".join(part for part in name.split(".") if part not in _WRAPPERS)


def _in_backward():
    """Whether autograd's engine is running a backward on this thread: a forward run there is
    activation checkpointing's recompute (torch.utils.checkpoint, reentrant or not), whose taps
    the forward already recorded."""
    return torch._C._current_graph_task_id() != -1


def _compiled(module):
    """Whether running ``module`` runs code torch.compile generated: it or a submodule is
    compiled (``torch.compile(module)``, or ``module.compile()`` in place, as torchtitan compiles
    each block)."""
    dynamo = sys.modules.get("torch._dynamo.eval_frame")  # not loaded: nothing was compiled
    if dynamo is None or not isinstance(module, torch.nn.Module):
        return False
    return any(isinstance(m, dynamo.OptimizedModule) or getattr(m, "_compiled_call_impl", None) is not None
               for m in module.modules())


def _groups_by_parameter(optimizer):
    """id(parameter) -> the param group that holds it."""
    return {id(p): g for g in optimizer.param_groups for p in g["params"]}


# Settings of how an optimizer computes, not of what: the same update either way.
_IMPLEMENTATION_SWITCHES = frozenset(("params", "lr", "foreach", "fused", "capturable", "differentiable"))


def _hyperparameters(group):
    """(key, number) for every setting a param group holds but lr (recorded as ``.lr``): numbers,
    flags as 0/1, tuples of numbers by position (``betas.0``), one-element tensors; in key order."""
    out = []
    for key in sorted(k for k in group if k not in _IMPLEMENTATION_SWITCHES and isinstance(k, str)):
        value = group[key]
        values = value if isinstance(value, (tuple, list)) else (value,)
        for i, v in enumerate(values):
            label = key if len(values) == 1 and not isinstance(value, (tuple, list)) else f"{key}.{i}"
            if isinstance(v, torch.Tensor) and v.numel() == 1 and not is_dtensor(v):
                out.append((label, v.detach().reshape(())))
            elif isinstance(v, (bool, int, float)):
                out.append((label, float(v)))
    return out


def _scope_hooks(ref, path):
    """A module's forward pre-hook and forward hook that open and close its scope; in code
    torch.compile traces, calls of the scope operators (numprobe/_compile.py)."""
    def open_scope(module, args):
        if torch.compiler.is_compiling():
            _ops.scope_open_op(path)
        else:
            _with(ref, lambda p: p._open_scope(path))

    def close_scope(module, args, output):
        if torch.compiler.is_compiling():
            _ops.scope_close_op(path)
        else:
            _with(ref, lambda p: p._close_scope(path))

    return open_scope, close_scope


def _with(ref, fn):
    probe = ref()
    if probe is not None:
        fn(probe)


def _tensors(value):
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


def _index(value, call, what):
    try:
        value = operator.index(value)  # an int, a numpy integer, a 0-dim integer tensor
    except TypeError:
        raise TypeError(f"numprobe: {call}(): the {what} must be an integer, not {type(value).__name__}") from None
    if value < 0:
        raise ValueError(f"numprobe: {call}({value}): {what} ids are >= 0")
    return value


def tap(name, t, shard=None, partial=None):
    """Records ``t`` as a tap of the active probe (the most recently constructed enabled one);
    nothing when there is none. Traced by torch.compile, it is the graph's operator (Probe.tap)."""
    if torch.compiler.is_compiling():
        _ops.tap(name, t, shard, partial)
        return
    probe = _active() if _active else None
    if probe is not None:
        probe.tap(name, t, shard, partial)
