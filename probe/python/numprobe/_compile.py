"""Op traces of compiled code: the nodes of the graph torch.compile captured, as op records.

A compiled graph runs fused kernels, not the model's ATen ops one by one, so the op trace's
RecordFunction callbacks see nothing of the model there (inside the graph's scopes they skip
what they do see: the compiler's decomposed ops and extern kernels). Instead, while a traced
probe is active, Inductor's pre-grad pass (and `traced_backend` for any other backend) inserts
after each node of the graph Dynamo captured a call of numprobe::node with the node's tensor
inputs and outputs, named as eager code names the op it dispatches first (`aten::` and the torch
function's or method's name: `torch._C._nn.gelu` is `aten::gelu`, `x + y` is `aten::add`), and
wraps the graph in numprobe::scope_open("") / scope_close(""): its ops are named after the scope
it runs in, and watch()'s module scopes, traced by Dynamo, are scope_open(path) calls inside it.
So a compiled forward's records pair with an eager forward's by name, and the differ finds the
first node whose inputs agree and whose output does not (the root-cause op) as it does for eager
ops. Where eager dispatches something else (indexing, a dtype conversion by method), the names
differ and the records are one run's only, which the differ lists and sets aside.

Forward only: the backward graph is AOTAutograd's, with no node of the model's. Nodes on DTensors
are not recorded (a DTensor's local pieces are not the graph's values), nor are multi-output
nodes' non-tensor parts. Recording a node's output makes Inductor keep that value in memory, so a
traced compiled run fuses less than an untraced one: its kernels may round otherwise.
"""
import operator

import torch
import torch.fx

from . import _ops
from ._dtensor import is_dtensor

# Python operators as eager code dispatches them.
_OPERATORS = {
    operator.add: "add", operator.iadd: "add_", operator.sub: "sub", operator.isub: "sub_",
    operator.mul: "mul", operator.imul: "mul_", operator.truediv: "div", operator.itruediv: "div_",
    operator.neg: "neg", operator.matmul: "matmul", operator.pow: "pow", operator.mod: "remainder",
    operator.floordiv: "floor_divide",
}
_PROBE_OPS = (_ops.tap_op, _ops.scope_open_op, _ops.scope_close_op, _ops.node_op)


def _tensor_value(value):
    return isinstance(value, torch.Tensor) and not is_dtensor(value)


def _op_name(node):
    """`aten::<name>` of a node eager code runs as one ATen op, None for any other node."""
    if node.op == "call_method":
        name = node.target
    elif node.op != "call_function" or node.target in _PROBE_OPS or node.target is operator.getitem:
        return None
    elif node.target in _OPERATORS:
        name = _OPERATORS[node.target]
    elif isinstance(node.target, torch._ops.OpOverload):
        return node.target._schema.name
    elif str(getattr(node.target, "__module__", "")).startswith("torch"):
        name = getattr(node.target, "__name__", None)
    else:
        return None
    return f"aten::{name}" if isinstance(name, str) else None


def _inputs(node):
    """The node's tensor arguments, positional then keyword, in order."""
    found = []
    torch.fx.map_arg((node.args, node.kwargs), lambda a: found.append(a) or a)
    return [a for a in found if _tensor_value(a.meta.get("example_value"))]


def _outputs(graph, node):
    """The nodes of the node's tensor outputs (getitem nodes for a tuple), the last one inserted
    (to insert after), or ([], None) where it returns no plain tensor."""
    value = node.meta.get("example_value")
    if _tensor_value(value):
        return [node], node
    if not isinstance(value, (tuple, list)) or not value or not all(_tensor_value(v) for v in value):
        return [], None
    outputs, last = [], node
    for i in range(len(value)):
        with graph.inserting_after(last):
            last = graph.call_function(operator.getitem, (node, i))
        outputs.append(last)
    return outputs, last


def insert_node_records(graph):
    """Inserts the node records and the graph's scope into `graph` (once: a graph that has them
    is left as it is). Returns whether it changed the graph."""
    nodes = list(graph.nodes)
    if any(n.op == "call_function" and n.target is _ops.node_op for n in nodes):
        return False
    records = 0
    for node in nodes:
        name = _op_name(node)
        if name is None:
            continue
        outputs, last = _outputs(graph, node)
        if not outputs:
            continue
        with graph.inserting_after(last):
            graph.call_function(_ops.node_op, (name, _inputs(node), outputs))
        records += 1
    if records == 0:
        return False
    with graph.inserting_before(next(n for n in graph.nodes if n.op != "placeholder")):
        graph.call_function(_ops.scope_open_op, ("",))
    with graph.inserting_before(next(n for n in graph.nodes if n.op == "output")):
        graph.call_function(_ops.scope_close_op, ("",))
    return True


def traced_backend(backend="inductor"):
    """A torch.compile backend: `backend` (a name or a callable) on the graph with its node
    records inserted. Inductor gets them from its pre-grad pass while a traced probe is active;
    other backends (`aot_eager`) through this: ``torch.compile(m, backend=traced_backend("aot_eager"))``."""
    from torch._dynamo import lookup_backend

    inner = lookup_backend(backend) if isinstance(backend, str) else backend

    def compile_graph(gm, example_inputs):
        if insert_node_records(gm.graph):
            gm.recompile()
        return inner(gm, example_inputs)

    return compile_graph


class _InductorPass:
    """Inductor's pre-grad custom pass while a traced probe is active (see install)."""

    def __init__(self):
        from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

        class NodeRecords(CustomGraphPass):
            def __call__(self, graph):
                insert_node_records(graph)

            def uuid(self):  # Inductor's FX graph cache keys compiled graphs on it
                return get_hash_for_files((__file__,))

        self.pass_ = NodeRecords()
        self.users = 0


_inductor_pass = None


# While torch.compile compiles, the ops it runs (fake tensors' factories, copies of inputs, RNG
# state) are no ops of the model: a compiled scope around the compile leaves them untraced.
def _compile_started(args):
    _ops.scope_open_op("")


def _compile_ended(args):
    _ops.scope_close_op("")


def install():
    """Adds the node records pass to Inductor's pre-grad passes (beside any the user set) and
    leaves what the compiler runs untraced."""
    global _inductor_pass
    from torch._dynamo.callback import callback_handler
    from torch._inductor import config

    if _inductor_pass is None:
        _inductor_pass = _InductorPass()
    _inductor_pass.users += 1
    if _inductor_pass.users == 1:
        config.pre_grad_custom_pass = _with_pass(config.pre_grad_custom_pass, _inductor_pass.pass_)
        callback_handler.register_start_callback(_compile_started)
        callback_handler.register_end_callback(_compile_ended)


def uninstall():
    from torch._dynamo.callback import callback_handler
    from torch._inductor import config

    if _inductor_pass is None or _inductor_pass.users == 0:
        return
    _inductor_pass.users -= 1
    if _inductor_pass.users == 0:
        config.pre_grad_custom_pass = _without_pass(config.pre_grad_custom_pass, _inductor_pass.pass_)
        callback_handler.remove_start_callback(_compile_started)
        callback_handler.remove_end_callback(_compile_ended)


def _with_pass(current, added):
    if current is None:
        return added
    return (*current, added) if isinstance(current, (tuple, list)) else (current, added)


def _without_pass(current, removed):
    if current is removed:
        return None
    if isinstance(current, (tuple, list)):
        rest = tuple(p for p in current if p is not removed)
        return rest[0] if len(rest) == 1 else (rest or None)
    return current
