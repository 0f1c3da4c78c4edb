"""One training job on several processes with ``torchrun`` (DistributedDataParallel).

The same entry point runs as one process or under ``torchrun --nproc_per_node=N``:
:meth:`DistContext.from_env` reads torchrun's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK``
and sets up ``torch.distributed`` only when ``WORLD_SIZE > 1`` (gloo on CPU, nccl on CUDA).
A training loop then does::

    ctx = DistContext.from_env(device=cfg.train.device)
    torch.manual_seed(seed_for_rank(seed, ctx.rank))        # dropout etc. differ per rank
    model = wrap_model(model.to(ctx.device), ctx)           # DDP when world_size > 1
    mine = shard(examples, ctx)                             # after a shuffle with the *shared* seed
    for batch in batches(mine, local_batch_size(batch_size, ctx)):
        loss = ...; loss.backward(); opt.step()             # DDP averages the gradients
    log(all_reduce_mean(loss.item(), ctx))
    if ctx.is_main:                                         # only rank 0 writes the registry
        cid = reg.put(unwrap_model(model).state_dict(), ...)
    cid = broadcast_object(cid if ctx.is_main else None, ctx)
    ctx.close()

With :func:`shard`'s strided split and ``local_batch_size = batch_size / world_size``, the
union of the ranks' k-th batches is the single-process k-th batch, and DDP's gradient is
the mean over it: N processes follow the one-process trajectory up to float rounding.
"""

from __future__ import annotations

import atexit
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence, TypeVar

from mmgrid.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    # lazy: torch (~2-3 s of imports) stays out of `mmgrid --help`, which imports this module for torchrun
    import torch

T = TypeVar("T")
_SEED_STRIDE = 1_000_003  # a prime: rank seeds never collide for seeds below it


