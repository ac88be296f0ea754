"""The probe on the Hugging Face ``Trainer``, in one line:

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[NumprobeCallback()])

``NumprobeCallback(**options)`` takes ``numprobe.attach``'s options; those not passed come from the
``PROBE_*`` environment (``PROBE_DIR``: the run directory that receives ``rank<R>/diff.log``) and
torchrun's ``RANK``/``WORLD_SIZE``. The Trainer's loop is left as it is: a step ends at the
optimizer's own step (before the Trainer's ``zero_grad``), each forward of the model is one
microbatch, and the records are named by the model's argument and output fields (``input
input_ids``, ``output loss``, ``output logits``). The Trainer's loss conventions (each rank's loss
times the number of processes, a loss divided by the tokens of the whole accumulation window) are
read by the differ as such (docs/diff-logs.md, "Conventions")."""
from transformers import TrainerCallback

from .._attach import Attachment


class NumprobeCallback(TrainerCallback):
    """Attaches numprobe when training begins and closes it when training ends."""

    def __init__(self, **options):
        self.options = options
        self.attachment = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.attachment is not None or model is None:
            return
        options = dict(self.options)
        # Releases before 4.50 hand the callback no optimizer yet (it is made lazily): it is
        # attached at the first step that has one (on_step_begin), or, where the release never
        # hands it over (4.49), adopted by attach at its first step.
        self.attachment = Attachment(model, None, step=state.global_step, **options)
        # The Trainer compiles a wrapper of the model it hands the callback (torch_compile=True).
        self.attachment.compiled = bool(getattr(args, "torch_compile", False))
        self._attach_optimizer(optimizer)

    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        self._attach_optimizer(optimizer)

    def on_train_end(self, args, state, control, **kwargs):
        if self.attachment is not None:
            self.attachment.close()
            self.attachment = None

    def _attach_optimizer(self, optimizer):
        if self.attachment is not None and optimizer is not None:
            self.attachment.watch_optimizer(optimizer)
