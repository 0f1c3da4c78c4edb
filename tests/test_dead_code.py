"""No function, method, class or property of mmgrid/ that nothing uses (vulture, a dead-code finder).

A definition counts as used when its name is used anywhere in mmgrid/, tests/, bench/, scripts/ or
analysis/ (vulture's static scan), or appears in docs/*.md or README.md (the documented Python API).
What is reached only by name at run time is listed below with the mechanism that reaches it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

vulture = pytest.importorskip("vulture", reason="the dead-code finder comes with the dev extra (pip install -e .[dev])")

REPO = Path(__file__).resolve().parent.parent
SCANNED = ("mmgrid", "tests", "bench", "scripts", "analysis")
KINDS = ("function", "method", "class", "property")
MIN_CONFIDENCE = 60

# decorators that register what they decorate in a table read by name (the table is the use)
IGNORE_DECORATORS = [
    "@register",  # merge methods (mmgrid/merge/methods/registry.py) and regularizers (train/regularizers/names.py)
    "@register_paradigm",  # the paradigm table (mmgrid/paradigms/registration.py)
    "@paradigm_knobs",  # a paradigm's knob declaration (mmgrid/paradigms/params.py)
]
# names reached through an interface or by a string, with the mechanism
IGNORE_NAMES = {
    "__getattr__": "a package's lazy attributes (PEP 562), called by the import system",
    "update_bound": "the Method interface (mmgrid/merge/methods/base.py), called through the base class",
    "forward": "torch.nn.Module.forward, called by Module.__call__",
    "*_job": "executor jobs, named by a 'module:function' string (mmgrid/exec/job.py)",
}


def unused(paths: list[Path], docs_text: str = "") -> list[str]:
    """``file:line: kind 'name'`` of every definition under ``paths[0]`` that nothing in ``paths`` uses
    and whose name ``docs_text`` does not mention."""
    v = vulture.Vulture(ignore_names=list(IGNORE_NAMES), ignore_decorators=IGNORE_DECORATORS)
    v.scavenge([str(p) for p in paths])
    root = paths[0].resolve()
    out = []
    for item in v.get_unused_code(min_confidence=MIN_CONFIDENCE):
        path = Path(item.filename).resolve()
        if item.typ not in KINDS or root not in path.parents:
            continue
        if docs_text and re.search(rf"\b{re.escape(item.name)}\b", docs_text):
            continue
        out.append(f"{path.relative_to(root.parent)}:{item.first_lineno}: {item.typ} {item.name!r}")
    return out


def test_nothing_in_mmgrid_is_unused() -> None:
    docs = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    found = unused([REPO / d for d in SCANNED if (REPO / d).is_dir()], docs)
    assert not found, ("definitions nothing uses (delete them, or add the mechanism that reaches them to "
                       "IGNORE_NAMES / IGNORE_DECORATORS in tests/test_dead_code.py):\n" + "\n".join(found))


def test_the_finder_reports_a_dead_function_and_spares_what_is_used(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(
        "def used():\n    return 1\n\n\ndef dead():\n    return used()\n\n\n"
        "def documented():\n    return 2\n\n\ndef stage_job():\n    return 3\n\n\n"
        "class Dead:\n    pass\n\n\n@register\nclass Registered:\n    pass\n")
    other = tmp_path / "tests"
    other.mkdir()
    (other / "test_x.py").write_text("from pkg.mod import used\n")
    found = unused([pkg, other], docs_text="call `documented()`")
    names = sorted(line.rsplit(" ", 1)[1] for line in found)
    assert names == ["'Dead'", "'dead'"], found
