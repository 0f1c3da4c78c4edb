"""The layer map of docs/architecture.md, checked on mmgrid's source with ``ast`` (nothing is imported).

Rules:

(a) every module sits on one layer of :data:`LAYERS`; an import points to its own layer or a
    lower one, and the packages of an ``independent`` layer (``train``, ``eval``) do not import
    each other;
(b) no import cycle between the modules of one package (a package's ``__init__`` is a module
    of it; a subpackage counts as one module of its parent);
(c) an import inside a function carries a ``# lazy: <reason>`` comment (on its line, on the
    line above, or above the block of imports it starts), naming the measured start-up cost
    it avoids.

Besides the layers: each equation of docs/architecture.md's concept table is defined once, in the
module the table names (:data:`ONE_HOME`), and code only a home may hold (a rename into place, the
safetensors header length and dtype table, an interval's quantiles, the sign dissimilarity) stands
nowhere else (:data:`ONE_HOME_PATTERNS`); no module reaches into a registry's private members; no
function takes more than :data:`MAX_PARAMS` parameters, none returns ``{"error": ...}`` where a
value belongs, and no module imports another module's private names (each exception in :data:`PARAMS_ALLOWED` / :data:`PRIVATE_IMPORTS_ALLOWED`
with its reason). Modules are split by concept, not at a line count: there is no line limit.

The table is docs/architecture.md's: that page's layer table is parsed (:func:`doc_layers`) and must
equal :data:`LAYERS`, name only modules and packages that exist and place every module
(:func:`table_problems`). No import is let through by name: the table has no exceptions.

Runtime imports only: anything under ``if TYPE_CHECKING:`` is left out. The checker is shown
to fail on a synthetic package with a deliberate upward import, a cycle and an unmarked lazy
import (``test_checker_reports_each_kind_of_violation``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "mmgrid"

# The layer table of docs/architecture.md, bottom up: (layer, ranks, independent); the doc's
# table is parsed and must say the same (test_the_doc_table_is_this_table_and_matches_the_tree).
# Each rank is a list of units (a package or a root module); within a layer a later rank may
# import an earlier one ("registry, then exec"), never the reverse. Units of an independent
# layer (the "run" layer) do not import each other. The root package ``mmgrid`` (its
# ``__init__`` only) is the top layer: it re-exports ``Registry`` lazily, and nothing imports it.
LAYERS: list[tuple[str, list[list[str]], bool]] = [
    ("foundation", [["mmgrid._version", "mmgrid.errors", "mmgrid.configtools", "mmgrid.config", "mmgrid.stats", "mmgrid.fileio", "mmgrid.plugins",
                     "mmgrid.cliargs"]], False),
    ("data", [["mmgrid.data"]], False),
    ("storage", [["mmgrid.registry"], ["mmgrid.exec"]], False),
    ("merging", [["mmgrid.merge"]], False),
    ("models", [["mmgrid.models"], ["mmgrid.paradigms"]], False),
    ("runtime", [["mmgrid.runtime"]], False),
    ("run", [["mmgrid.train", "mmgrid.eval"]], True),
    ("studies", [["mmgrid.sweep"], ["mmgrid.query"]], False),
    ("renderings", [["mmgrid.render"]], False),
    ("entry points", [["mmgrid.validate"], ["mmgrid.cli", "mmgrid.__main__"]], False),
    ("package root", [["mmgrid"]], False),
]

LAZY_MARKER = "# lazy:"


@dataclass
class Report:
    """What the checker found, each entry tagged with the module it is in."""

    upward: list[tuple[str, str, str]] = field(default_factory=list)  # (module, imported, why)
    cycles: list[tuple[str, list[str]]] = field(default_factory=list)  # (package, cycle of modules)
    unmarked: list[tuple[str, int, str]] = field(default_factory=list)  # (module, line, imported)

    def lines(self) -> list[tuple[list[str], str]]:
        """(modules it is about, message) for every violation: the importing module, or every
        module of a cycle."""
        out = [([m], f"{m} imports {t}: {why}") for m, t, why in self.upward]
        out += [(c, f"import cycle in {pkg}: {' -> '.join(c)}") for pkg, c in self.cycles]
        out += [([m], f"{m}:{line}: `{t}` imported inside a function without `{LAZY_MARKER} <reason>`")
                for m, line, t in self.unmarked]
        return out


@dataclass
class _Import:
    target: str
    line: int
    in_function: bool
    marked: bool


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under ``root`` (a package directory)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, path: Path, known: set[str]) -> list[_Import]:
    """Runtime imports of one module (TYPE_CHECKING blocks left out), resolved to module names."""
    source = path.read_text()
    lines = source.splitlines()
    is_pkg = path.name == "__init__.py"
    found: list[tuple[ast.stmt, bool]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    walk_stmt(sub, in_function)
                continue
            walk_stmt(child, in_function)

    def walk_stmt(child: ast.AST, in_function: bool) -> None:
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append((child, in_function))
        walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(source), False)
    import_lines = {i for n, _ in found for i in range(n.lineno, (n.end_lineno or n.lineno) + 1)}

    def marked(node: ast.stmt) -> bool:
        if any(LAZY_MARKER in lines[i - 1] for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
            return True
        i = node.lineno - 1  # walk up over the block of imports this one belongs to, to its comment
        while i >= 1:
            text = lines[i - 1].strip()
            if text.startswith("#"):
                if LAZY_MARKER in text:
                    return True
                i -= 1
                continue
            if i in import_lines:
                i -= 1
                continue
            return False
        return False

    out = []
    package = module if is_pkg else module.rpartition(".")[0]
    for node, in_function in found:
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                sub = f"{base}.{a.name}"
                targets.append(sub if sub in known else base)
        for t in targets:
            out.append(_Import(t, node.lineno, in_function, marked(node)))
    return out


def _known_target(target: str, known: set[str]) -> str | None:
    """The longest known module that ``target`` names (None for third-party modules)."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in known:
            return name
    return None


