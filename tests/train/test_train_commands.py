"""`mmgrid build` and the three forms of `mmgrid eval` through the CLI entry point."""

from __future__ import annotations

import yaml

import train_fakes as F
from mmgrid.cli import main
from mmgrid.runtime.context import open_registry, put_prepared


def _write_cfg(tmp_path) -> str:
    d = F.grid_dict(tmp_path)
    d["train"]["epochs"] = {"pretrain": 1, "p1": 1, "p2": 1}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(d))
    put_prepared(d["prepared"], F.FakePrepared([F.make_domain("A")], fingerprint="cli"))
    return str(path)


def test_build_then_eval_grid_checkpoint_and_recipe(tmp_path, capsys) -> None:
    cfg = _write_cfg(tmp_path)
    assert main(["build", cfg, "--no-progress", "--eval"]) == 0
    out = capsys.readouterr().out
    assert "3 stages (3 trained, 0 cached)" in out and "  toy  " in out and "  Most popular  " in out
    reg = open_registry(tmp_path / "reg")
    p1, p2 = (reg.query(paradigm="toy", period=p)["id"].iloc[0] for p in ("p1", "p2"))

    assert main(["build", cfg, "--no-progress"]) == 0
    assert "(0 trained, 3 cached)" in capsys.readouterr().out

    assert main(["eval", "--registry", str(tmp_path / "reg"), p2[:10], "--config", cfg]) == 0
    out = capsys.readouterr().out
    assert "recall@10=" in out and "non_active" in out
    assert len(reg.results(id=p2, split="test", group="all")) >= 2 * 5  # grid eval + this one

    recipe = tmp_path / "avg.yaml"
    recipe.write_text(yaml.safe_dump({"method": "average", "inputs": [p1, p2]}))
    assert main(["eval", "--recipe", str(recipe), "--registry", str(tmp_path / "reg"), "--config", cfg]) == 0
    assert "recipe" in capsys.readouterr().out
    res = reg.results(split="test", group="all")
    assert res["recipe_hash"].notna().any()

    assert main(["eval", cfg]) == 0
    assert "  toy  " in capsys.readouterr().out  # the console Table 2 (one line per domain and paradigm)


def test_eval_errors_are_one_line_named_errors(tmp_path, capsys) -> None:
    cfg = _write_cfg(tmp_path)
    assert main(["eval", cfg]) == 2  # nothing built yet
    assert "run `mmgrid build` first" in capsys.readouterr().err
    assert main(["eval"]) == 2


def test_evaluate_and_tabulate_evaluates_then_formats(tmp_path) -> None:
    from mmgrid.eval.grid import evaluate_and_tabulate
    from mmgrid.train.build import build_grid
    from mmgrid.train.regularizers import get_regularizer_class

    cfg = F.make_cfg(tmp_path, F.FakePrepared([F.make_domain("A")], fingerprint="table"),
                     train={"epochs": {"pretrain": 1, "p1": 1, "p2": 1}, "batch_size": 8, "lr": 0.01})
    build_grid(cfg, progress=False)
    table = evaluate_and_tabulate(cfg, progress=False)
    head = table.splitlines()[1].split()
    assert head == ["Domain", "Paradigm", "R@10", "N@10", "R@20", "N@20"]  # report.md's column order
    assert any(ln.startswith("A ") and "  toy  " in ln for ln in table.splitlines())
    assert "  Most popular  " in table and max(map(len, table.splitlines())) <= 120
    assert get_regularizer_class("orbit").name == "orbit"
