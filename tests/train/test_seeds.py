"""Training seeds as a grid coordinate: replicate ids, a one-seed grid's ids unchanged, the shared
base, regularizer rows on the first seed only, every replicate evaluated on the same users."""

from __future__ import annotations

import pytest
import torch

import train_fakes as F
from mmgrid.config import TrainConfig, load_grid
from mmgrid.configtools import build
from mmgrid.errors import ConfigError
from mmgrid.eval.grid import evaluate_grid
from mmgrid.registry.lineage import text_tree
from mmgrid.runtime.context import open_registry
from mmgrid.runtime.plan import plan_grid, plan_stages, stage_config_hash, stage_params
from mmgrid.train.build import build_grid

ORBIT = {"name": "orbit-sd-0.02", "regularizer": "orbit", "params": {"distance": "sign", "epsilon": 0.02}}
TRAIN = {"epochs": {"pretrain": 2, "p1": 1, "p2": 1}, "batch_size": 8, "lr": 0.01}


def test_train_seeds_config() -> None:
    assert build(TrainConfig, {"seed": 4}).seed_list == [4]
    t = build(TrainConfig, {"seeds": [3, 5]})
    assert (t.seed, t.seed_list) == (3, [3, 5])
    assert build(TrainConfig, {"seeds": [3, 5], "seed": 7}).seed_list == [7]  # `train.seed=7` on a grid with seeds
    for bad, msg in (([], "empty"), ([1, 1], "repeats"), ([0, -1], ">= 0")):
        with pytest.raises(ConfigError, match=msg):
            build(TrainConfig, {"seeds": bad})


def _old_ids(cfg, reg, base_id: str, domains: list[str], fingerprint: str) -> dict:
    """The ids as mmgrid computed them before seeds were a coordinate: make_id over coords, parent,
    params, config hash and train.seed, chained stage by stage."""
    chash = stage_config_hash(cfg, base_id, fingerprint)
    out = {}
    for v in cfg.variants:
        for p in v.paradigms or cfg.paradigms:
            for d in domains:
                parent, first = base_id, True
                for st in cfg.train.stages:
                    coords = {"paradigm": p, "domain": d, "period": st, "variant": v.name}
                    cid = reg.make_id(coords, "trained", [(parent, "init" if first else "previous_stage")],
                                      stage_params(cfg, v, p, st), chash, cfg.train.seed)
                    out[(v.name, p, d, st)] = cid
                    parent, first = cid, False
    return out


def test_one_seed_keeps_its_ids_and_replicates_get_their_own(tmp_path) -> None:
    one = F.make_cfg(tmp_path / "a", train={**TRAIN, "seed": 0}, variants=[{"name": "default"}, ORBIT])
    reg = open_registry(one.registry)
    plans1 = plan_stages(one, reg, "b" * 64, ["A", "B"], "fp")
    old = _old_ids(one, reg, "b" * 64, ["A", "B"], "fp")
    assert {(s.variant, s.paradigm, s.domain, s.stage): s.id for s in plans1} == old
    listed = F.make_cfg(tmp_path / "a", train={**TRAIN, "seeds": [0]}, variants=[{"name": "default"}, ORBIT])
    assert [s.id for s in plan_stages(listed, reg, "b" * 64, ["A", "B"], "fp")] == [s.id for s in plans1]

    two = F.make_cfg(tmp_path / "a", train={**TRAIN, "seeds": [0, 1]}, variants=[{"name": "default"}, ORBIT])
    plans2 = plan_stages(two, reg, "b" * 64, ["A", "B"], "fp")
    seed0 = {(s.variant, s.paradigm, s.domain, s.stage): s.id for s in plans2 if s.seed == 0}
    seed1 = {(s.variant, s.paradigm, s.domain, s.stage): s.id for s in plans2 if s.seed == 1}
    assert seed0 == old  # the first replicate is the one-seed grid
    assert set(seed1) == {k for k in old if k[0] == "default"}  # regularizer rows: first seed only
    assert not set(seed1.values()) & set(seed0.values()) and len(set(seed1.values())) == len(seed1)
    for s in plans2:  # each replicate chains its own stages from the shared base
        if s.seed == 1:
            assert s.parent_id == "b" * 64 if s.first else s.parent_id in seed1.values()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seeds")
    cfg = F.make_cfg(tmp, train={**TRAIN, "seeds": [0, 1]}, variants=[{"name": "default"}, ORBIT])
    return cfg, build_grid(cfg, progress=False)


def test_a_two_seed_build_stores_both_replicates(built) -> None:
    cfg, res = built
    reg = open_registry(cfg.registry)
    assert res.seeds == [0, 1] and len(res.stages) == 2 * 2 * 3 + 2 * 3 and len(res.trained) == len(res.stages)
    assert reg.get(res.base_id).seed == 0  # one base, trained with the first seed
    assert sorted(set(reg.query(kind="trained")["seed"])) == [0, 1]
    ones = reg.query(kind="trained", seed=1)
    assert len(ones) == 2 * 3 and set(ones["variant"]) == {"default"}
    a = reg.load(res.final_ids(seed=0)[("toy", "A")])
    b = reg.load(res.final_ids(seed=1)[("toy", "A")])
    assert any(not torch.equal(a[k], b[k]) for k in a)  # other seeds, other weights
    assert res.ids == {k[1:]: v for k, v in res.seed_ids.items() if k[0] == 0}
    assert plan_grid(cfg).seed_ids == res.seed_ids
    cid = res.final_ids(seed=1)[("toy", "B")]
    assert "seed=1" in text_tree(reg.lineage(cid), cid).splitlines()[0]


