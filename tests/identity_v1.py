"""The ids an earlier mmgrid gave a grid's checkpoints (identity version 1), computed as that code
did, for the tests of ``mmgrid registry remap-ids`` and of registries whose coordinates repeat."""

from __future__ import annotations

from typing import Any

from mmgrid.configtools import stable_hash, to_dict


def put_under_identity_v1(cfg: Any, src: Any, dst: Any) -> dict[str, str]:
    """Store the grid's checkpoints of ``src`` in ``dst`` under the ids an earlier mmgrid gave them,
    as that code computed them (restated here, not imported: the base hashed the prepared data's
    path-spelled fingerprint, a stage its data settings as spelled and every knob). Returns old -> new id."""
    from mmgrid.models.base import base_checkpoint_id, base_identity
    from mmgrid.runtime.context import open_prepared
    from mmgrid.runtime.plan import plan_stages, stage_params

    prepared = open_prepared(cfg.prepared)
    seed = cfg.train.seed
    new_bid = base_checkpoint_id(cfg.base, src, prepared.fingerprint, seed)
    old = base_identity(cfg.base, prepared.manifest["fingerprint"], seed, identity=1)
    mapping: dict[str, str] = {}

    def copy(cid: str, ident: dict[str, Any]) -> str:
        m = src.get(cid)
        got = dst.put(src.load(cid), m.coords, m.kind, parents=ident["parents"], params=ident["params"],
                      files={n: src.file(cid, n) for n in m.files}, meta=m.meta, seed=ident["seed"],
                      config_hash=ident["config_hash"], data_fingerprint=prepared.manifest["fingerprint"])
        mapping[got] = cid
        return got

    old_bid = copy(new_bid, old)
    variants = {v.name: v for v in cfg.variants}
    chash = stable_hash({"base": old_bid, "data": prepared.manifest["fingerprint"], "data_cfg": to_dict(cfg.data),
                         "stages": list(cfg.train.stages)})
    parent_of: dict[str, str] = {new_bid: old_bid}
    for p in plan_stages(cfg, src, new_bid, list(prepared.domains), prepared.fingerprint):
        params = {**stage_params(cfg, variants[p.variant], p.paradigm, p.stage),
                  "paradigm_params": dict(cfg.paradigm_params.get(p.paradigm, {}))}
        ident = {"parents": [(parent_of[p.parent_id], "init" if p.first else "previous_stage")], "params": params,
                 "config_hash": chash, "seed": p.seed}
        parent_of[p.id] = copy(p.id, ident)
    return mapping
