"""A report that fails says so: a failing section stops it (or, --keep-going, is marked and still exits
non-zero); a full disk or a failing section never leaves a half-written report under a final name."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import mmgrid.cli.sweep as commands
import mmgrid.render.report as report
import mmgrid.render.report_files as report_files
import mmgrid.sweep.study_results as sr
from mmgrid.cli import main
from mmgrid.render.report import ReportIncomplete, write_report
from mmgrid.render.report_files import ReportWriteError
from mmgrid.sweep.study_results import ReportSectionError
from mmgrid.sweep.crossdomain import run_cross_domain
from sweep_fakes import DOMAINS, EvalCounter, fake_merge


def _baselines(reg) -> None:
    for i, d in enumerate(DOMAINS):
        cid = reg.resolve({"paradigm": "fakelin", "domain": d, "period": "p2"})
        reg.record_eval(cid, "test", "all", {"recall@10": 0.1 + i / 100, "ndcg@10": 0.05 + i / 100,
                                             "recall@20": 0.2, "ndcg@20": 0.07}, extra={"eval_domain": d})


@pytest.fixture()
def small(grid):
    cfg, reg, prep = grid
    cfg.paradigms = ["fakelin"]
    _baselines(reg)
    return cfg, reg, prep


def _boom(*a, **k):
    raise RuntimeError("boom in the cross-domain study")


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())} if out.exists() else {}


def test_a_failing_section_stops_the_report_before_anything_is_written(small, tmp_path, monkeypatch, capsys):
    cfg, reg, prep = small
    monkeypatch.setattr(sr, "cross_domain", _boom)
    out = tmp_path / "rep"
    with pytest.raises(ReportSectionError, match=r"Figures 3 and 4.*RuntimeError: boom.*--keep-going"):
        write_report(cfg, reg, prep, out, diagnostics=False)
    assert _files(out) == {}  # not even a staging folder
    assert "Traceback" in capsys.readouterr().err  # the cause is shown


def test_keep_going_writes_the_rest_marks_the_failure_and_still_fails(small, tmp_path, monkeypatch):
    cfg, reg, prep = small
    monkeypatch.setattr(sr, "cross_domain", _boom)
    out = tmp_path / "rep"
    with pytest.raises(ReportIncomplete, match="Figures 3 and 4"):
        write_report(cfg, reg, prep, out, diagnostics=False, keep_going=True)
    text = (out / "report.md").read_text()
    assert "This report is incomplete" in text
    section = text.split("## Figures 3 and 4")[1].split("## ")[0]
    assert "FAILED" in section and "RuntimeError: boom in the cross-domain study" in section
    # the other sections are there: Table 2's cells are the recorded values in %
    assert "| fakelin | 10.00 |" in text.split("## Table 2")[1].split("## ")[0]
    assert "## Figure 5" in text and [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def test_a_section_that_fails_to_render_is_named_too(small, tmp_path, monkeypatch):
    cfg, reg, prep = small

    def bad(rep, r):
        raise KeyError("no such column")

    monkeypatch.setitem(report.RENDERERS, "table2", bad)
    with pytest.raises(ReportSectionError, match="Table 2.*KeyError"):
        write_report(cfg, reg, prep, tmp_path / "rep", diagnostics=False)
    assert not (tmp_path / "rep" / "report.md").exists()
    with pytest.raises(ReportIncomplete, match="Table 2"):
        write_report(cfg, reg, prep, tmp_path / "rep", diagnostics=False, keep_going=True)
    assert "could not be drawn: KeyError" in (tmp_path / "rep" / "report.md").read_text()


def _full_disk_after(n_ok: int):
    """A write_bytes that writes ``n_ok`` files, then half of the next one and fails with ENOSPC."""
    real = report_files.write_bytes
    calls = []

    def write(path, data):
        calls.append(path)
        if len(calls) > n_ok:
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data)

    return write


def test_a_full_disk_leaves_the_previous_complete_report(small, tmp_path, monkeypatch):
    cfg, reg, prep = small
    run_cross_domain(cfg, reg, prep, evaluator_factory=EvalCounter(), merge_fn=fake_merge)  # figures 3 and 4
    out = tmp_path / "rep"
    write_report(cfg, reg, prep, out, diagnostics=False)
    before = _files(out)
    assert "report.md" in before and any(n.endswith(".png") for n in before)
    # new results, so that a new report would differ
    reg.record_eval(reg.resolve({"paradigm": "fakelin", "domain": "A", "period": "p2"}), "test", "all",
                    {"recall@10": 0.9, "ndcg@10": 0.8, "recall@20": 0.95, "ndcg@20": 0.85}, extra={"eval_domain": "A"})
    monkeypatch.setattr(report_files, "write_bytes", _full_disk_after(0))
    with pytest.raises(ReportWriteError, match=r"No space left on device.*previous report.*unchanged"):
        write_report(cfg, reg, prep, out, diagnostics=False)
    assert _files(out) == before  # byte for byte, and no staging folder left


def test_a_full_disk_while_drawing_a_figure_leaves_no_report(small, tmp_path, monkeypatch):
    cfg, reg, prep = small
    import matplotlib.figure

    def savefig(self, path, **kw):
        Path(path).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    run_cross_domain(cfg, reg, prep, evaluator_factory=EvalCounter(), merge_fn=fake_merge)
    out = tmp_path / "rep"
    with pytest.raises(ReportWriteError, match="No space left"):
        write_report(cfg, reg, prep, out, diagnostics=False, keep_going=True)  # a write failure is never "kept going"
    assert _files(out) == {}


def test_the_command_exits_non_zero_with_the_named_error(small, tmp_path, monkeypatch, capsys):
    cfg, reg, prep = small
    monkeypatch.setattr(commands, "open_study", lambda args: (cfg, reg, prep))
    monkeypatch.setattr(sr, "cross_domain", _boom)
    out = tmp_path / "rep"
    assert main(["report", "grid.yaml", "--out", str(out), "--no-diagnostics"]) == 2
    err = capsys.readouterr().err
    assert "mmgrid: error: report section 'Figures 3 and 4: cross-domain merging' failed" in err
    assert not (out / "report.md").exists()
    assert main(["report", "grid.yaml", "--out", str(out), "--no-diagnostics", "--keep-going"]) == 2
    assert "1 report section(s) failed" in capsys.readouterr().err and (out / "report.md").exists()
    monkeypatch.undo()
    monkeypatch.setattr(commands, "open_study", lambda args: (cfg, reg, prep))
    assert main(["report", "grid.yaml", "--out", str(out), "--no-diagnostics"]) == 0
    assert "FAILED" not in (out / "report.md").read_text()
