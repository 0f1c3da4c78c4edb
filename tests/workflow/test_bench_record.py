"""bench/record.py: a benchmark writes its own record (machine, load, command, output) and keeps
the earlier ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.workflow.conftest import REPO


def test_a_benchmark_record_keeps_the_earlier_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import record

    monkeypatch.setattr(record, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench/x.py", "--quick"])
    (tmp_path / "x.md").write_text("# as recorded before\n\nspeed-up 11.2x\n")
    with record.recorded("x"):
        print("speed-up 12.0x")
    with record.recorded("x"):
        print("speed-up 12.5x")
    text = (tmp_path / "x.md").read_text()
    assert capsys.readouterr().out == "speed-up 12.0x\nspeed-up 12.5x\n"  # still printed as it ran
    head, earlier = text.split("## Earlier records")
    assert "speed-up 12.5x" in head and "command: `python bench/x.py --quick`" in head
    assert "load average" in head and "CPUs" in head
    assert earlier.index("12.0x") < earlier.index("11.2x")  # newest first, nothing lost
    with pytest.raises(RuntimeError):  # a failed run writes nothing
        with record.recorded("y"):
            raise RuntimeError("boom")
    assert not (tmp_path / "y.md").exists()
    monkeypatch.setattr(sys, "argv", ["bench/x.py", "--child", "a"])  # a benchmark's own child process
    with record.recorded("z"):
        print("child")
    assert not (tmp_path / "z.md").exists()


def test_a_named_record_says_which_benchmark_wrote_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import record

    assert record.render("merge", "python bench/merge.py --only ties", "", "", "", 1.0).startswith("# bench/merge.py\n")
    named = record.render("calibration_own_world", "python bench/calibration.py --record calibration_own_world",
                          "", "", "", 1.0)
    assert named.startswith("# bench/calibration.py (calibration_own_world)\n")


def test_run_all_runs_every_benchmark_that_writes_a_record(tmp_path: Path) -> None:
    """bench/run_all.sh names every script of bench/ that writes a record (a benchmark added without it
    would not be re-run), and with BENCH_ONLY runs just the steps it names, in order."""
    import os
    import re
    import subprocess

    writers = sorted(p.stem for p in (REPO / "bench").glob("*.py")
                     if p.stem != "record" and re.search(r"\brecorded\(|\brun_recorded\(", p.read_text()))
    script = (REPO / "bench" / "run_all.sh").read_text()
    assert writers and [w for w in writers if f"bench/{w}.py" not in script] == []
    env = {**os.environ, "PYTHON": "echo", "BENCH_CACHE": str(tmp_path), "BENCH_ONLY": "sweep lambda_star_users"}
    out = subprocess.run(["bash", str(REPO / "bench" / "run_all.sh")], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    ran = [ln for ln in out.splitlines() if not ln.startswith("==")]
    assert ran == ["bench/sweep.py", f"bench/lambda_star_users.py --registry {tmp_path}/demo/registry"]