def _level(module: str, layers: list[tuple[str, list[list[str]], bool]]) -> tuple[int, int, str, bool] | None:
    """(layer index, rank, unit, independent) of a module; None when the table does not place it."""
    best = None
    for li, (_, ranks, independent) in enumerate(layers):
        for ri, units in enumerate(ranks):
            for unit in units:
                if "." not in unit:  # the root package: its __init__ only
                    hit = module == unit
                else:
                    hit = module == unit or module.startswith(unit + ".")
                if hit and (best is None or len(unit) > best[0]):
                    best = (len(unit), (li, ri, unit, independent))
    return None if best is None else best[1]


def _node_in(package: str, module: str) -> str | None:
    """The module of ``package`` that ``module`` belongs to (itself, or the subpackage holding it)."""
    if module == package:
        return package
    if module.startswith(package + "."):
        return package + "." + module[len(package) + 1:].split(".")[0]
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle for each strongly connected component with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    out = []
    for comp in comps:  # a readable cycle through the component: a path back to its first node
        members, start = set(comp), comp[0]
        path, seen = [start], {start}
        while True:
            nxt = sorted(w for w in graph[path[-1]] if w in members)
            back = start in nxt
            if back and len(path) > 1:
                break
            fresh = [w for w in nxt if w not in seen]
            if not fresh:
                break
            path.append(fresh[0])
            seen.add(fresh[0])
        out.append([*path, start])
    return out


def check(root: Path, layers: list[tuple[str, list[list[str]], bool]] = LAYERS) -> Report:
    """Check the package at ``root`` against ``layers``; see the module docstring for the rules
    (no import is let through: the table has no exceptions)."""
    mods = _modules(root)
    known = set(mods)
    rep = Report()
    edges: list[tuple[str, str]] = []
    for mod, path in mods.items():
        for imp in _imports(mod, path, known):
            if imp.in_function and not imp.marked:
                rep.unmarked.append((mod, imp.line, imp.target))
            target = _known_target(imp.target, known)
            if target is None or target == mod:
                continue
            edges.append((mod, target))
            src, dst = _level(mod, layers), _level(target, layers)
            if src is None:
                rep.upward.append((mod, target, "the importing module is on no layer of the table"))
                continue
            if dst is None:
                rep.upward.append((mod, target, "the imported module is on no layer of the table"))
                continue
            if (dst[0], dst[1]) > (src[0], src[1]):
                rep.upward.append((mod, target, f"{layers[dst[0]][0]} ({dst[2]}) is above "
                                                f"{layers[src[0]][0]} ({src[2]})"))
            elif src[0] == dst[0] and src[3] and src[2] != dst[2]:
                rep.upward.append((mod, target, f"{src[2]} and {dst[2]} are siblings on the {layers[src[0]][0]} "
                                                "layer and must not import each other"))
    packages = sorted(m for m, p in mods.items() if p.name == "__init__.py")
    for pkg in packages:
        graph: dict[str, set[str]] = defaultdict(set)
        for a, b in edges:
            na, nb = _node_in(pkg, a), _node_in(pkg, b)
            if na is not None and nb is not None and na != nb:
                graph[na].add(nb)
                graph.setdefault(nb, set())
        for cyc in _cycles(graph):
            rep.cycles.append((pkg, cyc))
    return rep


