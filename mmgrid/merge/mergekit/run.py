"""Carry out a mergekit recipe with mmgrid's engine (see :mod:`.spec` for what is read).

Per tensor, the recipe's settings are evaluated (filters, gradients over the layers)
and mapped onto an mmgrid method and its parameters (:data:`.spec.METHOD_TABLE`).
Tensors with the same mapped parameters form a group, merged by one streamed
``merge_to_file`` pass; the result is written as an HF folder (sharded above a size,
with the index, and a README.md model card, :func:`recipe_card`) or stored in the registry
with lineage. Everything (recipe, sources,
shapes, every group's parameters) is checked before anything is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mmgrid.merge import executor
from mmgrid.merge.api import merge_to_file, prepare
from mmgrid.merge.errors import SourceError
from mmgrid.merge.mergekit import hf
from mmgrid.merge.mergekit.folder import Group, MergekitResult, is_path, num_layers, recipe_card
from mmgrid.merge.mergekit.spec import ZERO_BASE, MergekitSpec, layer_position
from mmgrid.merge.methods import get_method, identity
from mmgrid.merge.recipe import Recipe, default_coords
from mmgrid.merge.tensors import SafetensorsWriter, TensorSource, from_safetensors, open_source
from mmgrid.registry import card

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry


def _open(ref: str, label: str, registry: Registry | None) -> TensorSource:
    p = Path(ref)
    if p.is_dir():
        return hf.open_folder(p, label)
    if p.suffix == ".safetensors" and p.is_file():
        return from_safetensors(p)
    if registry is None:
        raise SourceError(f"{label}: {ref!r} is not an HF folder and no registry is given; give a folder with "
                          "model.safetensors (or its index) or pass --registry ROOT for registry ids")
    return open_source(ref, label, registry)


def _subset(src: TensorSource, names: list[str]) -> TensorSource:
    """The same source, restricted to ``names`` (no copy)."""
    return TensorSource(src.label, {n: src.shapes[n] for n in names}, src._get, dict(src.meta), dict(src.files),
                        locate=src.locate)


def _zeros(like: TensorSource) -> TensorSource:
    return TensorSource("zero base", dict(like.shapes), lambda n: torch.zeros(like.shapes[n][0], dtype=like.shapes[n][1]))


def plan_groups(spec: MergekitSpec, names: list[str], num_layers: int) -> list[Group]:
    """Evaluate the recipe for every tensor and group tensors with identical mmgrid merges."""
    groups: dict[str, Group] = {}
    fields: dict[str, set[str]] = {}
    for name in names:
        res = spec.resolve(name, layer_position(name, num_layers))
        method = spec.row.method
        if method not in fields:
            fields[method] = {f.name for f in dataclasses.fields(get_method(method).Params)}
        assert spec.row.build is not None  # parse() refuses a row without one
        m, params, base = spec.row.build(res, fields[method])
        if m not in fields:
            fields[m] = {f.name for f in dataclasses.fields(get_method(m).Params)}
        key = json.dumps([m, params, base], sort_keys=True)
        groups.setdefault(key, Group(m, params, base)).tensors.append(name)
    return list(groups.values())


def merge_recipe(spec: MergekitSpec, out_p: Path | None, registry: Registry | None, coords: dict[str, Any] | None,
                 max_shard_bytes: int, dry_run: bool) -> MergekitResult:
    """Carry out a checked recipe with the merge engine (the arguments of
    :func:`mmgrid.merge.mergekit.run_mergekit_recipe`, the output already checked)."""
    srcs = [_open(m, f"models[{i}] ({m})", registry) for i, m in enumerate(spec.models)]
    base = None if spec.base is None else _open(spec.base, f"base_model ({spec.base})", registry)
    first = base or srcs[0]
    names = list(first.shapes)
    groups = plan_groups(spec, names, num_layers(first.files.get("config.json"), names))
    # check every group (parameters, sources, shapes) before writing anything
    for g in groups:
        _group_inputs(g, srcs, base, registry, check=True)
    tok = first
    if spec.tokenizer_source is not None:
        tok = _open(spec.tokenizer_source, f"tokenizer_source ({spec.tokenizer_source})", registry)
    out_dtype = hf.DTYPES.get(spec.out_dtype or spec.dtype or "")
    files = {k: v for k, v in first.files.items() if k in hf.CONFIG_FILES}
    files.update({k: v for k, v in tok.files.items() if k in hf.TOKENIZER_FILES})
    if "config.json" in files:
        config = hf.config_with_dtype(files["config.json"], dtype_name(out_dtype))
        assert config is not None  # bytes in, bytes out
        files["config.json"] = config
    if dry_run:
        return MergekitResult(out_p, None, groups)
    if out_p is not None:
        files[card.CARD_FILE] = card.render_card(recipe_card(spec, groups, registry)).encode()
    if out_p is not None and len(groups) == 1:
        models, gbase = _group_inputs(groups[0], srcs, base, registry)
        weights = _direct(groups[0], models, gbase, registry, names, out_dtype, max_shard_bytes)
        if weights is not None:
            return MergekitResult(out_p, None, groups, hf.publish_folder(out_p, weights, files))
    with tempfile.TemporaryDirectory(prefix="mmgrid-mergekit-", dir=None if out_p is None else _parent(out_p)) as tmp:
        merged: dict[str, TensorSource] = {}
        for i, g in enumerate(groups):
            path = Path(tmp) / f"group{i}.safetensors"
            models, gbase = _group_inputs(g, srcs, base, registry)
            merge_to_file(g.method, models, path, base=gbase, registry=registry, durable=False, **g.params)
            gsrc = from_safetensors(path)
            for n in g.tensors:
                merged[n] = gsrc
        layout = [(n, merged[n].shapes[n][0], _dtype(merged[n].shapes[n][1], out_dtype)) for n in names]
        if out_p is not None:
            written = hf.write_folder(out_p, layout, lambda n: merged[n].get(n), files, max_shard_bytes)
            return MergekitResult(out_p, None, groups, written)
        single = Path(tmp) / "model.safetensors"
        w = SafetensorsWriter(single, layout, durable=False)
        for n, _, dt in layout:
            w.write(n, merged[n].get(n).to(dt))
        w.close()
        assert registry is not None  # without out=, registry= was required above
        cid = _store(spec, registry, single, files, groups, srcs, base, coords)
        return MergekitResult(None, cid, groups)


def _direct(g: Group, models: list[TensorSource], gbase: TensorSource | None, registry: Registry | None, names: list[str],
            out_dtype: torch.dtype | None, max_shard_bytes: int) -> Callable[[Path], list[str]] | None:
    """One group merged straight into the folder's ``model.safetensors`` (the merge pass
    writes the file: no scratch file read back and written again, which took more time
    than the merge itself for the streamed methods, measured): the ``weights`` writer of
    :func:`.hf.publish_folder`. None, before anything is written, where that file would
    differ from the general path's: another tensor order or output dtype, or more than one
    shard."""
    inst, msrcs, bsrc, plan = prepare(g.method, models, gbase, registry, **g.params)
    layout = [(n, s, _dtype(d, out_dtype)) for n, s, d in plan.layout]
    if [n for n, _, _ in layout] != names or layout != plan.layout or len(hf.shard_plan(layout, max_shard_bytes)) != 1:
        return None

    def weights(tmp: Path) -> list[str]:
        w = SafetensorsWriter(tmp / hf.SINGLE, plan.layout, {"format": "pt"}, durable=True)
        try:
            executor.run(inst, msrcs, bsrc, plan, w.write, w)
            w.close()
        except BaseException:
            w.abort()
            raise
        return [hf.SINGLE]

    return weights


def dtype_name(dtype: torch.dtype | None) -> str | None:
    """A torch dtype's name as config.json writes it (``bfloat16``)."""
    return None if dtype is None else str(dtype).removeprefix("torch.")


