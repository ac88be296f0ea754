"""numprobe for Python trainers: the same probe, logs and differ as the C++ library.

    import numprobe
    numprobe.attach(model, optimizer)  # PROBE_* and RANK/WORLD_SIZE from the environment

and the training loop runs as it is (docs/python.md); ``numprobe.integrations`` attaches it to
the transformers Trainer and to Lightning in one line. ``numprobe.Probe`` is the explicit API:
``watch``, ``watch_optimizer``, then per step ``begin_step``, ``forward``, ``backward``,
``end_step``. Every
hash, statistic and log line is made by the C++ library (numprobe._C); this package finds the
parameters, hooks the modules and unwraps DTensors into their shards.
"""
import torch  # (loads LibTorch before the binding that links it)

from . import _C

# The binding is compiled against one torch's headers and libraries (as any PyTorch extension):
# with another it would fail on a missing symbol, or worse, run with another ABI.
if torch.__version__.split("+")[0] != _C.torch_version:
    raise ImportError(f"numprobe was built against torch {_C.torch_version} and this Python has torch "
                      f"{torch.__version__}: reinstall it (pip install --no-build-isolation .) with this torch")

from ._attach import Attachment, attach
from ._compile import traced_backend
from ._diff import diff
from ._probe import Probe, tap
from ._scope import Scope

current_scope = _C.current_scope  # the joined name of the innermost scope open on this thread
__version__ = "0.1.0"
__all__ = ["attach", "Attachment", "Probe", "Scope", "tap", "diff", "traced_backend", "current_scope", "__version__"]
