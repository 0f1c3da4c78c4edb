"""Merging LoRA adapters module by module: the products combined by task arithmetic or
TIES, re-factorised, checked, and written with a report (see :mod:`mmgrid.merge.lora`)."""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mmgrid.fileio.atomic import atomic_output, atomic_write
from mmgrid.merge import ops
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.lora.adapters import (A_SUFFIX, B_SUFFIX, CONFIG_NAME, DTYPES, METHODS, REPORT_NAME,
                                        WEIGHTS_NAME, Adapter, module_model_name, check_compatible, lora_scaling,
                                        read_adapter)
from mmgrid.merge.lora.factorize import choose_rank, dense_factors, update_factors, check_finite, lowrank_norm, lowrank_svd

@dataclass
class LoraMergeReport:
    """What :func:`merge_lora` wrote and how well the factors reproduce the merged update.

    Attributes:
        out: the output folder.
        method: task_arithmetic | ties.
        rank: the adapter's ``r`` (the largest module rank; modules with another rank are
            listed in the config's rank_pattern).
        ranks: rank per module.
        errors: ||delta - B'A'||_F / ||delta||_F per module (0 where delta is 0).
        error: the same over all modules: sqrt(sum_m err_m^2 / sum_m ||delta_m||^2).
        params: the merge parameters (inputs, weights, density, sign rule, rank rule, dtype).
    """

    out: Path
    method: str
    rank: int
    ranks: dict[str, int]
    errors: dict[str, float]
    error: float
    params: dict = field(default_factory=dict)

    @property
    def max_error(self) -> tuple[str, float]:
        """(module, error) of the worst-reconstructed module."""
        name = max(self.errors, key=self.errors.__getitem__)
        return name, self.errors[name]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["out"] = str(self.out)
        return d

    def summary(self) -> str:
        name, worst = self.max_error
        return (
            f"merged {len(self.params.get('adapters', []))} LoRA adapters ({self.method}) into {self.out}: "
            f"rank {self.rank}, {len(self.ranks)} modules; relative reconstruction error "
            f"{self.error:.3g} overall, max {worst:.3g} ({name})"
        )


# ---------------------------------------------------------------------------- reading


def _check_params(n: int, method: str, weights, scale, rank, energy, density, sign_rule, dtype) -> dict:
    if n < 1:
        raise MergeParamError("merge_lora needs at least one adapter")
    if method not in METHODS:
        raise MergeParamError(f"LoRA merge method {method!r} is unknown; use one of {', '.join(METHODS)}")
    if weights is None:
        weights = [1.0] * n
    weights = [float(w) for w in weights]
    if len(weights) != n:
        raise MergeParamError(f"weights: {len(weights)} given for {n} adapters; give one weight per adapter")
    if not all(math.isfinite(w) for w in weights) or not math.isfinite(float(scale)):
        raise MergeParamError("weights and scale must be finite numbers")
    if rank is not None and rank != "full":
        if isinstance(rank, bool) or not isinstance(rank, int) and not (isinstance(rank, str) and rank.isdigit()):
            raise MergeParamError(
                f"rank {rank!r}: give a positive integer, 'full', or leave it out (the largest input rank)"
            )
        rank = int(rank)
        if rank < 1:
            raise MergeParamError(f"rank {rank}: must be >= 1")
    if energy is not None and not 0.0 < float(energy) <= 1.0:
        raise MergeParamError(f"energy {energy}: the kept fraction of sum sigma^2 must be in (0, 1], e.g. 0.99")
    if method == "ties":
        density = 0.2 if density is None else float(density)
        if not 0.0 < density <= 1.0:
            raise MergeParamError(f"density {density}: TIES keeps a fraction of entries in (0, 1], e.g. 0.2")
        sign_rule = sign_rule or "unweighted"
        if sign_rule not in ops.SIGN_RULES:
            raise MergeParamError(f"sign_rule {sign_rule!r}: use 'unweighted' (TIES paper) or 'weighted' (mergekit)")
    elif density is not None or sign_rule is not None:
        raise MergeParamError("density and sign_rule are TIES parameters; use method='ties' or leave them out")
    if dtype is not None and dtype not in DTYPES:
        raise MergeParamError(f"dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return {"method": method, "weights": weights, "scale": float(scale), "rank": rank,
            "energy": None if energy is None else float(energy), "density": density,
            "sign_rule": sign_rule, "dtype": dtype}


