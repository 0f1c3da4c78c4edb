"""The training loop: one function, read top to bottom.

``train_stage`` trains a model on a list of examples for a fixed number of epochs with
AdamW at a fixed learning rate, seeded. Batches come from ``task.collate``, the loss from
``task.loss`` (a paradigm, or the base LM task); regularizers see the model after every
optimizer step through their one hook. A NaN/Inf loss stops the stage with a
TrainingError; nothing is written for it, so the previous stage's checkpoint remains.

Under ``torchrun`` (``WORLD_SIZE > 1``) every rank takes its share of each batch
(``mmgrid.exec.ddp``) and gradients are averaged over ranks.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import torch
import torch.distributed

from mmgrid.errors import TrainingError
from mmgrid.exec.ddp import DistContext, all_reduce_mean, local_batch_size, shard
from mmgrid.runtime.device import autocast, resolve_device, seed_everything, to_device
from mmgrid.runtime.progress import progress as progress_bar

MAX_EVENTS = 500  # back-merge events kept in the stage log


@dataclass
class StageLog:
    """What a stage reports (stored in the checkpoint's meta)."""

    seeds: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    examples: int = 0
    epoch_losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    device: str = "cpu"
    events: list[dict[str, float]] = field(default_factory=list)  # back-merges: step, distances, merges
    n_events: int = 0
    max_distance_after_step: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def dist_context(device: str = "auto") -> Any:
    """A ``mmgrid.exec.ddp.DistContext`` under torchrun (``WORLD_SIZE > 1``), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    return DistContext.from_env(device=device)


def _average_gradients(params: list[torch.nn.Parameter], world_size: int) -> None:
    """Mean of the gradients over all ranks (what DDP does), without wrapping the model, so
    that paradigms may call any method of their model in ``loss``."""
    for p in params:
        if p.grad is not None:
            torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)
            p.grad.div_(world_size)


def _record(log: StageLog, step: int, values: dict[str, float]) -> None:
    if "distance" in values:
        prev = log.max_distance_after_step
        log.max_distance_after_step = values["distance"] if prev is None else max(prev, values["distance"])
    if values.get("merges", 0) > 0:
        log.n_events += 1
        if len(log.events) < MAX_EVENTS:
            log.events.append({"step": step, **values})


def task_option(task: Any, model: Any, name: str, default: Any) -> Any:
    """A training option (``bucket_window``, ``fused_optimizer``): the model's own
    ``train_options[name]`` where it has one (a paradigm knob, e.g. ``paradigm_params.emb``),
    else the task's attribute, else ``default``."""
    own = getattr(model, "train_options", None)
    if isinstance(own, dict) and name in own:
        return own[name]
    return getattr(task, name, default)


def _lengths(task: Any, examples: Sequence[Any], window: int) -> list[int] | None:
    """Per-example lengths when length bucketing is asked for (``window > 1`` and the task has an
    ``example_length(example)`` method), else None."""
    if window <= 1 or not hasattr(task, "example_length"):
        return None
    return [int(task.example_length(e)) for e in examples]


def length_buckets(order: list[int], lengths: Sequence[int], batch_size: int, window: int,
                   gen: torch.Generator) -> list[int]:
    """Reorder a shuffled epoch so that each batch holds examples of similar length.

    The shuffled ``order`` is cut into windows of ``window`` batches; inside a window the
    examples are sorted by length (stable, so ties keep the shuffled order), cut into
    batches of ``batch_size``, and the full batches are put in a seeded random order. The
    last, possibly short, batch of the epoch stays last, so the epoch is still cut into
    consecutive batches of ``batch_size`` (and a torchrun rank's strided share of each
    global batch is unchanged). Every example appears exactly as often as in ``order``:
    the epoch and the examples per step are those of the data layer; only which examples
    share a batch changes, which cuts padding (a checkpoint trained so has another
    computation version: ``bucket_window`` is part of the stage identity).
    """
    span = batch_size * window
    out: list[int] = []
    for w in range(0, len(order), span):
        chunk = sorted(order[w:w + span], key=lambda i: lengths[i])
        batches = [chunk[b:b + batch_size] for b in range(0, len(chunk), batch_size)]
        tail = [batches.pop()] if batches and len(batches[-1]) < batch_size else []
        perm = torch.randperm(len(batches), generator=gen).tolist() if batches else []
        for j in perm:
            out += batches[j]
        for t in tail:
            out += t
    return out


def adamw(params: list[torch.nn.Parameter], lr: float, weight_decay: float, fused: bool) -> torch.optim.AdamW:
    """The stage's AdamW.

    ``fused=False``: ``foreach`` (one multi-tensor kernel per AdamW operation), bit-identical to
    the per-parameter loop (tests/train). ``fused=True`` (a task that sets ``fused_optimizer``,
    with a ``train_version`` that says so): one fused kernel for the whole update, ~4x faster
    than foreach on the tiny models' 25 tensors (0.5 vs 1.9 ms a step, a tenth of an emb step)
    and equal to it up to float rounding (~1e-7). Devices without a fused AdamW fall back to
    foreach.
    """
    if fused and params and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)


