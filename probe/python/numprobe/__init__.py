"""numprobe for Python trainers: the same probe, logs and differ as the C++ library.

    import numprobe
    probe = numprobe.Probe()          # PROBE_* and RANK/WORLD_SIZE from the environment
    probe.watch(model)
    probe.watch_optimizer(optimizer)

then per step ``begin_step``, ``forward``, ``backward``, ``end_step`` (docs/python.md). Every
hash, statistic and log line is made by the C++ library (numprobe._C); this package finds the
parameters, hooks the modules and unwraps DTensors into their shards.
"""
import torch  # noqa: F401  (loads LibTorch before the binding that links it)

from ._diff import diff
from ._probe import Probe, tap
from ._scope import Scope

__version__ = "0.1.0"
__all__ = ["Probe", "Scope", "tap", "diff", "__version__"]
