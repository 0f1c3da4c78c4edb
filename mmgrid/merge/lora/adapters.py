"""Reading PEFT LoRA adapter folders (``adapter_config.json`` + ``adapter_model.safetensors``,
never a pickle), PEFT's scaling of each module, and the checks that several adapters can
be merged (see :mod:`mmgrid.merge.lora`)."""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from mmgrid.fileio.safetensors import torch_dtype
from mmgrid.merge.errors import ShapeMismatchError, SourceError

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
PICKLE_NAMES = ("adapter_model.bin", "adapter_model.pt", "adapter_model.pth")
PREFIX = "base_model.model."
A_SUFFIX = ".lora_A.weight"
B_SUFFIX = ".lora_B.weight"
REPORT_NAME = "mmgrid_merge_lora.json"
METHODS = ("task_arithmetic", "ties")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LORA_DTYPES = ("F32", "F16", "BF16", "F64")  # the safetensors dtypes a LoRA weight may have


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


def module_model_name(module: str) -> str:
    return module[len(PREFIX):] if module.startswith(PREFIX) else module


def read_adapter(path: str | os.PathLike) -> Adapter:
    """Open an adapter folder: its config and its safetensors header (no tensor is loaded).

    Raises:
        AdapterFormatError: not a folder, no adapter_config.json, not a LoRA adapter, a DoRA /
            bias / modules_to_save / trainable-token adapter, tensors that are not LoRA A/B
            pairs, or a rank that disagrees with the config.
        UnsafeAdapterError: only a pickle (adapter_model.bin) holds the weights.
    """

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
                if sl.get_dtype() not in LORA_DTYPES:
                    raise AdapterFormatError(
                        f"LoRA adapter {str(p)!r}: tensor {key!r} has dtype {sl.get_dtype()}; LoRA weights "
                        f"must be floating point ({', '.join(LORA_DTYPES)})"
                    )
                dtypes.add(torch_dtype(sl.get_dtype()))
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
        want = _pattern_value(config.get("rank_pattern"), module_model_name(name), config.get("r"))
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
