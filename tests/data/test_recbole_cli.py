"""RecBole atomic files as a source, the benchmark CSV source, and the `mmgrid world` / `prepare` commands."""

from __future__ import annotations

from pathlib import Path

from data_fixtures import HAND_META, HAND_REVIEWS, grid_yaml, write_jsonl
from mmgrid.cli import main
from mmgrid.config import load_grid
from mmgrid.data.pipeline import prepare


def _hand_rows() -> list[tuple[str, str, int]]:
    return [(r["user_id"], r["parent_asin"], r["timestamp"]) for r in HAND_REVIEWS]


def test_recbole_maps_to_same_format(tmp_path: Path) -> None:
    ds_dir = tmp_path / "atomic" / "toys"
    ds_dir.mkdir(parents=True)
    lines = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    lines += [f"{u}\t{i}\t5.0\t{t // 1000}" for u, i, t in _hand_rows()]
    (ds_dir / "toys.inter").write_text("\n".join(lines) + "\n")
    items = ["item_id:token\tname:token_seq\tbrand:token"]
    items += [f"{m['parent_asin']}\t{m['title']}\tAcme" for m in HAND_META if m["title"].strip()]
    (ds_dir / "toys.item").write_text("\n".join(items) + "\n")
    cfg = load_grid(grid_yaml(tmp_path, {"source": "recbole", "root": str(tmp_path / "atomic"), "kcore": 1,
                                         "recbole_text_field": "name"}))  # fmt: skip
    ds = prepare(cfg, log=lambda m: None)
    d = ds.domain("toys")
    assert d.item_titles == ["Alpha toy", "Beta toy", "Gamma toy", "Delta toy"]
    s = ds.stats().row(0, named=True)
    assert (s["users"], s["items"], s["interactions"], s["n_test"]) == (3, 4, 9, 2)
    assert ds.lm_text("train")  # item texts stand in for review text


def test_benchmark_csv_source(tmp_path: Path) -> None:
    root = tmp_path / "bench"
    root.mkdir()
    body = "\n".join(f"{u},{i},5.0,{t}," for u, i, t in _hand_rows())
    (root / "Toys.train.csv").write_text("user_id,parent_asin,rating,timestamp,history\n" + body + "\n")
    write_jsonl(root / "raw" / "meta_categories" / "meta_Toys.jsonl", HAND_META)
    cfg = load_grid(grid_yaml(tmp_path, {"source": "benchmark_csv", "root": str(root), "kcore": 1}))
    s = prepare(cfg, log=lambda m: None).stats().row(0, named=True)
    assert (s["users"], s["items"], s["interactions"], s["p_active"]) == (3, 4, 9, 0.5)


def test_cli_world_then_prepare(tmp_path: Path, capsys) -> None:
    world = tmp_path / "world"
    assert main(["world", "--out", str(world), "--seed", "1", "--domains", "2", "--scale", "0.6"]) == 0
    assert (world / "truth.json").exists()
    grid = grid_yaml(tmp_path, {"root": "unused"})
    out = tmp_path / "prep"
    assert main(["prepare", str(grid), "--out", str(out), f"data.root={world}", "data.kcore=3"]) == 0
    text = capsys.readouterr().out
    assert "Phones" in text and "Books" in text and "p_active" in text
    assert main(["prepare", str(grid), "--out", str(out), f"data.root={world}", "data.kcore=3"]) == 0
    assert "up to date" in capsys.readouterr().err
    assert main(["prepare", str(grid), "--out", str(out), "data.root=/nonexistent", "data.kcoer=3"]) == 2
    assert "unknown key 'kcoer'" in capsys.readouterr().err
