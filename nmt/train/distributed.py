"""Data-parallel training under torchrun: one process per device, NCCL on GPUs, gloo on CPUs.

Every helper is a no-op in a single process, so the trainer reads the same either way. Rank 0
alone logs, validates and writes checkpoints.
"""

from __future__ import annotations

import contextlib
import gc
import os

import torch
import torch.distributed as dist


def rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init() -> None:
    """Join the process group when launched by torchrun (it sets WORLD_SIZE and friends)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if torch.cuda.is_available():  # NCCL's object collectives run on the current device
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


def shutdown() -> None:
    """End the process group while the interpreter is whole: what still holds it (a DDP
    wrapper in a reference cycle) is collected first, so that gloo's worker threads are not
    left to be torn down during the interpreter's exit."""
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def local_device(name: str) -> str:
    """Under torchrun each process takes the GPU of its LOCAL_RANK."""
    if rank_and_world()[1] > 1 and name in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    return name


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    if rank_and_world()[1] == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def all_reduce_sum(value: int, device: torch.device) -> int:
    if rank_and_world()[1] == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(tensor)
    return int(tensor)


def all_reduce_sums(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sums over all processes (in float64)."""
    if rank_and_world()[1] == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def any_true(flag: bool, device: torch.device) -> bool:
    """True on every process if it is true on any (so all stop at the same step)."""
    return all_reduce_sum(int(flag), device) > 0


def broadcast_from_rank0(obj):
    if rank_and_world()[1] == 1:
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def gather_to_rank0(obj) -> list:
    """[the object of rank 0, of rank 1, ...] on rank 0; [] elsewhere; [obj] alone."""
    rank, world = rank_and_world()
    if world == 1:
        return [obj]
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(obj, gathered, dst=0)
    return gathered or []


def barrier() -> None:
    if rank_and_world()[1] > 1:
        dist.barrier()


def no_sync_unless(model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """Skip DDP's gradient all-reduce on all but the last of several accumulated batches."""
    if sync or not hasattr(model, "no_sync"):
        return contextlib.nullcontext()
    return model.no_sync()
