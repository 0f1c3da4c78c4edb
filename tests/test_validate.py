"""The one validation pass (mmgrid/validate.py): what it checks, and that every command that
reads a grid runs it before any job, so a bad grid writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgrid.cli import main
from mmgrid.config import load_grid
from mmgrid.errors import ConfigError, UnknownNameError
from mmgrid.exec.validate import check_scale
from mmgrid.validate import REFUSED, validate_grid

BAD_VARIANT = "variants=[{name: x, regularizer: orbitt}]"


def test_the_pass_includes_the_scale_warnings(tmp_path: Path) -> None:
    cfg = load_grid("amazon2023", [f"data.root={tmp_path}"])
    warnings = validate_grid(cfg)
    scale = check_scale(cfg)
    tail = warnings[-len(scale):]
    assert scale and all(w.startswith(s) for w, s in zip(tail, scale))  # the at-scale checks come last
    assert any("no raw files yet" in w for w in warnings)
    # the ones `mmgrid build` refuses say so, and name the preflight check (mmgrid/runtime/preflight.py)
    refused = {w.split("(preflight check: ")[1].split(")")[0] for w in tail if REFUSED in w}
    assert refused == {"data: nothing prepared yet", "folders"}
    assert [w for w in tail if REFUSED not in w] == [w for w in scale if w.startswith("data.domains")]
    hub = validate_grid(load_grid("demo", ["base.model=Qwen/Qwen3-0.6B"]))
    assert hub[0].startswith("base.model 'Qwen/Qwen3-0.6B' is a hub id")


@pytest.mark.parametrize("override, error, match", [
    (BAD_VARIANT, UnknownNameError, "unknown regularizer 'orbitt'.*Did you mean 'orbit'"),
    ("variants=[{name: x, regularizer: orbit}]", ConfigError, r"variants\[0\]\.params.*epsilon"),
    ("paradigms=[emb, txet]", UnknownNameError, "unknown paradigm 'txet'"),
    ("base.model=tiny_qwen9()", UnknownNameError, r"known: tiny_qwen3\(\), tiny_qwen3_wide\(\)"),
    ("base.model=no such model", ConfigError, "neither a named builder"),
    ("sweeps.cross_domain.methods={ties: {density: 2.0}}", ConfigError, "density"),
    ("sweeps.cross_domain.bases=[original, newest]", ConfigError, "unknown base 'newest'"),
])
def test_bad_grids_are_refused_with_named_errors(override: str, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        validate_grid(load_grid("demo", [override]))


@pytest.mark.parametrize("argv", [
    ["build", "demo"],
    ["eval", "demo"],
    ["sweep", "temporal", "demo"],
    ["sweep", "cross-domain", "demo"],
    ["predict-lambda", "demo"],
    ["report", "demo", "--out", "OUT"],
    ["demo", "--out", "OUT"],
])
def test_every_command_runs_the_pass_before_any_job(argv: list[str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    paths = [f"data.root={tmp_path / 'world'}", f"prepared={tmp_path / 'prepared'}",
             f"registry={tmp_path / 'registry'}"]
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main([*argv, BAD_VARIANT, *paths]) == 2
    assert "unknown regularizer 'orbitt'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, nothing trained


@pytest.mark.parametrize(("override", "words"), [
    ("paradigm_params.emb.nope=1", ["paradigm_params.emb.nope", "unknown parameter"]),
    ("paradigm_params.text.popularity_gamma=.nan", ["paradigm_params.text.popularity_gamma", "finite"]),
    ("paradigm_params.bogus.x=1", ["bogus"]),
    ("data.min_date=2022-13-45", ["data.min_date", "YYYY-MM-DD"]),
])
def test_paradigm_params_and_min_date_are_checked_before_any_job(override, words):
    """Paradigm knobs (names, types, finite numbers) and data.min_date fail in the
    validation pass, not when a job first uses them."""
    from mmgrid.config import load_grid
    from mmgrid.errors import MmgridError
    from mmgrid.validate import validate_grid

    with pytest.raises(MmgridError) as err:
        validate_grid(load_grid("demo", [override]))
    for w in words:
        assert w in str(err.value)


def test_an_impossible_date_in_a_grid_file_is_named(tmp_path):
    from mmgrid.config import load_grid
    from mmgrid.errors import ConfigError

    f = tmp_path / "g.yaml"
    f.write_text("name: g\ndata:\n  min_date: 2022-13-45\n")
    with pytest.raises(ConfigError, match="YYYY-MM-DD"):
        load_grid(f)


BUILTIN_PARADIGMS = ("text", "semid", "emb", "sasrec")


def _paradigm_defaults() -> dict:
    """Every built-in paradigm's knobs (test modules register fake paradigms of their own; they are
    not in the table)."""
    from mmgrid.paradigms import get_paradigm

    return {n: dict(get_paradigm(n).defaults) for n in BUILTIN_PARADIGMS}


def test_every_paradigm_knob_has_a_range_row_and_its_default_is_inside():
    """The range table covers every knob of every paradigm's DEFAULTS (a new knob
    gets its one-line row in mmgrid/paradigms/params.py), and no default is refused."""
    from mmgrid.paradigms.params import CROSS_CHECKS, RANGES, accepts

    defaults = _paradigm_defaults()
    assert set(RANGES) == set(defaults)
    for name, d in defaults.items():
        assert set(RANGES[name]) == set(d), (name, set(d) ^ set(RANGES[name]))
        for key, value in d.items():
            assert accepts(RANGES[name][key], value), (name, key, value)
        assert all(rule(d) for rule, _ in CROSS_CHECKS.get(name, []))


@pytest.mark.parametrize(("override", "words"), [
    ("paradigm_params.text.num_beams=0", ["paradigm_params.text.num_beams: 0 is out of range", "an integer >= 1"]),
    ("paradigm_params.semid.levels=-1", ["paradigm_params.semid.levels: -1", ">= 1"]),
    ("paradigm_params.semid.codebook_size=1", ["paradigm_params.semid.codebook_size: 1", ">= 2"]),
    ("paradigm_params.semid.align_ratio=-0.5", ["paradigm_params.semid.align_ratio: -0.5", ">= 0"]),
    ("paradigm_params.emb.temperature=0", ["paradigm_params.emb.temperature: 0.0", "> 0"]),
    ("paradigm_params.emb.n_negatives=-2", ["paradigm_params.emb.n_negatives: -2", ">= -1"]),
    ("paradigm_params.sasrec.dropout=1", ["paradigm_params.sasrec.dropout: 1.0", ">= 0 and < 1"]),
    ("paradigm_params.sasrec.heads=3", ["paradigm_params.sasrec: hidden=64 is not divisible by heads=3"]),
    ("paradigm_params.text.beam_combine=mean", ["paradigm_params.text.beam_combine: 'mean' is not accepted",
                                                "one of 'weighted', 'best'"]),
    ("paradigm_params.semid.embed_cache=5", ["paradigm_params.semid.embed_cache: 5 is not accepted", "null or"]),
    ("paradigm_params.text.embedder=", ["paradigm_params.text.embedder", "non-empty string"]),
])
def test_paradigm_knob_ranges_are_named_before_any_job(override, words):
    from mmgrid.config import load_grid
    from mmgrid.errors import ConfigError
    from mmgrid.validate import validate_grid

    with pytest.raises(ConfigError) as err:
        validate_grid(load_grid("demo", [override]))
    for w in words:
        assert w in str(err.value)
    assert "Fix the value" in str(err.value)


def test_knob_ranges_accept_their_edges():
    from mmgrid.config import load_grid
    from mmgrid.validate import validate_grid

    validate_grid(load_grid("demo", ["paradigm_params.emb.n_negatives=-1", "paradigm_params.sasrec.layers=0",
                                     "paradigm_params.text.max_new_tokens=0", "paradigm_params.semid.codebook_size=2",
                                     "paradigm_params.sasrec.dropout=0", "paradigm_params.semid.align_ratio=0"]))


def test_resolve_params_checks_ranges_for_a_paradigm_built_directly():
    """A paradigm built from Python (no validation pass) still refuses an out-of-range knob."""
    from mmgrid.errors import ConfigError
    from mmgrid.paradigms.params import resolve_params

    d = _paradigm_defaults()["text"]
    with pytest.raises(ConfigError, match="paradigm_params.text.num_beams: 0 is out of range"):
        resolve_params({"num_beams": 0}, d, "paradigm_params.text")
    assert resolve_params({"num_beams": 2}, d, "paradigm_params.text")["num_beams"] == 2