def _load(f, ad: Adapter, module: str) -> tuple[torch.Tensor, torch.Tensor]:
    a = check_finite(f.get_tensor(module + A_SUFFIX), f"LoRA adapter {str(ad.path)!r}: {module}{A_SUFFIX}")
    b = check_finite(f.get_tensor(module + B_SUFFIX), f"LoRA adapter {str(ad.path)!r}: {module}{B_SUFFIX}")
    return a, b


def _merge_module(handles, adapters, module: str, p: dict, out_dtype: torch.dtype) -> tuple:
    """One module: (B', A', rank, ||delta - B'A'||_F, ||delta||_F)."""
    name = module_model_name(module)
    default = max(ad.rank(module) for ad in adapters)
    if p["method"] == "task_arithmetic":
        bs, as_ = [], []
        for f, ad, w in zip(handles, adapters, p["weights"]):
            a, b = _load(f, ad, module)
            s = lora_scaling(ad.config, name, ad.rank(module))
            bs.append(b.to(torch.float64) * (p["scale"] * w * s))
            as_.append(a.to(torch.float64))
        bcat, acat = torch.cat(bs, 1), torch.cat(as_, 0)
        u, s, vh = lowrank_svd(bcat, acat)
        r = choose_rank(s, p["rank"], p["energy"], default)
        b2, a2 = update_factors(u, s, vh, r, out_dtype)
        check_finite(b2, f"merged {module}{B_SUFFIX}")
        check_finite(a2, f"merged {module}{A_SUFFIX}")
        norm = lowrank_norm(bcat, acat)
        err = lowrank_norm(torch.cat([bcat, -b2.to(torch.float64)], 1), torch.cat([acat, a2.to(torch.float64)], 0))
        return b2, a2, r, err, norm
    trimmed = []
    for f, ad in zip(handles, adapters):
        a, b = _load(f, ad, module)
        delta = (b.float() @ a.float()).mul_(lora_scaling(ad.config, name, ad.rank(module)))
        trimmed.append(ops.trim_top_density(delta, p["density"]))
    sign = ops.elect_sign(trimmed, p["weights"], p["sign_rule"])
    delta = ops.disjoint_mean(trimmed, sign, p["weights"]).mul_(p["scale"])
    del trimmed, sign
    check_finite(delta, f"merged update of {module}")
    ref = delta.to(torch.float64)
    del delta
    b2, a2, r = dense_factors(ref, p["rank"], p["energy"], default, out_dtype)
    check_finite(b2, f"merged {module}{B_SUFFIX}")
    check_finite(a2, f"merged {module}{A_SUFFIX}")
    err = float(torch.linalg.matrix_norm(ref - b2.to(torch.float64) @ a2.to(torch.float64)))
    return b2, a2, r, err, float(torch.linalg.matrix_norm(ref))


