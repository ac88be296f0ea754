"""torchtitan 0.3's llama3 (its debug flavor, fewer layers) trained on CPU over Gloo by numprobe's
ProbedTrainer, torchtitan's own Trainer with the probe attached: its parallelize code (TP, SP,
FSDP2, compile per block, AC, pipeline schedules), optimizer, LR scheduler and loss, and synthetic
data.

    torchrun --standalone --nproc-per-node 4 torchtitan_run.py --out OUT --dp 2 --tp 2
    torchrun --standalone --nproc-per-node 2 torchtitan_run.py --out OUT --pp 2 --pp-schedule 1F1B

Under --pp each forward_backward_step is --pp-chunks of the step's microbatches (default: all of
this data-parallel rank's), run by torchtitan's pipeline schedule; the microbatch size is --batch
either way, so every layout trains the same samples in the same microbatches.

What this script changes of torchtitan so that it runs here, nothing of it edited:
- imports that nothing on this path runs are stubbed when absent (tensorboard, HF datasets and
  tokenizers: the metrics writer, the text datasets, the tokenizer);
- the device is the CPU: torchtitan takes "cuda" where no accelerator is found, its device memory
  monitor calls torch.cuda functions torch.cpu lacks, and its timeout barrier passes a CUDA
  device id;
- attention is torchtitan's SDPA module (flex attention compiles too slowly on CPU), the loss
  its plain cross entropy (the chunked loss runs the output layer inside the loss), the data
  a tokenizer-free loader of random tokens;
- torchtitan hands its pipeline schedule the microbatches one by one (step(arg_mbs=...), a
  newer torch's schedule API); torch 2.13's takes the whole batch and splits it into the same
  microbatches, so they are joined for it;
- FSDP2's gradient sum is sent as SUM (torchtitan's divide factor of 1 makes it PREMUL_SUM,
  which Gloo lacks);
- the weights: torchtitan initializes each rank's shard from that rank's RNG on CPU (the
  DTensor RNG tracker that keeps sharded and whole initializations alike is CUDA's), so one
  whole initialization is loaded into every layout after the Trainer is built.
Planted faults (--fault) are bugs a trainer can have: a wrong TP plan entry (plan: the embedding's
partial lookups declared replicated), an unreduced norm gradient under sequence parallel
(norm_grad), clipping by this rank's local norm (clip_local), a gradient scaled on one rank
(grad_scale), a pipeline schedule that skips the first stage's backward of the step's last
microbatch (pp_skip_backward). The first two patch torchtitan's sharding configuration and its RMSNorm before the
Trainer builds the model.
"""
import argparse
import importlib.machinery
import logging
import os
import sys
import types
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.fsdp  # noqa: F401  (registers the "fake" backend torchtitan's mesh uses)


def stub_unused_imports():
    def stub(name, **attrs):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__dict__.update(attrs)
        sys.modules[name] = module
        return module

    for name, attrs in (("tensorboard", {}), ("datasets", {"Dataset": object, "load_dataset": None}),
                        ("tokenizers", {"AddedToken": object, "Tokenizer": object})):
        try:
            __import__(name)
        except ImportError:
            stub(name, **attrs)
            if name == "tensorboard":
                stub("torch.utils.tensorboard", SummaryWriter=object)
            if name == "datasets":
                stub("datasets.distributed", split_dataset_by_node=None)


stub_unused_imports()

from torchtitan.components.dataloader import BaseDataLoader  # noqa: E402  (after the stubs)
from torchtitan.components.tokenizer import BaseTokenizer  # noqa: E402


