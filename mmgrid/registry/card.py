"""Model cards: the README.md that every exported Hugging Face folder carries.

A card is YAML front matter plus a short Markdown body, in the layout of Hugging Face's
model-card metadata (``huggingface_hub.ModelCard`` parses it):

* ``base_model``: the lineage's base -- the hub id where the base came from the hub (a
  checkpoint whose source is ``org/name``, or a folder of the hub cache
  ``models--org--name``), else its registry id (or a folder's name);
* ``base_model_relation``: ``merge`` for merges, ``finetune`` for trained checkpoints,
  ``adapter`` for a LoRA adapter (the hub's values are adapter, merge, quantized and
  finetune; it draws the model tree from this field and ``base_model``); none for a base
  model itself;
* ``library_name`` (transformers; peft for an adapter), ``tags`` (mmgrid, merge and the method, or the paradigm);
* ``mmgrid``: the checkpoint's id, kind, coords, method and parameters and its lineage
  (every ancestor's id, kind, coords, method and parents with their roles).

:func:`render_card` is the one writer; :func:`checkpoint_card` builds a registry
checkpoint's card (``mmgrid registry export-hf``), :func:`adapter_card` an extracted LoRA
adapter's, and the mergekit-recipe runner builds the card of a folder it writes from the recipe.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from mmgrid.configtools import load_yaml
from mmgrid.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.registry.manifest import Manifest

CARD_FILE = "README.md"
LIBRARY = "transformers"
RELATION = {"merged": "merge", "trained": "finetune"}  # registry kind -> base_model_relation
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_HUB_CACHE = re.compile(r"models--([A-Za-z0-9][A-Za-z0-9._-]*)--([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass
class Card:
    """What a card says.

    Attributes:
        title: the heading.
        base_model: the lineage's base(s).
        relation: ``merge`` | ``finetune`` | None (a base model).
        method: how it was made (a merge method, a paradigm's training), or None.
        params: the method's parameters.
        tags: tags beside ``mmgrid`` (``merge``, the method...).
        mmgrid: the checkpoint's record (id, kind, coords, lineage...).
        summary: one paragraph for the body.
        library: the hub's ``library_name`` (``peft`` for an adapter).
    """

    title: str
    base_model: list[str] = field(default_factory=list)
    relation: str | None = None
    method: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    mmgrid: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    library: str = LIBRARY


def hub_name(source: Any) -> str | None:
    """The hub id a model came from: a hub cache folder's ``models--org--name``, or a source
    written ``org/name`` (the string alone decides: a path from a manifest is never looked
    up; a relative folder spelled ``a/b`` reads as a hub id); None otherwise."""
    if not isinstance(source, str) or not source:
        return None
    m = _HUB_CACHE.search(source)
    if m:
        return f"{m.group(1)}/{m.group(2)}"
    if _HUB_ID.match(source):
        return source
    return None


def render_card(card: Card) -> str:
    """The README.md text of ``card`` (front matter by ``yaml.safe_dump``)."""
    front: dict[str, Any] = {}
    if card.base_model:
        front["base_model"] = card.base_model[0] if len(card.base_model) == 1 else list(card.base_model)
    if card.relation:
        front["base_model_relation"] = card.relation
    front["library_name"] = card.library
    front["tags"] = list(dict.fromkeys(["mmgrid", *card.tags]))
    front["mmgrid"] = {**card.mmgrid, "method": card.method, "params": card.params}
    body = [f"# {card.title}", "", card.summary or "Exported by mmgrid.", ""]
    if card.method:
        body += ["## Method", "", f"`{card.method}`, with parameters:", "", "```yaml",
                 yaml.safe_dump(card.params or {}, sort_keys=True).rstrip(), "```", ""]
    lineage = card.mmgrid.get("lineage") or []
    if lineage:
        body += ["## Lineage", ""]
        for e in lineage:
            parents = ", ".join(f"`{p['id'][:12]}` ({p['role']})" for p in e.get("parents", [])) or "none"
            what = f", {e['method']}" if e.get("method") else ""
            body.append(f"- `{str(e['id'])[:12]}`: {e.get('kind', '')}{what}; parents: {parents}")
        body.append("")
    return "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n\n" + "\n".join(body)


def _entry(m: "Manifest") -> dict[str, Any]:
    return {"id": m.id, "kind": m.kind, "coords": dict(m.coords), "method": m.method,
            "parents": [{"id": p.id, "role": p.role} for p in m.parents]}


def lineage(reg: "Registry", ids: list[str]) -> list[dict[str, Any]]:
    """The checkpoints ``ids`` and all their ancestors, each once, children before parents."""
    out, seen, todo = [], set(), list(ids)
    while todo:
        cid = todo.pop(0)
        if cid in seen:
            continue
        seen.add(cid)
        m = reg.get(cid)
        out.append(_entry(m))
        todo += [p.id for p in m.parents]
    return out


def base_names(reg: "Registry", entries: list[dict[str, Any]], own: str | None = None) -> list[str]:
    """The names of a lineage's base: its ``base`` checkpoints, else its roots (no parents),
    never ``own``; a hub id where the checkpoint came from the hub, else its registry id."""
    cands = [e for e in entries if e["kind"] == "base" and e["id"] != own]
    if not cands:
        cands = [e for e in entries if not e["parents"] and e["id"] != own]
    out = []
    for e in cands:
        out.append(hub_name(reg.get(e["id"]).meta.get("source")) or e["id"])
    return list(dict.fromkeys(out))


def checkpoint_card(reg: "Registry", m: "Manifest") -> Card:
    """The card of registry checkpoint ``m``: its lineage's base and relation, method,
    parameters and lineage."""
    entries = lineage(reg, [m.id])
    bases = base_names(reg, entries, own=m.id)  # none for a base model itself (no self-loop in the tree)
    record: dict[str, Any] = {"id": m.id, "kind": m.kind, "coords": dict(m.coords)}
    if hub_name(m.meta.get("source")):
        record["source"] = hub_name(m.meta.get("source"))
    coords = ", ".join(f"{k}={v}" for k, v in m.coords.items())
    method = m.params.get("merge_method") or m.method
    params = {k: v for k, v in m.params.items() if k != "method"}
    tags = ["merge", str(method)] if m.kind == "merged" and method else [str(m.coords.get("paradigm", m.kind))]
    inputs = [p.id[:12] for p in m.parents if p.role == "merge_input"]
    summary = {"merged": f"A merge of {len(inputs)} checkpoints ({', '.join(inputs)}) by `{method}`, made with mmgrid.",
               "trained": "A checkpoint trained with mmgrid from its parent(s) below."}.get(m.kind, f"A {m.kind} checkpoint of mmgrid's registry.")
    return Card(title=f"mmgrid {m.kind} checkpoint {m.id[:12]} ({coords})", base_model=bases,
                relation=RELATION.get(m.kind), method=str(method) if method else None, params=params, tags=tags,
                mmgrid={**record, "lineage": entries}, summary=summary)


def card_base_models(text: str) -> list[str]:
    """``base_model`` of a README.md card's front matter ([] when there is none or it does not parse)."""
    if not text.startswith("---"):
        return []
    end = text.find("\n---", 3)
    try:
        front = load_yaml(text[3:end], "README.md card") if end > 0 else None
    except (yaml.YAMLError, ConfigError):
        return []
    bm = front.get("base_model") if isinstance(front, dict) else None
    if isinstance(bm, str):
        return [bm]
    return [str(x) for x in bm] if isinstance(bm, list) else []


def adapter_card(base: str | None, params: dict[str, Any], rank: int) -> Card:
    """The card of a LoRA adapter extracted from a checkpoint's task vector: ``base_model``
    the model it applies to (``base``: its hub id or name; None for an in-memory state dict),
    relation ``adapter``, library ``peft``, the extraction's parameters."""
    return Card(title="LoRA adapter extracted by mmgrid", base_model=[base] if base else [], relation="adapter",
                method="extract_lora", params=json.loads(json.dumps(params, default=str)), tags=["lora", "peft", "extract_lora"],
                mmgrid={"kind": "adapter", "rank": rank}, library="peft",
                summary="A PEFT LoRA adapter: the truncated SVD of a checkpoint's task vector against its base.")