def test_every_replicate_is_evaluated_on_the_same_users(built) -> None:
    cfg, res = built
    reg = open_registry(cfg.registry)
    out = evaluate_grid(cfg, res, progress=False, registry=reg)
    assert {k.seed for k in out.results} == {0, 1}
    rows = reg.results(split=cfg.eval.split, group="all", metric="recall@10", paradigm="toy", variant="default")
    rows = rows[rows["kind"] == "trained"]
    assert sorted(rows["seed"].tolist()) == [0, 0, 1, 1]  # domains A and B, seeds 0 and 1
    users = [tuple(reg.per_user(r)["user_idx"]) for _, r in rows.iterrows()]
    by_domain = {}
    for (_, r), u in zip(rows.iterrows(), users):
        by_domain.setdefault(r["domain"], set()).add(u)
    assert all(len(v) == 1 for v in by_domain.values())  # replicates paired user by user
    pop = reg.results(paradigm="popular", split=cfg.eval.split, group="all", metric="recall@10")
    assert len(pop) == 2  # most-popular: once per domain
    assert (rows["ci_low"] <= rows["value"]).all() and (rows["value"] <= rows["ci_high"]).all()


def test_shared_stages_config() -> None:
    t = build(TrainConfig, {"seeds": [0, 1], "shared_stages": ["pretrain"]})
    assert t.shared_stages == ["pretrain"]
    for bad in (["p1"], ["pretrain", "p2"], ["pretrain", "p1", "p2"]):  # not leading, or nothing left per seed
        with pytest.raises(ConfigError, match="shared_stages"):
            build(TrainConfig, {"seeds": [0, 1], "shared_stages": bad}).check_shared_stages()
        with pytest.raises(ConfigError, match="shared_stages"):  # a grid checks it when it is built
            load_grid("demo", [f"train.shared_stages={bad}"])


def test_shared_pretrain_is_planned_once_and_every_replicate_continues_from_it(tmp_path) -> None:
    plain = F.make_cfg(tmp_path / "a", train={**TRAIN, "seeds": [0, 1]}, variants=[{"name": "default"}, ORBIT])
    shared = F.make_cfg(tmp_path / "a", train={**TRAIN, "seeds": [0, 1], "shared_stages": ["pretrain"]},
                        variants=[{"name": "default"}, ORBIT])
    reg = open_registry(plain.registry)
    p_plain = plan_stages(plain, reg, "b" * 64, ["A", "B"], "fp")
    p_shared = plan_stages(shared, reg, "b" * 64, ["A", "B"], "fp")
    key = lambda s: (s.seed, s.variant, s.paradigm, s.domain, s.stage)  # noqa: E731
    seed0 = {key(s): s.id for s in p_plain if s.seed == 0}
    assert {key(s): s.id for s in p_shared if s.seed == 0} == seed0  # the first replicate is unchanged
    ones = [s for s in p_shared if s.seed == 1]
    assert {s.stage for s in ones} == {"p1", "p2"}  # no pretrain of its own
    for s in ones:
        if s.stage == "p1":  # continues from the first seed's pretrain of the same cell
            assert not s.first and s.parent_id == seed0[(0, s.variant, s.paradigm, s.domain, "pretrain")]
    plain_ones = {key(s): s.id for s in p_plain if s.seed == 1}
    assert not {s.id for s in ones} & set(plain_ones.values())  # other lineage, other ids
    assert len(p_shared) == len(p_plain) - 2  # one pretrain per domain less (default row, seed 1)


def test_a_build_with_shared_pretrain_trains_it_once(tmp_path) -> None:
    cfg = F.make_cfg(tmp_path, train={**TRAIN, "seeds": [0, 1], "shared_stages": ["pretrain"]})
    res = build_grid(cfg, progress=False)
    reg = open_registry(cfg.registry)
    trained = reg.query(kind="trained")
    assert len(trained[trained["period"] == "pretrain"]) == 2 and set(trained[trained["period"] == "pretrain"]["seed"]) == {0}
    assert len(trained[(trained["seed"] == 1)]) == 2 * 2  # p1 and p2 of domains A and B
    a, b = reg.load(res.final_ids(seed=0)[("toy", "A")]), reg.load(res.final_ids(seed=1)[("toy", "A")])
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the replicates still differ after p1 and p2
    p1 = res.seed_ids[(1, "default", "toy", "A", "p1")]
    assert [p[0] for p in reg.get(p1).parents] == [res.seed_ids[(0, "default", "toy", "A", "pretrain")]]
