"""Docs that run: every ```bash / ```sh / ```python block of README.md and docs/*.md runs here,
in file order, against one quick demo (tests/workflow/conftest.py), or is marked on the line
before its fence as not runnable here, with the reason::

    <!-- not-runnable: paper scale (six Amazon categories, GPUs) -->

Each block runs in a scratch folder holding ``runs/demo`` (the quick demo) and ``grids/`` (the
packaged grids), with this checkout's ``mmgrid`` first on ``PATH``: shell blocks under
``bash -e`` (a closed pipe is fine, as at a prompt), Python blocks as a script of their own. A
deliberately broken block fails (``test_a_broken_example_fails``).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.workflow.conftest import REPO

pytestmark = pytest.mark.slow

RUNNABLE = {"bash": "sh", "sh": "sh", "shell": "sh", "console": "sh", "python": "py", "py": "py"}
FENCE = re.compile(r"^```(\w+)?[^\n]*$")
MARK = re.compile(r"^<!--\s*not-runnable:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str  # "sh" or "py"
    code: str
    skip: str | None  # the reason, when marked not runnable here

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path.name}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The shell and Python blocks of a Markdown file, in order.

    Raises:
        ValueError: a not-runnable mark without a reason, or a fence left open.
    """
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, (m.group(1) or "").lower()
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{start + 1}: a code fence is never closed")
        if lang in RUNNABLE:
            mark = MARK.match(lines[start - 1]) if start > 0 else None
            if mark is not None and not mark.group(1):
                raise ValueError(f"{path}:{start}: `not-runnable:` needs a reason")
            out.append(Block(path, start + 1, RUNNABLE[lang], "\n".join(lines[start + 1 : j]) + "\n",
                             mark.group(1) if mark else None))
        i = j + 1
    return out


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.fixture(scope="session")
def workspace(quick_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the docs' relative paths (runs/demo, grids/...) mean the quick demo."""
    ws = tmp_path_factory.mktemp("docs")
    (ws / "runs").mkdir()
    (ws / "runs" / "demo").symlink_to(quick_demo, target_is_directory=True)
    (ws / "grids").symlink_to(REPO / "grids", target_is_directory=True)
    shim = ws / ".bin"
    shim.mkdir()
    exe = shim / "mmgrid"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mmgrid "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return ws


def run_block(block: Block, ws: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MMGRID_QUIET": "1",
           "PATH": f"{ws / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("MMGRID_REGISTRY", None)
    if block.lang == "sh":
        cmd = ["bash", "-e", "-c", block.code]
    else:
        cmd = [sys.executable, "-c", block.code]
    return subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=timeout)


ALL = [b for f in doc_files() for b in blocks(f)]


@pytest.mark.parametrize("block", ALL, ids=[b.name for b in ALL])
def test_doc_block_runs(block: Block, workspace: Path) -> None:
    if block.skip:
        pytest.skip(f"not runnable here: {block.skip}")
    proc = run_block(block, workspace)
    assert proc.returncode == 0, (f"{block.name} failed (exit {proc.returncode}):\n{block.code}\n--- stdout\n"
                                  f"{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-3000:]}")


def test_a_broken_example_fails(workspace: Path, tmp_path: Path) -> None:
    doc = tmp_path / "broken.md"
    doc.write_text("# x\n\n```bash\nmmgrid query --registry runs/demo --no-such-flag\n```\n\n"
                   "```python\nfrom mmgrid.query import Grid\nGrid.open('runs/nowhere')\n```\n\n"
                   "<!-- not-runnable: shown only -->\n```sh\nexit 3\n```\n")
    found = blocks(doc)
    assert [b.lang for b in found] == ["sh", "py", "sh"] and found[2].skip == "shown only"
    assert run_block(found[0], workspace).returncode != 0
    assert run_block(found[1], workspace).returncode != 0
    good = tmp_path / "good.md"
    good.write_text("```bash\nmmgrid query --registry runs/demo --limit 1\n```\n")
    assert run_block(blocks(good)[0], workspace).returncode == 0


def test_a_mark_needs_a_reason_and_fences_close(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("<!-- not-runnable: -->\n```bash\ntrue\n```\n")
    with pytest.raises(ValueError, match="needs a reason"):
        blocks(doc)
    doc.write_text("```bash\ntrue\n")
    with pytest.raises(ValueError, match="never closed"):
        blocks(doc)


def test_readme_is_user_documentation() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert not re.search(r"\b[0-9a-f]{7,12}\b(?![0-9a-f])", re.sub(r"```.*?```", "", text, flags=re.S)), \
        "a commit hash (or id) in the README's prose"
    assert not re.search(r"\bissue \d+|\bsession\b|\bhelper\b", text, flags=re.I)
    lines = text.splitlines()
    fence = [i for i, ln in enumerate(lines) if ln.startswith("```")][:2]
    first = [ln for ln in lines[fence[0] + 1 : fence[1]] if ln.strip()]
    assert len(first) == 2 and "mmgrid demo" in first[0] and "pytest" in first[1]
    toc = text[: text.index("\n## ", text.index("## Contents"))] if "## Contents" in text else text
    assert "Querying a grid" in toc and "follow-up" in toc.lower()
    for quoted in re.findall(r"^## Findings.*?(?=^## )", text, flags=re.S | re.M):
        assert "another machine" in quoted.lower() and "interval" in quoted
