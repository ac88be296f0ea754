"""The hooks both Lightning packages call, shared by their callbacks (lightning.py for
``lightning.pytorch``, pytorch_lightning.py for the standalone ``pytorch_lightning``): Lightning
checks that a callback is an instance of its own package's ``Callback``."""
from .._attach import Attachment, _named_leaves


class LightningHooks:
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
