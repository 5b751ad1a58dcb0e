"""MORI's tuning_configs.lookup, answered from epjit's own measured schedule
tables (TargetInfo's, per target; docs/PERFORMANCE.md records the measurements)."""
import epjit


def _torch_target():
    """The target of torch's current GPU (sm90, gfx942, ...), else "host"."""
    try:
        import torch
    except ImportError:
        return "host"
    if not torch.cuda.is_available():
        return "host"
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    arch = getattr(props, "gcnArchName", "")
    if arch:
        return arch.split(":")[0]
    return f"sm{props.major}{props.minor}"


def lookup(world_size, hidden, topk, dtype=None, *, target=None, max_tokens=4096, experts_per_rank=None):
    """The geometry epjit uses for this shape: dispatch_block_num,
    combine_block_num, warp_num_per_block, combine_warp_num_per_block (the variant
    for `max_tokens` tokens per rank) and `schedule`, every variant by token count
    as (max_tokens_inclusive or None, dispatch blocks, dispatch warps, combine
    blocks, combine warps). `target` defaults to torch's current GPU's."""
    target = target or _torch_target()
    names = [row["name"] for row in epjit.targets()]
    if target not in names:
        raise epjit.Error(f"tuning_configs.lookup: target '{target}' is not one epjit knows (expected one of "
                          f"{', '.join(names)}); fix: pass target=")
    config = epjit.EpDispatchCombineConfig(
        rank=0, world_size=world_size, hidden_dim=hidden, max_num_inp_token_per_rank=max_tokens,
        num_experts_per_rank=experts_per_rank or topk, num_experts_per_token=topk,
        data_type=dtype if dtype is not None else "bf16", target=target)
    schedule = [tuple(row) for row in config.resolved_schedule()]
    chosen = next((row for row in schedule if row[0] is None or max_tokens <= row[0]), schedule[-1])
    return dict(dispatch_block_num=chosen[1], warp_num_per_block=chosen[2], combine_block_num=chosen[3],
                combine_warp_num_per_block=chosen[4], schedule=schedule)