@dataclass(frozen=True)
class DistContext:
    rank: int = 0  # global rank
    local_rank: int = 0  # rank on this machine (selects the GPU)
    world_size: int = 1
    device: str = "cpu"  # "cpu" or "cuda:<local_rank>"
    initialized: bool = False  # True when this context created the process group

    @property
    def is_main(self) -> bool:
        """Rank 0: the only process that writes the registry and prints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, device: str = "auto", backend: str | None = None) -> "DistContext":
        """Read torchrun's environment; start ``torch.distributed`` when ``WORLD_SIZE > 1``.

        Args:
            device: ``auto`` (CUDA if available), ``cpu`` or ``cuda``.
            backend: ``gloo`` or ``nccl``; default gloo on CPU, nccl on CUDA.

        Raises:
            ConfigError: on inconsistent torchrun variables or ``cuda`` without a GPU.
        """
        # lazy: torch (~2-3 s of imports) stays out of `mmgrid --help`, which imports this module for torchrun
        import torch

        rank, world, local = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0)
        if not 0 <= rank < world:
            raise ConfigError(f"torchrun environment: RANK={rank} is not in [0, WORLD_SIZE={world}).")
        use_cuda = _want_cuda(device, torch.cuda.is_available())
        dev = f"cuda:{local}" if use_cuda else "cpu"
        if use_cuda:
            torch.cuda.set_device(local)
        initialized = False
        if world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group(backend=backend or ("nccl" if use_cuda else "gloo"))
            initialized = True
            # a process group still alive when the interpreter exits is torn down by C++
            # destructors, which can abort a rank ("terminate called without an active
            # exception", seen once in CI on a rank that had returned from its stage)
            atexit.register(_destroy_at_exit)
        return cls(rank, local, world, dev, initialized)

    def close(self) -> None:
        """Tear down the process group this context created (call once at the end)."""
        # lazy: torch (~2-3 s of imports) stays out of `mmgrid --help`, which imports this module for torchrun
        import torch

        if self.initialized and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _destroy_at_exit() -> None:
    # lazy: torch (~2-3 s of imports) stays out of `mmgrid --help`, which imports this module for torchrun
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer (set by torchrun).") from exc


def _want_cuda(device: str, available: bool) -> bool:
    if device == "auto":
        return available
    if device.startswith("cuda"):
        if not available:
            raise ConfigError(f"device {device!r} was asked for but CUDA is not available; use cpu or auto.")
        return True
    if device == "cpu":
        return False
    raise ConfigError(f"device {device!r}: use auto, cpu or cuda.")


def is_main() -> bool:
    """True unless torchrun says this process is not rank 0 (no torch import)."""
    return _env_int("RANK", 0) == 0


def seed_for_rank(seed: int, rank: int) -> int:
    """A per-rank seed: ``seed`` itself on rank 0 (so one process equals rank 0 of one).

    Use it for randomness that should differ between ranks (dropout, sampling). Data
    order must use the shared ``seed`` so that :func:`shard` splits the same sequence.
    """
    if rank < 0:
        raise ConfigError(f"rank {rank} is negative.")
    return (seed + rank * _SEED_STRIDE) % 2**32


def shard(items: Sequence[T], ctx: DistContext) -> list[T]:
    """This rank's share of ``items``: every ``world_size``-th item starting at ``rank``.

    The list is first padded by repeating its first items (as ``DistributedSampler``
    does) so that every rank gets the same count: DDP needs the same number of steps on
    every rank, or the gradient all-reduce waits forever.
    """
    items = list(items)
    world = ctx.world_size
    if world == 1:
        return items
    if not items:
        return []
    total = -(-len(items) // world) * world
    padded = items + [items[i % len(items)] for i in range(total - len(items))]
    return padded[ctx.rank :: world]


def local_batch_size(batch_size: int, ctx: DistContext) -> int:
    """Per-rank batch size that keeps the global batch at ``batch_size``.

    Raises:
        ConfigError: if ``batch_size`` is not a multiple of the number of processes.
    """
    if batch_size % ctx.world_size:
        raise ConfigError(
            f"train.batch_size={batch_size} is not divisible by the {ctx.world_size} torchrun processes; "
            f"use a multiple of {ctx.world_size} so that the global batch stays the same."
        )
    return batch_size // ctx.world_size


def wrap_model(model: "torch.nn.Module", ctx: DistContext, **ddp_kwargs: Any) -> "torch.nn.Module":
    """``DistributedDataParallel(model)`` when distributed, else ``model`` unchanged.

    DDP broadcasts rank 0's parameters at construction, so all ranks start equal even if
    they built the model with different seeds. The model must already be on ``ctx.device``.
    """
    if not ctx.distributed:
        return model
    # lazy: torch (~2-3 s of imports) stays out of `mmgrid --help`, which imports this module for torchrun
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.local_rank] if ctx.device.startswith("cuda") else None
    return DistributedDataParallel(model, device_ids=ids, **ddp_kwargs)


def unwrap_model(model: "torch.nn.Module") -> "torch.nn.Module":
    """The plain module inside a DDP wrapper (its ``state_dict`` has no ``module.`` prefix)."""
    return getattr(model, "module", model)


def all_reduce_mean(value: Any, ctx: DistContext) -> Any:
    """Mean of ``value`` (a float or a tensor) over all ranks; unchanged on one process."""
    if not ctx.distributed:
        return value
    # lazy: torch (~2-3 s of imports) stays out of `mmgrid --help`, which imports this module for torchrun
    import torch

    is_tensor = isinstance(value, torch.Tensor)
    t = value.detach().clone() if is_tensor else torch.tensor(float(value), dtype=torch.float64)
    t = t.to(ctx.device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    t = t / ctx.world_size
    return t if is_tensor else float(t.item())


def barrier(ctx: DistContext) -> None:
    """Wait for every rank (no-op on one process)."""
    if ctx.distributed:
        # lazy: torch (~2-3 s of imports) stays out of `mmgrid --help`, which imports this module for torchrun
        import torch

        if ctx.device.startswith("cuda"):
            torch.distributed.barrier(device_ids=[ctx.local_rank])
        else:
            torch.distributed.barrier()


def broadcast_object(obj: T, ctx: DistContext, src: int = 0) -> T:
    """Send a small JSON-able value (a registry id) from rank ``src`` to every rank.

    Sent as JSON bytes in a tensor rather than with ``broadcast_object_list``, which
    pickles: mmgrid unpickles nothing.
    """
    if not ctx.distributed:
        return obj

    # lazy: torch (~2-3 s of imports) stays out of `mmgrid --help`, which imports this module for torchrun
    import torch

    data = json.dumps(obj).encode() if ctx.rank == src else b""
    size = torch.tensor([len(data)], dtype=torch.int64, device=ctx.device)
    torch.distributed.broadcast(size, src=src)
    buf = torch.zeros(int(size.item()), dtype=torch.uint8, device=ctx.device)
    if ctx.rank == src:
        buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    torch.distributed.broadcast(buf, src=src)
    return json.loads(bytes(buf.cpu().tolist()).decode())
