"""Reading a prepared dataset: :func:`load_prepared` → :class:`PreparedDataset` → :class:`DomainData`.

The folder layout and columns are the "Prepared dataset" contract in docs/contracts.md.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import polars as pl

from mmgrid.configtools import stable_hash
from mmgrid.data.errors import PreparedDataError

MANIFEST = "manifest.json"


class DomainData:
    """One prepared domain: items, interactions and examples (parquet, read on first use)."""

    def __init__(self, root: Path, name: str, phases: dict[str, tuple[int | None, int | None]]) -> None:
        self.root, self.name, self._phases = root / name, name, phases

    def __repr__(self) -> str:
        return f"DomainData({self.name!r}, items={self.n_items})"

    @cached_property
    def items(self) -> pl.DataFrame:
        """``item_idx`` (0..n-1, sorted), ``parent_asin``, ``title``, ``text``, ``first_seen_ms``."""
        return _read(self.root / "items.parquet")

    @property
    def n_items(self) -> int:
        return self.items.height

    @cached_property
    def item_texts(self) -> list[str]:
        """Model text of each item, by ``item_idx``."""
        return self.items.get_column("text").to_list()

    @cached_property
    def item_titles(self) -> list[str]:
        """Title of each item, by ``item_idx``."""
        return self.items.get_column("title").to_list()

    @cached_property
    def interactions(self) -> pl.DataFrame:
        """``user_idx``, ``user_id``, ``item_idx``, ``timestamp`` (ms), ``phase``; sorted by user, time."""
        return _read(self.root / "interactions.parquet")

    @cached_property
    def _examples(self) -> pl.DataFrame:
        return _read(self.root / "examples.parquet")

    def examples(self, phase: str) -> pl.DataFrame:
        """Examples whose target lies in ``phase``: ``phase``, ``user_idx``, ``target``, ``history``, ``timestamp``."""
        self._check_phase(phase)
        return self._examples.filter(pl.col("phase") == phase)

    def active_users(self, phase: str) -> set[int]:
        """Users with at least one interaction in ``phase``."""
        self._check_phase(phase)
        inter = self.interactions.filter(pl.col("phase") == phase)
        return set(inter.get_column("user_idx").unique().to_list())

    def popularity(self, phases: str | Iterable[str]) -> np.ndarray:
        """Interaction count of each item (by ``item_idx``) over the given phase(s)."""
        names = [phases] if isinstance(phases, str) else list(phases)
        for p in names:
            self._check_phase(p)
        idx = self.interactions.filter(pl.col("phase").is_in(names)).get_column("item_idx").to_numpy()
        return np.bincount(idx, minlength=self.n_items).astype(np.int64)

    def _check_phase(self, phase: str) -> None:
        if phase not in self._phases:
            raise PreparedDataError(f"domain {self.name!r}: unknown phase {phase!r}; phases are {list(self._phases)}.")


class PreparedDataset:
    """A prepared dataset folder written by ``mmgrid prepare``."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root, self.manifest = root, manifest
        self._domains: dict[str, DomainData] = {}

    def __repr__(self) -> str:
        return f"PreparedDataset({str(self.root)!r}, domains={self.domains})"

    @property
    def domains(self) -> list[str]:
        return list(self.manifest["domains"])

    @property
    def fingerprint(self) -> str:
        """Hash of the prepared data's content: the raw files' sha256 and every data setting that
        shapes the prepared data, never where the files are (``data.root``, however it is spelled,
        and the input files' paths are left out; so is ``data.strict``, which only decides whether
        a bad line raises). The same raw files prepared the same way from another folder, a
        symlink or another disk have the same fingerprint (see :func:`content_fingerprint`)."""
        return content_fingerprint(self.manifest)

    @property
    def path_fingerprint(self) -> str:
        """The path fingerprint: the data settings with ``data.root`` and the input files' absolute
        paths, the data part of a stage identity before the content fingerprint; ``mmgrid registry
        remap-ids`` reads it to map checkpoints stored under such identities onto today's ids."""
        return str(self.manifest["fingerprint"])

    @property
    def phases(self) -> dict[str, tuple[int | None, int | None]]:
        """Phase name → half-open ``(start_ms, end_ms)``, in time order (None = open end)."""
        return {k: (v[0], v[1]) for k, v in self.manifest["phases"].items()}

    def domain(self, name: str) -> DomainData:
        if name not in self.manifest["domains"]:
            raise PreparedDataError(f"{self.root}: no domain {name!r}; domains are {self.domains}.")
        if name not in self._domains:
            self._domains[name] = DomainData(self.root, name, self.phases)
        return self._domains[name]

    def stats(self) -> pl.DataFrame:
        """One row a domain (see :mod:`mmgrid.data.stats`)."""
        return _read(self.root / "stats.parquet")

    def lm_text(self, split: str) -> list[str]:
        """Review texts set apart for the base LM: ``split`` is ``train`` or ``heldout``."""
        if split not in ("train", "heldout"):
            raise PreparedDataError(f"lm_text split must be 'train' or 'heldout', got {split!r}.")
        df = _read(self.root / "lm_text.parquet")
        return df.filter(pl.col("split") == split).get_column("text").to_list()


# what only says where the raw files are, or whether a bad line raises: never part of the content
LOCATION_FIELDS = ("root", "strict")


def content_fingerprint(manifest: dict[str, Any]) -> str:
    """The content fingerprint of a prepared dataset's manifest: its format, its data settings
    without :data:`LOCATION_FIELDS`, and the multiset of its input files' sha256 (their paths are
    left out)."""
    config = {k: v for k, v in dict(manifest.get("config") or {}).items() if k not in LOCATION_FIELDS}
    digests = sorted(str(v.get("sha256")) for v in dict(manifest.get("inputs") or {}).values())
    return stable_hash({"format": manifest.get("format"), "config": config, "inputs": digests, "identity": "content"})


def load_prepared(root: str | Path) -> PreparedDataset:
    """Open a prepared dataset folder (the manifest is written last, so its presence means complete)."""
    root = Path(root)
    path = root / MANIFEST
    if not path.exists():
        raise PreparedDataError(
            f"{root}: no {MANIFEST}; this is not a prepared dataset. Run `mmgrid prepare CONFIG --out {root}`."
        )
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PreparedDataError(f"{path}: not valid JSON ({exc}); run `mmgrid prepare` again.") from exc
    return PreparedDataset(root, manifest)


def _read(path: Path) -> pl.DataFrame:
    if not path.exists():
        raise PreparedDataError(f"{path} is missing; the prepared dataset is incomplete. Run `mmgrid prepare` again.")
    return pl.read_parquet(path)
