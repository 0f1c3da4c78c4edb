"""Hugging Face model folders: read one (single or sharded safetensors) as a streaming
:class:`~mmgrid.merge.tensors.TensorSource`, write one (sharded above a size, with
``model.safetensors.index.json``, as ``save_pretrained`` does).

Only safetensors are read: a folder with nothing but ``pytorch_model.bin`` is refused
(mmgrid never unpickles).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mmgrid.fileio.atomic import swap_dir
from mmgrid.merge.errors import SourceError
from mmgrid.merge.mergekit.folder import (CONFIG_FILES, DEFAULT_SHARD_BYTES, INDEX, SINGLE, TOKENIZER_FILES,  # noqa: F401
                                          config_with_dtype, publish_folder, read_files)
from mmgrid.merge.tensors import SafetensorsWriter, TensorSource, from_safetensors

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def open_folder(path: str | os.PathLike, label: str) -> TensorSource:
    """A streaming source over an HF folder: ``model.safetensors`` or the shards listed
    by ``model.safetensors.index.json``; ``files`` holds its config and tokenizer files.

    Raises:
        SourceError: no safetensors (a ``.bin``-only folder), a shard missing, a tensor
            listed in two shards or absent from its shard.
    """
    p = Path(path)
    if not p.is_dir():
        raise SourceError(f"{label}: {p} is not a folder; give an HF model folder (config.json + safetensors) or a registry id")
    if (p / INDEX).is_file():
        try:
            wmap = json.loads((p / INDEX).read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SourceError(f"{label}: {p / INDEX} is not a safetensors index with a weight_map ({exc})") from exc
        shards: dict[str, TensorSource] = {}
        for fname in dict.fromkeys(wmap.values()):
            if "/" in fname or fname.startswith("."):
                raise SourceError(f"{label}: {p / INDEX} names shard {fname!r} outside the folder")
            shards[fname] = from_safetensors(p / fname)
        shapes: dict[str, Any] = {}
        owner: dict[str, str] = {}
        for fname, src in shards.items():
            for name, spec in src.shapes.items():
                if name in owner:
                    raise SourceError(f"{label}: tensor {name} is in both {owner[name]} and {fname}; the checkpoint is inconsistent")
                owner[name] = fname
                shapes[name] = spec
        missing = [n for n in wmap if owner.get(n) != wmap[n]]
        if missing:
            raise SourceError(f"{label}: {p / INDEX} lists {missing[:3]} in shards that do not hold them; re-save the model")
        order = {n: i for i, n in enumerate(wmap)}
        shapes = dict(sorted(shapes.items(), key=lambda kv: order.get(kv[0], len(order))))
        src = TensorSource(str(p), shapes, lambda n: shards[owner[n]].get(n),
                           locate=lambda n: shards[owner[n]].locate(n))
    elif (p / SINGLE).is_file():
        src = from_safetensors(p / SINGLE)
        src.label = str(p)
    else:
        bins = sorted(x.name for x in p.glob("*.bin"))
        why = f" (only {', '.join(bins)}: mmgrid never unpickles; convert it to safetensors first)" if bins else ""
        raise SourceError(f"{label}: {p} has no {SINGLE} or {INDEX}{why}")
    src.files = read_files(p, CONFIG_FILES + TOKENIZER_FILES)
    return src


def shard_plan(layout: list[tuple[str, tuple[int, ...], torch.dtype]], max_bytes: int) -> list[list[tuple[str, tuple[int, ...], torch.dtype]]]:
    """Split tensors in order into shards of at most ``max_bytes`` (a bigger tensor gets a
    shard of its own), as ``save_pretrained`` does."""
    shards: list[list[Any]] = [[]]
    size = 0
    for name, shape, dtype in layout:
        n = dtype.itemsize
        for s in shape:
            n *= int(s)
        if shards[-1] and size + n > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape, dtype))
        size += n
    return shards


def write_folder(out: Path, layout: list[tuple[str, tuple[int, ...], torch.dtype]], get: Callable[[str], torch.Tensor],
                 files: dict[str, bytes], max_shard_bytes: int = DEFAULT_SHARD_BYTES) -> list[str]:
    """Write an HF folder at ``out`` (replaced whole if it exists: the caller decides): the tensors of ``layout`` (in that
    order and dtype, each read with ``get``) as ``model.safetensors`` or, above
    ``max_shard_bytes``, ``model-0000i-of-0000n.safetensors`` with the index; and
    ``files``. Built in a sibling temporary folder, renamed into place when complete
    (an existing ``out`` is swapped out only then, so an error leaves it as it was).
    Returns the weight file names."""

    def weights(tmp: Path) -> list[str]:
        shards = shard_plan(layout, max_shard_bytes)
        names = [SINGLE] if len(shards) == 1 else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
        wmap, total = {}, 0
        for fname, shard in zip(names, shards):
            w = SafetensorsWriter(tmp / fname, shard, {"format": "pt"}, durable=True)
            try:
                for name, _, dtype in shard:
                    t = get(name)
                    w.write(name, t.to(dtype))
                    wmap[name] = fname
                    total += t.numel() * dtype.itemsize
                w.close()
            except BaseException:
                w.abort()
                raise
        if len(names) > 1:
            (tmp / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": wmap}, indent=2) + "\n")
        return names

    return publish_folder(out, weights, files)
