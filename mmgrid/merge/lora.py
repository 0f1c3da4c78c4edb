"""LoRA-to-LoRA merging: several PEFT LoRA adapters into one LoRA adapter.

No base model is read and nothing is merged into a base. For every target module m and
adapter i the low-rank update is (LoRA, Hu et al. 2021, Eq. 3; rsLoRA, Kalajdzievski 2023)

    delta_i = s_i B_i A_i,   s_i = alpha_i / r_i   (alpha_i / sqrt(r_i) with use_rslora)

with alpha_i and r_i taken from ``alpha_pattern`` / ``rank_pattern`` where they match
the module, as PEFT does. The products are combined as task vectors:

* ``task_arithmetic`` (Ilharco et al. 2023; MMGRid Eq. 3):
  delta = scale * sum_i w_i delta_i (weights default 1.0 each);
* ``ties`` (Yadav et al. 2023, per tensor): trim each delta_i to its top ``density``
  fraction by magnitude; elect the sign gamma = sign(sum_i TRIM(delta_i)) on the
  *unweighted* trimmed vectors as the paper does (``sign_rule="weighted"``: sign of
  sum_i w_i TRIM(delta_i), mergekit's rule); disjoint mean
  sum_i w_i TRIM(delta_i) [agrees] / sum_i w_i [agrees] (equal weights: the paper's
  mean over agreeing inputs); times ``scale`` (the paper's lambda).

The combined delta is re-factorised by truncated SVD, delta ~ U_r S_r V_r^T (best rank-r
approximation, Eckart-Young: ||delta - U_r S_r V_r^T||_F^2 = sum_{j>r} sigma_j^2), and
written as B' = U_r sqrt(S_r), A' = sqrt(S_r) V_r^T with lora_alpha = r, so PEFT's
scaling is 1 and B'A' is the merged update itself. For task arithmetic the SVD is taken
through QR of the stacked factors [w_i s_i B_i] and [A_i] (exact, cheap: the product has
rank <= sum_i r_i); for TIES, whose trimming makes the product dense, through the
eigenvectors of the dense delta's smaller Gram matrix in float64 (the same truncation,
3-5x cheaper than a float64 SVD). The relative reconstruction error ||delta - B'A'||_F / ||delta||_F is measured on
the factors as written (in the output dtype) per module and over all modules.

Modules are processed one at a time: only one module's factors (and for TIES its N
dense products) are in memory at once, combined in float32 (TIES) or float64 (task
arithmetic's stacked factors), factorised in float64; the output factors take the
inputs' dtype. The output adapter itself (about the size of one input) is kept until
it is written, after every module has been merged and checked. Only ``adapter_model.safetensors`` is read;
a folder with only a pickle (``adapter_model.bin``) is refused.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from mmgrid.merge import ops
from mmgrid.merge.errors import MergeParamError, NonFiniteError, ShapeMismatchError, SourceError

__all__ = [
    "AdapterFormatError",
    "AdapterMismatchError",
    "LoraMergeReport",
    "UnsafeAdapterError",
    "lora_scaling",
    "merge_lora",
    "read_adapter",
]

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
PICKLE_NAMES = ("adapter_model.bin", "adapter_model.pt", "adapter_model.pth")
PREFIX = "base_model.model."
A_SUFFIX = ".lora_A.weight"
B_SUFFIX = ".lora_B.weight"
REPORT_NAME = "mmgrid_merge_lora.json"
METHODS = ("task_arithmetic", "ties")
SIGN_RULES = ("unweighted", "weighted")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


class AdapterFormatError(SourceError):
    """An adapter folder cannot be read as a PEFT LoRA adapter (missing files, unsupported kind)."""


class UnsafeAdapterError(AdapterFormatError):
    """An adapter's weights exist only as a pickle (adapter_model.bin); mmgrid never unpickles."""


class AdapterMismatchError(ShapeMismatchError):
    """Adapters disagree on target modules, a module's shape or a config setting."""