def test_every_package_is_on_a_layer() -> None:
    placed = {m: _level(m, LAYERS) for m in _modules(ROOT)}
    assert [m for m, lv in placed.items() if lv is None] == []


# --------------------------------------------------------------------------- the doc's layer table

DOC = ROOT.parent / "docs" / "architecture.md"


def doc_layers(text: str) -> list[tuple[str, list[list[str]], bool]]:
    """The layer table of docs/architecture.md (the table under ``## The layers``), bottom up, in
    :data:`LAYERS`' form. A row is ``| N name | units | what it is |``: the units are the
    backticked ``mmgrid...`` names of the second cell outside parentheses, ``then`` starts the
    next rank, and ``siblings`` marks an independent layer. Rows must be numbered 0, 1, ... from
    the bottom."""
    lines = text.split("\n## The layers", 1)[1].splitlines()
    rows = []
    for line in lines[1:]:
        if line.startswith("## "):
            break
        if line.startswith("|") and not line.startswith("|---") and not line.startswith("| layer"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows and not line.startswith("|"):
            break
    out = []
    for number, (head, units, _) in enumerate(reversed(rows)):
        index, _, name = head.partition(" ")
        assert index == str(number), f"layer {head!r}: rows are numbered 0, 1, ... from the bottom"
        plain = re.sub(r"\([^)]*\)", "", units)
        ranks = [re.findall(r"`(mmgrid[\w.]*)`", part) for part in re.split(r"\bthen\b", plain)]
        out.append((name, [r for r in ranks if r], "siblings" in units))
    return out


def table_problems(layers: list[tuple[str, list[list[str]], bool]], root: Path) -> list[str]:
    """Where a layer table and the package at ``root`` disagree: a unit the table names that is no
    module or package there, or a module that no unit holds."""
    mods = _modules(root)
    problems = [f"the table names {unit}, which is not in {root.name}/" for _, ranks, _ in layers
                for units in ranks for unit in units
                if not any(m == unit or ("." in unit and m.startswith(unit + ".")) for m in mods)]
    problems += [f"{m} is on no layer of the table" for m in mods if _level(m, layers) is None]
    return problems


def test_the_doc_table_is_this_table_and_matches_the_tree() -> None:
    layers = doc_layers(DOC.read_text())
    assert layers == LAYERS, "docs/architecture.md's layer table and LAYERS must say the same"
    assert table_problems(layers, ROOT) == []


def test_the_doc_table_check_catches_a_stale_table(tmp_path: Path) -> None:
    doc = ("# x\n\n## The layers\n\n| layer | packages / modules | what it is |\n|---|---|---|\n"
           "| 2 top | `mmgrid.cli`, `mmgrid.gone` | the command (`mmgrid.cli.x` in parentheses is no unit) |\n"
           "| 1 run | `mmgrid.train`, `mmgrid.eval` (siblings: neither imports the other) | - |\n"
           "| 0 base | `mmgrid.errors`, then `mmgrid.config` (root `__init__`, `mmgrid.other`) | - |\n\nText.\n")
    layers = doc_layers(doc)
    assert layers == [("base", [["mmgrid.errors"], ["mmgrid.config"]], False),
                      ("run", [["mmgrid.train", "mmgrid.eval"]], True), ("top", [["mmgrid.cli", "mmgrid.gone"]], False)]
    _write(tmp_path, {"mmgrid/__init__.py": "", "mmgrid/errors.py": "", "mmgrid/config/__init__.py": "",
                      "mmgrid/train/__init__.py": "", "mmgrid/eval/x.py": "", "mmgrid/cli/__init__.py": "",
                      "mmgrid/new.py": ""})
    assert table_problems(layers, tmp_path / "mmgrid") == [
        "the table names mmgrid.gone, which is not in mmgrid/", "mmgrid is on no layer of the table",
        "mmgrid.new is on no layer of the table"]
    with pytest.raises(AssertionError, match="numbered"):
        doc_layers(doc.replace("| 2 top", "| 3 top"))


def test_imports_point_down_without_cycles_and_lazy_imports_are_marked() -> None:
    assert [msg for _, msg in check(ROOT).lines()] == []


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_checker_reports_each_kind_of_violation(tmp_path: Path) -> None:
    """A synthetic ``mmgrid`` with one violation of each kind, and imports that are fine."""
    _write(tmp_path, {
        "mmgrid/__init__.py": "",
        "mmgrid/errors.py": "",
        "mmgrid/data/__init__.py": "",
        "mmgrid/data/load.py": "from mmgrid.train.loop import step\n",  # upward: data -> train
        "mmgrid/data/ok.py": "import json\nfrom mmgrid.errors import X\nfrom . import load\n",  # fine
        "mmgrid/train/__init__.py": "",
        "mmgrid/train/loop.py": "from mmgrid.train import stage\n",  # cycle loop <-> stage
        "mmgrid/train/stage.py": ("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from mmgrid.sweep import x\n"  # ignored
                                  "def f():\n    from mmgrid.train import loop\n"  # cycle + unmarked
                                  "def g():\n    # lazy: torch (~2.5 s) kept out of --help\n"
                                  "    import os\n    import sys\n"),  # marked block
        "mmgrid/cli/__init__.py": "",
        "mmgrid/cli/train.py": "from mmgrid.eval import grid\nfrom mmgrid.train import loop\n",  # entry layer: fine
        "mmgrid/eval/__init__.py": "",
        "mmgrid/eval/grid.py": "from mmgrid.train.loop import step  # sibling on the run layer\n",
        "mmgrid/registry/__init__.py": "",
        "mmgrid/registry/api.py": "from mmgrid.exec import base\n",  # registry below exec: upward
        "mmgrid/exec/__init__.py": "",
        "mmgrid/exec/base.py": "from mmgrid.registry import api\n",  # fine
    })
    rep = check(tmp_path / "mmgrid")
    upward = {(m, t) for m, t, _ in rep.upward}
    assert upward == {("mmgrid.data.load", "mmgrid.train.loop"), ("mmgrid.eval.grid", "mmgrid.train.loop"),
                      ("mmgrid.registry.api", "mmgrid.exec.base")}
    assert any("siblings" in why for m, _, why in rep.upward if m == "mmgrid.eval.grid")
    cycles = {(pkg, tuple(sorted(set(c)))) for pkg, c in rep.cycles}
    assert ("mmgrid.train", ("mmgrid.train.loop", "mmgrid.train.stage")) in cycles
    # the root package sees the same cross-package imports as cycles between its subpackages
    assert ("mmgrid", ("mmgrid.exec", "mmgrid.registry")) in cycles
    assert rep.unmarked == [("mmgrid.train.stage", 5, "mmgrid.train.loop")]
    assert len(rep.lines()) == len(rep.upward) + len(rep.cycles) + len(rep.unmarked)


def test_a_cycle_through_a_package_init_counts(tmp_path: Path) -> None:
    _write(tmp_path, {
        "mmgrid/__init__.py": "",
        "mmgrid/models/__init__.py": "from mmgrid.models.base import B\n",
        "mmgrid/models/base.py": "from mmgrid.models import get_builder\n",  # a name of __init__: base -> __init__
        "mmgrid/models/builders.py": "",
        "mmgrid/models/tokenizer.py": "from mmgrid.models import builders\n",  # a submodule: no edge to __init__
    })
    rep = check(tmp_path / "mmgrid")
    assert [(pkg, set(c)) for pkg, c in rep.cycles] == [("mmgrid.models", {"mmgrid.models", "mmgrid.models.base"})]
    assert rep.upward == [] and rep.unmarked == []


@pytest.mark.parametrize("module, layer", [("mmgrid", "package root"), ("mmgrid.config.grid", "foundation"),
                                           ("mmgrid.cliargs", "foundation"), ("mmgrid.runtime.plan", "runtime"),
                                           ("mmgrid.cli.eval", "entry points"), ("mmgrid.train.stage", "run"),
                                           ("mmgrid.cli.demo", "entry points"), ("mmgrid.validate", "entry points")])
def test_the_table_places_modules_where_layers_md_says(module: str, layer: str) -> None:
    assert LAYERS[_level(module, LAYERS)[0]][0] == layer


def test_cli_parser_imports_no_heavy_library() -> None:
    """`mmgrid --help` builds the parser of every command: none of the libraries that the lazy
    imports keep out (docs/architecture.md gives their measured start-up costs) may be loaded."""
    heavy = ("torch", "transformers", "matplotlib", "ray", "pandas", "polars", "sklearn", "scipy")
    code = ("import sys; from mmgrid.cli import make_parser; make_parser(); "
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT.parent)
    assert out.stdout.strip() == ""


# --------------------------------------------------------------------------- one home per equation

# name -> (the module that defines it, what it is): each is defined exactly once in mmgrid/, and
# docs/architecture.md's concept table names the home (checked below).
ONE_HOME: dict[str, tuple[str, str]] = {
    "eq7": ("mmgrid/merge/methods/weights.py", "MMGRid Eq. 7's weights (alpha, 1 - alpha)"),
    "neutral_base": ("mmgrid/merge/api.py", "MMGRid Eq. 8, the neutral base"),
    "NEUTRAL_BASE_METHOD": ("mmgrid/merge/api.py", "the method that stores Eq. 8"),
    "argmax_lambda": ("mmgrid/stats/lambda_star.py", "lambda*'s rule (argmax, ties)"),
    "TIE_DECIMALS": ("mmgrid/stats/lambda_star.py", "the tie tolerance of lambda*"),
    "robust_lambda_star": ("mmgrid/stats/lambda_star.py", "lambda* with its bootstrap interval"),
    "blend_eq11": ("mmgrid/sweep/selection.py", "MMGRid Eq. 11"),
    "ols": ("mmgrid/stats/regression.py", "least squares with an intercept"),
    "loo_predictions": ("mmgrid/stats/regression.py", "leave-one-out predictions"),
    "rank_correlation": ("mmgrid/stats/association.py", "Spearman's rho"),
    "interpolate": ("mmgrid/merge/ops.py", "MMGRid Eq. 9-10, theta_t1 + lambda (theta_t2 - theta_t1)"),
    "lerp_into": ("mmgrid/merge/ops.py", "MMGRid Eq. 9-10 into a buffer (the fast pass, the sweep, a live module)"),
    "elect_sign": ("mmgrid/merge/ops.py", "the TIES sign rule (dense, fast pass and LoRA call it)"),
    "trim_magnitude": ("mmgrid/merge/ops.py", "the TIES magnitude trim"),
    "disjoint_mean": ("mmgrid/merge/ops.py", "the TIES disjoint mean (dense, fast pass and LoRA call it)"),
    "weighted_sum": ("mmgrid/merge/ops.py", "sum_i w_i tau_i, MMGRid Eq. 3's combine"),
    "linear_combination": ("mmgrid/merge/ops.py", "a linear merge c_0 theta_0 + sum_i c_i theta_i (reference and fast pass)"),
    "merged": ("mmgrid/merge/pipeline.py", "the Euclidean pipeline on one tensor or chunk (reference and fast pass)"),
    "apply_kernel": ("mmgrid/merge/pipeline.py", "a method's declared kernel on a chunk (reference and fast pass)"),
    "SIGN_RULES": ("mmgrid/merge/ops.py", "the TIES sign rules' names"),
    "safetensors_header": ("mmgrid/fileio/safetensors.py", "the safetensors header (registry blobs, merge inputs)"),
    "encode_header": ("mmgrid/fileio/safetensors.py", "writing a safetensors header (registry blobs, the merge writer)"),
    "ST_DTYPES": ("mmgrid/fileio/safetensors.py", "the safetensors dtype names"),
    "atomic_write": ("mmgrid/fileio/atomic.py", "a file that readers see whole"),
    "atomic_output": ("mmgrid/fileio/atomic.py", "a file written by a library under a temporary name, renamed whole"),
    "swap_dir": ("mmgrid/fileio/atomic.py", "a folder that readers see whole"),
    "percentile_interval": ("mmgrid/stats/bootstrap.py", "a percentile-bootstrap interval"),
    "percentile_band": ("mmgrid/stats/bootstrap.py", "an interval's quantiles, pointwise over curves"),
    "render_card": ("mmgrid/registry/card.py", "the README.md model card of every exported folder"),
    "load_yaml": ("mmgrid/configtools.py", "reading YAML with aliases bounded before expansion"),
    "script_json": ("mmgrid/render/report_html_encode.py", "JSON inside a <script> block of report.html"),
    "html_text": ("mmgrid/render/report_html_encode.py", "a value as HTML text of report.html"),
    "html_attr": ("mmgrid/render/report_html_encode.py", "a value as an HTML attribute of report.html"),
}

# library calls that would be a second implementation of a home above, outside that home
SECOND_COPIES = {"spearmanr": "mmgrid/stats/association.py", "LinearRegression": "mmgrid/stats/regression.py",
                 "rankdata": "mmgrid/stats/association.py"}


def _definitions(root: Path) -> dict[str, list[str]]:
    """name -> files defining it (functions, classes, module-level assignments) anywhere in ``root``."""
    out: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[node.name].append(rel)
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            out.update({t.id: out[t.id] + [rel] for t in targets if isinstance(t, ast.Name)})
    return out


def test_each_equation_has_one_definition_and_the_concept_table_names_it() -> None:
    defs = _definitions(ROOT)
    wrong = {name: defs.get(name, []) for name, (home, _) in ONE_HOME.items() if defs.get(name, []) != [home]}
    assert wrong == {}, "each must be defined once, in its home"
    table = (ROOT.parent / "docs" / "architecture.md").read_text()
    missing = [name for name in ONE_HOME if f"`{name}`" not in table]
    assert missing == [], "docs/architecture.md's concept table must name each home"


def test_no_second_copy_of_a_home_through_a_library_call() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(ROOT.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in SECOND_COPIES and SECOND_COPIES[name] != rel:
                found.append(f"{rel}:{node.lineno} uses {name}; the home is {SECOND_COPIES[name]}")
    assert found == []


# Code that only a concept's home may contain (ONE_HOME by pattern, beside ONE_HOME by name): a line matching
# one of these anywhere else is a second home. Each: regular expression -> (its home, what it is).
ONE_HOME_PATTERNS: dict[str, tuple[str, str]] = {
    r"\bos\.(replace|rename|link)\(|\.rename\((?!\{|columns=|index=)":
        ("mmgrid/fileio/atomic.py", "a rename into place (atomic_write, atomic_output, replace, swap_dir, publish_file)"),
    r"struct\.(un)?pack(_into)?\(\s*[\"']<Q[\"']":
        ("mmgrid/fileio/safetensors.py", "the safetensors header's 8-byte length (encode_header, safetensors_header)"),
    r"\bnp\.(nan)?(quantile|percentile)\(":
        ("mmgrid/stats/bootstrap.py", "an interval's quantiles (percentile_interval, percentile_band)"),
    r"torch\.sign\([^()]*\)\s*!=\s*torch\.sign\(":
        ("mmgrid/stats/signs.py", "the sign dissimilarity, Orbit Eq. 1 (sign_dissimilarity)"),
}
# The one table of safetensors dtype names: a dict literal with one of these as a key or value is a second one.
DTYPE_TABLE_NAMES = {"F32", "BF16", "F16", "F64", "I64", "BOOL"}
DTYPE_TABLE_HOME = "mmgrid/fileio/safetensors.py"
# file:line -> why the line is not a second home
PATTERNS_ALLOWED: dict[str, str] = {
    "mmgrid/sweep/calibration/measures.py:188": "the minimum, median and maximum of the replicates' estimates, "
                                                 "a summary, not an interval",
}


def second_homes(root: Path) -> list[str]:
    """``path:line what`` for every line outside its home that matches :data:`ONE_HOME_PATTERNS` (comments
    and docstrings too: text that names the call is a second home in the making), and every dict
    literal outside :data:`DTYPE_TABLE_HOME` that maps a safetensors dtype name."""
    import re

    found = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        text = path.read_text()
        for pattern, (home, what) in ONE_HOME_PATTERNS.items():
            if rel == home:
                continue
            for i, line in enumerate(text.splitlines(), 1):
                if re.search(pattern, line) and f"{rel}:{i}" not in PATTERNS_ALLOWED:
                    found.append(f"{rel}:{i} {what}; the home is {home}")
        if rel != DTYPE_TABLE_HOME:
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Dict) and any(isinstance(x, ast.Constant) and x.value in DTYPE_TABLE_NAMES
                                                      for x in (*node.keys, *node.values)):
                    found.append(f"{rel}:{node.lineno} a safetensors dtype table; the home is {DTYPE_TABLE_HOME}")
    return found


def test_formats_and_io_have_one_home() -> None:
    """Renames into place, the safetensors header and dtype table, an interval's quantiles and the sign
    dissimilarity each live in one module; every other module calls it."""
    assert second_homes(ROOT) == []
    assert [k for k in PATTERNS_ALLOWED if not (ROOT.parent / k.split(":")[0]).is_file()] == [], \
        "an allowed exception names a file that is gone"


def test_the_pattern_check_catches_a_planted_second_home(tmp_path: Path) -> None:
    _write(tmp_path, {
        "mmgrid/__init__.py": "",
        "mmgrid/fileio/atomic.py": "import os\nos.replace('a', 'b')\n",  # the home: fine
        "mmgrid/fileio/safetensors.py": "ST_DTYPES = {'F32': 'float32'}\n",  # the home: fine
        "mmgrid/data/write.py": ("import os, struct\nimport numpy as np\n"
                                 "def save(tmp, path, head):\n    tmp.write_text('x')\n    os.replace(tmp, path)\n"
                                 "    tmp.rename(path)\n    return struct.pack('<Q', len(head))\n"
                                 "def ci(x):\n    return np.quantile(x, [0.025, 0.975])\n"
                                 "def sd(x, r):\n    return (torch.sign(x) != torch.sign(r)).float().mean()\n"
                                 "TABLE = {torch.bfloat16: 'BF16'}\n"
                                 "FRAME = df.rename({'a': 'b'})\n"),  # a data frame's rename: fine
    })
    got = sorted(int(x.split(" ")[0].rpartition(":")[2]) for x in second_homes(tmp_path / "mmgrid"))
    assert got == [5, 6, 7, 9, 11, 12]  # os.replace, Path.rename, the header length, np.quantile, signs, dtypes


def test_yaml_is_read_by_the_one_bounded_loader() -> None:
    """No module calls ``yaml.safe_load`` / ``yaml.load`` / ``yaml.full_load`` itself: every YAML document goes
    through ``configtools.load_yaml``, whose aliases are bounded before expansion."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(ROOT.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("safe_load", "load", "full_load", "unsafe_load", "safe_load_all", "load_all")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "yaml"):
                found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_eq_9_10_is_computed_in_its_home_only() -> None:
    """``torch.lerp`` (MMGRid Eq. 9-10's arithmetic) is called only in ``merge/ops.py``; every
    other path (the temporal method, the fast pass, the sweep, a live module) calls the home."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(ROOT.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("lerp", "lerp_")
                    and rel != ONE_HOME["interpolate"][0]):
                found.append(f"{rel}:{node.lineno}")
    assert found == []


# Arithmetic the fast file pass must not do itself: it tiles, streams and reuses buffers, and
# gets every entry's value from the shared functions (pipeline.apply_kernel, ops.lerp_into);
# tensor methods by name ("add" is left out: sets have it too).
RESTATING = {"add_", "sub", "sub_", "mul", "mul_", "div", "div_", "sign", "sign_", "clamp", "clamp_",
             "clamp_min", "clamp_min_", "hardshrink", "masked_fill", "masked_fill_", "where", "lt", "gt", "abs",
             "abs_", "neg", "neg_", "lerp", "lerp_", "addcmul", "addcmul_", "relu", "relu_"}


def _restated(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "merge" / "fastpass").glob("*.py")):
        rel = str(path.relative_to(root.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RESTATING:
                found.append(f"{rel}:{node.lineno} {node.func.attr}")
    return found


def test_the_fast_pass_restates_no_merge_formula() -> None:
    """The fast pass (merge/fastpass/) computes no entry itself: its chunks go through
    ``pipeline.apply_kernel`` (linear_combination, lerp_into, the Euclidean pipeline: the
    functions the reference path calls), so the two paths agree by construction."""
    assert _restated(ROOT) == []
    kernels = (ROOT / "merge" / "fastpass" / "kernels.py").read_text()
    assert "pl.apply_kernel(" in kernels


def test_the_restatement_check_catches_a_formula(tmp_path: Path) -> None:
    _write(tmp_path, {"mmgrid/__init__.py": "", "mmgrid/merge/fastpass/k.py":
                      "def f(d, t, w):\n    d.masked_fill_(d.abs() < t, 0.0)\n    return d.mul_(w)\n"})
    assert sorted(x.split(" ")[1] for x in _restated(tmp_path / "mmgrid")) == ["abs", "masked_fill_", "mul_"]


def test_the_one_home_check_catches_a_second_definition(tmp_path: Path) -> None:
    _write(tmp_path, {"mmgrid/__init__.py": "", "mmgrid/a.py": "def ols(x, y):\n    pass\nTIE_DECIMALS = 9\n",
                      "mmgrid/b.py": "TIE_DECIMALS: int = 9\ndef f():\n    def ols():\n        pass\n"})
    defs = _definitions(tmp_path / "mmgrid")
    assert defs["ols"] == ["mmgrid/a.py", "mmgrid/b.py"] and defs["TIE_DECIMALS"] == ["mmgrid/a.py", "mmgrid/b.py"]


# --------------------------------------------------------------------------- interfaces

# A function past ~8 parameters is asking for a typed record; a function returns
# a value or raises a named error, never {"error": ...} where a value belongs; a module that needs
# another's private name shows a split in the wrong place. Modules are split by concept, not at a
# line count (there is no line limit). Each allowed exception says why.
MAX_PARAMS = 8
PARAMS_ALLOWED: dict[str, str] = {
    "mmgrid/eval/ranking.py:__init__": "Evaluator's settings (split, ks, groups, activity phase, users, batch, "
                                       "seed) are keyword-only options with defaults, each a key of the grid's "
                                       "eval section; callers name the few they change",
    "mmgrid/eval/table.py:baseline_table": "the console table's display options, keyword-only with defaults",
    "mmgrid/eval/table.py:baseline_cells": "baseline_table's cells: the same keyword-only options with defaults",
    "mmgrid/merge/lora/merging.py:_check_params": "checks merge_lora's keyword options before anything is read, "
                                                   "one argument per option so each error names its flag",
    "mmgrid/merge/lora/merging.py:merge_lora": "the public entry point of `mmgrid merge-lora`: its flags as keyword "
                                               "options with defaults, as PEFT's add_weighted_adapter takes them",
    "mmgrid/merge/lora/extract.py:extract_lora": "the public entry point of `mmgrid extract-lora`: its flags as "
                                                  "keyword options with defaults, like merge_lora's",
    "mmgrid/registry/api.py:put": "put's keywords are the manifest's fields (coords, kind, parents, params, files, "
                                  "meta ...), each optional and named at the call",
    "mmgrid/registry/hf.py:import_hf": "the public entry point of `mmgrid registry import-hf`: its flags as keyword "
                                       "options with defaults",
}
PRIVATE_IMPORTS_ALLOWED: dict[str, str] = {
}


@dataclass
class Interfaces:
    """What :func:`check_interfaces` found: ``path:function`` -> parameters, ``path:line`` of error
    dicts, ``path:module.name`` of private imports."""

    many_params: dict[str, int] = field(default_factory=dict)
    error_values: list[str] = field(default_factory=list)
    private_imports: list[str] = field(default_factory=list)


def check_interfaces(root: Path) -> Interfaces:
    """The three interface rules above, on every module under ``root`` (with ``ast``)."""
    out = Interfaces()
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
                if len(names) > MAX_PARAMS:
                    out.many_params[f"{rel}:{node.name}"] = len(names)
            elif isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "error"
                                                    for k in node.keys):
                out.error_values.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mmgrid"):
                out.private_imports += [f"{rel}:{node.module}.{al.name}" for al in node.names
                                        if al.name.startswith("_") and not al.name.startswith("__")]
    return out


def test_functions_take_a_handful_of_parameters_and_return_values_not_errors() -> None:
    found = check_interfaces(ROOT)
    assert {k: n for k, n in found.many_params.items() if k not in PARAMS_ALLOWED} == {}, \
        f"more than {MAX_PARAMS} parameters: pass a typed record"
    assert found.error_values == [], "return a value or raise a named error, never {'error': ...}"
    assert [k for k in PARAMS_ALLOWED if k not in found.many_params] == [], "an allowed exception no longer needed"


def test_no_module_imports_another_modules_private_names() -> None:
    found = check_interfaces(ROOT)
    assert [k for k in found.private_imports if k not in PRIVATE_IMPORTS_ALLOWED] == []
    assert [k for k in PRIVATE_IMPORTS_ALLOWED if k not in found.private_imports] == [], \
        "an allowed exception no longer needed"


def private_registry_uses(root: Path) -> list[str]:
    """``path:line .name`` where a module other than the Registry's own (``registry/api.py``) reaches into
    a registry handle's private members (``reg._commit``, ``registry._index``...)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        if rel == "mmgrid/registry/api.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            target = node.value.attr if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                else node.value.id if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) else None
            if target in ("reg", "registry") and node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"{rel}:{node.lineno} .{node.attr}")
    return found


def test_the_registry_is_used_through_its_public_interface(tmp_path: Path) -> None:
    """Its helper modules (HF import/export, verify/gc) and every other caller use public methods."""
    assert private_registry_uses(ROOT) == []
    _write(tmp_path, {"mmgrid/__init__.py": "", "mmgrid/registry/hf.py": "def f(reg, self):\n    reg._commit(1)\n"
                      "    self.registry._index.write()\n    reg.commit_manifest(1)\n    return reg.__class__\n"})
    assert private_registry_uses(tmp_path / "mmgrid") == ["mmgrid/registry/hf.py:2 ._commit",
                                                          "mmgrid/registry/hf.py:3 ._index"]


def test_the_interface_checker_reports_each_kind_of_violation(tmp_path: Path) -> None:
    _write(tmp_path, {
        "mmgrid/__init__.py": "",
        "mmgrid/a.py": ("def wide(a, b, c, d, e, f, g, h, *, i):\n    return {'error': 'no'}\n"
                        "def ok(self, a, b, c, d, e, f, g, h, *args, **kw):\n    return {'value': 1}\n"),
        "mmgrid/b.py": "from mmgrid.a import _hidden, ok\nfrom os import _exit\n",
    })
    found = check_interfaces(tmp_path / "mmgrid")
    assert found.many_params == {"mmgrid/a.py:wide": 9}
    assert found.error_values == ["mmgrid/a.py:2"]
    assert found.private_imports == ["mmgrid/b.py:mmgrid.a._hidden"]
