"""End to end on the real pipeline: synthetic world -> prepare -> build (all paradigms,
reduced sizes, plus an Orbit row for semid) -> evaluate -> the Table-2-style table."""

from __future__ import annotations

import pytest

from mmgrid.cli import main

pytestmark = pytest.mark.slow


def test_world_prepare_build_eval(tmp_path, capsys) -> None:
    from mmgrid.config import load_grid
    from mmgrid.eval.grid import evaluate_grid
    from mmgrid.eval.table import baseline_table
    from mmgrid.train.build import build_grid
    from mmgrid.runtime.context import open_registry

    world, prep, reg_root = tmp_path / "w", tmp_path / "prep", tmp_path / "reg"
    assert main(["world", "--out", str(world), "--domains", "2", "--scale", "0.5"]) == 0
    assert main(["prepare", "demo", f"data.root={world}", "data.lm_text_docs=600", "--out", str(prep)]) == 0
    cfg = load_grid("demo", [
        f"prepared={prep}", f"registry={reg_root}", f"data.root={world}", "train.threads=1",
        "train.epochs={pretrain: 1, p1: 1, p2: 1}", "train.max_examples=96", "base.lm_epochs=1",
        "eval.max_users=40", "eval.retention_docs=20", "train.seeds=[0]",  # one replicate (tests/train/test_seeds.py: several)
        "variants=[{name: default}, {name: orbit-sd-0.01, regularizer: orbit, "
        "params: {distance: sign, epsilon: 0.01}, paradigms: [semid]}]",
    ])
    res = build_grid(cfg, progress=False)
    domains = sorted({s.domain for s in res.stages})
    assert len(domains) == 2 and len(res.stages) == (4 + 1) * 2 * 3
    reg = open_registry(reg_root)
    for s in res.stages:
        if s.variant != "default":
            log = reg.get(s.id).meta["train_log"]
            assert log["max_distance_after_step"] <= 0.01
    summary = evaluate_grid(cfg, res, progress=False)
    assert set(summary.matrices) == {("emb", d) for d in domains}
    assert summary.base_text_loss == summary.base_text_loss  # finite
    table = baseline_table(reg, cfg.paradigms, domains, period="p2")
    for row in ("Text-grounded (BIGRec)", "SemID (LC-Rec)", "SemEmb (HLLM)", "SASRec", "Most popular"):
        assert f"  {row} " in table  # the console's Table 2: one line per domain and paradigm
    assert max(map(len, table.splitlines())) <= 120
