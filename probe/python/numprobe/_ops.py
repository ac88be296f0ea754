"""The probe's operators (numprobe::tap, defined by the C++ library) as torch.compile sees them.

Inside a compiled region numprobe.tap() becomes a call of the operator, which the graph keeps:
an operator that returns nothing and mutates nothing is dead code to AOTAutograd unless it is
declared to have a side effect, and ORDERED also keeps it where it stood among the graph's
other effects. The kernel records into the active probe when the graph runs."""
import torch
from torch._higher_order_ops.effects import _EffectType, _register_effectful_op

from . import _C  # noqa: F401  (loads libnumprobe, which registers the operators)
from ._dtensor import is_dtensor, local_piece

tap_op = torch.ops.numprobe.tap.default
# Private API (torch 2.13): tests/python/test_compile.py pins that it still keeps the call.
_register_effectful_op(tap_op, _EffectType.ORDERED)


def tap(name, t, shard=None, partial=None):
    """numprobe.tap() in traced code: a DTensor's placements are fixed when the graph is traced,
    so its piece is worked out then and the operator receives the local tensor."""
    if is_dtensor(t):
        t, shard, partial = local_piece(t)
    shape, offset = shard if shard is not None else ((), ())
    index, count = partial if partial is not None else (0, 1)
    tap_op(name, t, list(shape), list(offset), index, count)
