"""The probe's operators (defined by the C++ library) as torch.compile sees them.

Inside a compiled region numprobe.tap() becomes a call of numprobe::tap, and under an op trace
the module scopes and the graph's nodes become calls of numprobe::scope_open, scope_close and
node (numprobe/_compile.py). The graph keeps them: an operator that returns nothing and mutates
nothing is dead code to AOTAutograd unless it is declared to have a side effect, and ORDERED
also keeps it where it stood among the graph's other effects (a node inside its scope). The
kernels record into the active probe when the graph runs."""
import torch
from torch._higher_order_ops.effects import _EffectType, _register_effectful_op

from . import _C  # noqa: F401  (loads libnumprobe, which registers the operators)
from ._dtensor import is_dtensor, local_piece

tap_op = torch.ops.numprobe.tap.default
scope_open_op = torch.ops.numprobe.scope_open.default
scope_close_op = torch.ops.numprobe.scope_close.default
node_op = torch.ops.numprobe.node.default
# Private API (torch 2.13): tests/python/test_compile.py pins that it still keeps the calls.
for _op in (tap_op, scope_open_op, scope_close_op, node_op):
    _register_effectful_op(_op, _EffectType.ORDERED)


def tap(name, t, shard=None, partial=None):
    """numprobe.tap() in traced code: a DTensor's placements are fixed when the graph is traced,
    so its piece is worked out then and the operator receives the local tensor."""
    if is_dtensor(t):
        t, shard, partial = local_piece(t)
    shape, offset = shard if shard is not None else ((), ())
    index, count = partial if partial is not None else (0, 1)
    tap_op(name, t, list(shape), list(offset), index, count)
