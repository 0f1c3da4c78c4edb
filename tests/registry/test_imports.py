"""The registry's and the executor's modules import one another without cycles, never the
root package, and at module top unless a comment names a measured cost (issue 14)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mmgrid.registry", "mmgrid.exec")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, name: str, is_pkg: bool, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function?) of every runtime import (not under TYPE_CHECKING)."""
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_fn: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for n in child.orelse:
                    visit(n, in_fn)
                continue
            fn = in_fn or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, fn) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = ".".join(pkg[: len(pkg) - child.level + 1] + ([child.module] if child.module else []))
                for a in child.names:
                    full = f"{base}.{a.name}"
                    out.append((full if full in known else base, child.lineno, fn))
            visit(child, fn)

    visit(ast.parse(source), False)
    return out


def graph(sources: dict[str, tuple[str, bool]]) -> dict[str, list[tuple[str, int, bool]]]:
    known = set(sources)
    return {n: [e for e in imports(src, n, pkg, known) if e[0] in known and e[0] != n] for n, (src, pkg) in sources.items()}


def cycles(g: dict[str, list[tuple[str, int, bool]]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w, _, _ in g.get(v, ()):
            if w not in index:
                strong(w)
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
                found.append(sorted(comp))

    for v in g:
        if v not in index:
            strong(v)
    return found


def package_sources(pkg: str) -> dict[str, tuple[str, bool]]:
    folder = ROOT / pkg.replace(".", "/")
    return {module_name(p): (p.read_text(), p.name == "__init__.py") for p in sorted(folder.glob("*.py"))}


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_cycle_and_no_root_import(pkg: str) -> None:
    sources = {**package_sources(pkg), "mmgrid": ((ROOT / "mmgrid/__init__.py").read_text(), True)}
    g = graph(sources)
    assert cycles({k: v for k, v in g.items() if k != "mmgrid"}) == []
    assert [n for n, es in g.items() if n != "mmgrid" and any(t == "mmgrid" for t, _, _ in es)] == []


@pytest.mark.parametrize("pkg, only", [("mmgrid.registry", None), ("mmgrid.exec", ("base", "job", "ray"))])
def test_function_level_imports_name_their_cost(pkg: str, only: tuple[str, ...] | None) -> None:
    unexplained = []
    for n, (src, is_pkg) in package_sources(pkg).items():
        if only is not None and n.rsplit(".", 1)[-1] not in only:
            continue
        lines = src.splitlines()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)) and "# lazy:" not in lines[sub.lineno - 1]:
                        unexplained.append(f"{n}:{sub.lineno}: {lines[sub.lineno - 1].strip()}")
    assert unexplained == []


def test_the_checks_fail_on_a_deliberate_violation() -> None:
    sources = {
        "p": ("", True),
        "p.a": ("from p import b\n", False),
        "p.b": ("def f():\n    from p.a import x\n", False),  # a cycle hidden in a function
        "p.c": ("import mmgrid\n", False),
    }
    g = graph({**sources, "mmgrid": ("", True)})
    assert cycles({k: v for k, v in g.items() if k != "mmgrid"}) == [["p.a", "p.b"]]
    assert [n for n, es in g.items() if any(t == "mmgrid" for t, _, _ in es)] == ["p.c"]
    assert cycles(graph({**sources, "p.b": ("import typing\nif typing.TYPE_CHECKING:\n    from p.a import x\n", False)})) == []