def _parent(p: Path) -> str:
    p.absolute().parent.mkdir(parents=True, exist_ok=True)
    return str(p.absolute().parent)


def _dtype(stored: torch.dtype, out: torch.dtype | None) -> torch.dtype:
    return out if out is not None and stored.is_floating_point else stored


def _group_inputs(g: Group, srcs: list[TensorSource], base: TensorSource | None, registry: Registry | None,
                  check: bool = False) -> tuple[list[TensorSource], TensorSource | None]:
    models = [_subset(s, g.tensors) for s in srcs]
    missing = [(s.label, n) for s in srcs for n in g.tensors if n not in s.shapes]
    if missing:
        raise SourceError(f"{missing[0][0]} has no tensor {missing[0][1]} (and {len(missing) - 1} more missing); "
                          "all models must have the base model's tensors")
    if g.base == ZERO_BASE:
        gbase = _subset(_zeros(srcs[0]), g.tensors)
    elif g.base == "" or base is None:
        gbase = None
    else:
        gbase = _subset(base, g.tensors)
    if check:
        prepare(g.method, models, gbase, registry, **g.params)
    return models, gbase


def _store(spec: MergekitSpec, registry: Registry, path: Path, files: dict[str, bytes], groups: list[Group],
           srcs: list[TensorSource], base: TensorSource | None, coords: dict[str, Any] | None) -> str:
    """Store the merged file in the registry with lineage for inputs that are registry ids."""
    ids = [m for m, s in zip(spec.models, srcs) if not is_path(m)]
    parents = [(registry.get(m).id, "merge_input") for m in ids]
    if spec.base is not None and base is not None and not is_path(spec.base) and spec.base not in spec.models:
        parents.append((registry.get(spec.base).id, "merge_base"))
    if ids and len(ids) == len(spec.models):
        dflt = default_coords(registry, Recipe(spec.row.method, ids))
    else:
        dflt = {"paradigm": "none", "domain": "none", "period": "none"}
    dflt["variant"] = f"mergekit-{spec.row.mergekit}"
    used = sorted({g.method for g in groups})
    params = {"method": "mergekit", "merge_method": spec.row.mergekit, "recipe": spec.raw,
              "mmgrid_methods": [identity(m) for m in used]}
    meta = {"mergekit": {"recipe": spec.raw, "groups": [{"method": g.method, "params": g.params, "tensors": len(g.tensors)}
                                                        for g in groups]}}
    return registry.put(str(path), {**dflt, **(coords or {})}, "merged", parents=parents, params=params,
                        files=files, meta=meta)
