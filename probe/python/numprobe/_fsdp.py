"""FSDP2 (fully_shard): which parameters it shards, and the unsharded parameter each
microbatch's gradient lands on before the reduce-scatter. FSDP2 shows these only through its
module state (private in every torch release so far); where a torch lays it out otherwise, the
probe leaves those per-microbatch gradients out and says so."""
import warnings


def fsdp_params(module):
    """id(sharded parameter) -> (FSDP2 module, its FSDPParam), for every parameter under a
    fully_shard'ed module of ``module``."""
    found = {}
    for sub in module.modules():
        groups = _param_groups(sub)
        if groups is None:
            warnings.warn(f"numprobe: this torch's FSDP2 keeps its parameters where numprobe does not look: the "
                          f"per-microbatch gradients (mb_grad) of {type(sub).__name__}'s sharded parameters are "
                          "left out", RuntimeWarning, stacklevel=3)
            continue
        for group in groups:
            for fsdp_param in getattr(group, "fsdp_params", ()):
                sharded = getattr(fsdp_param, "sharded_param", None)
                if sharded is not None:
                    found[id(sharded)] = (sub, fsdp_param)
    return found


def unsharded_param(fsdp_param):
    """The unsharded parameter FSDP2 all-gathers into (made at the first all-gather), or None."""
    return getattr(fsdp_param, "_unsharded_param", None)


def _param_groups(module):
    """The FSDP2 parameter groups of a module: [] for a module FSDP2 does not manage, None for
    one it manages in a way this file does not know."""
    get_state = getattr(module, "_get_fsdp_state", None)
    if get_state is None:
        return []
    state = get_state()
    groups = getattr(state, "_fsdp_param_groups", None)  # torch >= 2.10: one per mesh
    if groups is None and hasattr(state, "_fsdp_param_group"):
        group = state._fsdp_param_group
        groups = [group] if group is not None else []
    return groups
