"""Code and docs say what is: no issue numbers, no commit hashes in prose, no file outside the repository.

Scanned: every ``.py`` under mmgrid/, tests/, bench/ and scripts/ outside hidden folders and installed
packages (virtual environments such as bench/.venv-mergekit hold other projects' code), and README.md and docs/*.md. How mmgrid
came to be lives in CHANGELOG.md and in the benchmarks' records (bench/results/), which are not scanned.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCANNED_CODE = ("mmgrid", "tests", "bench", "scripts")

# (what, pattern); each names a kind of history or an outside reference
RULES: list[tuple[str, re.Pattern[str]]] = [
    ("an issue number", re.compile(r"\bissues? #?\d+\b", re.I)),
    # the names are split so that this file does not itself cite what it forbids
    ("a file outside the repository", re.compile(r"\bST" r"YLE\.md\b|\bLAY" r"ERS\.md\b|\.\./sha" r"red/|\bsha" r"red/papers\b")),
    ("a paper by the local numbering", re.compile(r"\bpapers? 00\d\b")),
    ("a commit", re.compile(r"\bcommit [0-9a-f]{7,40}\b|\b(main|master) at [0-9a-f]{7,40}\b")),
]
THIS = Path(__file__).resolve()
# (file, what) -> why a match there is a fact of what the file does, not a story
ALLOWED: dict[tuple[str, str], str] = {
    ("bench/train_eval.py", "a commit"): "its --baseline default is the commit the benchmark checks out and times",
    ("bench/train_eval_cell.py", "a commit"): "it imports from that baseline commit's module layout too",
    ("tests/data/test_world_plant.py", "a commit"): "the pinned file hashes are what that commit's code wrote",
}


def findings(paths: list[Path]) -> list[str]:
    """``file:line: what`` for every line of ``paths`` that a rule of :data:`RULES` matches."""
    out = []
    for path in paths:
        name = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            out += [f"{name}:{n}: {what}: {line.strip()[:120]}"
                    for what, rx in RULES if rx.search(line) and (name, what) not in ALLOWED]
    return out


def _installed(path: Path) -> bool:
    """Whether ``path`` lies in a hidden folder (a virtual environment such as .venv or CI's
    bench/.venv-mergekit, a cache) or in an installed package: other projects' code, not mmgrid's."""
    parts = path.relative_to(REPO).parts[:-1]
    return any(part.startswith(".") or part == "site-packages" for part in parts)


def scanned() -> list[Path]:
    code = [p for d in SCANNED_CODE if (REPO / d).is_dir() for p in sorted((REPO / d).rglob("*.py"))
            if not _installed(p) and p.resolve() != THIS]
    return code + [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_code_and_docs_carry_no_history_or_outside_reference() -> None:
    found = findings(scanned())
    assert not found, ("code and docs say what is (history goes to CHANGELOG.md or a benchmark's record under "
                       "bench/results/):\n" + "\n".join(found))


def test_virtual_environments_are_not_scanned() -> None:
    assert _installed(REPO / "bench/.venv-mergekit/lib/python3.11/site-packages/dill/_dill.py")
    assert _installed(REPO / ".venv/lib/python3.11/site-packages/x.py")
    assert _installed(REPO / "tests/vendored/site-packages/x.py")
    assert not _installed(REPO / "bench/merge.py")
    assert not _installed(REPO / "mmgrid/merge/mergekit/oracle.py")


def test_each_rule_catches_its_kind(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('"""Fixed in issue 27."""\n# see ST' 'YLE.md\n# MMGRid (paper 004) Eq. 3\n# since commit 3114acf0\n'
                   '# MMGRid Eq. 10: theta_t1 + lambda (theta_t2 - theta_t1)\n')
    kinds = [line.split(": ")[1] for line in findings([bad])]
    assert kinds == ["an issue number", "a file outside the repository", "a paper by the local numbering", "a commit"]
