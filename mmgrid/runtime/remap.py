"""Map checkpoints stored under an earlier identity onto today's ids, without retraining.

Identity version 1 (:func:`mmgrid.runtime.plan.legacy_stage_plans`) hashed the data settings as
spelled (``data.root`` relative or absolute gave other ids) and every paradigm knob; version 2
hashes content only (:mod:`mmgrid.runtime.plan`). A registry built before holds the grid's
checkpoints under version-1 ids, which stay valid (nothing is removed or rewritten). For each
stage of the grid whose version-2 id is not stored, :func:`remap_ids` looks for the stage's
version-1 id and, when it is stored, puts the same tensors and files under the version-2 identity
(a new manifest: content-addressed blobs are shared, no tensor is copied), with
``meta["same_as"]`` naming the old id. The base is mapped the same way first.

Only exact matches are mapped: an old id is recomputed from today's grid (its training
settings, the prepared data's old fingerprint, the data settings in each spelling the build may
have used: as in the prepared data's manifest, as written in the grid, resolved, relative to
here, with or without a trailing slash) and a checkpoint is mapped only when that id is stored.
An old id is a hash of its whole identity, so a match proves the checkpoint was trained with
exactly these settings on exactly this prepared data; nothing is guessed from coordinates.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.configtools import to_dict
from mmgrid.errors import RegistryError
from mmgrid.models.base import base_checkpoint_id, base_identity
from mmgrid.runtime.plan import StagePlan, grid_domains, legacy_stage_plans, plan_stages, stage_config_hash, stage_params

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry

Key = tuple[int, str, str, str, str]  # (seed, variant, paradigm, domain, stage)


@dataclass
class RemapReport:
    """What :func:`remap_ids` mapped (old id, new id, what), and what it could not."""

    mapped: list[tuple[str, str, str]] = field(default_factory=list)
    already: int = 0  # stages whose new id was stored already
    missing: int = 0  # stages with neither a new nor an old checkpoint (`mmgrid build` trains them)
    dry_run: bool = False

    def lines(self) -> list[str]:
        verb = "would map" if self.dry_run else "mapped"
        out = [f"  {old[:12]} -> {new[:12]}  {what}" for old, new, what in self.mapped]
        out.append(f"{verb} {len(self.mapped)} checkpoint(s) onto today's ids; {self.already} stage(s) already "
                   f"had one; {self.missing} stage(s) have no checkpoint under either identity "
                   "(`mmgrid build` trains them).")
        if self.missing and not self.mapped:
            out.append("Earlier ids are recomputed from the prepared data the registry was built with (its "
                       "manifest.json): if that folder was prepared again since (another data.root, moved files), "
                       "they cannot be; pass prepared=DIR of a copy of the build's prepared data if one is kept.")
        return out


def _spellings(cfg: GridConfig, prepared: PreparedDataset) -> list[dict[str, Any]]:
    """The data settings in every spelling a version-1 build may have hashed (see the module docstring)."""
    base = to_dict(cfg.data)
    roots: list[str] = []
    stored = dict((getattr(prepared, "manifest", None) or {}).get("config") or {})
    for root in (str(stored.get("root", "")), str(base["root"])):
        if not root:
            continue
        absolute = str(Path(root).resolve())
        try:
            relative = os.path.relpath(absolute)
        except ValueError:  # another drive (Windows)
            relative = root
        for r in (root, absolute, relative):
            roots += [r.rstrip("/") or r, r.rstrip("/") + "/"]
    out, seen = [], set()
    for shape in ([stored] if stored else []) + [base]:
        for root in dict.fromkeys(roots):
            d = {**shape, "root": root}
            key = repr(sorted(d.items()))
            if key not in seen:
                seen.add(key)
                out.append(d)
    return out


def legacy_ids(cfg: GridConfig, registry: Registry, prepared: PreparedDataset) -> tuple[str | None, dict[Key, str]]:
    """(the base's stored version-1 id or None, stage key -> stored version-1 id) of the grid
    (nothing for prepared data that has no path-spelled fingerprint, such as a stand-in)."""
    seed = cfg.train.seed
    old_fp = getattr(prepared, "path_fingerprint", None)
    if not old_fp:
        return None, {}
    old_bid = base_checkpoint_id(cfg.base, registry, old_fp, seed, identity=1)
    if not registry.has(old_bid):
        return None, {}
    domains = grid_domains(cfg, prepared)
    found: dict[Key, str] = {}
    for data_cfg in _spellings(cfg, prepared):
        for p in legacy_stage_plans(cfg, registry, old_bid, domains, prepared.path_fingerprint, data_cfg):
            key = (p.seed, p.variant, p.paradigm, p.domain, p.stage)
            if key not in found and registry.has(p.id):
                found[key] = p.id
    return old_bid, found


def stale_stages(cfg: GridConfig, registry: Registry, prepared: PreparedDataset) -> int:
    """How many of the grid's stages (the base counted as one) are not stored under today's id
    but are under identity version 1: ``mmgrid registry remap-ids`` reuses them."""
    seed = cfg.train.seed
    new_bid = base_checkpoint_id(cfg.base, registry, prepared.fingerprint, seed)
    old_bid, old = legacy_ids(cfg, registry, prepared)
    if old_bid is None or old_bid == new_bid:
        return 0
    n = 0 if registry.has(new_bid) else 1
    plans = plan_stages(cfg, registry, new_bid, grid_domains(cfg, prepared), prepared.fingerprint)
    return n + sum(1 for p in plans if (p.seed, p.variant, p.paradigm, p.domain, p.stage) in old
                   and not registry.has(p.id))


def remap_ids(cfg: GridConfig, registry: Registry, prepared: PreparedDataset, dry_run: bool = False) -> RemapReport:
    """Put every stage stored only under its version-1 id under its version-2 id (see the module
    docstring); old ids stay valid. Idempotent: a second call maps nothing.

    Raises:
        RegistryError: a re-put checkpoint got another id than the plan's (a bug: nothing after it is mapped).
    """
    rep = RemapReport(dry_run=dry_run)
    seed = cfg.train.seed
    new_bid = base_checkpoint_id(cfg.base, registry, prepared.fingerprint, seed)
    old_bid, old = legacy_ids(cfg, registry, prepared)
    have: set[str] = set()  # ids stored, or (dry run) that would be
    if registry.has(new_bid):
        have.add(new_bid)
    elif old_bid is not None:
        ident = base_identity(cfg.base, prepared.fingerprint, seed)
        _put_same(registry, old_bid, new_bid, ident, prepared.fingerprint, dry_run)
        rep.mapped.append((old_bid, new_bid, "base"))
        have.add(new_bid)
    if new_bid not in have:
        rep.missing = len(plan_stages(cfg, registry, new_bid, grid_domains(cfg, prepared), prepared.fingerprint))
        return rep
    variants = {v.name: v for v in cfg.variants}
    for p in plan_stages(cfg, registry, new_bid, grid_domains(cfg, prepared), prepared.fingerprint):
        key = (p.seed, p.variant, p.paradigm, p.domain, p.stage)
        if registry.has(p.id):
            rep.already += 1
            have.add(p.id)
        elif key in old and p.parent_id in have:
            ident = {"coords": {"paradigm": p.paradigm, "domain": p.domain, "period": p.stage, "variant": p.variant},
                     "kind": "trained", "parents": [(p.parent_id, "init" if p.first else "previous_stage")],
                     "params": stage_params(cfg, variants[p.variant], p.paradigm, p.stage),
                     "config_hash": stage_config_hash(cfg, new_bid, prepared.fingerprint), "seed": p.seed}
            _put_same(registry, old[key], p.id, ident, prepared.fingerprint, dry_run)
            rep.mapped.append((old[key], p.id, _what(p)))
            have.add(p.id)
        else:
            rep.missing += 1
    return rep


def _what(p: StagePlan) -> str:
    return f"{p.variant}/{p.paradigm}/{p.domain}/{p.stage}" + (f" seed {p.seed}" if p.seed else "")


def _put_same(registry: Registry, old_id: str, new_id: str, ident: dict[str, Any], fingerprint: str, dry_run: bool) -> None:
    """Store ``old_id``'s tensors and files under the identity ``ident`` (which must be ``new_id``)."""
    if registry.make_id(ident["coords"], ident["kind"], ident["parents"], ident["params"], ident["config_hash"],
                        ident["seed"]) != new_id:
        raise RegistryError(f"remap: the identity computed for {old_id[:12]} is not the planned id {new_id[:12]}; "
                            "nothing more was mapped. Please report this with the grid file.")
    if dry_run:
        return
    old = registry.get(old_id)
    files = {name: registry.file(old_id, name) for name in old.files}
    meta = {**old.meta, "same_as": old_id, "same_as_code_version": old.code_version}
    got = registry.put(registry.open_tensors(old_id), ident["coords"], ident["kind"], parents=ident["parents"],
                       params=ident["params"], files=files, meta=meta, seed=ident["seed"],
                       config_hash=ident["config_hash"], data_fingerprint=fingerprint)
    if got != new_id:  # pragma: no cover - make_id above is the same function
        raise RegistryError(f"remap: {old_id[:12]} was stored as {got[:12]}, not {new_id[:12]}.")
