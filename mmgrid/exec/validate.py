"""Checks of a grid that matter when it runs at scale (called by ``mmgrid validate``).

Nothing is downloaded or imported heavily: files are only looked for, hub ids only
checked for their form, and Ray only looked up. Everything here is a warning: a paper-
scale grid is usually validated before its data and models are in place.
"""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.config import GridConfig

# The categories of Amazon Reviews 2023 (https://amazon-reviews-2023.github.io/).
AMAZON2023_CATEGORIES = (
    "All_Beauty", "Amazon_Fashion", "Appliances", "Arts_Crafts_and_Sewing", "Automotive", "Baby_Products",
    "Beauty_and_Personal_Care", "Books", "CDs_and_Vinyl", "Cell_Phones_and_Accessories",
    "Clothing_Shoes_and_Jewelry", "Digital_Music", "Electronics", "Gift_Cards", "Grocery_and_Gourmet_Food",
    "Handmade_Products", "Health_and_Household", "Health_and_Personal_Care", "Home_and_Kitchen",
    "Industrial_and_Scientific", "Kindle_Store", "Magazine_Subscriptions", "Movies_and_TV",
    "Musical_Instruments", "Office_Products", "Patio_Lawn_and_Garden", "Pet_Supplies", "Software",
    "Sports_and_Outdoors", "Subscription_Boxes", "Tools_and_Home_Improvement", "Toys_and_Games",
    "Video_Games", "Unknown",
)  # fmt: skip
AMAZON2023_URL = "https://datarepo.eng.ucsd.edu/mcauley_group/data/amazon_2023/raw"
_EMBEDDER_DEFAULT = "all-minilm-l6-v2"


def check_scale(cfg: "GridConfig") -> list[str]:
    """Warnings about data files, local model folders and execution settings.

    Returns:
        Human-readable warnings (empty when the grid is ready to run here).
    """
    return _check_data(cfg) + _check_embedders(cfg) + _check_exec(cfg)


def _check_data(cfg: "GridConfig") -> list[str]:
    if cfg.data.source != "amazon2023" or cfg.world is not None:
        return []  # a synthetic world is written by `mmgrid demo`/`mmgrid world`
    out = []
    for d in cfg.data.domains:
        if d not in AMAZON2023_CATEGORIES:
            close = difflib.get_close_matches(d, AMAZON2023_CATEGORIES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append(f"data.domains: {d!r} is not an Amazon Reviews 2023 category{hint}.")
    root = Path(cfg.data.root)
    missing = [d for d in cfg.data.domains if not _raw_files_present(root, d)]
    if missing:
        out.append(
            f"data.root {root}: no raw files yet for {', '.join(missing)}; download "
            f"{AMAZON2023_URL}/review_categories/<Domain>.jsonl.gz and "
            f"{AMAZON2023_URL}/meta_categories/meta_<Domain>.jsonl.gz into {root}/raw/... (docs/scale.md)."
        )
    return out


def _raw_files_present(root: Path, domain: str) -> bool:
    reviews = [root / "raw" / "review_categories" / f"{domain}.jsonl{ext}" for ext in ("", ".gz")]
    meta = [root / "raw" / "meta_categories" / f"meta_{domain}.jsonl{ext}" for ext in ("", ".gz")]
    return any(p.is_file() for p in reviews) and any(p.is_file() for p in meta)


def _check_embedders(cfg: "GridConfig") -> list[str]:
    out = []
    for paradigm in cfg.paradigms:
        name = (cfg.paradigm_params.get(paradigm) or {}).get("embedder")
        if name and name != _EMBEDDER_DEFAULT and not Path(str(name)).expanduser().is_dir():
            out.append(
                f"paradigm_params.{paradigm}.embedder: {name!r} is not a local folder yet; mmgrid never "
                "downloads models, so place a sentence-transformers folder there before `mmgrid build`."
            )
    return out


def _check_exec(cfg: "GridConfig") -> list[str]:
    ex, out = cfg.exec, []
    if ex.executor == "ray" and importlib.util.find_spec("ray") is None:
        out.append("exec.executor is ray but Ray is not installed: pip install 'mmgrid[ray]'.")
    if ex.workers != 1 and ex.executor != "local":
        out.append(f"exec.workers is {ex.workers} but exec.executor is {ex.executor}: workers apply to the local "
                   "executor only (Ray schedules by exec.num_cpus_per_job).")
    if ex.executor == "local" and ex.workers > 1 and cfg.train.device == "cuda":
        out.append(f"exec.workers is {ex.workers} with train.device cuda: the local workers would share the GPU, "
                   "each with its own CUDA context; use 1, or Ray with exec.num_gpus_per_train.")
    gpus = max(ex.num_gpus_per_train, ex.num_gpus_per_eval)
    if gpus > 0 and cfg.train.device == "cpu":
        out.append("exec asks for GPUs per job but train.device is cpu: the GPUs would sit idle.")
    if cfg.train.device == "cuda" and gpus == 0:
        out.append(
            "train.device is cuda but exec.num_gpus_per_train is 0: on Ray, several jobs would share one GPU."
        )
    if ex.address and not Path(str(cfg.registry)).is_absolute():
        out.append(
            f"exec.address joins a Ray cluster: registry {cfg.registry!r} is relative, so every node must start "
            "in the same shared folder; an absolute path on a shared filesystem is safer."
        )
    return out
