"""Installed-looking plugin distributions for the extension-point tests: a folder holding a module
and a ``*.dist-info`` (METADATA, entry_points.txt), as ``pip install`` leaves them, which
``importlib.metadata`` finds once the folder is on ``sys.path`` (or ``PYTHONPATH``)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTENDING = REPO / "docs" / "extending.md"


def doc_block(index: int, lang: str = "python") -> str:
    """The ``index``-th ``lang`` code block of docs/extending.md (the documented plugin code)."""
    return re.findall(rf"^```{lang}\n(.*?)^```", EXTENDING.read_text(), flags=re.S | re.M)[index]


SIGN_CONSENSUS = doc_block(0)  # the documented 30-line merge method, mmgrid_sign_consensus.py
TV_NORM = doc_block(2)  # the documented study, mmgrid_tv_norm.py


def install(site: Path, dist: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]],
            version: str = "0.1.0") -> Path:
    """Write distribution ``dist`` into ``site``: its modules (name -> source) and a dist-info whose
    entry_points.txt has ``{group: {name: "module:attr"}}``; returns ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (site / f"{name}.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items())
        for group, points in entry_points.items()))
    return site


def sign_consensus_site(site: Path) -> Path:
    """``site`` with the documented method installed as distribution ``mmgrid-sign-consensus``."""
    return install(site, "mmgrid-sign-consensus", {"mmgrid_sign_consensus": SIGN_CONSENSUS},
                   {"mmgrid.merge_methods": {"sign_consensus": "mmgrid_sign_consensus:SignConsensus"}})


def worker_lookup(name: str) -> dict:
    """A job run in a pool worker: where merge method ``name`` comes from in that process, and
    whether its plugin module was imported there before the lookup."""
    import os
    import sys

    from mmgrid.merge.methods import METHODS, get_method

    before = "mmgrid_sign_consensus" in sys.modules
    cls = get_method(name)
    source = next(e.source for e in METHODS.entries(load=False) if e.name == name)
    return {"pid": os.getpid(), "class": f"{cls.__module__}:{cls.__qualname__}", "source": str(source),
            "imported_before": before}
