"""The torch-free part of a recipe's HF folder: the files copied beside the weights, a
folder published whole, and the result types (:mod:`.run` merges the weights; :mod:`.entry`
copies them where the recipe is a plain copy).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.merge.mergekit.spec import layer_position
from mmgrid.fileio.atomic import swap_dir
from mmgrid.registry import card

if TYPE_CHECKING:
    from mmgrid.merge.mergekit.spec import MergekitSpec
    from mmgrid.registry.api import Registry

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# save_pretrained's default max_shard_size ("5GB", decimal)
DEFAULT_SHARD_BYTES = 5 * 10**9

#: small files copied with a model: its config and its tokenizer
CONFIG_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "tokenizer.model", "added_tokens.json", "chat_template.jinja", "chat_template.json")


@dataclass
class Group:
    """Tensors merged with one mmgrid method and parameter set."""

    method: str
    params: dict[str, Any]
    base: str | None  # None: the recipe's base; ZERO_BASE; "": none
    tensors: list[str] = field(default_factory=list)


@dataclass
class MergekitResult:
    """What :func:`mmgrid.merge.mergekit.run_mergekit_recipe` did.

    Attributes:
        out: the written HF folder (None when stored in the registry).
        id: the registry id (None when written to a folder).
        groups: the mmgrid merges it ran (method, parameters, tensors).
        files: the weight files written (folder output).
    """

    out: Path | None
    id: str | None
    groups: list[Group]
    files: list[str] = field(default_factory=list)


def num_layers(config: bytes | None, names: Iterable[str]) -> int:
    """The model's layer count: config.json's num_hidden_layers, else the highest layer index + 1."""
    try:
        n = json.loads(config or b"{}").get("num_hidden_layers")
        if isinstance(n, int) and n > 0:
            return n
    except (ValueError, AttributeError):
        pass
    idx = [layer_position(k, 2) for k in names]  # 0 or i/1 = i with L = 2
    return int(max(idx, default=0)) + 1


def read_files(folder: Path, names: Iterable[str]) -> dict[str, bytes]:
    return {n: (folder / n).read_bytes() for n in names if (folder / n).is_file()}


def publish_folder(out: Path, weights: Callable[[Path], list[str]], files: dict[str, bytes]) -> list[str]:
    """Build an HF folder in a sibling temporary folder and rename it to ``out`` when
    complete (an existing ``out`` is swapped out only then, so an error leaves it as it
    was): ``weights(tmp)`` writes the weight files into ``tmp`` and returns their names;
    ``files`` (config, tokenizer) are written beside them."""
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        names = weights(tmp)
        for n, data in files.items():
            (tmp / n).write_bytes(data)
        swap_dir(tmp, out)  # overwrite: swap, then drop the old one
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return names


def config_with_dtype(config: bytes | None, dtype: str | None) -> bytes | None:
    """config.json with ``torch_dtype`` set to the written dtype's name (``bfloat16``;
    unchanged if none)."""
    if config is None or dtype is None:
        return config
    try:
        cfg = json.loads(config)
    except ValueError:
        return config
    name = dtype
    for key in ("torch_dtype", "dtype"):
        if key in cfg:
            cfg[key] = name
    return (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode()


def lineage_of(ref: str, registry: Any) -> tuple[str, list[str], list[dict[str, Any]]]:
    """A recipe input's name in a card, the base of its lineage, and its lineage entries: a
    registry checkpoint's (:mod:`mmgrid.registry.card`), or a folder's hub id (a hub cache
    folder) or folder name, its own card's ``base_model`` when it has one."""
    if not is_path(ref):
        cid = registry.get(ref).id
        entries = card.lineage(registry, [cid])
        return cid, card.base_names(registry, entries), entries
    p = Path(ref)
    name = card.hub_name(str(p.resolve())) or p.name
    readme = p / card.CARD_FILE if p.is_dir() else None
    bases = card.card_base_models(readme.read_text(errors="replace")) if readme and readme.is_file() else []
    return name, bases or [name], [{"id": name, "kind": "folder", "coords": {}, "method": None, "parents": []}]


def recipe_card(spec: MergekitSpec, groups: list[Group], registry: Registry | None) -> card.Card:
    """The model card of a folder a recipe writes: ``base_model`` the inputs' lineage bases,
    relation ``merge``, the recipe (inputs by name) and the mmgrid merges that ran."""
    names: list[str] = []
    bases: list[str] = []
    entries: list[dict[str, Any]] = []
    parents: list[dict[str, str]] = []
    refs = ([(spec.base, "merge_base")] if spec.base is not None else []) + [(m, "merge_input") for m in spec.models]
    for ref, role in refs:
        name, base, lin = lineage_of(ref, registry)
        names.append(name)
        bases += base
        entries += [e for e in lin if e["id"] not in {x["id"] for x in entries}]
        parents.append({"id": name, "role": role})
    params = {"parameters": spec.params, "models": [{"model": n, "parameters": mp} for n, mp in
                                                    zip(names[-len(spec.models):], spec.model_params)]}
    if spec.base is not None:
        params["base_model"] = names[0]
    used = [{"method": g.method, "params": g.params, "tensors": len(g.tensors)} for g in groups]
    return card.Card(
        title=f"mmgrid {spec.row.mergekit} merge of {len(spec.models)} models", base_model=list(dict.fromkeys(bases)),
        relation="merge", method=spec.row.mergekit, params=params, tags=["merge", "mergekit", spec.row.mergekit],
        mmgrid={"kind": "merged", "parents": parents, "lineage": [{"id": "(this merge)", "kind": "merged",
                                                                   "method": spec.row.mergekit, "parents": parents}, *entries],
                "mmgrid_merges": used},
        summary=f"A mergekit `{spec.row.mergekit}` recipe run with mmgrid's merge engine.")


def is_path(ref: str) -> bool:
    p = Path(ref)
    return p.is_dir() or (p.suffix == ".safetensors" and p.is_file())