def run_on_cpu():
    import torchtitan.components.metrics as metrics
    import torchtitan.distributed.parallel_dims as parallel_dims
    import torchtitan.distributed.utils as dist_utils
    import torchtitan.tools.utils as tools

    tools.device_type, tools.device_module = "cpu", torch.cpu
    parallel_dims.device_type = "cpu"
    dist_utils.device_type, dist_utils.device_module = "cpu", torch.cpu
    dist_utils.set_pg_timeouts = lambda *args, **kwargs: None

    class CpuMemory:
        device_name = "cpu"

        def get_peak_stats(self):
            return metrics.DeviceMemStats(0.0, 0.0, 0.0, 0.0, 0, 0)

        def reset_peak_stats(self):
            pass

    metrics.build_device_memory_monitor = lambda: CpuMemory()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--dp", type=int, default=1, help="FSDP2 degree (data_parallel_shard_degree)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1, help="pipeline stages' ranks (pipeline_parallel_degree)")
    p.add_argument("--pp-schedule", default="1F1B", help="torchtitan's pipeline_parallel_schedule")
    p.add_argument("--pp-chunks", type=int, default=0,
                   help="microbatches per pipeline schedule step (default: --microbatches / --dp)")
    p.add_argument("--sp", type=int, default=1, help="sequence parallel under TP (torchtitan's default: 1)")
    p.add_argument("--backend", default="partial_dtensor", choices=["partial_dtensor", "full_dtensor"])
    p.add_argument("--compile", default="none", choices=["none", "aot_eager", "inductor"])
    p.add_argument("--ac", default="none", choices=["none", "full", "selective"])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=2, help="global microbatches per step")
    p.add_argument("--batch", type=int, default=2, help="sequences per microbatch")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--mixed-precision-param", default="float32", choices=["float32", "bfloat16"],
                   help="torchtitan's training.mixed_precision_param: the dtype FSDP2 computes in (its own "
                        "default is bfloat16, installed on one rank too; reductions stay float32)")
    p.add_argument("--fault", default="none", choices=["none", "plan", "norm_grad", "clip_local", "grad_scale", "pp_skip_backward"])
    p.add_argument("--probe", type=int, default=1)
    return p.parse_args()


def main():
    args = parse_args()
    # Under torchrun, also for one process; before torchtitan's own init_distributed, which then
    # keeps this group. As it would do, autograd runs on the calling thread.
    dist.init_process_group("gloo")
    torch.autograd.set_multithreading_enabled(False)

    run_on_cpu()
    from numprobe.integrations.torchtitan import ProbeConfig, ProbedTrainer
    config = trainer_config(args, ProbedTrainer.Config, ProbeConfig)
    plant_before_build(args)
    trainer = config.build()
    sum_as_sum(trainer)
    schedule_takes_microbatches(trainer)
    load_one_initialization(trainer, config, args)
    plant(args, trainer)
    try:
        trainer.train()
    finally:
        trainer.close()
    # Only after a clean run: after a failure a barrier would wait for ranks that never come.
    leave_process_group()


