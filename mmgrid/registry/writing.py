"""What ``Registry.put`` checks and stores before the manifest is committed.

Every check that can refuse an input runs before the first byte reaches the registry
(or, for a stream of tensors read from files, before the batch's temporary files are
renamed into place: a refused batch leaves no blob, no file and no temporary file):

* tensor names non-empty and unique, dtypes storable in safetensors;
* no NaN or Inf in a floating-point tensor (:class:`NonFiniteTensorError`);
* file names plain (no '/', no '..'), contents bytes;
* params and meta JSON-able;
* an identity already stored is compared with the input (:func:`check_same_tensors`).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from mmgrid.errors import RegistryError
import mmgrid.registry.names as names
from mmgrid.fileio.safetensors import dtype_name
from mmgrid.registry.errors import IdentityConflictError, InvalidNameError, NonFiniteTensorError
from mmgrid.registry.manifest import BlobRef, Manifest
from mmgrid.registry.tensors import describe

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from mmgrid.registry.store import BlobStore

FINITE_CHUNK = 1 << 24  # elements checked at once (bounds the float32 copy of a float8 chunk)


def check_finite(name: str, tensor: "torch.Tensor") -> None:
    """Refuse a floating-point tensor holding NaN or Inf.

    One ``aminmax`` reduction per chunk (min and max propagate NaN, and an Inf is the max
    or the min): no mask is allocated, and it runs at memory speed (300 MB of bf16 in
    0.04 s here, where ``isfinite(t).all()`` took 3.3 s). Counts are computed only to
    word the error.

    Raises:
        NonFiniteTensorError: naming the tensor and how many NaN / Inf values it holds.
    """
    import torch  # lazy: torch (~2-4 s) stays out of `import mmgrid.registry`

    if not tensor.is_floating_point() or tensor.numel() == 0:
        return
    flat = tensor.detach().reshape(-1)
    for i in range(0, flat.numel(), FINITE_CHUNK):
        part = flat[i:i + FINITE_CHUNK]
        if part.dtype not in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
            part = part.float()  # float8: no aminmax kernel
        lo, hi = torch.aminmax(part)
        if math.isfinite(float(lo)) and math.isfinite(float(hi)):
            continue
        full = flat.float() if flat.dtype != part.dtype else flat
        nan, inf = int(torch.isnan(full).sum()), int(torch.isinf(full).sum())
        raise NonFiniteTensorError(
            f"tensor {name!r} ({tuple(tensor.shape)}, {tensor.dtype}) holds {nan} NaN and {inf} Inf values; "
            "NaN and Inf never enter the registry (nothing was stored). Find where they arise (a diverged "
            "loss, a too-large learning rate, an overflow in half precision) and put finite weights."
        )


def store_tensors(store: "BlobStore", items: Iterator[tuple[str, "torch.Tensor"]]) -> dict[str, BlobRef]:
    """Check and store every tensor (inside ``store.batch()``); returns name -> blob."""
    futures: dict[str, tuple[Any, tuple[int, ...], str, int]] = {}
    for name, tensor in items:
        if not isinstance(name, str) or not name:
            raise InvalidNameError(f"tensor name {name!r} must be a non-empty string.")
        if name in futures:
            raise RegistryError(f"tensor {name!r} appears twice (two shards?); every name must be unique.")
        dtype = dtype_name(tensor.dtype)  # refuse unsupported dtypes before any work
        check_finite(name, tensor)
        futures[name] = (store.submit_tensor(tensor), tuple(tensor.shape), dtype, tensor.numel() * tensor.element_size())
    blobs = {name: BlobRef(fut.result()[0], shape, dtype, int(nb)) for name, (fut, shape, dtype, nb) in futures.items()}
    if not blobs:
        raise RegistryError("the checkpoint has no tensors; pass a non-empty state dict or .safetensors path.")
    return blobs


def check_files(files: Mapping[str, Any] | None) -> dict[str, bytes]:
    """Validated name -> bytes of a checkpoint's small files (before anything is stored)."""
    out: dict[str, bytes] = {}
    for name, data in (files or {}).items():
        names.check_file_name(name)
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise RegistryError(f"file {name!r} must be bytes (e.g. Path(...).read_bytes()), got {type(data).__name__}.")
        out[name] = bytes(data)
    return out


def store_files(store: "BlobStore", files: Mapping[str, bytes]) -> dict[str, str]:
    return {name: store.put_file(data)[0] for name, data in check_files(files).items()}


def jsonable(value: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    try:
        return json.loads(names.canonical_json(dict(value or {})))
    except (TypeError, ValueError) as exc:
        raise RegistryError(f"{what} must be JSON-able (numbers, strings, lists, dicts; tuples become lists): {exc}") from exc


def check_same_tensors(m: Manifest, state_or_path: Any) -> None:
    """An identity already stored, put again: compare what costs nothing to compare.

    Tensor names, shapes and dtypes come from the state dict (or the safetensors headers)
    without reading any data, so they are always compared. Values are not: hashing them is
    the bulk of a put's cost, and recomputing a nondeterministic job (GPU kernels) gives
    other bits for the same identity; the first stored content stays, as documented.

    Raises:
        IdentityConflictError: names, shapes or dtypes differ.
    """
    ours = describe(state_or_path)
    theirs = {k: (tuple(b.shape), b.dtype) for k, b in m.blobs.items()}
    if ours == theirs:
        return
    missing, extra = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
    diff = [f"{k}: {ours[k]} vs stored {theirs[k]}" for k in sorted(set(ours) & set(theirs)) if ours[k] != theirs[k]]
    parts = ([f"{len(missing)} stored tensors absent (e.g. {', '.join(missing[:3])})"] if missing else []) + \
            ([f"{len(extra)} tensors not stored (e.g. {', '.join(extra[:3])})"] if extra else []) + \
            ([f"{len(diff)} shape/dtype differences (e.g. {'; '.join(diff[:3])})"] if diff else [])
    raise IdentityConflictError(
        f"checkpoint {m.id} ({m.kind} {m.coords}) is already stored with different content: {'; '.join(parts)}. "
        "The same identity (coords, kind, parents, params, config hash, seed) must mean the same checkpoint: "
        "give this one another identity (a params entry, a variant) or remove the stored one "
        "(`mmgrid registry gc ROOT --keep ...`). Nothing was stored."
    )
