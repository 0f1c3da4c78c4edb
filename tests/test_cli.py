"""The `mmgrid` command's wiring: help, overrides anywhere on the line, named errors."""

from __future__ import annotations

import pytest

from mmgrid.cli import main


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    for cmd in ("world", "prepare", "build", "eval", "merge", "query", "lineage", "registry", "sweep",
                "predict-lambda", "report", "demo", "validate"):
        assert cmd in out


def test_overrides_change_the_validated_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "demo", "train.seed=7"]) == 0
    first = capsys.readouterr().out
    assert main(["validate", "demo", "train.seed=8"]) == 0
    assert capsys.readouterr().out != first  # the grid hash follows the override


def test_unknown_config_key_is_a_named_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "demo", "train.sed=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'sed'" in err and "Did you mean 'seed'" in err


def test_unknown_option_is_still_refused() -> None:
    with pytest.raises(SystemExit):
        main(["validate", "demo", "--no-such-flag"])


def test_report_takes_overrides_after_out(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    # an override after --out reaches the config: the missing prepared folder it names is reported
    rc = main(["report", "demo", "--out", str(tmp_path / "r"), f"prepared={tmp_path / 'nowhere'}",
               f"registry={tmp_path / 'registry'}"])  # never the checkout's runs/demo/registry
    assert rc == 2
    assert "nowhere" in capsys.readouterr().err


def test_no_module_imports_back_from_cli() -> None:
    """`mmgrid.cli` (its `__init__`, the argparse root) loads the command modules; they (and everything
    else but `__main__`) take shared helpers from `mmgrid.cli.context` and `mmgrid.cliargs`, never from the
    root that loads them."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "mmgrid"
    back = []
    for path in root.rglob("*.py"):
        if path.name == "__main__.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "mmgrid.cli" for n in names):
                back.append(str(path.relative_to(root)))
    assert back == []


def test_a_given_registry_reaches_the_grid_as_a_path_not_an_override(tmp_path, monkeypatch) -> None:
    """`--registry PATH` with a grid: the resolved path is set on the grid as it is, never written into a
    `registry=...` override and parsed back as YAML (which reads ` #...` as a comment); a `registry=`
    override the user gives still wins."""
    import argparse

    from mmgrid import configtools
    from mmgrid.cli.context import load_config

    odd = tmp_path / "runs #1" / "registry"
    (odd / "manifests").mkdir(parents=True)
    parsed: list[str] = []
    real = configtools.parse_override
    monkeypatch.setattr(configtools, "parse_override", lambda text: parsed.append(text) or real(text))
    given = argparse.Namespace(registry=str(odd), root=None)
    cfg = load_config("demo", ["train.seed=3"], given, command="test")
    assert cfg.registry == str(odd) and cfg.train.seed == 3
    assert parsed == ["train.seed=3"]
    other = tmp_path / "other"
    assert load_config("demo", [f"registry={other}"], given, command="test").registry == str(other)

