"""A mergekit YAML recipe read into mmgrid's terms (no tensors are touched here).

What is read (mergekit's ``MergeConfiguration``, mergekit/config.py and plan.py):
``merge_method``, ``base_model``, ``models`` (each ``model`` and ``parameters``),
top-level ``parameters``, ``dtype``, ``out_dtype``, ``tokenizer_source`` (``base``, a
model, or absent). A parameter's setting is, as mergekit evaluates it per tensor:

* a scalar (number, bool or string);
* a gradient: a list of numbers, interpolated linearly over the layers: layer i of L
  has t = i / (L - 1) (t = 1 when L = 1), tensors outside the layers (embeddings,
  final norm, LM head) t = 0; the value at t is (1 - f) v[j] + f v[j + 1] with
  j = floor(t (n - 1)), f = t (n - 1) - j;
* a list of conditions ``{filter: SUBSTRING, value: SETTING}``: the first whose filter is
  absent, ``"*"`` or a substring of the tensor's name gives the value; if none matches,
  the next level is asked.

A model's parameter is looked up in its own ``parameters``, then in the top-level
``parameters``, then the method's default (mergekit's ``ConfigReader.parameter``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mmgrid.configtools import load_yaml
from mmgrid.merge.errors import MergekitRecipeError, MergekitUnsupportedError
from mmgrid.merge.mergekit.table import METHOD_TABLE, REQUIRED, ZERO_BASE, Resolved, Row, supported_methods

__all__ = ["METHOD_TABLE", "REQUIRED", "ZERO_BASE", "MergekitSpec", "Resolved", "Row", "evaluate", "layer_position",
           "load", "parse", "supported_methods"]


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_TOP_KEYS = {"merge_method", "base_model", "models", "parameters", "dtype", "out_dtype", "tokenizer_source",
             "slices", "modules", "tokenizer", "chat_template", "name"}
_DTYPES = {"float32", "float16", "bfloat16", "fp32", "fp16", "bf16"}


def evaluate(setting: Any, tensor: str, t: float) -> Any:
    """mergekit's ``evaluate_setting``: the setting's value for one tensor (None: no
    condition matched)."""
    if isinstance(setting, (int, float, bool, str)):
        return setting
    if all(isinstance(e, (int, float)) for e in setting):
        scaled = t * (len(setting) - 1)
        i0 = int(scaled)
        i1 = min(len(setting) - 1, i0 + 1)
        frac = scaled - i0
        return (1 - frac) * setting[i0] + frac * setting[i1]
    if all(isinstance(e, (int, float, bool, str)) for e in setting):
        return setting[int(t * (len(setting) - 1))]
    for cond in setting:
        flt = cond.get("filter")
        if flt is None or flt == "*" or (tensor and flt in tensor):
            return evaluate(cond["value"], tensor, t)
    return None


def _check_setting(value: Any, where: str) -> None:
    if isinstance(value, (int, float, bool, str)):
        return
    if isinstance(value, list) and value:
        if all(isinstance(e, (int, float, bool, str)) for e in value):
            return
        for i, c in enumerate(value):
            if not isinstance(c, dict) or "value" not in c or set(c) - {"value", "filter"}:
                raise MergekitRecipeError(
                    f"{where}[{i}]: a list setting holds numbers (a gradient over the layers) or conditions "
                    f"{{filter: SUBSTRING, value: ...}}; got {c!r}")
            if c.get("filter") is not None and not isinstance(c["filter"], str):
                raise MergekitRecipeError(f"{where}[{i}].filter: a tensor-name substring (a string), got {c['filter']!r}")
            _check_setting(c["value"], f"{where}[{i}].value")
        return
    hint = "; wrap a {filter, value} condition in a list" if isinstance(value, dict) else ""
    raise MergekitRecipeError(f"{where}: a setting is a number, a list of numbers (gradient) or a list of "
                              f"{{filter, value}} conditions; got {value!r}{hint}")


@dataclass
class MergekitSpec:
    """A checked mergekit recipe.

    Attributes:
        row: its :data:`METHOD_TABLE` row.
        base: the base model reference (a folder or a registry id), or None.
        models: the non-base input references, in order.
        model_params: each input's ``parameters`` (raw settings).
        params: top-level ``parameters``.
        dtype, out_dtype: mergekit's names (None: as stored).
        tokenizer_source: a model reference whose tokenizer files are copied, or None.
        raw: the recipe as read (stored with a registry result).
    """

    row: Row
    base: str | None
    models: list[str]
    model_params: list[dict[str, Any]]
    params: dict[str, Any]
    dtype: str | None = None
    out_dtype: str | None = None
    tokenizer_source: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def resolve(self, tensor: str, t: float) -> Resolved:
        """The parameters of ``tensor`` at layer position ``t`` (see the module doc)."""
        row = self.row
        glob = {}
        for name, default in row.glob.items():
            v = evaluate(self.params[name], tensor, t) if name in self.params else None
            if v is None:
                if default is REQUIRED:
                    raise MergekitRecipeError(f"parameters.{name}: {row.mergekit} needs it for tensor {tensor}; add it")
                v = default
            if isinstance(default, bool) and not isinstance(v, bool):
                raise MergekitRecipeError(f"parameters.{name}: true or false, got {v!r} on tensor {tensor}")
            if isinstance(default, float) and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise MergekitRecipeError(f"parameters.{name}: a number, got {v!r} on tensor {tensor}")
            glob[name] = v
        per = []
        for i, mp in enumerate(self.model_params):
            d = {}
            for name, default in row.per_model.items():
                v = None
                for src in (mp, self.params):
                    if name in src:
                        v = evaluate(src[name], tensor, t)
                        if v is not None:
                            break
                if v is None:
                    if default is REQUIRED:
                        raise MergekitRecipeError(
                            f"models[{i}].parameters.{name}: {row.mergekit} needs a {name} for model {self.models[i]!r} "
                            f"on tensor {tensor}; give it in the model's parameters or the top-level parameters")
                    v = default
                if not isinstance(v, (int, float)) or isinstance(v, bool):
                    raise MergekitRecipeError(f"models[{i}].parameters.{name}: a number, got {v!r} on tensor {tensor}")
                d[name] = v
            per.append(d)
        return Resolved(glob, per)


def layer_position(name: str, num_layers: int) -> float:
    """mergekit's t of a tensor: i / (L - 1) in layer i of L (1 if L = 1), else 0."""
    m = _LAYER.search(name)
    if not m:
        return 0.0
    return int(m.group(1)) / (num_layers - 1) if num_layers > 1 else 1.0


