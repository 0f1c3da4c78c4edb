"""Paradigm checkpoints to and from the registry (``Checkpoint`` <-> put / load)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmgrid.errors import ConfigError, ModelError
from mmgrid.models.base import shared_base
from mmgrid.paradigms.base import Checkpoint

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry


def checkpoint_meta(ckpt: Checkpoint, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The meta stored with a checkpoint: its own meta, ``added_rows`` and ``extra``."""
    meta = dict(ckpt.meta)
    meta["added_rows"] = {k: [int(v[0]), list(v[1])] for k, v in ckpt.added_rows.items()}
    meta.update(extra or {})
    return meta


def load_checkpoint(registry: Registry, ref: Any, state: dict | None = None) -> Checkpoint:
    """Rebuild a paradigm :class:`Checkpoint` (state, files, meta, added rows) from the registry.

    Args:
        registry: an open registry.
        ref: checkpoint id or alias.
        state: use this state instead of the stored one (a merge result), keeping the
            checkpoint's files and meta.
    """
    man = registry.get(ref)
    files = {name: registry.file(man.id, name) for name in man.files}
    meta = dict(man.meta or {})
    added = {k: (int(v[0]), list(v[1])) for k, v in (meta.get("added_rows") or {}).items()}
    return Checkpoint(state=state if state is not None else registry.load(man.id), files=files, meta=meta,
                      added_rows=added, base_model=lambda: lineage_base(registry, man.id))


def lineage_base(registry: Registry, cid: str) -> Any:
    """The base LM at the root of a checkpoint's lineage, loaded once per process (read-only).

    Raises:
        ModelError: the lineage's root is not a base checkpoint (e.g. an imported checkpoint without
            parents), so there is no base to read.
    """
    root = lineage_root(registry, cid)
    kind = registry.get(root).kind
    if kind != "base":
        raise ModelError(f"checkpoint {cid}: the root of its lineage, {root}, is a {kind!r} checkpoint, not a base; "
                         "there is no base LM to read (ground with ground_embedder: model or sentence instead).")
    return shared_base(registry, root).model


def lineage_root(registry: Registry, cid: str) -> str:
    """The root of a checkpoint's lineage (the base LLM it was trained from)."""
    g = registry.lineage(cid)
    roots = sorted(n for n in g.nodes if g.in_degree(n) == 0)
    if not roots:
        raise ConfigError(f"checkpoint {cid}: its lineage has no root; cannot find the original base.")
    if len(roots) > 1:
        bases = [r for r in roots if registry.get(r).kind == "base"]
        roots = bases or roots
    return roots[0]
