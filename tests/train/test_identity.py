"""A stage's id is a function of content: the prepared data's content, the training settings and
knobs, the identity version; never how ``data.root`` is spelled, never a knob read only at
evaluation. A registry built under the earlier identity (version 1: the data settings as
spelled and every knob) is refused by ``build`` before anything trains and mapped onto today's
ids by ``mmgrid registry remap-ids`` without training; studies run on a registry that holds both."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mmgrid.configtools import stable_hash
from mmgrid.data.dataset import content_fingerprint
from mmgrid.paradigms import paradigm_names
from tests.identity_v1 import put_under_identity_v1
from mmgrid.paradigms.params import EVAL, KNOBS, TRAIN, WHERE, training_params

paradigm_names()  # every paradigm module loaded (each declares its knobs when imported)

REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- knobs


def test_every_declared_knob_has_a_use_and_eval_knobs_leave_the_identity() -> None:
    for name, cls in KNOBS.items():
        assert set(cls.uses().values()) <= {TRAIN, EVAL, WHERE}, name
    text = {"embedder": "/models/a", "embed_cache": "/tmp/x", "num_beams": 9, "max_history": 7}
    assert training_params("text", text) == {"max_history": 7}
    assert training_params("sasrec", {"user_batch": 5, "hidden": 32}) == {"hidden": 32}
    # the semantic-ID codes are made from the embedder when the model is built: a training knob there
    assert training_params("semid", {"embedder": "/models/a", "rank_batch": 3}) == {"embedder": "/models/a"}
    # a paradigm without a declaration (a plug-in) keeps every knob
    assert training_params("no-such-paradigm", {"a": 1}) == {"a": 1}


def test_the_knobs_training_reads_are_declared_training_knobs() -> None:
    """What each paradigm's build / examples / collate / loss read (by reading the source) is TRAIN."""
    read_in_training = {"text": {"max_history", "max_title_tokens"},
                        "sasrec": {"hidden", "layers", "heads", "dropout", "max_len", "item_bias"},
                        "emb": {"temperature", "n_negatives", "max_item_tokens", "max_history", "all_positions"},
                        "semid": {"embedder", "levels", "codebook_size", "max_history", "max_text_tokens"}}
    for name, knobs in read_in_training.items():
        uses = KNOBS[name].uses()
        assert {k: uses[k] for k in knobs} == {k: TRAIN for k in knobs}, name


# --------------------------------------------------------------------------- content fingerprint


def _manifest(root: str, paths: tuple[str, str], kcore: int = 5, sha: str = "aa") -> dict[str, Any]:
    return {"format": 1, "config": {"root": root, "kcore": kcore, "strict": False, "max_history": 20},
            "inputs": {paths[0]: {"sha256": sha, "size": 1, "mtime_ns": 1},
                       paths[1]: {"sha256": "bb", "size": 2, "mtime_ns": 2}},
            "fingerprint": stable_hash(root)}


def test_content_fingerprint_ignores_where_the_files_are_and_sees_what_they_hold() -> None:
    a = content_fingerprint(_manifest("runs/q/world", ("/home/u/runs/q/world/r.jsonl", "/home/u/runs/q/world/m.jsonl")))
    assert a == content_fingerprint(_manifest("/mnt/disk2/world/", ("/mnt/disk2/world/r.jsonl", "/mnt/disk2/world/m.jsonl")))
    assert a != content_fingerprint(_manifest("runs/q/world", ("/x/r.jsonl", "/x/m.jsonl"), sha="cc"))
    assert a != content_fingerprint(_manifest("runs/q/world", ("/x/r.jsonl", "/x/m.jsonl"), kcore=3))


# --------------------------------------------------------------------------- a tiny real grid

OVERRIDES = ["world.n_domains=2", "world.scale=0.2", "paradigms=[sasrec]", "variants=[{name: default}]",
             "base.lm_epochs=0", "base.vocab_size=512", "train.max_examples=32", "train.device=cpu",
             "train.threads=1", "train.seeds=[0]", "exec.workers=1", "sweeps.temporal.paradigm=sasrec"]


