"""The type checker (mypy, configured in pyproject.toml's ``[tool.mypy]``) and the dead-code finder
(vulture, with the reasons of ``tests/vulture_allowlist.txt``) pass over ``mmgrid/``.

Both tools come with the ``dev`` extra; where one is not installed its tests skip, saying so.
Each gate is also shown to fail: mypy on a module with a type error, vulture on a function nothing calls
and on an allow-list entry that matches nothing.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "tests" / "vulture_allowlist.txt"
MIN_CONFIDENCE = 60  # vulture's confidence of an unused function, class, method or variable

needs_mypy = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is not installed (pip install -e '.[dev]')")
needs_vulture = pytest.mark.skipif(importlib.util.find_spec("vulture") is None,
                                   reason="vulture is not installed (pip install -e '.[dev]')")


def _mypy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
@needs_mypy
def test_mypy_passes_over_mmgrid() -> None:
    """``mypy`` (files = mmgrid, check_untyped_defs) finds no error."""
    res = _mypy()
    assert res.returncode == 0, f"mypy found errors:\n{res.stdout}{res.stderr}"
    assert "Success" in res.stdout


@needs_mypy
def test_mypy_fails_on_a_type_error(tmp_path: Path) -> None:
    """The same configuration reports a wrong argument type with its line (the gate can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(n: int) -> int:\n    return n\n\n\nf('three')\n")
    res = _mypy("--cache-dir", str(tmp_path / "cache"), str(bad), cwd=tmp_path)
    assert res.returncode == 1
    assert "bad.py:5: error" in res.stdout and "[arg-type]" in res.stdout


@dataclass(frozen=True)
class Allowed:
    path: str  # fnmatch glob over the finding's file, relative to the repository
    name: str  # fnmatch glob over the unused name
    reason: str
    line: int


def read_allowlist(text: str) -> list[Allowed]:
    """Entries ``PATH-GLOB NAME-GLOB -- REASON``; comments (#) and blank lines skipped. A line
    without both globs and a reason raises ValueError naming it."""
    out = []
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        spec, sep, reason = line.partition(" -- ")
        globs = spec.split()
        if not sep or len(globs) != 2 or not reason.strip():
            raise ValueError(f"vulture allow-list line {no}: {raw!r}; write PATH-GLOB NAME-GLOB -- REASON")
        out.append(Allowed(globs[0], globs[1], reason.strip(), no))
    return out


def findings(paths: list[Path], root: Path) -> list[tuple[str, str, str, int]]:
    """(file relative to ``root``, unused name, kind, line) of every vulture finding."""
    import vulture  # lazy: an optional dev tool; the test skips without it

    v = vulture.Vulture()
    v.scavenge([str(p) for p in paths])
    out = []
    for item in v.get_unused_code(min_confidence=MIN_CONFIDENCE):
        rel = Path(item.filename).resolve().relative_to(root.resolve()).as_posix()
        out.append((rel, item.name, item.typ, item.first_lineno))
    return out


def unlisted(found: list[tuple[str, str, str, int]], allowed: list[Allowed]) -> tuple[list[str], list[Allowed]]:
    """(findings no entry covers, entries that cover no finding)."""
    used: set[Allowed] = set()
    left = []
    for path, name, kind, line in found:
        hits = [a for a in allowed if fnmatch.fnmatchcase(path, a.path) and fnmatch.fnmatchcase(name, a.name)]
        used.update(hits)
        if not hits:
            left.append(f"{path}:{line}: unused {kind} {name!r}")
    return left, [a for a in allowed if a not in used]


@needs_vulture
def test_dead_code_finder_passes_over_mmgrid() -> None:
    """Every vulture finding over mmgrid/ is allow-listed with its reason, and every entry still covers one."""
    allowed = read_allowlist(ALLOWLIST.read_text())
    left, stale = unlisted(findings([ROOT / "mmgrid"], ROOT), allowed)
    assert not left, ("code nothing uses (remove it, or add `PATH-GLOB NAME -- reason` to "
                      f"{ALLOWLIST.relative_to(ROOT)}):\n" + "\n".join(left))
    assert not stale, "allow-list entries that match no finding (delete them):\n" + "\n".join(
        f"line {a.line}: {a.path} {a.name}" for a in stale)


@needs_vulture
def test_dead_code_finder_fails_on_an_unused_function(tmp_path: Path) -> None:
    """A function nothing calls is a finding; an entry covers it; an entry for nothing is stale."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text(textwrap.dedent("""\
        def used() -> int:
            return 1


        def forgotten() -> int:
            return 2


        print(used())
        """))
    found = findings([pkg], tmp_path)
    assert [(p, n, k) for p, n, k, _ in found] == [("pkg/mod.py", "forgotten", "function")]
    left, stale = unlisted(found, [])
    assert left == ["pkg/mod.py:5: unused function 'forgotten'"] and stale == []
    entry = Allowed("pkg/*.py", "forgotten", "called by name", 1)
    ghost = Allowed("pkg/*.py", "vanished", "removed long ago", 2)
    assert unlisted(found, [entry, ghost]) == ([], [ghost])


def test_allowlist_entries_need_a_reason() -> None:
    assert read_allowlist("# c\n\nmmgrid/a.py f -- why\n") == [Allowed("mmgrid/a.py", "f", "why", 3)]
    for bad in ("mmgrid/a.py f\n", "mmgrid/a.py f -- \n", "mmgrid/a.py -- why\n"):
        with pytest.raises(ValueError, match="line 1"):
            read_allowlist(bad)
