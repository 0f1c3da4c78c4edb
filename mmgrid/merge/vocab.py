"""Added vocabulary: rows that only some models have (semantic-ID tokens, LM-head rows).

Each model's ``meta["added_rows"] = {tensor: [first_added_row, [token names]]}``
(see :class:`mmgrid.paradigms.base.Checkpoint`). Rows before ``first_added_row`` are
shared and merged by the method. Added rows form a union by token name in input order:
a token that every input has is merged by the method (against the base's row of that
token if the base has it; with no such base row, by the mean); a token that 2..N-1
inputs have is their mean; a token of one input is copied. The plan records where
every output row came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmgrid.merge.errors import ShapeMismatchError


@dataclass
class RowPlan:
    """How one tensor's rows are assembled.

    Attributes:
        shared: number of leading rows every input has (merged by the method).
        tokens: added token names in output order (row ``shared + j`` is token j).
        sources: for each token, [(input index, row in that input), ...].
        base_rows: for each token, the base's row of it or None.
    """

    shared: int
    tokens: list[str] = field(default_factory=list)
    sources: list[list[tuple[int, int]]] = field(default_factory=list)
    base_rows: list[int | None] = field(default_factory=list)

    @property
    def out_rows(self) -> int:
        return self.shared + len(self.tokens)

    def provenance(self, n_inputs: int) -> dict[str, Any]:
        """JSON-able: which inputs each added row came from and how it was made."""
        rows = []
        for j, (tok, src) in enumerate(zip(self.tokens, self.sources)):
            how = "method" if len(src) == n_inputs else ("mean" if len(src) > 1 else "copy")
            rows.append({"row": self.shared + j, "token": tok, "inputs": [i for i, _ in src], "how": how})
        return {"shared_rows": self.shared, "added": rows}


def _added(meta: dict[str, Any] | None, name: str, n_rows: int) -> tuple[int, list[str]]:
    entry = ((meta or {}).get("added_rows") or {}).get(name)
    if entry is None:
        return n_rows, []
    first, toks = int(entry[0]), [str(t) for t in entry[1]]
    if first + len(toks) != n_rows:
        raise ShapeMismatchError(
            f"tensor {name}: meta added_rows says {first} shared + {len(toks)} added rows, "
            f"but the tensor has {n_rows} rows; fix the checkpoint's meta['added_rows']"
        )
    return first, toks


def plan_rows(name: str, rows: list[int], metas: list[dict | None], labels: list[str],
              base_rows: int | None = None, base_meta: dict | None = None) -> RowPlan | None:
    """The row plan of one tensor, or None when no input has added rows for it."""
    added = [_added(m, name, r) for m, r in zip(metas, rows)]
    if not any(toks for _, toks in added):
        return None
    firsts = {f for f, _ in added}
    if len(firsts) != 1:
        detail = ", ".join(f"{lab}: {f}" for lab, (f, _) in zip(labels, added))
        raise ShapeMismatchError(f"tensor {name}: inputs disagree on the number of shared rows ({detail}); they are not the same architecture")
    shared = firsts.pop()
    base_index: dict[str, int] = {}
    if base_rows is not None:
        bfirst, btoks = _added(base_meta, name, base_rows)
        if bfirst < shared:
            raise ShapeMismatchError(f"tensor {name}: the base has {bfirst} shared rows, the inputs {shared}")
        base_index = {t: bfirst + j for j, t in enumerate(btoks)}
    plan = RowPlan(shared)
    where: dict[str, int] = {}
    for i, (_, toks) in enumerate(added):
        for j, tok in enumerate(toks):
            if tok not in where:
                where[tok] = len(plan.tokens)
                plan.tokens.append(tok)
                plan.sources.append([])
                plan.base_rows.append(base_index.get(tok))
            plan.sources[where[tok]].append((i, shared + j))
    return plan


def merged_added_rows(plans: dict[str, RowPlan]) -> dict[str, list]:
    """The merged model's ``meta["added_rows"]``."""
    return {name: [p.shared, list(p.tokens)] for name, p in plans.items()}