def leave_process_group():
    """Ends the run without interpreter finalization, as examples/python/transformer.py does:
    Gloo's worker threads can drop a finished collective's Python-owned tensors after the
    caller's wait() returned, and during finalization that aborts the process
    (pytorch/pytorch#190489). The probe's log is on disk once each step ends."""
    dist.barrier()  # no rank closes its connections while a peer still needs them
    dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def trainer_config(args, Config, ProbeConfig):
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer
    from torchtitan.components.optimizer import default_adamw
    from torchtitan.config import CompileConfig, DebugConfig, ParallelismConfig, TrainingConfig
    from torchtitan.components.metrics import MetricsProcessor

    vocab = 2048
    dp = args.dp
    if args.microbatches % dp:
        raise SystemExit(f"--microbatches {args.microbatches} is not a multiple of --dp {dp}")
    chunks = (args.pp_chunks or args.microbatches // dp) if args.pp > 1 else 1
    if (args.microbatches // dp) % chunks:
        raise SystemExit(f"--pp-chunks {chunks} does not divide this rank's {args.microbatches // dp} microbatches")
    local_batch = args.batch * chunks  # under PP, the schedule's batch: `chunks` microbatches
    optimizer = default_adamw(lr=args.lr)
    optimizer.implementation = "foreach"
    return Config(
        model_spec=model_spec(args),
        dump_folder=os.path.join(args.out, "torchtitan"),
        tokenizer=NoTokenizer.Config(vocab=vocab),
        dataloader=RandomTokenLoader.Config(vocab=vocab, seed=args.seed,
                                       microbatches_per_step=args.microbatches // dp),
        loss=CrossEntropyLoss.Config(global_vocab_size=vocab),
        optimizer=optimizer,
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2),
        metrics=MetricsProcessor.Config(log_freq=1000),
        training=TrainingConfig(local_batch_size=local_batch, global_batch_size=args.batch * args.microbatches,
                                seq_len=args.seq, steps=args.steps, max_norm=args.max_norm,
                                mixed_precision_param=args.mixed_precision_param,
                                disable_cuda_graphs=True),
        parallelism=ParallelismConfig(data_parallel_shard_degree=dp, tensor_parallel_degree=args.tp,
                                      enable_sequence_parallel=bool(args.sp), spmd_backend=args.backend,
                                      pipeline_parallel_degree=args.pp, pipeline_parallel_schedule=args.pp_schedule,
                                      pipeline_parallel_microbatch_size=args.batch),
        compile=CompileConfig(enable=args.compile != "none", components=["model"],
                              backend="inductor" if args.compile == "none" else args.compile),
        activation_checkpoint=ac_config(args.ac),
        debug=DebugConfig(seed=args.seed),
        probe=ProbeConfig(enable=bool(args.probe), run_dir=args.out),
    )


def model_spec(args):
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import model_registry

    spec = model_registry("debugmodel")
    spec.model.layers = spec.model.layers[: args.layers]
    for block in spec.model.layers:
        block.attention.inner_attention = ScaledDotProductAttention.Config()
    spec.state_dict_adapter = None
    return spec


def ac_config(mode):
    if mode == "none":
        return None
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    return FullAC.Config() if mode == "full" else SelectiveAC.Config()


class NoTokenizer(BaseTokenizer):
    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        vocab: int = 2048

    def __init__(self, config, *, tokenizer_path=None):
        super().__init__()
        self._vocab = config.vocab

    def encode(self, *args, **kwargs):
        return []

    def decode(self, *args, **kwargs):
        return ""

    def get_vocab_size(self):
        return self._vocab


class RandomTokenLoader(BaseDataLoader):
    """Random token sequences: global microbatch g of step s the same in every layout (the
    Attachment's numbering: this rank's i-th microbatch of a step is i * dp + dp_rank)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        vocab: int = 2048
        seed: int = 0
        microbatches_per_step: int = 1

    def __init__(self, config, *, dp_world_size, dp_rank, tokenizer, seq_len, local_batch_size,
                 snapshot_every_n_steps=None):
        self.config, self.dp, self.rank = config, dp_world_size, dp_rank
        self.seq, self.batch = seq_len, local_batch_size

    def __iter__(self):
        step = 1
        while True:
            for i in range(self.config.microbatches_per_step):
                g = torch.Generator().manual_seed((self.config.seed * 1_000_003 + step) * 1_009 + i * self.dp + self.rank)
                tokens = torch.randint(0, self.config.vocab, (self.batch, self.seq + 1), generator=g)
                yield {"input": tokens[:, :-1]}, tokens[:, 1:]
            step += 1

    def state_dict(self):
        return {}

    def load_state_dict(self, state_dict):
        pass


def sum_as_sum(trainer):
    """FSDP2 reduces torchtitan's gradients (divide factor 1) as PREMUL_SUM(1), which Gloo lacks:
    sent as SUM, then multiplied by 1 (bitwise the same)."""
    from torch.distributed.fsdp import FSDPModule

    for part in trainer.model_parts:
        for module in part.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)


def schedule_takes_microbatches(trainer):
    """torch 2.13's pipeline schedules take the whole batch (step(*args, target=...)) and split it
    along the batch dim into n_microbatches equal pieces: torchtitan's list of microbatches is
    joined in order for it, which the schedule splits back into the same microbatches."""
    import inspect

    schedule = getattr(trainer, "pp_schedule", None)
    if schedule is None or "arg_mbs" in inspect.signature(schedule.step).parameters:
        return
    whole_batch_step = schedule.step

    def join(pieces):
        return torch.cat(pieces) if isinstance(pieces[0], torch.Tensor) else pieces[0]

    def step(*, arg_mbs=None, kwarg_mbs=None, target_mbs=None, **options):
        args = () if arg_mbs is None else tuple(join(list(p)) for p in zip(*arg_mbs))
        kwargs = {} if not kwarg_mbs else {k: join([kw[k] for kw in kwarg_mbs]) for k in kwarg_mbs[0]}
        target = None if target_mbs is None else torch.cat(target_mbs)
        return whole_batch_step(*args, target=target, **options, **kwargs)

    schedule.step = step


def load_one_initialization(trainer, config, args):
    """Every layout starts from one whole initialization, made alike on every rank: each
    parameter's piece of it is copied into the parameter (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    with torch.device("cpu"):
        torch.manual_seed(args.seed)
        whole = config.model_spec.model.build()
        with torch.no_grad():
            whole.init_weights(buffer_device=None)
    values = dict(whole.named_parameters())
    with torch.no_grad():
        for part in trainer.model_parts:
            for name, param in part.named_parameters():
                value = values[plain_name(name)]
                if isinstance(param, DTensor):
                    shape, offset = compute_local_shape_and_global_offset(value.shape, param.device_mesh,
                                                                          param.placements)
                    piece = value[tuple(slice(o, o + n) for o, n in zip(offset, shape))]
                    param.to_local().copy_(piece)
                else:
                    param.copy_(value)


WRAPPERS = ("_checkpoint_wrapped_module", "_orig_mod", "_fsdp_wrapped_module")


def plain_name(name):
    return ".".join(s for s in name.split(".") if s not in WRAPPERS)


def plant_before_build(args):
    """The faults that live in the model's configuration or code (torchtitan builds the model
    from them in the Trainer's constructor)."""
    if args.fault == "plan":
        plant_wrong_plan_entry()
    elif args.fault == "norm_grad":
        plant_local_norm()


def plant(args, trainer):
    if args.fault == "clip_local":
        plant_local_clipping()
    elif args.fault == "grad_scale":
        plant_gradient_scale(trainer, "layers.0.attention.wo.weight", 1.01)
    elif args.fault == "pp_skip_backward":
        plant_skipped_backward(trainer)
    elif args.fault == "norm_grad":
        for part in trainer.model_parts:
            for name, module in part.named_modules():
                if plain_name(name) == "layers.0.ffn_norm":
                    module.local_norm_fault = True


def plant_wrong_plan_entry():
    """The vocabulary-parallel embedding's output declared replicated, not a partial sum: each
    rank looks up only the rows of its vocabulary shard (zeros for the other tokens), and that
    is used as the whole embedding, never reduced. (torchtitan checks a module's declared output
    placement against the DTensor it returns, so a row-parallel Linear's entry cannot be wrong
    this way; the embedding runs in a local_map region, whose output is what the plan says.)"""
    import dataclasses

    import spmd_types as spmd
    import torchtitan.models.llama3.sharding as sharding
    from torchtitan.models.common.decoder_sharding import dense_activation_placement

    configure = sharding.set_llama3_sharding_config

    def configure_wrongly(config, *, enable_sp):
        configure(config, enable_sp=enable_sp)
        embed = config.tok_embeddings
        embed.sharding_config = dataclasses.replace(embed.sharding_config,
                                                    out_src_shardings=dense_activation_placement(tp=spmd.R))

    sharding.set_llama3_sharding_config = configure_wrongly


def plant_local_norm():
    """The norm a module marked `local_norm_fault` computes on this rank's sequence shard with its
    replicated weight's local value: the weight's gradient is this shard's contribution only,
    still labelled Replicate, so it is never summed over the TP ranks (the sequence-parallel
    norm gradient a trainer forgets to all-reduce)."""
    from torch.distributed.tensor import DTensor
    from torchtitan.models.common.nn_modules import RMSNorm

    forward = RMSNorm.forward

    def forward_locally(self, x):
        if not getattr(self, "local_norm_fault", False) or not isinstance(x, DTensor) \
                or not isinstance(self.weight, DTensor):
            return forward(self, x)
        out = torch.nn.functional.rms_norm(x.to_local(), self.normalized_shape, self.weight.to_local(), self.eps)
        return DTensor.from_local(out, x.device_mesh, x.placements, run_check=False)

    RMSNorm.forward = forward_locally


def plant_local_clipping():
    """Clipping by this rank's own gradient norm: the norm of its local shards, not reduced."""
    import torchtitan.distributed.utils as dist_utils
    from torch.distributed.tensor import DTensor

    def clip_by_local_norm(parameters, max_norm, *args, **kwargs):
        grads = [p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
                 for p in parameters if p.grad is not None]
        total = torch.nn.utils.get_total_norm(grads, 2.0, False, True)
        torch.nn.utils.clip_grads_with_norm_(grads, max_norm, total, True)
        return total

    dist_utils.clip_grad_norm_ = clip_by_local_norm


def plant_skipped_backward(trainer):
    """An off-by-one in a pipeline schedule: the first stage's backward of each step's last
    microbatch never runs, so that stage's gradients lack the microbatch's contribution."""
    schedule = trainer.pp_schedule
    for stage in getattr(schedule, "_stages", None) or [schedule._stage]:
        if stage.is_first:
            backward = stage.backward_one_chunk  # the probe's wrapper, when attached

            def skip_the_last(chunk, *args, backward=backward, **kwargs):
                if chunk != schedule._n_microbatches - 1:
                    return backward(chunk, *args, **kwargs)

            stage.backward_one_chunk = skip_the_last


def plant_gradient_scale(trainer, name, factor):
    """One parameter's gradient scaled on the last rank only, before the optimizer step."""
    if dist.get_rank() != dist.get_world_size() - 1:
        return
    param = dict(trainer.model_parts[0].named_parameters())[name]

    def scale(*_):
        with torch.no_grad():
            grad = param.grad.to_local() if hasattr(param.grad, "to_local") else param.grad
            grad.mul_(factor)

    trainer.optimizers.register_step_pre_hook(scale)


if __name__ == "__main__":
    main()
