"""Where a mergekit recipe is carried out (:func:`run_mergekit_recipe`): the recipe is checked,
then merged by the engine (:mod:`.run`), or copied where it is a plain copy.

A plain copy is mergekit's ``passthrough`` of one HF folder holding a single
``model.safetensors``, every tensor at scale 1, written in the stored dtype, into one shard:
the merged file is then the input file, tensor for tensor and bit for bit. It is copied whole
after the check the engine makes (no floating tensor holds NaN or Inf), and neither torch nor
the engine is imported: their start-up (about 1.2 s, torch 1.1 s of it) is most of the time of
a one-file copy. Every other recipe, and any input this path cannot read, goes to the engine,
which gives the same tensors (or its named error).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from mmgrid.fileio.atomic import fsync_file
from mmgrid.fileio.safetensors import FLOAT_BITS
from mmgrid.merge.errors import MergekitRecipeError, NonFiniteError, SourceError
from mmgrid.merge.mergekit import folder as fo
from mmgrid.merge.mergekit import spec as sp
from mmgrid.registry import card
from mmgrid.registry.blobfmt import safetensors_header

COPY_METHOD = "passthrough"  # the built-in mmgrid method a plain copy maps onto
FLOATS = FLOAT_BITS  # safetensors float dtypes: (config.json's name, item size, the exponent bits)
OTHER_FLOATS = {"F64", "F8_E4M3", "F8_E5M2"}  # floats this path does not check: the engine merges them
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16",
               "bfloat16": "bfloat16", "bf16": "bfloat16"}
CHECK_BYTES = 8 << 20  # bytes per read of the NaN/Inf check


def run_mergekit_recipe(recipe: str | Path | dict, out: str | os.PathLike | None = None, registry: Any = None,
                        coords: dict[str, Any] | None = None, max_shard_bytes: int = fo.DEFAULT_SHARD_BYTES,
                        overwrite: bool = False, dry_run: bool = False) -> fo.MergekitResult:
    """Run a mergekit YAML recipe (a path, YAML text or a dict) with mmgrid's engine.

    Args:
        out: write an HF folder there (it must not exist, or be empty, unless ``overwrite``).
        registry: an open ``mmgrid.Registry``: models may be its ids; without ``out`` the
            result is stored there (kind ``merged``, lineage edges ``merge_input`` and
            ``merge_base`` for inputs that are registry checkpoints).
        coords: coords of a registry result (default: the inputs' joined coords, or
            paradigm/domain/period ``none`` for folder inputs; variant ``mergekit-METHOD``).
        max_shard_bytes: shard above this many bytes (save_pretrained's 5 GB default).
        dry_run: check everything, write nothing.

    Raises:
        MergekitRecipeError / MergekitUnsupportedError: a bad or unsupported recipe;
        SourceError, ShapeMismatchError, MergeParamError, NonFiniteError...: as ``merge``.
        Nothing is written when any is raised.
    """
    data, where = sp.read(recipe)
    copying = isinstance(data, dict) and data.get("merge_method") == COPY_METHOD
    spec = sp.parse(data, where, [COPY_METHOD] if copying else None)
    if out is None and registry is None:
        raise MergekitRecipeError("give out=FOLDER (an HF folder) or registry= (a registry checkpoint) for the result")
    out_p = None if out is None else Path(out)
    if out_p is not None and out_p.exists() and not overwrite and (not out_p.is_dir() or any(out_p.iterdir())):
        raise MergekitRecipeError(f"output {out_p} exists and is not empty; choose a new folder or pass overwrite=True (--overwrite)")
    if copying and out_p is not None and not dry_run:
        done = copy_recipe(spec, out_p, registry, max_shard_bytes)
        if done is not None:
            return done
    # lazy: the merge engine imports torch (about 1 s); a plain copy above runs without it
    from mmgrid.merge.mergekit.run import merge_recipe

    return merge_recipe(spec, out_p, registry, coords, max_shard_bytes, dry_run)


def copy_recipe(spec: sp.MergekitSpec, out: Path, registry: Any, max_shard_bytes: int) -> fo.MergekitResult | None:
    """Carry out a passthrough recipe as a copy of its model's file (module docstring); None,
    before anything is written, where it is not a plain copy."""
    if spec.base is not None or len(spec.models) != 1 or not fo.is_path(spec.models[0]):
        return None
    src = Path(spec.models[0])
    weights = src / fo.SINGLE
    if not src.is_dir() or not weights.is_file() or (src / fo.INDEX).exists():
        return None
    tensors = _tensors(weights)
    if tensors is None:
        return None
    names = list(tensors)
    layers = fo.num_layers(fo.read_files(src, ["config.json"]).get("config.json"), names)
    build = spec.row.build
    if build is None:
        return None
    for name in names:
        if build(spec.resolve(name, sp.layer_position(name, layers)), {"scale"}) != (COPY_METHOD, {"scale": 1.0}, ""):
            return None
    want = DTYPE_NAMES.get(spec.out_dtype or spec.dtype or "")
    floats = [(n, t) for n, t in tensors.items() if t[0] in FLOATS or t[0] in OTHER_FLOATS]
    if any(t[0] in OTHER_FLOATS or (want is not None and FLOATS[t[0]][0] != want) for _, t in floats):
        return None
    if sum(b - a for _, a, b in tensors.values()) > max_shard_bytes:
        return None
    tok = src
    if spec.tokenizer_source is not None:
        tok = Path(spec.tokenizer_source)
        if not fo.is_path(spec.tokenizer_source) or not tok.is_dir():
            return None
    check_finite(weights, str(src), floats)
    files = fo.read_files(src, fo.CONFIG_FILES)
    files.update(fo.read_files(tok, fo.TOKENIZER_FILES))
    if "config.json" in files:
        config = fo.config_with_dtype(files["config.json"], want)
        assert config is not None  # bytes in, bytes out
        files["config.json"] = config
    groups = [fo.Group(COPY_METHOD, {"scale": 1.0}, "", names)]
    files[card.CARD_FILE] = card.render_card(fo.recipe_card(spec, groups, registry)).encode()

    def copy(tmp: Path) -> list[str]:
        shutil.copyfile(weights, tmp / fo.SINGLE)
        fsync_file(tmp / fo.SINGLE)  # as durable as the engine's writer
        return [fo.SINGLE]

    return fo.MergekitResult(out, None, groups, fo.publish_folder(out, copy, files))


def _tensors(path: Path) -> dict[str, tuple[str, int, int]] | None:
    """name -> (safetensors dtype, first byte, end byte) in the file; None where the header is
    not one this path reads (the engine then names what is wrong)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            def read(pos: int, k: int) -> bytes:
                fh.seek(pos)
                return fh.read(k)

            n, header = safetensors_header(read, size)
        out = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            a, b = (int(x) for x in t["data_offsets"])
            if not 0 <= a <= b or 8 + n + b > size:
                return None
            out[name] = (str(t["dtype"]), 8 + n + a, 8 + n + b)
        return out
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_finite(path: Path, label: str, floats: list[tuple[str, tuple[str, int, int]]]) -> None:
    """Raise NonFiniteError naming the first floating tensor of ``path`` holding NaN or Inf.

    Its exponent bits all set (the bit pattern as a signed integer at least the exponent mask,
    or as an unsigned one at least sign bit | mask): two maxima per block, no temporaries.
    """
    import numpy as np  # lazy: only a plain copy reads bit patterns (torch is not imported there)

    buf = bytearray(CHECK_BYTES)
    view = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        for name, (dt, a, b) in floats:
            _, size, mask = FLOATS[dt]
            sign = 1 << (8 * size - 1)
            signed, unsigned = np.dtype(f"<i{size}"), np.dtype(f"<u{size}")
            pos = a
            while pos < b:
                k = min(CHECK_BYTES, b - pos)
                got = os.preadv(fd, [view[:k]], pos)
                if got <= 0 or got % size:
                    raise SourceError(f"{label}: tensor data of {name!r} is truncated; the file is incomplete")
                raw = np.frombuffer(buf, dtype=np.uint8, count=got)
                if int(raw.view(signed).max()) >= mask or int(raw.view(unsigned).max()) >= sign | mask:
                    raise NonFiniteError(f"tensor {name!r} of {label} holds NaN or Inf; fix or retrain that checkpoint")
                pos += got
    finally:
        os.close(fd)
