"""Building a grid: ids planned up front, lineage, cache hits, resume == uninterrupted,
variants with a regularizer, and bad input (unknown paradigm, empty phase, NaN loss)."""

from __future__ import annotations

import pytest
import torch

import train_fakes as F
from mmgrid.errors import ConfigError, DataError, TrainingError, UnknownNameError
from mmgrid.runtime.plan import plan_grid
from mmgrid.train.build import build_grid
from mmgrid.validate import validate_grid
from mmgrid.runtime.context import open_registry

ORBIT = {"name": "orbit-sd-0.02", "regularizer": "orbit", "params": {"distance": "sign", "epsilon": 0.02}}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grid")
    cfg = F.make_cfg(tmp, variants=[{"name": "default"}, ORBIT])
    return cfg, build_grid(cfg, progress=False)


def test_every_stage_is_stored_with_lineage(built) -> None:
    cfg, res = built
    reg = open_registry(cfg.registry)
    assert len(res.stages) == 2 * 2 * 3 and len(res.trained) == 12 and not res.cached
    base = reg.get(res.base_id)
    assert base.kind == "base" and base.coords["paradigm"] == "base"
    for s in res.stages:
        m = reg.get(s.id)
        assert (m.coords["paradigm"], m.coords["domain"], m.coords["period"], m.coords["variant"]) == (
            s.paradigm, s.domain, s.stage, s.variant)
        assert [tuple(p) for p in m.parents] == [(s.parent_id, "init" if s.first else "previous_stage")]
        assert m.params["epochs"] == cfg.train.epochs[s.stage]
        assert m.meta["train_log"]["steps"] > 0 and m.meta["added_rows"]["items.weight"][0] == 20
    first = [s for s in res.stages if s.first]
    assert all(s.parent_id == res.base_id for s in first)


def test_second_build_is_all_cache_hits_and_plan_matches(built) -> None:
    cfg, res = built
    again = build_grid(cfg, progress=False)
    assert again.trained == [] and len(again.cached) == 12
    assert plan_grid(cfg).ids == res.ids


def _sd_to_origin(state: dict, domain: str) -> float:
    """Sign dissimilarity (Orbit Eq. 1) of a stored toy state vs its rebuilt origin, added rows excluded."""
    from mmgrid.runtime.device import derive_seed

    origin = F.ToyParadigm().build(None, F.make_domain(domain), {}, derive_seed(0, "toy", domain, "build"))
    flipped = counted = 0
    for name, o in origin.named_parameters():
        t, o = state[name], o.detach()
        if name == "items.weight":
            t, o = t[:20], o[:20]
        nz = o != 0
        flipped += int(((torch.sign(t) != torch.sign(o)) & nz).sum())
        counted += int(nz.sum())
    return flipped / counted


def test_orbit_row_stays_within_epsilon_of_the_origin(built) -> None:
    cfg, res = built
    reg = open_registry(cfg.registry)
    eps = ORBIT["params"]["epsilon"]
    for s in res.stages:
        sd = _sd_to_origin(reg.load(s.id), s.domain)
        if s.variant == "default":
            assert sd > eps  # without Orbit the model drifts further (the check is not vacuous)
            continue
        assert sd <= eps
        log = reg.get(s.id).meta["train_log"]
        assert log["max_distance_after_step"] <= eps and log["n_events"] > 0


def test_resume_after_a_failure_equals_an_uninterrupted_build(built, tmp_path) -> None:
    cfg_ref, res_ref = built
    cfg = F.make_cfg(tmp_path, variants=[{"name": "default"}, ORBIT])
    F.FAIL_AT.add(("B", "p2"))
    try:
        with pytest.raises(RuntimeError, match="injected"):
            build_grid(cfg, progress=False)
    finally:
        F.FAIL_AT.clear()
    reg = open_registry(cfg.registry)
    ref = open_registry(cfg_ref.registry)
    missing = [k for k, cid in res_ref.ids.items() if not reg.has(cid)]
    assert sorted(missing) == [("default", "toy", "B", "p2"), ("orbit-sd-0.02", "toy", "B", "p2")]
    res = build_grid(cfg, progress=False)
    assert len(res.trained) == 2 and res.ids == res_ref.ids
    for cid in res.ids.values():
        a, b = reg.load(cid), ref.load(cid)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_unknown_paradigm_fails_before_anything_runs(tmp_path) -> None:
    cfg = F.make_cfg(tmp_path, paradigms=["toy", "txet"])
    with pytest.raises(UnknownNameError, match="txet"):
        validate_grid(cfg)  # the one validation pass every command runs before build_grid
    assert not (tmp_path / "reg").exists() or not open_registry(cfg.registry).query().shape[0]


def test_unknown_regularizer_and_bad_params_fail_early(tmp_path) -> None:
    with pytest.raises(UnknownNameError, match="orbit"):
        validate_grid(F.make_cfg(tmp_path, variants=[{"name": "x", "regularizer": "orbitt"}]))
    with pytest.raises(ConfigError, match="epsilon"):
        validate_grid(F.make_cfg(tmp_path, variants=[{"name": "x", "regularizer": "orbit"}]))
    with pytest.raises(ConfigError, match=r"variants\[0\]\.paradigms: 'nope' is not in paradigms"):
        validate_grid(F.make_cfg(tmp_path, variants=[{"name": "x", "paradigms": ["nope"]}]))
    with pytest.raises(ConfigError, match="train.stages: at least one stage"):
        validate_grid(F.make_cfg(tmp_path, train={"stages": [], "epochs": {}}))


def test_empty_phase_is_a_data_error_before_any_training(tmp_path) -> None:
    prep = F.FakePrepared([F.make_domain("A"), F.make_domain("B", drop_phase="p1")], fingerprint="fake-empty")
    cfg = F.make_cfg(tmp_path, prep)
    with pytest.raises(DataError, match="domain 'B': phase 'p1' has no examples"):
        build_grid(cfg, progress=False)
    assert not (tmp_path / "reg").exists()


def test_unknown_base_builder_fails_early(tmp_path) -> None:
    cfg = F.make_cfg(tmp_path, base={"model": "tiny_qwen9()"})
    with pytest.raises(UnknownNameError, match=r"tiny_qwen3\(\)"):
        validate_grid(cfg)
    with pytest.raises(UnknownNameError, match=r"tiny_qwen3\(\)"):
        build_grid(cfg, progress=False)  # without the pass, the base fails before any stage is planned


def test_nan_loss_stops_with_training_error_and_keeps_last_good(tmp_path) -> None:
    cfg = F.make_cfg(tmp_path, F.FakePrepared([F.make_domain("A")], fingerprint="fake-nan"))
    F.NAN_AT.add(("A", "p1"))
    try:
        with pytest.raises(TrainingError, match="toy/A/p1"):
            build_grid(cfg, progress=False)
    finally:
        F.NAN_AT.clear()
    reg = open_registry(cfg.registry)
    assert list(reg.query(paradigm="toy")["period"]) == ["pretrain"]
