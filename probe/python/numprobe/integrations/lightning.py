"""The probe on a Lightning ``Trainer``, in one line:

    trainer = lightning.Trainer(..., callbacks=[NumprobeCallback()])

``NumprobeCallback(**options)`` takes ``numprobe.attach``'s options; those not passed come from
the ``PROBE_*`` environment (``PROBE_DIR``: the run directory) and the trainer's own rank and world
size. Lightning hands each batch to ``training_step``, which need not call the module's forward:
each training batch is one microbatch (its tensors named by the batch's keys or positions), and
the loss Lightning passes to ``backward`` opens its backward region; the module's own outputs are
not recorded (whether a call of the LightningModule runs its hooks depends on the strategy). A step ends when the optimizer has stepped (before
Lightning's ``zero_grad``); under ``accumulate_grad_batches`` the microbatches between are one
step. Lightning divides each loss by its accumulation count: the differ reads that as the
trainer's convention (docs/diff-logs.md, "Conventions")."""
try:
    from lightning.pytorch import Callback
except ImportError:  # only the standalone package is installed
    from pytorch_lightning import Callback

from ._lightning_hooks import LightningHooks


class NumprobeCallback(LightningHooks, Callback):
    """Attaches numprobe when training starts and closes it when training ends."""
