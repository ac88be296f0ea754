"""A tensor as the probe records it: the local tensor, where it sits in the global one (a
shard), and whether it is one summand of it (a partial sum). DTensors say so by their
placements on their mesh; plain tensors are whole."""

try:
    from torch.distributed.tensor import DTensor, Partial, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
except ImportError:  # a torch built without distributed
    DTensor = None


def is_dtensor(t):
    return DTensor is not None and isinstance(t, DTensor)


def local_piece(t):
    """(local tensor, shard, partial): shard is (global_shape, offset) or None for the whole
    tensor; partial is (index, count) or None. Reads no data and sends nothing."""
    if not is_dtensor(t):
        return t, None, None
    mesh, placements = t.device_mesh, t.placements
    local = t._local_tensor  # to_local() would add an autograd node; this is the same tensor
    global_shape = list(t.shape)
    shard = None
    if any(isinstance(p, Shard) for p in placements):
        _, offset = compute_local_shape_and_global_offset(t.shape, mesh, placements)
        shard = (global_shape, list(offset))
    return local, shard, _partial_of(mesh, placements)


def _partial_of(mesh, placements):
    """This rank's summand among the partial sums the placements hold: mesh dims with a
    Partial placement, numbered by this rank's coordinates on them."""
    index, count = 0, 1
    coordinate = None
    for dim, placement in enumerate(placements):
        if isinstance(placement, Partial):
            if coordinate is None:
                coordinate = mesh.get_coordinate()
            size = mesh.size(dim)
            index, count = index * size + coordinate[dim], count * size
    return (index, count) if count > 1 else None
