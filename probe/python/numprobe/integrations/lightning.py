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
except ImportError:  # the older package name
    from pytorch_lightning import Callback

from .._attach import Attachment, _named_leaves


class NumprobeCallback(Callback):
    """Attaches numprobe when training starts and closes it when training ends."""

    def __init__(self, **options):
        self.options = options
        self.attachment = None

    def on_train_start(self, trainer, pl_module):
        if self.attachment is not None:
            return
        options = dict(self.options)
        options.setdefault("rank", trainer.global_rank)
        options.setdefault("world_size", trainer.world_size)
        # No forward hooks: whether a call of the LightningModule runs its hooks depends on the
        # strategy (DDP's wrapper calls training_step itself), and the batch is each microbatch.
        self.attachment = Attachment(pl_module, list(trainer.optimizers), step=trainer.global_step,
                                     forward_hooks=False, **options)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.attachment is not None:
            self.attachment.hold_microbatch(_named_leaves(batch, "batch"), pl_module)

    def on_before_backward(self, trainer, pl_module, loss):
        if self.attachment is not None:
            self.attachment.backward_root(loss)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.attachment is not None:
            self.attachment.release_microbatch()

    def on_train_end(self, trainer, pl_module):
        if self.attachment is not None:
            self.attachment.close()
            self.attachment = None
