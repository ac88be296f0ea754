"""The probe on a Trainer of the standalone ``pytorch_lightning`` package (the releases before
the ``lightning`` package, and those who still install it), in one line:

    trainer = pytorch_lightning.Trainer(..., callbacks=[NumprobeCallback()])

The same callback as ``numprobe.integrations.lightning``'s (see there), on this package's
``Callback``: Lightning accepts only instances of its own package's class."""
from pytorch_lightning import Callback

from ._lightning_hooks import LightningHooks


class NumprobeCallback(LightningHooks, Callback):
    """Attaches numprobe when training starts and closes it when training ends."""