def _ref(value: Any, where: str) -> str:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, dict) and set(value) <= {"model", "lora", "override_architecture"} and "model" in value:
        if value.get("lora") or value.get("override_architecture"):
            raise MergekitUnsupportedError(f"{where}: LoRA or architecture overrides on a model are not supported; "
                                           "merge the LoRA into a folder first, or use `mmgrid merge-lora`")
        return _ref(value["model"], where)
    raise MergekitRecipeError(f"{where}: a model is a folder path or a registry id (a string), got {value!r}")


def parse(data: Any, where: str = "mergekit recipe", methods: Collection[str] | None = None) -> MergekitSpec:
    """Check a mergekit recipe (already loaded YAML) and return its :class:`MergekitSpec`.

    ``methods``: the registered mmgrid methods to map onto (default: the method registry's;
    a caller that maps onto a built-in method names it, without importing the engine).

    Raises:
        MergekitRecipeError: a malformed recipe (what, where in the YAML, how to fix).
        MergekitUnsupportedError: a mergekit feature mmgrid does not read.
    """
    if not isinstance(data, Mapping):
        raise MergekitRecipeError(f"{where}: expected a mapping with merge_method and models, got {type(data).__name__}")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise MergekitRecipeError(f"{where}: unknown key(s) {sorted(unknown)}; mergekit recipes have "
                                  f"{', '.join(sorted(_TOP_KEYS))}")
    for key, why in (("slices", "layer slicing (frankenmerges) is not supported yet; merge whole models with `models:`"),
                     ("modules", "per-module definitions are not supported yet; use `models:`"),
                     ("tokenizer", "the `tokenizer:` block (token surgery) is not supported; use tokenizer_source: base "
                                   "or a model with the same vocabulary"),
                     ("chat_template", "chat_template is not supported; edit tokenizer_config.json of the result")):
        if data.get(key) is not None:
            raise MergekitUnsupportedError(f"{where}.{key}: {why}")
    name = data.get("merge_method")
    if not isinstance(name, str):
        raise MergekitRecipeError(f"{where}.merge_method: missing; give a mergekit method name, e.g. ties")
    if methods is None:
        # lazy: the method registry imports the merge engine (torch, about 1 s); a recipe carried
        # out as a file copy (mmgrid.merge.mergekit.entry) names its built-in method instead
        from mmgrid.merge.methods import method_names

        methods = method_names()
    registered = set(methods)
    row = METHOD_TABLE.get(name)
    ok = supported_methods(registered)
    if row is None:
        raise MergekitRecipeError(f"{where}.merge_method: unknown mergekit method {name!r}; supported: {', '.join(ok)}")
    if row.build is None or row.method not in registered:
        why = "mmgrid has no such method" if not row.method else (
            f"mmgrid's {row.method!r} is not registered in this version" if row.method not in registered
            else f"the mapping onto mmgrid's {row.method!r} is not written yet")
        raise MergekitUnsupportedError(f"{where}.merge_method: {name!r} is not supported ({why}); supported: {', '.join(ok)}")
    models_raw = data.get("models")
    if not isinstance(models_raw, list) or not models_raw:
        raise MergekitRecipeError(f"{where}.models: give a non-empty list of {{model: PATH_OR_ID, parameters: {{...}}}}")
    base = None if data.get("base_model") is None else _ref(data["base_model"], f"{where}.base_model")
    if row.needs_base and base is None:
        raise MergekitRecipeError(f"{where}.base_model: {name} merges task vectors and needs a base model; add base_model")
    params = data.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise MergekitRecipeError(f"{where}.parameters: a mapping of parameter -> setting, got {params!r}")
    known = set(row.glob) | set(row.per_model)
    for k, v in params.items():
        if k not in known:
            raise MergekitRecipeError(f"{where}.parameters.{k}: not a parameter of {name}; known: {', '.join(sorted(known))}")
        _check_setting(v, f"{where}.parameters.{k}")
    models, mparams = [], []
    for i, m in enumerate(models_raw):
        w = f"{where}.models[{i}]"
        if not isinstance(m, Mapping) or "model" not in m or set(m) - {"model", "parameters"}:
            raise MergekitRecipeError(f"{w}: each entry is {{model: PATH_OR_ID, parameters: {{...}}}}, got {m!r}")
        ref = _ref(m["model"], f"{w}.model")
        mp = m.get("parameters") or {}
        if not isinstance(mp, Mapping):
            raise MergekitRecipeError(f"{w}.parameters: a mapping, got {mp!r}")
        for k, v in mp.items():
            if k not in row.per_model:
                raise MergekitRecipeError(f"{w}.parameters.{k}: not a per-model parameter of {name}; known: "
                                          f"{', '.join(sorted(row.per_model)) or 'none'} (global ones go in the top-level parameters)")
            _check_setting(v, f"{w}.parameters.{k}")
        if ref == base and not row.base_is_input:
            continue  # the base in the models list: mergekit skips it as an input (its parameters are unused)
        if ref in models:
            raise MergekitRecipeError(f"{w}.model: {ref!r} is listed twice; list each model once")
        models.append(ref)
        mparams.append(dict(mp))
    if row.base_is_input and base is not None and base not in models:
        models.append(base)  # mergekit merges the base as one more input, with the top-level parameters
        mparams.append({})
    if row.base_first and base is not None:  # slerp: mergekit's first vector is the base model
        i = models.index(base)
        models.insert(0, models.pop(i))
        mparams.insert(0, mparams.pop(i))
    if not models:
        raise MergekitRecipeError(f"{where}.models: no input besides the base model; add the models to merge")
    for key in ("dtype", "out_dtype"):
        if data.get(key) is not None and data[key] not in _DTYPES:
            raise MergekitRecipeError(f"{where}.{key}: {data[key]!r}; one of {', '.join(sorted(_DTYPES))}")
    tok = data.get("tokenizer_source")
    if tok == "union":
        raise MergekitUnsupportedError(f"{where}.tokenizer_source: union (a merged vocabulary) is not supported; use "
                                       "base or one model's folder (all models must share its vocabulary)")
    tok_ref = None if tok in (None, "base") else _ref(tok, f"{where}.tokenizer_source")
    spec = MergekitSpec(row, base, models, mparams, dict(params), data.get("dtype"), data.get("out_dtype"), tok_ref,
                        json.loads(json.dumps(dict(data), default=str)))
    return spec


def load(recipe: str | Path | Mapping[str, Any]) -> MergekitSpec:
    """Read a mergekit recipe from a YAML path, YAML text or a dict (``yaml.safe_load``)."""
    return parse(*read(recipe))


def read(recipe: str | Path | Mapping[str, Any]) -> tuple[Any, str]:
    """(the recipe as loaded YAML, where it came from) of a YAML path, YAML text or a dict."""
    if isinstance(recipe, Mapping):
        return recipe, "mergekit recipe"
    text = recipe if isinstance(recipe, str) else ""  # a Path is read below
    where = "mergekit recipe"
    if isinstance(recipe, Path) or (isinstance(recipe, str) and "\n" not in recipe and recipe.endswith((".yml", ".yaml"))):
        p = Path(recipe)
        if not p.is_file():
            raise MergekitRecipeError(f"no mergekit recipe at {p}; give the path of a YAML file")
        text, where = p.read_text(), str(p)
    try:
        data = load_yaml(text, where)
    except yaml.YAMLError as exc:
        raise MergekitRecipeError(f"{where}: not valid YAML ({exc})") from exc
    return data, where
