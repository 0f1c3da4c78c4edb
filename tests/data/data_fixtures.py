"""Tiny handmade Amazon-2023-layout files for the data tests.

The hand-computed case (dates UTC, kcore 1, paper phases):

    u1: A 2022-01-01 (pretrain), D 2022-02-01 (pretrain), B 2022-08-01 (p1), C 2022-11-01 (p2),
        A again 2023-02-01 (a duplicate: dropped, the earliest is kept)
    u2: B 2022-03-01 (pretrain), C 2023-01-15 (test)
    u3: A 2022-05-01 (pretrain), C 2022-12-01 (p2), B 2023-02-10 (test)
    u4: F 2022-04-01 -> F has no metadata: dropped
    u1: E 2022-06-01 -> E has an empty title: dropped
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml


def ms(date: str) -> int:
    """``YYYY-MM-DD`` (UTC) → Unix milliseconds."""
    return int(datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp() * 1000)


def review(user: str, item: str, date: str, **extra: Any) -> dict[str, Any]:
    rec = {
        "rating": 5.0, "title": f"Nice {item}", "text": f"{user} liked {item}", "images": [], "asin": item,
        "parent_asin": item, "user_id": user, "timestamp": ms(date), "helpful_vote": 0, "verified_purchase": True,
    }  # fmt: skip
    rec.update(extra)
    return rec


def meta(item: str, title: str | None, **extra: Any) -> dict[str, Any]:
    rec = {
        "main_category": "Toys", "title": title, "average_rating": 4.5, "rating_number": 3,
        "features": [f"feature of {item}"], "description": [f"About {item}."], "price": 9.99, "images": [],
        "videos": [], "store": "Acme", "categories": [], "details": {"Brand": "Acme"}, "parent_asin": item,
        "bought_together": None,
    }  # fmt: skip
    rec.update(extra)
    return rec


HAND_REVIEWS = [
    review("u1", "A", "2022-01-01"),
    review("u1", "D", "2022-02-01"),
    review("u1", "B", "2022-08-01"),
    review("u1", "C", "2022-11-01"),
    review("u1", "A", "2023-02-01"),
    review("u2", "B", "2022-03-01"),
    review("u2", "C", "2023-01-15"),
    review("u3", "A", "2022-05-01"),
    review("u3", "C", "2022-12-01"),
    review("u3", "B", "2023-02-10"),
    review("u4", "F", "2022-04-01"),
    review("u1", "E", "2022-06-01"),
]
HAND_META = [meta("A", "Alpha toy"), meta("B", "Beta toy"), meta("C", "Gamma toy"), meta("D", "Delta toy"), meta("E", "  ")]


def write_jsonl(path: Path, records: list[Any], gz: bool = False, raw_lines: dict[int, str] | None = None) -> Path:
    """Write records as JSON lines; ``raw_lines`` inserts verbatim lines at 0-based positions."""
    lines = [json.dumps(r) for r in records]
    for pos, text in sorted((raw_lines or {}).items()):
        lines.insert(pos, text)
    blob = ("\n".join(lines) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(blob))
    else:
        path.write_bytes(blob)
    return path


def write_category(root: Path, name: str, reviews: list[Any], metas: list[Any], gz: bool = False,
                   raw_lines: dict[int, str] | None = None) -> Path:  # fmt: skip
    """Write one category in the Amazon 2023 layout under ``root``; returns the review file."""
    write_jsonl(root / "raw" / "meta_categories" / f"meta_{name}.jsonl", metas, gz=gz)
    return write_jsonl(root / "raw" / "review_categories" / f"{name}.jsonl", reviews, gz=gz, raw_lines=raw_lines)


def grid_yaml(tmp: Path, data: dict[str, Any], name: str = "t", **top: Any) -> Path:
    """A minimal grid YAML with the given ``data`` section."""
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"name": name, "data": data, "prepared": str(tmp / "prepared"), **top}))
    return p