@dataclass
class Adapter:
    """One adapter folder, read up to the safetensors header (no tensor loaded).

    Attributes:
        path: the folder.
        config: adapter_config.json as a dict.
        modules: module name (as in the file, without ``.lora_A.weight``) -> (A shape, B shape).
        dtypes: the dtypes of its tensors.
    """

    path: Path
    config: dict
    modules: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]
    dtypes: set[torch.dtype]

    @property
    def weights(self) -> Path:
        return self.path / WEIGHTS_NAME

    def rank(self, module: str) -> int:
        return self.modules[module][0][0]


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


def _pattern_value(patterns: dict | None, module: str, default: Any) -> Any:
    """PEFT's rank_pattern / alpha_pattern lookup: the first key matching the module's suffix."""
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def lora_scaling(config: dict, module: str, rank: int) -> float:
    """PEFT's LoRA scaling of one module: alpha / r, or alpha / sqrt(r) with use_rslora.

    ``module`` is the module's name relative to the base model (no ``base_model.model.``);
    alpha comes from ``alpha_pattern`` where a key matches it, else ``lora_alpha``.
    """
    alpha = float(_pattern_value(config.get("alpha_pattern"), module, config.get("lora_alpha", 8)))
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def _model_name(module: str) -> str:
    return module[len(PREFIX):] if module.startswith(PREFIX) else module