def merge_lora(
    adapters: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    method: str = "task_arithmetic",
    weights: Sequence[float] | None = None,
    rank: int | str | None = None,
    energy: float | None = None,
    density: float | None = None,
    sign_rule: str | None = None,
    scale: float = 1.0,
    dtype: str | None = None,
    overwrite: bool = False,
) -> LoraMergeReport:
    """Merge PEFT LoRA adapters into one LoRA adapter folder (see the module docstring).

    Args:
        adapters: adapter folders (adapter_config.json + adapter_model.safetensors).
        out: the folder to write (adapter_config.json, adapter_model.safetensors and the
            report ``mmgrid_merge_lora.json``).
        method: task_arithmetic | ties.
        weights: one weight per adapter (default 1.0 each): task arithmetic's lambda_i;
            TIES's weights in the disjoint mean (and in the sign with ``sign_rule="weighted"``).
        rank: output rank: an integer, ``"full"`` (every nonzero direction: exact up to
            rounding), or None: the largest input rank of each module.
        energy: keep the smallest rank whose sigma^2 sum reaches this fraction of the total
            (per module, at most ``rank`` when ``rank`` is given).
        density: TIES's kept fraction per product, in (0, 1]; default 0.2.
        sign_rule: TIES's sign election: unweighted (paper, default) | weighted (mergekit).
        scale: a factor on the merged update (TIES's lambda).
        dtype: output dtype (float32 | bfloat16 | float16); default: the inputs' (promoted).
        overwrite: replace an adapter already in ``out``.

    Returns:
        The :class:`LoraMergeReport` (ranks and relative reconstruction errors).

    Raises:
        AdapterFormatError, UnsafeAdapterError, AdapterMismatchError, NonFiniteError,
        MergeParamError: before anything is written.
    """

    p = _check_params(len(adapters), method, weights, scale, rank, energy, density, sign_rule, dtype)
    out = Path(out)
    read = [read_adapter(a) for a in adapters]
    check_compatible(read)
    if any(out.resolve() == ad.path.resolve() for ad in read):
        raise MergeParamError(f"out {str(out)!r} is one of the input adapters; write the merge to a new folder")
    if not overwrite and ((out / WEIGHTS_NAME).exists() or (out / CONFIG_NAME).exists()):
        raise MergeParamError(f"out {str(out)!r} already holds an adapter; choose a new folder or pass overwrite=True")
    if dtype is not None:
        out_dtype = DTYPES[dtype]
    else:
        # the inputs' dtype; mixed dtypes promote (bfloat16 + float16 -> float32)
        out_dtype = functools.reduce(torch.promote_types, sorted(set().union(*(ad.dtypes for ad in read)), key=str))

    tensors: dict[str, torch.Tensor] = {}
    ranks: dict[str, int] = {}
    errors: dict[str, float] = {}
    err2 = norm2 = 0.0
    with ExitStack() as stack:
        handles = [stack.enter_context(safe_open(str(ad.weights), framework="pt")) for ad in read]
        for module in sorted(read[0].modules):
            b2, a2, r, err, norm = _merge_module(handles, read, module, p, out_dtype)
            tensors[module + A_SUFFIX], tensors[module + B_SUFFIX] = a2, b2
            ranks[module] = r
            errors[module] = err / norm if norm > 0 else (0.0 if err == 0 else math.inf)
            err2 += err * err
            norm2 += norm * norm
    overall = math.sqrt(err2 / norm2) if norm2 > 0 else 0.0

    top = max(ranks.values())
    config = json.loads(json.dumps(read[0].config))
    config.update(r=top, lora_alpha=top, use_rslora=False, inference_mode=True,
                  rank_pattern={module_model_name(m): r for m, r in ranks.items() if r != top},
                  alpha_pattern={module_model_name(m): r for m, r in ranks.items() if r != top})
    params = {"adapters": [str(ad.path) for ad in read], **p, "out_dtype": str(out_dtype).removeprefix("torch.")}
    report = LoraMergeReport(out, method, top, ranks, errors, overall, params)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"format": "pt", "mmgrid.merge_lora": json.dumps(params, sort_keys=True)}
    with atomic_output(out / WEIGHTS_NAME) as tmp:
        save_file(tensors, str(tmp), metadata=meta)
    atomic_write(out / CONFIG_NAME, (json.dumps(config, indent=2, sort_keys=True) + "\n").encode(), durable=False)
    atomic_write(out / REPORT_NAME, (json.dumps(report.to_dict(), indent=2) + "\n").encode(), durable=False)
    return report
