"""LoRA extraction: a PEFT LoRA adapter from a full fine-tune's task vector, and applying
an adapter to a base (the inverse direction of :mod:`mmgrid.merge.lora.merging`).

For every target module m (a 2-D ``*.weight`` that is not a vocabulary matrix, filtered by
``include`` / ``exclude`` regular expressions) the task vector tau_m = theta_m - theta_0,m
(MMGRid Eq. 2) is replaced by its best rank-r approximation (Eckart-Young, by truncated
SVD in float64): tau_m ~ U_r S_r V_r^T = B A with B = U_r sqrt(S_r), A = sqrt(S_r) V_r^T,
written with ``lora_alpha = r`` so PEFT's scaling alpha / r is 1 and B A is the update
itself (mergekit-extract-lora writes the same product with the same split,
``--distribute-scale``). The rank of a module is ``rank`` (at most its smaller side), or
the smallest rank whose sigma^2 sum reaches ``energy`` of ||tau_m||_F^2 (both: the smaller).
The relative reconstruction error ||tau_m - B A||_F / ||tau_m||_F = sqrt(sum_{j>r} sigma_j^2) /
||tau_m||_F is measured on the factors as written, per module and over all modules.

A LoRA adapter carries only its target modules: the other tensors that the fine-tune
changed (embeddings and LM head, norms, biases) stay at the base's values once the
adapter is applied. The report gives their share of ||tau||^2 (``not_carried``), so the
adapter's loss is visible before any evaluation.

:func:`apply_lora` adds an adapter's updates (alpha / r) B A to a base, the state PEFT's
``merge_and_unload`` gives; with a registry it stores the result with lineage, so an
extracted or merged adapter can be evaluated as any checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mmgrid.fileio.atomic import replace
from mmgrid.merge.errors import MergeParamError, ShapeMismatchError
from mmgrid.merge.lora.adapters import (A_SUFFIX, B_SUFFIX, CONFIG_NAME, DTYPES, PREFIX, WEIGHTS_NAME, module_model_name,
                                        lora_scaling, read_adapter)
from mmgrid.merge.lora.factorize import dense_factors, check_finite
from mmgrid.merge.plan import is_vocab
from mmgrid.merge.tensors import TensorSource, open_source
from mmgrid.registry import card

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry

REPORT_NAME = "mmgrid_extract_lora.json"
METHOD = "extract_lora"  # the ``method`` of an applied adapter stored in the registry
APPLY_METHOD = "apply_lora"


@dataclass
class LoraExtractReport:
    """What :func:`extract_lora` wrote and how well the adapter reproduces the fine-tune.

    Attributes:
        out: the adapter folder.
        rank: the adapter's ``r`` (the largest module rank; others in rank_pattern).
        ranks: rank per extracted module (module name as in the model).
        errors: ||tau_m - B A||_F / ||tau_m||_F per module.
        error: over all extracted modules: sqrt(sum_m err_m^2 / sum_m ||tau_m||^2).
        not_carried: tensor -> its share of ||tau||^2 over the whole model, for changed
            tensors the adapter does not hold (embeddings, norms, biases, excluded modules).
        carried: the extracted modules' share of ||tau||^2.
        unchanged: target modules whose task vector is 0 (no adapter weights written).
        params: checkpoint, base, rank rule, filters, dtype.
        applied_id: the registry id of base + adapter, when it was stored.
    """

    out: Path
    rank: int
    ranks: dict[str, int]
    errors: dict[str, float]
    error: float
    not_carried: dict[str, float]
    carried: float
    unchanged: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    applied_id: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["out"] = str(self.out)
        return d

    def summary(self) -> str:
        worst = max(self.errors, key=self.errors.__getitem__) if self.errors else None
        tail = f", max {self.errors[worst]:.3g} ({worst})" if worst else ""
        return (f"extracted a LoRA adapter into {self.out}: rank {self.rank}, {len(self.ranks)} modules; relative "
                f"reconstruction error {self.error:.3g} overall{tail}; the adapter's modules hold "
                f"{self.carried:.1%} of ||tau||^2 (the rest stays at the base when applied)")


def _check(rank: Any, energy: Any, dtype: str | None) -> tuple[int | None, float | None]:
    if rank is None and energy is None:
        raise MergeParamError("extract_lora: give rank (an integer >= 1) or energy (a fraction in (0, 1]), or both")
    if rank is not None:
        if isinstance(rank, bool) or not (isinstance(rank, int) or (isinstance(rank, str) and rank.isdigit())) \
                or int(rank) < 1:
            raise MergeParamError(f"extract_lora: rank {rank!r} must be an integer >= 1")
        rank = int(rank)
    if energy is not None:
        energy = float(energy)
        if not 0.0 < energy <= 1.0:
            raise MergeParamError(f"extract_lora: energy {energy} is the kept fraction of sum sigma^2, in (0, 1], e.g. 0.9")
    if dtype is not None and dtype not in DTYPES:
        raise MergeParamError(f"extract_lora: dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return rank, energy


def _regexes(pats: Sequence[str] | str | None, what: str) -> list[re.Pattern]:
    if pats is None:
        return []
    out = []
    for p in [pats] if isinstance(pats, str) else pats:
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise MergeParamError(f"extract_lora: {what} pattern {p!r} is not a regular expression ({exc})") from exc
    return out


def target_modules(ck: TensorSource, base: TensorSource, include: Sequence[str] | str | None = None,
                   exclude: Sequence[str] | str | None = None) -> list[str]:
    """The tensor names extracted: float 2-D ``*.weight`` tensors of equal shape in both, not
    vocabulary matrices, matching an ``include`` pattern (if any) and no ``exclude`` pattern."""
    inc, exc = _regexes(include, "include"), _regexes(exclude, "exclude")
    out = []
    for name, (shape, dtype) in ck.shapes.items():
        if not (dtype.is_floating_point and len(shape) == 2 and name.endswith(".weight")) or is_vocab(name, False):
            continue
        if name not in base.shapes or tuple(base.shapes[name][0]) != tuple(shape):
            continue
        module = name[: -len(".weight")]
        if inc and not any(p.search(module) for p in inc):
            continue
        if any(p.search(module) for p in exc):
            continue
        out.append(name)
    return out


def extract_lora(checkpoint: Any, base: Any, out: str | os.PathLike, rank: int | None = None,
                 energy: float | None = None, include: Sequence[str] | str | None = None,
                 exclude: Sequence[str] | str | None = None, dtype: str | None = None, overwrite: bool = False,
                 registry: Registry | None = None, store: bool = False, coords: dict[str, Any] | None = None) -> LoraExtractReport:
    """Extract a PEFT LoRA adapter from ``checkpoint``'s task vector against ``base``.

    Args:
        checkpoint, base: registry ids (with ``registry``), ``.safetensors`` paths or state dicts.
        out: the adapter folder to write (adapter_config.json, adapter_model.safetensors and
            the report ``mmgrid_extract_lora.json``).
        rank: the rank of each module (at most its smaller side).
        energy: instead or as well: the smallest rank holding this fraction of sum sigma^2.
        include, exclude: regular expressions on module names (``model.layers.0.mlp.up_proj``).
        dtype: the adapter's dtype (float32 | bfloat16 | float16; default: the checkpoint's).
        overwrite: replace an adapter already in ``out``.
        registry: an open registry (ids; and where ``store`` puts the applied model).
        store: also store base + adapter in ``registry`` (:func:`apply_lora`); its id is
            ``report.applied_id``.
        coords: coords of the stored model (default: the checkpoint's, variant ``lora-<rule>``).

    Raises:
        MergeParamError, SourceError, ShapeMismatchError, NonFiniteError: before anything is written.
    """
    rank, energy = _check(rank, energy, dtype)
    out = Path(out)
    if not overwrite and ((out / WEIGHTS_NAME).exists() or (out / CONFIG_NAME).exists()):
        raise MergeParamError(f"out {str(out)!r} already holds an adapter; choose a new folder or pass overwrite=True")
    if store and registry is None:
        raise MergeParamError("extract_lora: store=True needs registry= (where the applied model goes)")
    ck = open_source(checkpoint, "checkpoint", registry)
    bs = open_source(base, "base", registry)
    targets = target_modules(ck, bs, include, exclude)
    if not targets:
        raise MergeParamError("extract_lora: no target module: no 2-D *.weight tensor (not an embedding or LM head) "
                              "of the same shape in checkpoint and base matches; check include/exclude")
    out_dtype = DTYPES[dtype] if dtype else ck.shapes[targets[0]][1]
    tensors: dict[str, torch.Tensor] = {}
    ranks: dict[str, int] = {}
    errors: dict[str, float] = {}
    unchanged: list[str] = []
    sq: dict[str, float] = {}
    err2 = norm2 = 0.0
    for name, (shape, dt) in ck.shapes.items():
        if not dt.is_floating_point:
            continue
        a = ck.get(name)
        b = bs.get(name) if name in bs.shapes else None
        if b is None or tuple(b.shape) != tuple(a.shape):
            sq[name] = float(a.double().square().sum()) if b is None else math.nan  # not comparable
            continue
        tau = check_finite(a.to(torch.float64) - b.to(torch.float64), f"checkpoint - base at {name}")
        sq[name] = float(tau.square().sum())
        if name not in targets:
            continue
        module = name[: -len(".weight")]
        if sq[name] == 0.0:
            unchanged.append(module)
            continue
        limit = min(tau.shape) if rank is None else min(rank, min(tau.shape))
        bf, af, r = dense_factors(tau, limit, energy, limit, out_dtype)
        err = float(torch.linalg.matrix_norm(tau - bf.to(torch.float64) @ af.to(torch.float64)))
        key = PREFIX + module
        tensors[key + A_SUFFIX], tensors[key + B_SUFFIX] = af, bf
        ranks[module] = r
        errors[module] = err / math.sqrt(sq[name])
        err2 += err * err
        norm2 += sq[name]
    if not ranks:
        raise MergeParamError("extract_lora: the checkpoint equals the base on every target module; nothing to extract")
    total = sum(v for v in sq.values() if not math.isnan(v))
    carried = norm2 / total if total > 0 else 1.0
    not_carried = {n: (v / total if total > 0 else 0.0) for n, v in sq.items()
                   if n not in targets and not math.isnan(v) and v > 0}
    not_carried.update({n: math.nan for n, v in sq.items() if math.isnan(v)})
    top = max(ranks.values())
    params = {"checkpoint": ck.label, "base": bs.label, "rank": rank, "energy": energy,
              "include": include, "exclude": exclude, "dtype": str(out_dtype).removeprefix("torch.")}
    config = {
        "base_model_name_or_path": bs.label, "peft_type": "LORA", "task_type": None, "r": top, "lora_alpha": top,
        "rank_pattern": {m: r for m, r in ranks.items() if r != top},
        "alpha_pattern": {m: r for m, r in ranks.items() if r != top},
        "target_modules": sorted(ranks), "lora_dropout": 0.0, "fan_in_fan_out": False, "bias": "none",
        "use_rslora": False, "use_dora": False, "inference_mode": True, "modules_to_save": None,
    }
    report = LoraExtractReport(out, top, ranks, errors, math.sqrt(err2 / norm2) if norm2 > 0 else 0.0,
                               not_carried, carried, unchanged, params)
    readme = card.render_card(card.adapter_card(_base_name(registry, base), params, top))
    _write_folder(out, tensors, config, report, overwrite, readme)
    if store:
        assert registry is not None  # store without a registry was refused above
        try:
            report.applied_id = store_applied(out, bs if isinstance(base, TensorSource) else base, registry,
                                              coords=coords or _coords(registry, checkpoint, rank, energy),
                                              source=checkpoint, params=params)
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)  # a failing call leaves nothing half-written
            raise
        (out / REPORT_NAME).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return report


def _base_name(registry: Registry | None, base: Any) -> str | None:
    """The name of the model an adapter applies to, for its card: a registry checkpoint's hub
    source or id, a folder's or file's hub id (a hub cache path) or name; None for a state dict."""
    cid = _registry_id(registry, base)
    if cid is not None and registry is not None:
        return card.hub_name(registry.get(cid).meta.get("source")) or cid
    if isinstance(base, (str, os.PathLike)):
        p = Path(base).resolve()
        return card.hub_name(str(p)) or (p.parent.name if p.suffix == ".safetensors" else p.name)
    return None


def _registry_id(registry: Registry | None, ref: Any) -> str | None:
    """The registry id of ``ref``, or None for a state dict, a path or a source."""
    if registry is None or not isinstance(ref, str) or Path(ref).exists():
        return None
    return registry.get(ref).id


def _coords(registry: Registry, checkpoint: Any, rank: int | None, energy: float | None) -> dict[str, Any]:
    cid = _registry_id(registry, checkpoint)
    coords = dict(registry.get(cid).coords) if cid else {"paradigm": "unknown", "domain": "none", "period": "none"}
    rule = "-".join(x for x in (f"r{rank}" if rank else "", f"e{energy:g}" if energy else "") if x)
    coords["variant"] = f"lora-{rule}"
    return coords


def _write_folder(out: Path, tensors: dict, config: dict, report: LoraExtractReport, overwrite: bool,
                  readme: str) -> None:
    """Write the four files (weights, config, report, the README.md card) into a temporary
    folder beside ``out``, then move them in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        save_file(tensors, str(tmp / WEIGHTS_NAME), metadata={"format": "pt",
                                                               "mmgrid.extract_lora": json.dumps(report.params)})
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        (tmp / REPORT_NAME).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        (tmp / card.CARD_FILE).write_text(readme)
        out.mkdir(exist_ok=True)
        for name in (WEIGHTS_NAME, CONFIG_NAME, REPORT_NAME, card.CARD_FILE):
            replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def apply_lora(adapter: str | os.PathLike, base: Any, registry: Registry | None = None, scale: float = 1.0) -> dict[str, torch.Tensor]:
    """base + scale (alpha / r) B A on every module of ``adapter`` (PEFT's merge_and_unload), in
    the base's dtypes; the other tensors are the base's.

    Raises:
        AdapterFormatError, UnsafeAdapterError: not a plain PEFT LoRA adapter.
        ShapeMismatchError: a module the base lacks or of another shape.
    """
    ad = read_adapter(adapter)
    bs = open_source(base, "base", registry)
    out = {n: bs.get(n).clone() for n in bs.shapes}
    with safe_open(str(ad.weights), framework="pt") as f:
        for module in ad.modules:
            name = module_model_name(module) + ".weight"
            if name not in out:
                raise ShapeMismatchError(f"LoRA adapter {str(ad.path)!r}: module {module_model_name(module)!r} is not in the "
                                         f"base {bs.label} (no tensor {name!r}); apply it to the base it was made for")
            a = check_finite(f.get_tensor(module + A_SUFFIX), f"{module}{A_SUFFIX}").to(torch.float64)
            b = check_finite(f.get_tensor(module + B_SUFFIX), f"{module}{B_SUFFIX}").to(torch.float64)
            w = out[name]
            if tuple(w.shape) != (b.shape[0], a.shape[1]):
                raise ShapeMismatchError(f"LoRA adapter {str(ad.path)!r}: module {module_model_name(module)!r} maps "
                                         f"{a.shape[1]} -> {b.shape[0]} but the base's {name} is {list(w.shape)}")
            s = scale * lora_scaling(ad.config, module_model_name(module), ad.rank(module))
            out[name] = (w.to(torch.float64) + s * (b @ a)).to(w.dtype)
    return out


def store_applied(adapter: str | os.PathLike, base: Any, registry: Registry, coords: dict[str, Any] | None = None,
                  source: Any = None, params: dict | None = None, scale: float = 1.0) -> str:
    """Store base + adapter (:func:`apply_lora`) in ``registry``; return its id.

    Lineage: ``merge_base`` -> the base; ``merge_input`` -> ``source`` (the checkpoint an
    adapter was extracted from) when given. ``params`` (part of the identity) record how
    the adapter was made, with a hash of its weights, so another adapter gets another id.
    Files and meta are the source's (else the base's): the paradigm reads its item tables there.
    """
    ad = read_adapter(adapter)
    digest = hashlib.sha256((Path(adapter) / WEIGHTS_NAME).read_bytes()).hexdigest()
    state = apply_lora(adapter, base, registry, scale)
    template = open_source(source if source is not None else base, "source", registry)
    base_id, source_id = _registry_id(registry, base), _registry_id(registry, source)
    parents = ([(base_id, "merge_base")] if base_id else []) + ([(source_id, "merge_input")] if source_id else [])
    method = METHOD if source is not None else APPLY_METHOD
    store_params = {"method": method, **(params or {}), "adapter_sha256": digest, "scale": scale}
    store_params = {k: v for k, v in store_params.items() if k not in ("checkpoint", "base")}
    meta = {k: v for k, v in template.meta.items() if k != "merge"}
    meta["merge"] = {"method": method, "params": store_params, "adapter": str(ad.path)}
    if coords is None:
        ref = source_id or base_id
        coords = dict(registry.get(ref).coords) if ref else {"paradigm": "unknown", "domain": "none", "period": "none"}
        coords["variant"] = "lora-applied"
    return registry.put(state, coords, "merged", parents=parents, params=store_params, files=template.files, meta=meta)
