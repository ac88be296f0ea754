"""numprobe.Scope: names the ops run inside it, for op traces (docs/log-format.md)."""
from . import _C


class Scope:
    """A context manager over the C++ probe::Scope.

    ``with numprobe.Scope("layers.3"):`` names ops ``layers.3/<op>#<k>``; scopes nest per thread
    and join with ".". ``split=(rank, size)``: the scope's computation is split over ``size``
    ranks (tensor parallelism), so its op records are composed across them by the differ.
    """

    def __init__(self, name, split=None):
        if not isinstance(name, str) or not name:
            raise ValueError(f"numprobe.Scope: the name must be a non-empty string, not {name!r}")
        self._name = name
        self._split = split or (0, 1)
        self._scope = None

    def __enter__(self):
        rank, size = self._split
        self._scope = _C.Scope(self._name, split_rank=rank, split_size=size)
        return self

    def __exit__(self, *exc):
        self._scope.close()
        self._scope = None
        return False

    @property
    def name(self):
        """The joined name (outer scopes' names and this one's), while open."""
        return self._scope.name if self._scope else self._name
