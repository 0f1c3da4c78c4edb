"""The bytes of a tensor blob: a one-tensor safetensors file under the key ``"t"``.

``tensor_bytes`` writes exactly what ``safetensors.torch.save({"t": tensor})`` writes
(JSON header padded with spaces to an 8-byte boundary), so a blob's name (the sha256 of
its bytes) does not depend on which code path wrote it. ``safetensors_header`` is the one
parser of a safetensors header (a registry blob's and a merge input's); ``blob_header``
reads a blob's with it; ``from_blob`` turns verified bytes back into a tensor without copying them.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from mmgrid.errors import RegistryError
from mmgrid.registry.errors import CorruptBlobError

if TYPE_CHECKING:  # pragma: no cover
    import torch

TENSOR_KEY = "t"

# safetensors dtype names <-> torch dtype attribute names
ST_TO_TORCH = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32", "U64": "uint64",
}
TORCH_TO_ST = {v: k for k, v in ST_TO_TORCH.items()}


def st_name(dtype: "torch.dtype") -> str:
    """The safetensors name of a torch dtype ("F32", "BF16"...).

    Raises:
        RegistryError: safetensors cannot store this dtype.
    """
    name = str(dtype).removeprefix("torch.")
    if name not in TORCH_TO_ST:
        raise RegistryError(f"tensor dtype {dtype} cannot be stored in safetensors; cast it (e.g. to float32).")
    return TORCH_TO_ST[name]


def tensor_bytes(tensor: "torch.Tensor") -> tuple[bytes, memoryview]:
    """A one-tensor safetensors file as (header, data view), without copying the data."""
    import torch  # lazy: torch (~2-4 s) stays out of `import mmgrid.registry`

    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    info = {TENSOR_KEY: {"dtype": st_name(t.dtype), "shape": list(t.shape), "data_offsets": [0, t.numel() * t.element_size()]}}
    head = json.dumps(info, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    data = t.reshape(-1).view(torch.uint8).numpy().data if t.numel() else memoryview(b"")
    return struct.pack("<Q", len(head)) + head, data


def safetensors_header(read: Callable[[int, int], bytes], size: int | None = None) -> tuple[int, dict]:
    """(n, header) of a safetensors file: its first 8 bytes are the little-endian length n
    of the JSON header that follows; the data starts at byte 8 + n.

    The one parser of that header (registry blobs and the merge's file sources read it
    here). ``read(offset, size)`` gives the file's bytes; with ``size`` (the file's length)
    a length past the end is refused before it is read: a foreign file would ask for
    petabytes.

    Raises:
        ValueError: the bytes are not a safetensors header (the caller names the file).
    """
    raw = read(0, 8)
    if len(raw) != 8:
        raise ValueError(f"{len(raw)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw)
    if size is not None and n > size - 8:
        raise ValueError(f"header length {n} is larger than the file ({size} bytes)")
    header = json.loads(read(8, n))
    if not isinstance(header, dict):
        raise ValueError(f"the header is a JSON {type(header).__name__}, not an object")
    return n, header


def blob_header(read: Callable[[int, int], bytes], path: Path) -> tuple[int, str, tuple[int, ...], int, int]:
    """(header length n, torch dtype name, shape, start, end) of a one-tensor safetensors
    blob; ``read(offset, size)`` gives its bytes. The data lies at [8 + n + start, 8 + n + end).

    Raises:
        CorruptBlobError: the bytes are not such a blob.
    """
    try:
        n, header = safetensors_header(read)
        info = header[TENSOR_KEY]
        start, end = (int(x) for x in info["data_offsets"])
        return n, ST_TO_TORCH[info["dtype"]], tuple(info["shape"]), start, end
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptBlobError(f"blob {path} is not a one-tensor safetensors file ({exc!r}); re-create the checkpoint.") from exc


def from_blob(buf: bytearray, path: Path) -> "torch.Tensor":
    """The tensor of a verified one-tensor safetensors blob, sharing ``buf``'s memory (no copy)."""
    import torch  # lazy: torch (~2-4 s) stays out of `import mmgrid.registry`

    n, dtype_name, shape, start, end = blob_header(lambda o, k: bytes(buf[o:o + k]), path)
    dtype = getattr(torch, dtype_name)
    count = end - start
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(buf, dtype=torch.uint8, count=count, offset=8 + n + start)
    return flat.view(dtype).reshape(shape)