def read_adapter(path: str | os.PathLike) -> Adapter:
    """Open an adapter folder: its config and its safetensors header (no tensor is loaded).

    Raises:
        AdapterFormatError: not a folder, no adapter_config.json, not a LoRA adapter, a DoRA /
            bias / modules_to_save / trainable-token adapter, tensors that are not LoRA A/B
            pairs, or a rank that disagrees with the config.
        UnsafeAdapterError: only a pickle (adapter_model.bin) holds the weights.
    """
    from safetensors import safe_open

    p = Path(path)
    if p.is_file() and p.name in (WEIGHTS_NAME, CONFIG_NAME):
        p = p.parent
    if not p.is_dir():
        raise AdapterFormatError(
            f"LoRA adapter {str(path)!r}: no such folder; give the folder PeftModel.save_pretrained wrote"
        )
    cfg_path = p / CONFIG_NAME
    if not cfg_path.is_file():
        raise AdapterFormatError(
            f"LoRA adapter {str(p)!r}: no {CONFIG_NAME}; give the folder PeftModel.save_pretrained wrote"
        )
    if not (p / WEIGHTS_NAME).is_file():
        pickles = [n for n in PICKLE_NAMES if (p / n).is_file()]
        if pickles:
            raise UnsafeAdapterError(
                f"LoRA adapter {str(p)!r}: its weights are only in {pickles[0]} (a pickle, which mmgrid never "
                f"loads); re-save it as safetensors: PeftModel.save_pretrained(dir, safe_serialization=True), "
                f"in an environment you trust"
            )
        raise AdapterFormatError(f"LoRA adapter {str(p)!r}: no {WEIGHTS_NAME}")
    try:
        config = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as exc:
        raise AdapterFormatError(f"LoRA adapter {str(p)!r}: {CONFIG_NAME} is not valid JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise AdapterFormatError(f"LoRA adapter {str(p)!r}: {CONFIG_NAME} is not a JSON object")
    kind = config.get("peft_type", "LORA")
    if str(kind).upper() != "LORA":
        raise AdapterFormatError(f"LoRA adapter {str(p)!r}: peft_type is {kind!r}; only LoRA adapters can be merged")
    for key, why in (("use_dora", "DoRA's magnitude vectors"), ("lora_bias", "LoRA biases"),
                     ("modules_to_save", "fully trained modules (modules_to_save)"),
                     ("trainable_token_indices", "trainable tokens"),
                     ("target_parameters", "LoRA on parameters (target_parameters)")):
        if config.get(key):
            raise AdapterFormatError(
                f"LoRA adapter {str(p)!r}: {key} is set; merging {why} is not supported; "
                f"merge plain LoRA adapters (A/B pairs only)"
            )
    modules: dict[str, list] = {}
    dtypes: set[torch.dtype] = set()
    try:
        with safe_open(str(p / WEIGHTS_NAME), framework="pt") as f:
            for key in f.keys():
                sl = f.get_slice(key)
                shape = tuple(sl.get_shape())
                for i, suffix in enumerate((A_SUFFIX, B_SUFFIX)):
                    if key.endswith(suffix):
                        modules.setdefault(key[: -len(suffix)], [None, None])[i] = shape
                        break
                else:
                    raise AdapterFormatError(
                        f"LoRA adapter {str(p)!r}: tensor {key!r} is not a LoRA A/B weight; only adapters of "
                        f"plain LoRA A/B pairs on linear layers can be merged"
                    )
                if sl.get_dtype() not in _ST_DTYPES:
                    raise AdapterFormatError(
                        f"LoRA adapter {str(p)!r}: tensor {key!r} has dtype {sl.get_dtype()}; LoRA weights "
                        f"must be floating point ({', '.join(_ST_DTYPES)})"
                    )
                dtypes.add(_ST_DTYPES[sl.get_dtype()])
    except AdapterFormatError:
        raise
    except Exception as exc:  # safetensors raises its own error types
        raise AdapterFormatError(f"LoRA adapter {str(p)!r}: {WEIGHTS_NAME} cannot be read ({exc})") from exc
    if not modules:
        raise AdapterFormatError(f"LoRA adapter {str(p)!r}: {WEIGHTS_NAME} holds no LoRA weights")
    for name, (a, b) in modules.items():
        if a is None or b is None:
            missing = A_SUFFIX if a is None else B_SUFFIX
            raise AdapterFormatError(f"LoRA adapter {str(p)!r}: module {name!r} has no {missing[1:]} tensor")
        if len(a) != 2 or len(b) != 2 or a[0] != b[1]:
            raise AdapterFormatError(
                f"LoRA adapter {str(p)!r}: module {name!r} has A {list(a)} and B {list(b)}; expected A (r, in) "
                f"and B (out, r) of a linear layer (convolution and embedding LoRA are not supported)"
            )
        want = _pattern_value(config.get("rank_pattern"), _model_name(name), config.get("r"))
        if want is not None and int(want) != a[0]:
            raise AdapterFormatError(
                f"LoRA adapter {str(p)!r}: module {name!r} has rank {a[0]} but its config says r={want}; "
                f"the config does not belong to these weights"
            )
    frozen = {k: (tuple(a), tuple(b)) for k, (a, b) in modules.items()}
    return Adapter(p, config, frozen, dtypes)


def _targets(config: dict) -> Any:
    t = config.get("target_modules")
    return sorted(t) if isinstance(t, list) else t


def check_compatible(adapters: Sequence[Adapter]) -> None:
    """Same target modules, module set, layer shapes and fan_in_fan_out; warn on different bases.

    Raises:
        AdapterMismatchError: naming the adapter and module that differ from the first.
    """
    first = adapters[0]
    for ad in adapters[1:]:
        where = f"LoRA adapter {str(ad.path)!r} (vs the first, {str(first.path)!r})"
        if _targets(ad.config) != _targets(first.config):
            raise AdapterMismatchError(
                f"{where}: target_modules {_targets(ad.config)} differ from {_targets(first.config)}; "
                f"merge adapters trained on the same target modules"
            )
        if bool(ad.config.get("fan_in_fan_out")) != bool(first.config.get("fan_in_fan_out")):
            raise AdapterMismatchError(f"{where}: fan_in_fan_out differs; the adapters are for different layer types")
        missing = sorted(set(first.modules) - set(ad.modules))
        extra = sorted(set(ad.modules) - set(first.modules))
        if missing or extra:
            what = f"lacks module {missing[0]!r}" if missing else f"has module {extra[0]!r} the first lacks"
            n = len(missing) + len(extra)
            raise AdapterMismatchError(
                f"{where}: {what}" + (f" ({n} modules differ)" if n > 1 else "")
                + "; merge adapters with the same target modules and layers (layers_to_transform)"
            )
        for name, (a, b) in ad.modules.items():
            a0, b0 = first.modules[name]
            if a[1] != a0[1] or b[0] != b0[0]:
                raise AdapterMismatchError(
                    f"{where}: module {name!r} maps {a[1]} -> {b[0]} features where the first maps "
                    f"{a0[1]} -> {b0[0]}; the adapters belong to different base models"
                )
    names = {ad.config.get("base_model_name_or_path") for ad in adapters}
    if len(names) > 1:
        warnings.warn(
            f"the LoRA adapters name different base models: {sorted(map(str, names))}; merging them anyway "
            f"(their shapes agree); check that they were trained on the same base",
            stacklevel=3,
        )


# ---------------------------------------------------------------------------- math


def _finite(t: torch.Tensor, what: str) -> torch.Tensor:
    if not bool(torch.isfinite(t).all()):
        raise NonFiniteError(f"{what} holds NaN or Inf; fix or drop that adapter before merging")
    return t


def _choose_rank(s: torch.Tensor, rank: int | str | None, energy: float | None, default: int) -> int:
    """The kept rank: ``rank`` (None: ``default``; "full": every singular value), cut by ``energy``."""
    if rank == "full":
        r = int(s.numel())
    elif rank is None:
        r = default
    else:
        r = int(rank)
    if energy is not None:
        e = s.double().square()
        total = float(e.sum())
        if total > 0:
            cum = torch.cumsum(e, 0)
            k = int(torch.searchsorted(cum, torch.tensor([energy * total], dtype=cum.dtype) * (1 - 1e-12)).item()) + 1
            r = min(r if rank is not None else int(s.numel()), k)
        else:
            r = 1
    return max(1, r)


def _factors(u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor, r: int, dtype: torch.dtype) -> tuple:
    """B' = U_r sqrt(S_r), A' = sqrt(S_r) V_r^T, zero-padded to rank r if fewer values exist."""
    k = min(r, s.numel())
    root = s[:k].clamp_min(0).sqrt()
    b = torch.zeros(u.shape[0], r, dtype=u.dtype)
    a = torch.zeros(r, vh.shape[1], dtype=vh.dtype)
    b[:, :k] = u[:, :k] * root
    a[:k] = root[:, None] * vh[:k]
    return b.to(dtype).contiguous(), a.to(dtype).contiguous()


def _lowrank_svd(bcat: torch.Tensor, acat: torch.Tensor) -> tuple:
    """SVD of bcat @ acat through QR of both factors (exact; cost linear in out and in)."""
    qb, rb = torch.linalg.qr(bcat)
    qa, ra = torch.linalg.qr(acat.T)
    u, s, vh = torch.linalg.svd(rb @ ra.T, full_matrices=False)
    return qb @ u, s, vh @ qa.T


def _dense_factors(delta: torch.Tensor, rank, energy, default: int, dtype: torch.dtype) -> tuple:
    """Best rank-r factors of a dense delta (float64) through the eigenvectors of its smaller Gram.

    With delta delta^T = U diag(sigma^2) U^T (or delta^T delta = V diag(sigma^2) V^T when
    delta is tall), A'_j = U_j^T delta has norm sigma_j; B'A' = U_r U_r^T delta is the
    orthogonal projection onto the top-r left singular vectors, i.e. the truncated SVD
    (Eckart-Young). This costs a Gram product and an eigh: 3-5x less than a float64 SVD.
    """
    tall = delta.shape[0] > delta.shape[1]
    m = delta.T if tall else delta  # m is wide: rows <= columns
    evals, evecs = torch.linalg.eigh(m @ m.T)
    order = torch.argsort(evals, descending=True)
    u = evecs[:, order]
    s = evals[order].clamp_min(0).sqrt()
    r = _choose_rank(s, rank, energy, default)
    k = min(r, s.numel())
    left = u[:, :k]  # orthonormal columns
    right = left.T @ m  # rows of norm sigma_j
    c = torch.linalg.vector_norm(right, dim=1).sqrt()
    safe = torch.where(c > 0, c, torch.ones((), dtype=c.dtype))
    left, right = left * c, right / safe[:, None]
    if tall:  # delta = m^T = right^T left^T
        left, right = right.T, left.T
    b = torch.zeros(delta.shape[0], r, dtype=torch.float64)
    a = torch.zeros(r, delta.shape[1], dtype=torch.float64)
    b[:, :k], a[:k] = left, right
    return b.to(dtype).contiguous(), a.to(dtype).contiguous(), r


def _lowrank_norm(g: torch.Tensor, h: torch.Tensor) -> float:
    """||g @ h||_F without forming the product: ||R h|| with g = Q R."""
    _, r = torch.linalg.qr(g)
    return float(torch.linalg.matrix_norm(r @ h))


# ---------------------------------------------------------------------------- merge


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
        if sign_rule not in SIGN_RULES:
            raise MergeParamError(f"sign_rule {sign_rule!r}: use 'unweighted' (TIES paper) or 'weighted' (mergekit)")
    elif density is not None or sign_rule is not None:
        raise MergeParamError("density and sign_rule are TIES parameters; use method='ties' or leave them out")
    if dtype is not None and dtype not in DTYPES:
        raise MergeParamError(f"dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return {"method": method, "weights": weights, "scale": float(scale), "rank": rank,
            "energy": None if energy is None else float(energy), "density": density,
            "sign_rule": sign_rule, "dtype": dtype}


def _load(f, ad: Adapter, module: str) -> tuple[torch.Tensor, torch.Tensor]:
    a = _finite(f.get_tensor(module + A_SUFFIX), f"LoRA adapter {str(ad.path)!r}: {module}{A_SUFFIX}")
    b = _finite(f.get_tensor(module + B_SUFFIX), f"LoRA adapter {str(ad.path)!r}: {module}{B_SUFFIX}")
    return a, b


def _merge_module(handles, adapters, module: str, p: dict, out_dtype: torch.dtype) -> tuple:
    """One module: (B', A', rank, ||delta - B'A'||_F, ||delta||_F)."""
    name = _model_name(module)
    default = max(ad.rank(module) for ad in adapters)
    if p["method"] == "task_arithmetic":
        bs, as_ = [], []
        for f, ad, w in zip(handles, adapters, p["weights"]):
            a, b = _load(f, ad, module)
            s = lora_scaling(ad.config, name, ad.rank(module))
            bs.append(b.to(torch.float64) * (p["scale"] * w * s))
            as_.append(a.to(torch.float64))
        bcat, acat = torch.cat(bs, 1), torch.cat(as_, 0)
        u, s, vh = _lowrank_svd(bcat, acat)
        r = _choose_rank(s, p["rank"], p["energy"], default)
        b2, a2 = _factors(u, s, vh, r, out_dtype)
        _finite(b2, f"merged {module}{B_SUFFIX}")
        _finite(a2, f"merged {module}{A_SUFFIX}")
        norm = _lowrank_norm(bcat, acat)
        err = _lowrank_norm(torch.cat([bcat, -b2.to(torch.float64)], 1), torch.cat([acat, a2.to(torch.float64)], 0))
        return b2, a2, r, err, norm
    trimmed = []
    for f, ad in zip(handles, adapters):
        a, b = _load(f, ad, module)
        delta = (b.float() @ a.float()).mul_(lora_scaling(ad.config, name, ad.rank(module)))
        trimmed.append(ops.trim_top_density(delta, p["density"]))
    voters = trimmed if p["sign_rule"] == "unweighted" else [t * w for t, w in zip(trimmed, p["weights"])]
    sign = ops.elect_sign(voters)
    del voters
    delta = ops.disjoint_mean(trimmed, sign, p["weights"]).mul_(p["scale"])
    del trimmed, sign
    _finite(delta, f"merged update of {module}")
    ref = delta.to(torch.float64)
    del delta
    b2, a2, r = _dense_factors(ref, p["rank"], p["energy"], default, out_dtype)
    _finite(b2, f"merged {module}{B_SUFFIX}")
    _finite(a2, f"merged {module}{A_SUFFIX}")
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
    from safetensors import safe_open
    from safetensors.torch import save_file

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
                  rank_pattern={_model_name(m): r for m, r in ranks.items() if r != top},
                  alpha_pattern={_model_name(m): r for m, r in ranks.items() if r != top})
    params = {"adapters": [str(ad.path) for ad in read], **p, "out_dtype": str(out_dtype).removeprefix("torch.")}
    report = LoraMergeReport(out, method, top, ranks, errors, overall, params)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"format": "pt", "mmgrid.merge_lora": json.dumps(params, sort_keys=True)}
    _atomic(out / WEIGHTS_NAME, lambda tmp: save_file(tensors, str(tmp), metadata=meta))
    _atomic(out / CONFIG_NAME, lambda tmp: tmp.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n"))
    _atomic(out / REPORT_NAME, lambda tmp: tmp.write_text(json.dumps(report.to_dict(), indent=2) + "\n"))
    return report


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
