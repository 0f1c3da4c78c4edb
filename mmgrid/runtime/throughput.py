"""How fast training runs: measured on this machine, or a named accelerator at a stated MFU.

A cost estimate turns FLOPs into seconds with a :class:`Throughput`: ``seconds = steps *
step_seconds + flops / flops_per_s``. :func:`measured` times a few AdamW steps of the tiny
Qwen3 base (``tiny_qwen3()``, random tokens) at two batch shapes on this machine and derives
both numbers, in CPU time of this process (so that other load on the machine does not change
them; on a busy machine wall-clock time is longer): a fixed cost per optimizer step (Python, the
optimizer, small kernels) and the
sustained FLOP/s of the matrix work, counted as 6 * N * tokens with N the parameters that
multiply each token, :meth:`~mmgrid.runtime.modelfiles.ModelShape.flop_params`); the result is cached
per machine, torch version and thread count (``$MMGRID_CACHE``, else ``~/.cache/mmgrid``).
:func:`accelerator` uses a GPU's peak dense bf16 FLOP/s from its vendor datasheet times a
model FLOPs utilisation (MFU, as nanoGPT reports it), with no per-step cost.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from mmgrid.errors import ConfigError
from mmgrid.fileio.atomic import atomic_write
from mmgrid.models.builders import tiny_qwen3
from mmgrid.runtime.modelfiles import shape_of

# Peak dense (no sparsity) bf16 tensor-core FLOP/s, from the vendors' datasheets:
# NVIDIA H100 Tensor Core GPU datasheet (SXM5: 989 TFLOPS BF16; the 1,979 quoted is with sparsity),
# NVIDIA H200 Tensor Core GPU datasheet (SXM: 989 TFLOPS BF16, the same compute as H100 SXM),
# NVIDIA A100 Tensor Core GPU datasheet (312 TFLOPS BF16 dense; 624 with sparsity),
# NVIDIA L4 Tensor Core GPU datasheet (121 TFLOPS BF16 dense; 242 with sparsity).
ACCELERATORS: dict[str, tuple[float, str]] = {
    "h100": (989e12, "NVIDIA H100 SXM, 989 TFLOP/s dense bf16 (datasheet)"),
    "h200": (989e12, "NVIDIA H200 SXM, 989 TFLOP/s dense bf16 (datasheet)"),
    "a100": (312e12, "NVIDIA A100, 312 TFLOP/s dense bf16 (datasheet)"),
    "l4": (121e12, "NVIDIA L4, 121 TFLOP/s dense bf16 (datasheet)"),
}
CALIBRATION_SHAPES = ((2, 4), (32, 128))  # (examples, tokens each) of the two timed steps
CALIBRATION_STEPS = 8  # timed AdamW steps per shape (after two warm-up steps)
CACHE_VERSION = 3


@dataclass(frozen=True)
class Throughput:
    """``seconds = steps * step_seconds + flops / flops_per_s``; ``source`` says where the numbers come from."""

    flops_per_s: float
    step_seconds: float
    source: str

    def seconds(self, flops: float, steps: int) -> float:
        return steps * self.step_seconds + flops / self.flops_per_s


def accelerator(name: str, mfu: float) -> Throughput:
    """A named GPU (:data:`ACCELERATORS`) at model FLOPs utilisation ``mfu`` (0 < mfu <= 1).

    Raises:
        ConfigError: an unknown name or an MFU outside (0, 1].
    """
    key = name.lower().replace("-", "").replace(" ", "")
    if key not in ACCELERATORS:
        raise ConfigError(f"--accelerator {name!r} is not known; use one of {', '.join(ACCELERATORS)} "
                          "(or leave it out to use this machine's measured throughput).")
    if not 0 < mfu <= 1:
        raise ConfigError(f"--mfu {mfu}: give the model FLOPs utilisation as a fraction in (0, 1], e.g. 0.4.")
    peak, what = ACCELERATORS[key]
    return Throughput(peak * mfu, 0.0, f"{what} at MFU {mfu:g}")


def cache_dir() -> Path:
    """Where measured throughputs are cached: ``$MMGRID_CACHE``, else ``~/.cache/mmgrid``."""
    env = os.environ.get("MMGRID_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "mmgrid"


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``; else what ``platform`` knows)."""
    cpu = platform.processor() or platform.machine() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def _machine_key(threads: int) -> str:
    return f"v{CACHE_VERSION}|{platform.node()}|{cpu_model()}|torch {torch.__version__}|threads {threads}"


def measured(threads: int | None = None, refresh: bool = False) -> Throughput:
    """This machine's training throughput (see the module docstring), cached; ``refresh`` measures again.

    Args:
        threads: torch intra-op threads to measure with (the grid's ``train.threads``; None: torch's default).
    """
    if threads is not None:
        torch.set_num_threads(threads)
    key = _machine_key(torch.get_num_threads())
    path = cache_dir() / "throughput.json"
    try:
        cached = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        cached = {}
    if not refresh and key in cached:
        return Throughput(**cached[key])
    result = _measure()
    cached[key] = asdict(result)
    try:
        atomic_write(path, json.dumps(cached, indent=1).encode(), durable=False)
    except OSError:
        pass  # a read-only home: measured again next time
    return result


def _measure() -> Throughput:
    """Time AdamW steps of ``tiny_qwen3()``: a step of almost no FLOPs (2 examples of 4 tokens) gives the
    fixed cost of a step, a full one (32 examples of 128 tokens) the FLOP/s of the rest; the fastest of
    :data:`CALIBRATION_STEPS` timed steps of each, in CPU time."""
    torch.manual_seed(0)
    model = tiny_qwen3(2048)
    n = shape_of(model.config.to_dict()).flop_params()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    best = []
    for batch, length in CALIBRATION_SHAPES:
        ids = torch.randint(3, 2048, (batch, length))
        times = []
        for i in range(2 + CALIBRATION_STEPS):
            t0 = time.process_time()  # CPU time: what this process computes, not how busy the machine is
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i >= 2:
                times.append(time.process_time() - t0)
        best.append(min(times))
    (b0, l0), (b1, l1) = CALIBRATION_SHAPES
    f0, f1 = 6.0 * n * b0 * l0, 6.0 * n * b1 * l1
    rate = (f1 - f0) / max(best[1] - best[0], 1e-9)
    step = max(best[0] - f0 / rate, 0.0)
    return Throughput(float(rate), float(step), f"this machine, measured (tiny_qwen3 AdamW steps: {rate / 1e9:.2f} "
                                                f"GFLOP/s + {step * 1e3:.1f} ms a step)")
