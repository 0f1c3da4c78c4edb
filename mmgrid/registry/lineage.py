"""Lineage: every checkpoint's ancestors as a networkx graph, and as a text tree.

Edges point from parent to child and carry how the child was made: the parent's role
(``previous_stage``, ``init``, ``merge_input``, ``merge_base``), the method and its
parameters. The graph is read from manifests, so it works without the SQLite index.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import networkx as nx

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.registry.manifest import Manifest

from mmgrid.registry.errors import UnknownCheckpointError


def label(m: "Manifest") -> str:
    c = m.coords
    extra = ",".join(f"{k}={v}" for k, v in c.items() if k not in ("paradigm", "domain", "period", "variant"))
    variant = "" if c.get("variant", "default") == "default" else f"/{c['variant']}"
    return f"{c['paradigm']}/{c['domain']}/{c['period']}{variant}" + (f" ({extra})" if extra else "")


def build(reg: "Registry", cid: str) -> nx.DiGraph:
    """The checkpoint and all its ancestors; missing ancestors are nodes with ``missing=True``."""
    root = reg.get(cid)
    g = nx.DiGraph(root=root.id)
    stack, seen = [root], {root.id}
    while stack:
        m = stack.pop()
        g.add_node(m.id, coords=dict(m.coords), kind=m.kind, label=label(m), created=m.created, method=m.method,
                   seed=m.seed)
        for p in m.parents:
            if g.has_edge(p.id, m.id):  # one model as two inputs (e.g. merge_input and merge_base)
                g.edges[p.id, m.id]["roles"].append(p.role)
                g.edges[p.id, m.id]["role"] = ",".join(g.edges[p.id, m.id]["roles"])
            else:
                g.add_edge(p.id, m.id, role=p.role, roles=[p.role], method=m.method, params=dict(m.params))
            if p.id in seen:
                continue
            seen.add(p.id)
            try:
                stack.append(reg.get(p.id))
            except UnknownCheckpointError:
                g.add_node(p.id, missing=True, label="(missing manifest)", kind="?", coords={})
    return g


def _edge_text(attrs: dict[str, Any]) -> str:
    params = {k: v for k, v in attrs.get("params", {}).items() if k != "method"}
    method = attrs.get("method")
    how = f"{method} " if method else ""
    if params:
        text = json.dumps(params, sort_keys=True, separators=(",", "="))[1:-1].replace('"', "")
        how += f"{text[:80]}{'...' if len(text) > 80 else ''}"
    return f"{attrs['role']}" + (f" [{how.strip()}]" if how.strip() else "")


def text_tree(g: nx.DiGraph, cid: str) -> str:
    """An indented tree from the checkpoint back to its roots, one line per edge."""
    lines: list[str] = []
    shown: set[str] = set()

    def node_text(n: str) -> str:
        a = g.nodes[n]
        seed = f" seed={a['seed']}" if a.get("seed") is not None else ""  # the training seed (replicate)
        return f"{n}  {a.get('label', '')}  <{a.get('kind', '?')}{seed}>"

    def walk(n: str, prefix: str) -> None:
        parents = list(g.predecessors(n))
        for i, p in enumerate(parents):
            last = i == len(parents) - 1
            again = p in shown and any(True for _ in g.predecessors(p))
            lines.append(f"{prefix}{'└── ' if last else '├── '}{_edge_text(g.edges[p, n])}: {node_text(p)}" + (" (ancestors shown above)" if again else ""))
            if not again:
                shown.add(p)
                walk(p, prefix + ("    " if last else "│   "))

    lines.append(node_text(cid))
    shown.add(cid)
    walk(cid, "")
    return "\n".join(lines)