@runtime_checkable
class TrainTask(Protocol):
    """What :func:`train_stage` uses of a task (a paradigm, or the base LM task).

    Attributes:
        fused_optimizer: True selects the fused AdamW (:func:`adamw`); default False.
        bucket_window: > 1 (with :meth:`example_length`) batches examples of similar length
            together (:func:`length_buckets`); default 0 (off).

    A model with a ``train_options`` dict overrides either for itself (:func:`task_option`): emb
    makes both ``paradigm_params.emb`` knobs.
    """

    def collate(self, model: torch.nn.Module, examples: list[Any]) -> dict[str, torch.Tensor]:
        """Batch a list of examples into tensors."""
        ...

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scalar training loss of one batch."""
        ...


@dataclass(frozen=True)
class StageSettings:
    """The hyperparameters of one stage.

    Attributes:
        epochs: passes over the (possibly capped) examples.
        lr: AdamW learning rate, fixed for the whole stage.
        batch_size: examples per optimizer step.
        seed: seeds torch, numpy, random and the shuffling.
        weight_decay: AdamW's decoupled weight decay.
        max_examples: keep a seeded random sample of this many examples (None = all).
        device: ``auto`` | ``cpu`` | ``cuda``.
        dtype: ``auto`` (bf16 autocast on CUDA) | ``float32`` | ``bfloat16``.
    """

    epochs: int
    lr: float
    batch_size: int
    seed: int
    weight_decay: float = 0.0
    max_examples: int | None = None
    device: str = "auto"
    dtype: str = "auto"


def _capped(examples: Sequence[Any], max_examples: int | None, gen: torch.Generator) -> list[Any]:
    """A seeded random sample of ``max_examples`` examples in their order (all when fewer)."""
    examples = list(examples)
    if max_examples is not None and len(examples) > max_examples:
        keep = torch.randperm(len(examples), generator=gen)[:max_examples].sort().values
        examples = [examples[i] for i in keep.tolist()]
    return examples


def _batch_loss(task: Any, model: torch.nn.Module, batch: dict[str, torch.Tensor], regularizers: Sequence[Any],
                dev: torch.device, dtype: str) -> torch.Tensor:
    """The task's loss of one batch plus every regularizer's penalty, under autocast."""
    with autocast(dev, dtype):
        loss = task.loss(model, batch)
        for reg in regularizers:
            if hasattr(reg, "penalty"):
                loss = loss + reg.penalty(model)
    return loss


def train_stage(task: TrainTask, model: torch.nn.Module, examples: Sequence[Any], settings: StageSettings | None = None,
                *, regularizers: Sequence[Any] = (), where: str = "", progress: bool = True, dist: Any = None,
                **knobs: Any) -> StageLog:
    """Train ``model`` in place on ``examples``.

    Args:
        task: a :class:`TrainTask` (``collate``, ``loss``; optionally ``fused_optimizer``,
            ``bucket_window`` and ``example_length``).
        model: the model; moved to the device, left there in train mode.
        examples: the stage's training examples.
        settings: the stage's hyperparameters; or give them as keywords (``epochs=..., lr=...``,
            the fields of :class:`StageSettings`).
        regularizers: objects with ``on_step_end(model, step) -> dict`` (and maybe ``penalty``).
        where: ``paradigm/domain/stage`` for progress and error messages.
        progress: show progress (:func:`mmgrid.runtime.progress.progress`: a bar on a terminal,
            a few plain lines with rate and ETA in a log, nothing when quiet).
        dist: a ``DistContext`` (torchrun): every rank sees the same shuffled order, takes
            its strided share with ``batch_size / world_size`` per step, and gradients are
            averaged over ranks, so N processes follow the one-process trajectory.

    Returns:
        The :class:`StageLog`.

    Raises:
        TrainingError: the loss became NaN or infinite.
    """
    st = settings if settings is not None else StageSettings(**knobs)
    if settings is not None and knobs:
        raise TypeError(f"train_stage: give the settings or {sorted(knobs)} as keywords, not both")
    t0 = time.perf_counter()
    log = StageLog(seeds=seed_everything(st.seed))
    dev = torch.device(dist.device) if dist is not None else resolve_device(st.device)
    log.device = str(dev)
    model.to(dev)
    model.train()

    gen = torch.Generator().manual_seed(st.seed)
    examples = _capped(examples, st.max_examples, gen)
    log.examples = len(examples)
    world = dist.world_size if dist is not None else 1
    local_bs = local_batch_size(st.batch_size, dist) if world > 1 else st.batch_size

    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(params, st.lr, st.weight_decay, fused=bool(task_option(task, model, "fused_optimizer", False)))
    n_batches = math.ceil(math.ceil(len(examples) / world) / local_bs) if examples else 0
    show = progress and (dist is None or dist.is_main)
    bar = progress_bar(total=st.epochs * n_batches, desc=where or "train", unit="step", enabled=show)
    step = 0
    window = int(task_option(task, model, "bucket_window", 0) or 0)
    lengths = _lengths(task, examples, window)
    for epoch in range(st.epochs):
        order = torch.randperm(len(examples), generator=gen).tolist()
        if lengths is not None:
            order = length_buckets(order, lengths, st.batch_size, window, gen)
        mine = [examples[i] for i in order]
        if world > 1:
            mine = shard(mine, dist)
        total, count = 0.0, 0
        for b in range(n_batches):
            batch = to_device(task.collate(model, mine[b * local_bs:(b + 1) * local_bs]), dev)
            loss = _batch_loss(task, model, batch, regularizers, dev, st.dtype)
            if not torch.isfinite(loss.detach()).all():
                bar.close()
                raise TrainingError(
                    f"{where}: the loss became {float(loss.detach())} at epoch {epoch + 1}, step {step}; "
                    "nothing was written for this stage (the previous checkpoint is kept). Lower train.lr "
                    "or check the data of this phase."
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if world > 1:
                _average_gradients(params, world)
            opt.step()
            for reg in regularizers:
                _record(log, step, reg.on_step_end(model, step))
            value = float(loss.detach())
            total, count, step = total + value, count + 1, step + 1
            bar.set_postfix(epoch=f"{epoch + 1}/{st.epochs}", loss=f"{value:.4f}", refresh=False)
            bar.update(1)
        mean = total / max(count, 1)
        if world > 1:
            mean = all_reduce_mean(mean, dist)
        log.epoch_losses.append(mean)
    bar.close()
    model.eval()
    log.steps = step
    log.seconds = time.perf_counter() - t0
    return log
