"""A merge as data: inputs, base, method, parameters, seed. Stored results become
lineage edges in the registry (roles ``merge_input`` and ``merge_base``).

YAML form (read with ``yaml.safe_load``)::

    method: ties            # a registered method name
    inputs: [ID_A, ID_B]    # registry ids (or aliases), in order
    base: ID_BASE           # an id, a list of ids (neutral base, MMGRid Eq. 8), or null
    params: {density: 0.2}  # validated against the method's parameter dataclass
    seed: 0                 # DARE masks (copied into params.seed where the method has one)
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mmgrid.configtools import build, load_yaml
from mmgrid.errors import ConfigError
from mmgrid.merge.api import merge_to_file, prepare
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods import canonical_params, get_method, identity, validate_params
from mmgrid.merge.methods.base import Method
from mmgrid.merge.tensors import from_manifest
from mmgrid.registry.names import make_id, normalize_coords, normalize_parents

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry


@dataclass
class Recipe:
    """One merge, fully specified."""

    method: str
    inputs: list[str]
    base: str | list[str] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def checked(self) -> "CheckedRecipe":
        """Validate the method and its parameters, once: the result carries them, typed, to
        :func:`run_recipe` and the merge, which check nothing again.

        Raises:
            UnknownNameError: unknown method.
            MergeParamError: unknown parameter, wrong type, or out of range.
        """
        cls = get_method(self.method)
        fields = {f.name for f in dataclasses.fields(cls.Params)}
        params = canonical_params(self.method, self.params)
        if "seed" in fields:
            params.setdefault("seed", self.seed)
        typed = validate_params(self.method, params)
        return CheckedRecipe(self, cls(typed), {k: canonical_number(v, getattr(typed, k, None)) for k, v in params.items()})

    def method_params(self) -> dict[str, Any]:
        """The parameters in their canonical spelling (``lambda`` -> ``lam``: one parameter, one id;
        :func:`mmgrid.merge.methods.canonical_params`) with the recipe's seed filled in where the
        method takes one. A number written as text (``--set lambda=13e-1``: YAML 1.1 reads ``13e-1`` as a
        string) becomes the number its typed parameter holds (1.3), so it names the same merge, and id, as
        ``lambda=1.3``; numbers given as numbers are kept as written (the ids stored from them stay)."""
        return self.checked().params

    def legacy_params(self) -> dict[str, Any]:
        """The parameters as spelled in the recipe (what ids were computed from before the
        spellings were made canonical), seed filled in as :meth:`method_params` does."""
        fields = {f.name for f in dataclasses.fields(get_method(self.method).Params)}
        params = dict(self.params)
        if "seed" in fields:
            params.setdefault("seed", self.seed)
        return params

    def to_yaml(self) -> str:
        return yaml.safe_dump(dataclasses.asdict(self), sort_keys=False)

    @classmethod
    def from_yaml(cls, text: str, where: str = "merge recipe") -> "Recipe":
        """Parse and validate a recipe (method and parameters are checked here)."""
        return check_recipe(text, where).recipe

    @classmethod
    def load(cls, path: str | Path) -> "Recipe":
        return read_recipe(path).recipe


@dataclass(frozen=True)
class CheckedRecipe:
    """A recipe whose method and parameters passed validation (:meth:`Recipe.checked`).

    Attributes:
        recipe: the recipe as written.
        method: the method with its typed parameters (:func:`mmgrid.merge.api.prepare` takes it as is).
        params: the parameters in their canonical spelling, seed filled in: what the id records.
    """

    recipe: Recipe
    method: Method
    params: dict[str, Any]


def check_recipe(text: str, where: str = "merge recipe") -> CheckedRecipe:
    """Parse a recipe and validate its method and parameters, once."""
    try:
        data = load_yaml(text, where)
    except yaml.YAMLError as exc:  # a syntax error, or a tag safe_load refuses (!!python/object)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise MergeParamError(f"{where}: not a plain YAML recipe ({problem}); write method, inputs and "
                              "params as plain YAML values, without !!python tags.") from exc
    try:
        rec = build(Recipe, data, where=where)
    except ConfigError as exc:
        raise MergeParamError(str(exc)) from exc
    return rec.checked()


def read_recipe(path: str | Path) -> CheckedRecipe:
    """:func:`check_recipe` of the recipe file ``path``."""
    return check_recipe(Path(path).read_text(), where=f"merge recipe {path}")


def canonical_number(given: Any, typed: Any) -> Any:
    """``typed`` (the validated parameter) where ``given`` is a number written as text, or a list holding
    one; else ``given`` unchanged."""
    def is_number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if isinstance(given, str) and is_number(typed):
        return typed
    if (isinstance(given, (list, tuple)) and isinstance(typed, (list, tuple)) and len(given) == len(typed)
            and any(isinstance(g, str) for g in given)):
        return [t if isinstance(g, str) and is_number(t) else g for g, t in zip(given, typed)]
    return given


def default_coords(registry: Registry, recipe: Recipe) -> dict[str, Any]:
    """Coords of the merged model: the inputs' paradigm, joined domains and periods."""
    return merged_coords([registry.get(i) for i in recipe.inputs], recipe.method)


