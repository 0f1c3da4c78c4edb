"""Every message, docstring and doc page that names a Python API (``mmgrid.pkg.name``) names one
that exists: each such dotted name in a string literal of mmgrid/ (messages, docstrings) and in
README.md and docs/*.md is imported (its longest importable module, then attributes).

Not Python names, and skipped: a string that *is* the dotted name (a key: an MLflow tag such as
``"mmgrid.key"``, a safetensors metadata key such as ``"mmgrid.extract_lora"``), a name
written as a tag (``mmgrid.parent.<role>``, "the ``mmgrid.key`` tag"), and the entry-point
groups plugins register through (``mmgrid.merge_methods``, :data:`mmgrid.plugins.GROUPS`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

from mmgrid.plugins import GROUPS

REPO = Path(__file__).resolve().parent.parent
NAME = re.compile(r"(?<![\w/.-])mmgrid(?:\.[A-Za-z_]\w*)+")
TAG_AFTER = re.compile(r"(\.<|`*\s+tags?\b)")
# the MLflow tags `mmgrid export mlflow` writes (mmgrid/render/mlflow_export.py; docs/report.md lists them):
# a checkpoint's id, kind, coordinates, seed and method, a study's keys, and mmgrid.parent.<role>
MLFLOW_TAGS = {f"mmgrid.{k}" for k in ("id", "kind", "paradigm", "domain", "period", "variant", "seed", "method",
                                       "key", "study", "recipe_hash")}


def exists(name: str) -> bool:
    """True when ``name`` (``mmgrid.a.b.c``) is an importable module or an attribute chain of one."""
    parts = name.split(".")
    if "__main__" in parts:  # importing it would run the command line: its file is enough
        return parts[-1] == "__main__" and importlib.util.find_spec(name) is not None
    for i in range(len(parts), 0, -1):
        mod = ".".join(parts[:i])
        try:
            obj = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (mod == exc.name or mod.startswith(exc.name + ".")):
                continue  # this prefix is no module: try a shorter one
            raise  # the module exists but fails to import: a defect of its own
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def names_in(text: str, whole_is_key: bool = False) -> list[str]:
    """The dotted ``mmgrid.`` names a text mentions as Python names (keys and tags left out)."""
    if whole_is_key and NAME.fullmatch(text.strip().rstrip(".")):
        return []
    return [m.group(0) for m in NAME.finditer(text) if not TAG_AFTER.match(text, m.end())
            and m.group(0) not in MLFLOW_TAGS and m.group(0) not in GROUPS.values()
            and not m.group(0).startswith("mmgrid.parent.")]


def mentioned() -> dict[str, list[str]]:
    """Each dotted name, with where it is mentioned (file:line)."""
    out: dict[str, list[str]] = {}
    for path in sorted((REPO / "mmgrid").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in names_in(node.value, whole_is_key=True):
                    out.setdefault(name, []).append(f"{path.relative_to(REPO)}:{node.lineno}")
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for name in names_in(line):
                out.setdefault(name, []).append(f"{path.relative_to(REPO)}:{i}")
    return out


def test_the_checker_tells_a_missing_api_from_an_existing_one() -> None:
    assert exists("mmgrid.query.load_model") and exists("mmgrid.query.Grid.open") and exists("mmgrid.registry")
    assert not exists("mmgrid.research.load_model")  # the module does not exist
    assert not exists("mmgrid.query.load_modle")  # the module does, the name does not
    assert names_in("Load it: `mmgrid.research.load_model(reg, ID)`.") == ["mmgrid.research.load_model"]
    assert names_in("mmgrid.key", whole_is_key=True) == []
    assert names_in("lineage as tags ``mmgrid.parent.<role>``, found by its ``mmgrid.key`` tag") == []
    assert names_in("see runs/mmgrid.db and mmgrid-run.yaml") == []
    assert names_in("tags `mmgrid.id`, `mmgrid.seed`; inputs as `mmgrid.parent.merge_input`") == []
    source = (REPO / "mmgrid" / "render" / "mlflow_export.py").read_text()  # the tags are the exporter's
    assert all(f'"{t}"' in source for t in MLFLOW_TAGS - {f"mmgrid.{k}" for k in ("paradigm", "domain", "period",
                                                                                  "variant")})
    assert 'f"mmgrid.{k}": v for k, v in m.coords.items()' in source and 'f"mmgrid.parent.{p.role}"' in source


def test_every_named_python_api_exists() -> None:
    seen = mentioned()
    assert len(seen) > 50  # the scan sees the code base's names (messages, docstrings, docs)
    missing = {name: where[:3] for name, where in sorted(seen.items()) if not exists(name)}
    assert not missing, f"names of Python APIs that do not exist: {missing}"
