"""A tensor as the probe records it: the local tensor, where it sits in the global one (a
shard), and whether it is one summand of it (a partial sum). DTensors say so by their
placements on their mesh; plain tensors are whole."""
import warnings

try:
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
except ImportError:
    try:  # torch < 2.5 keeps DTensor here
        from torch.distributed._tensor import DTensor, Partial, Replicate, Shard
    except ImportError:  # a torch built without distributed: no DTensor to meet
        DTensor = None
if DTensor is not None:
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:
        from torch.distributed._tensor._utils import compute_local_shape_and_global_offset
    try:
        from torch.distributed.tensor.placement_types import _StridedShard
    except ImportError:
        _StridedShard = None


class Unrecordable(ValueError):
    """A DTensor whose placements the log format cannot describe."""


def is_dtensor(t):
    return DTensor is not None and isinstance(t, DTensor)


def local_piece(t, own_dims=()):
    """(local tensor, shard, partial): shard is (global_shape, offset) or None for the whole
    tensor; partial is (index, count) or None. Reads no data and sends nothing. Raises
    Unrecordable for placements no shard or partial sum describes.

    ``own_dims``: names of mesh dims along which each rank's piece is a microbatch of its own
    (the data-parallel dims of a trainer whose activations are DTensors over the whole mesh,
    torchtitan's full_dtensor): their placements say where the rank's rows sit in a batch of
    every rank's microbatches, or that its gradient is one of their summands, and the probe
    records the piece as that rank's microbatch instead (a placement is a claim about the
    values; what the rank holds is its own microbatch's)."""
    if not is_dtensor(t):
        return t, None, None
    mesh, placements = t.device_mesh, t.placements
    _check_strided(placements)
    local = t._local_tensor  # to_local() would add an autograd node; this is the same tensor
    own = _own_dims(mesh, own_dims)
    shard = None
    if any(_is_shard(p) for p in placements):
        _, offset = compute_local_shape_and_global_offset(t.shape, mesh, placements)
        shard = (list(t.shape), list(offset))
        if own:
            shard = _within_own(shard, local.shape, placements, own)
    if own:  # (only then: every record comes through here)
        placements = [Replicate() if i in own else p for i, p in enumerate(placements)]
    return local, shard, _partial_of(mesh, placements)


def _own_dims(mesh, names):
    if not names or mesh.mesh_dim_names is None:
        return frozenset()
    return frozenset(i for i, n in enumerate(mesh.mesh_dim_names) if n in names)


def _within_own(shard, local_shape, placements, own):
    """The shard within the rank's own microbatch: tensor dims cut only by its own mesh dims
    are whole there."""
    shape, offset = shard
    for d in range(len(shape)):
        by_own = any(_is_shard(p) and p.dim == d for i, p in enumerate(placements) if i in own)
        if not by_own:
            continue
        if any(_is_shard(p) and p.dim == d for i, p in enumerate(placements) if i not in own):
            raise Unrecordable(f"placements {placements}: dim {d} is cut by data-parallel and other mesh dims")
        shape[d], offset[d] = local_shape[d], 0
    if shape == list(local_shape):
        return None
    return shape, offset


def warn_unrecordable(name, error):
    warnings.warn(f"numprobe: '{name}' is not recorded: {error}", RuntimeWarning, stacklevel=3)


def _is_shard(placement):
    return isinstance(placement, Shard) or (_StridedShard is not None and isinstance(placement, _StridedShard))


def _check_strided(placements):
    """A strided shard (FSDP2 over a tensor-parallel shard of the same dim) is one block of the
    global tensor only when a plain Shard of that dim on a later mesh dim cuts inside it."""
    if _StridedShard is None:
        return
    for i, placement in enumerate(placements):
        if isinstance(placement, _StridedShard) and not any(
                isinstance(later, Shard) and not isinstance(later, _StridedShard) and later.dim == placement.dim
                for later in placements[i + 1:]):
            raise Unrecordable(f"placements {placements}: a strided shard is no single block of the global "
                               "tensor, which the log's shards are")


def _partial_of(mesh, placements):
    """This rank's summand among the partial sums the placements hold: mesh dims with a
    Partial placement, numbered by this rank's coordinates on them."""
    index, count = 0, 1
    coordinate = None
    for dim, placement in enumerate(placements):
        if isinstance(placement, Partial):
            if placement.reduce_op != "sum":
                raise Unrecordable(f"placements {placements}: a Partial('{placement.reduce_op}') piece is no "
                                   "summand (only partial sums are recorded as such)")
            if coordinate is None:
                coordinate = mesh.get_coordinate()
            size = mesh.size(dim)
            index, count = index * size + coordinate[dim], count * size
    return (index, count) if count > 1 else None
