"""The merge package's shape (issue 14): no import cycle between its modules, imports at
module top unless a comment names a measured cost (``# lazy: <reason>``), modules under
~400 lines. The checker is shown to catch a deliberate cycle and an unmarked lazy import."""

from __future__ import annotations

import ast
from pathlib import Path

import mmgrid.merge

ROOT = Path(mmgrid.merge.__file__).parent


def _modules(root: Path, pkg: str) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        parts = (pkg, *f.relative_to(root).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _imports(mods: dict[str, Path], pkg: str) -> tuple[dict[str, set[str]], list[str]]:
    """Runtime import edges between the package's modules (``from P import m`` is an
    edge to P.m when that is a module; TYPE_CHECKING blocks skipped), and the function-level
    imports (of anything) that no ``# lazy:`` comment above them in the function explains."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    unmarked = []
    for m, f in mods.items():
        src = f.read_text()
        lines = src.splitlines()
        tree = ast.parse(src)
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                for n in ast.walk(node)}
        inner = {id(n): node.lineno for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(node)}  # import node -> its function's first line
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            hits = {t for t in targets if t.startswith(pkg)}
            for t in hits:
                while t not in mods:
                    t = t.rpartition(".")[0]
                if t != m:
                    edges[m].add(t)
            if id(node) in inner:
                if "# lazy:" not in "\n".join(lines[inner[id(node)] - 1:node.lineno]):  # said in the function
                    unmarked.append(f"{m}:{node.lineno}")
    return edges, unmarked


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_merge_has_no_import_cycle_and_no_unexplained_lazy_import():
    edges, unmarked = _imports(_modules(ROOT, "mmgrid.merge"), "mmgrid.merge")
    assert _cycles(edges) == []
    assert unmarked == []
    assert "mmgrid.merge.methods" not in edges["mmgrid.merge.methods.registry"]  # the registry is a leaf
    assert edges["mmgrid.merge.methods.registry"] == set()


def test_merge_modules_stay_small():
    big = {str(f.relative_to(ROOT)): n for f in ROOT.rglob("*.py") if (n := len(f.read_text().splitlines())) > 400}
    assert big == {}


def test_the_checker_sees_a_cycle_and_an_unmarked_lazy_import(tmp_path: Path):
    pkg = tmp_path / "fake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from fake import b\n")
    (pkg / "b.py").write_text("def f():\n    from fake import a\n")
    (pkg / "c.py").write_text("def g():\n    # lazy: torch, 4 s\n    from fake import a\n")
    edges, unmarked = _imports(_modules(pkg, "fake"), "fake")
    assert _cycles(edges) == [["fake.a", "fake.b"]]
    assert unmarked == ["fake.b:2"]