def merged_coords(mans: list[Any], method: str) -> dict[str, Any]:
    """:func:`default_coords` of inputs already looked up (their manifests, in order)."""

    def joined(key: str) -> str:
        vals: list[str] = []
        for m in mans:
            v = str(m.coords.get(key, ""))
            if v and v not in vals:
                vals.append(v)
        return "+".join(vals) or "none"

    return {"paradigm": joined("paradigm"), "domain": joined("domain"), "period": joined("period"),
            "variant": f"merge-{method}"}


def run_recipe(recipe: Recipe | CheckedRecipe, registry: Registry, coords: dict[str, Any] | None = None,
               dry_run: bool = False) -> str:
    """Carry out a recipe and store the result; return its id.

    The merged model gets the first input's files (config.json, tokenizer...) and meta,
    ``meta["added_rows"]`` of the merged vocabulary, and ``meta["merge"]`` with the
    method's report (GCWM conflict scores, ...) and the added-row provenance. With
    ``dry_run`` everything is validated and the id is returned, nothing is stored. A
    :class:`CheckedRecipe` is not validated again; each input and base is looked up in the
    registry once.
    """
    checked = recipe if isinstance(recipe, CheckedRecipe) else recipe.checked()
    rec, params = checked.recipe, checked.params
    inputs = [registry.get(i) for i in rec.inputs]
    single = isinstance(rec.base, str)
    base_ids: list[str] = [] if rec.base is None else [rec.base] if isinstance(rec.base, str) else list(rec.base)
    bases = [registry.get(b) for b in base_ids]
    coords = {**merged_coords(inputs, rec.method), **(coords or {})}  # given keys override
    store_params = {**identity(rec.method), **params}
    parents = [(m.id, "merge_input") for m in inputs] + [(m.id, "merge_base") for m in bases]
    cid = make_id(normalize_coords(coords), "merged", normalize_parents(parents), store_params, None, rec.seed)
    legacy = {**identity(rec.method), **rec.legacy_params()}
    if legacy != store_params:  # a merge stored before spellings were canonical (`lambda`) keeps its id
        old = make_id(normalize_coords(coords), "merged", normalize_parents(parents), legacy, None, rec.seed)
        if not registry.has(cid) and registry.has(old):
            return old
    srcs = [from_manifest(registry, m) for m in inputs]
    base_srcs = [from_manifest(registry, m) for m in bases]
    base = None if rec.base is None else base_srcs[0] if single else base_srcs
    if dry_run:
        prepare(checked.method, srcs, base, registry)
        return cid
    first = srcs[0]
    with tempfile.TemporaryDirectory(prefix="mmgrid-merge-") as tmp:
        out = Path(tmp) / "model.safetensors"
        # a scratch file: the registry copies it into its own durable store
        info = merge_to_file(checked.method, srcs, out, base=base, registry=registry, durable=False)
        meta = {k: v for k, v in first.meta.items() if k not in ("merge", "added_rows")}
        if info.added_rows:
            meta["added_rows"] = info.added_rows
        meta["merge"] = {"method": rec.method, "params": info.params, "report": info.report, "rows": info.rows,
                         "inputs": list(rec.inputs), "base": rec.base}
        return registry.put(str(out), coords, "merged", parents=parents, params=store_params,
                            files=first.files, meta=meta, seed=rec.seed)