def _cfg(root: str, prepared: Path, registry: Path, extra: list[str] | None = None) -> Any:
    from mmgrid.config import load_grid

    return load_grid("demo", OVERRIDES + [f"data.root={root}", f"prepared={prepared}", f"registry={registry}",
                                          *(extra or [])])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.train.build import build_grid

    tmp = tmp_path_factory.mktemp("ids")
    cfg = _cfg(str(tmp / "world"), tmp / "prepared", tmp / "registry")
    write_world(cfg.data.root, cfg.world)
    prepare(cfg, log=lambda _m: None)
    res = build_grid(cfg, progress=False)
    return {"tmp": tmp, "cfg": cfg, "res": res}


def _plan(cfg: Any) -> Any:
    from mmgrid.runtime.context import forget
    from mmgrid.runtime.plan import plan_grid

    forget()  # the per-process handles are keyed by path: open what this config names
    return plan_grid(cfg)


@pytest.mark.slow
def test_moving_or_respelling_the_data_keeps_every_id(tiny: dict[str, Any], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from mmgrid.data.pipeline import prepare
    from mmgrid.train.build import build_grid

    base, res = tiny["tmp"], tiny["res"]
    assert len(res.trained) == len(res.stages) == 2 * 3
    moved = tmp_path / "other-disk" / "world"
    shutil.copytree(base / "world", moved)  # another folder, the same files
    (tmp_path / "link").symlink_to(moved, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    for i, root in enumerate(["other-disk/world/", "link", str(moved)]):  # relative + slash, a symlink, absolute
        cfg = _cfg(root, tmp_path / f"prepared-{i}", base / "registry")
        prepare(cfg, log=lambda _m: None)
        plan = _plan(cfg)
        assert plan.base_id == res.base_id and plan.ids == res.ids, root
        again = build_grid(cfg, progress=False)
        assert again.trained == [] and len(again.cached) == len(res.stages), root


@pytest.mark.slow
def test_an_eval_only_knob_keeps_the_ids_and_a_training_knob_changes_them(tiny: dict[str, Any]) -> None:
    from mmgrid.runtime.context import open_prepared, open_registry
    from mmgrid.runtime.plan import plan_stages

    base, res = tiny["tmp"], tiny["res"]
    reg = open_registry(base / "registry")

    def ids(extra: list[str]) -> dict:
        cfg = _cfg(str(base / "world"), base / "prepared", base / "registry", extra)
        prepared = open_prepared(cfg.prepared)
        return {(s.paradigm, s.domain, s.stage): s.id
                for s in plan_stages(cfg, reg, res.base_id, list(prepared.domains), prepared.fingerprint)}

    built = {(p, d, st): i for (_, p, d, st), i in res.ids.items()}
    assert ids(["paradigm_params={sasrec: {user_batch: 7, exclude_history: false}}"]) == built
    changed = ids(["paradigm_params={sasrec: {hidden: 32}}"])
    assert set(changed) == set(built) and not set(changed.values()) & set(built.values())


# ------------------------------------------------------------ identity version 1 (the earlier ids)


def _mmgrid(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MMGRID_QUIET": "1"}
    env.pop("MMGRID_REGISTRY", None)
    return subprocess.run([sys.executable, "-m", "mmgrid", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_a_registry_of_earlier_ids_is_refused_by_build_and_remapped_without_training(tiny: dict[str, Any],
                                                                                     tmp_path: Path) -> None:
    from mmgrid.registry import Registry
    from mmgrid.runtime.context import forget

    base, res = tiny["tmp"], tiny["res"]
    cfg = _cfg(str(base / "world"), base / "prepared", tmp_path / "old-registry")
    forget()
    src = Registry.open(base / "registry")
    old = Registry.open(tmp_path / "old-registry")
    mapping = put_under_identity_v1(cfg, src, old)
    assert len(mapping) == len(res.stages) + 1 and not set(mapping) & set(mapping.values())
    args = [*OVERRIDES, f"data.root={base / 'world'}", f"prepared={base / 'prepared'}",
            f"registry={tmp_path / 'old-registry'}"]

    refused = _mmgrid("build", "demo", "--no-progress", *args, cwd=tmp_path)
    assert refused.returncode != 0 and "remap-ids" in refused.stderr, refused.stderr[-2000:]
    assert sorted(p.stem for p in (tmp_path / "old-registry" / "manifests").glob("*/*.json")) == sorted(mapping)

    dry = _mmgrid("registry", "remap-ids", "demo", "--dry-run", *args, cwd=tmp_path)
    assert dry.returncode == 0 and f"would map {len(mapping)} checkpoint(s)" in dry.stdout, dry.stdout + dry.stderr
    done = _mmgrid("registry", "remap-ids", "demo", *args, cwd=tmp_path)
    assert done.returncode == 0 and f"mapped {len(mapping)} checkpoint(s)" in done.stdout, done.stdout + done.stderr
    again = _mmgrid("registry", "remap-ids", "demo", *args, cwd=tmp_path)
    assert "mapped 0 checkpoint(s)" in again.stdout  # idempotent

    built = _mmgrid("build", "demo", "--no-progress", *args, cwd=tmp_path)
    assert built.returncode == 0 and "(0 trained," in built.stdout, built.stdout + built.stderr[-2000:]
    reg = Registry.open(tmp_path / "old-registry")
    for old_id, new_id in mapping.items():  # both ids resolve, to the same tensors; lineage names the old one
        assert reg.has(old_id) and reg.has(new_id)
        assert reg.get(new_id).blobs == reg.get(old_id).blobs and reg.get(new_id).meta["same_as"] == old_id
    verify = _mmgrid("registry", "verify", "--registry", str(tmp_path / "old-registry"), cwd=tmp_path)
    assert verify.returncode == 0 and f"warning: {len(mapping)} groups" in verify.stdout, verify.stdout


@pytest.mark.slow
def test_studies_pick_the_planned_ids_when_coordinates_repeat(tiny: dict[str, Any], tmp_path: Path) -> None:
    """Checkpoints under earlier ids, newer than the grid's own, share every coordinate with them:
    the temporal sweep and Table 2 still read the grid's planned checkpoints."""
    from mmgrid.registry import Registry
    from mmgrid.runtime.context import forget, open_prepared
    from mmgrid.runtime.plan import plan_grid
    from mmgrid.sweep.tables import table2_ci
    from mmgrid.sweep.temporal import sweep_domain

    base, res = tiny["tmp"], tiny["res"]
    shutil.copytree(base / "registry", tmp_path / "registry", ignore=shutil.ignore_patterns("index.sqlite*"))
    cfg = _cfg(str(base / "world"), base / "prepared", tmp_path / "registry")
    forget()
    reg = Registry.open(tmp_path / "registry")
    mapping = put_under_identity_v1(cfg, reg, reg)  # the earlier ids, stored after the planned ones
    with pytest.raises(Exception, match="match 2 checkpoints"):
        reg.resolve({"paradigm": "sasrec", "domain": res.stages[0].domain, "period": "p1", "seed": 0})
    plan = plan_grid(cfg, reg)
    prepared = open_prepared(cfg.prepared)
    rows = sweep_domain(cfg, reg, prepared, res.stages[0].domain)
    assert rows and {r["p1_id"] for r in rows} | {r["p2_id"] for r in rows} <= plan.id_set
    _, _, cv = table2_ci(cfg, reg, sorted({s.domain for s in res.stages}))
    picked = {i for by_domain in cv.ids["sasrec"].values() for i in by_domain.values()}
    assert picked and picked <= plan.id_set and not picked & set(mapping)
