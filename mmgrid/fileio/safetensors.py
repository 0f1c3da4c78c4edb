"""The safetensors format (https://github.com/huggingface/safetensors): its dtype names and its header.

A file is an 8-byte little-endian length n, a JSON header of n bytes (tensor name ->
``{"dtype", "shape", "data_offsets"}``, optionally ``"__metadata__"``: str -> str), then the data;
each tensor's bytes lie at ``[8 + n + begin, 8 + n + end)``. :func:`encode_header` writes a header
as ``safetensors.torch.save`` does (compact JSON padded with spaces to an 8-byte boundary), so
bytes written here equal the library's; :func:`safetensors_header` is the one parser (registry
blobs, merge inputs). The one dtype table: :data:`ST_DTYPES`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from mmgrid.errors import MmgridError

if TYPE_CHECKING:  # pragma: no cover
    import torch

# safetensors dtype name -> torch dtype attribute name
ST_DTYPES: dict[str, str] = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32", "U64": "uint64",
}
_NAMES = {v: k for k, v in ST_DTYPES.items()}  # torch attribute name -> safetensors name
# the float dtypes a byte-level check reads: (torch attribute name, item size, the exponent bits: all set = Inf/NaN)
FLOAT_BITS: dict[str, tuple[str, int, int]] = {
    "BF16": ("bfloat16", 2, 0x7F80), "F16": ("float16", 2, 0x7C00), "F32": ("float32", 4, 0x7F800000)}


class SafetensorsFormatError(MmgridError, ValueError):
    """A dtype safetensors cannot store, or bytes that are not a safetensors header."""


def dtype_name(dtype: "torch.dtype") -> str:
    """The safetensors name of a torch dtype ("F32", "BF16"...).

    Raises:
        SafetensorsFormatError: safetensors cannot store this dtype.
    """
    name = str(dtype).removeprefix("torch.")
    if name not in _NAMES:
        raise SafetensorsFormatError(f"tensor dtype {dtype} cannot be stored in safetensors; cast it (e.g. to float32).")
    return _NAMES[name]


def torch_dtype(name: str) -> "torch.dtype":
    """The torch dtype of a safetensors dtype name ("F32"), or of a torch name ("float32", "torch.float32").

    Raises:
        SafetensorsFormatError: no such dtype.
    """
    import torch  # lazy: torch (~2-4 s) stays out of `import mmgrid.fileio`

    text = str(name)
    attr = ST_DTYPES.get(text.upper()) or ST_DTYPES.get(_NAMES.get(text.lower().removeprefix("torch."), ""))
    if attr is None or not hasattr(torch, attr):
        raise SafetensorsFormatError(f"unsupported tensor dtype {name}; safetensors stores {', '.join(ST_DTYPES)}")
    return getattr(torch, attr)


def nbytes(shape: Sequence[int], dtype: "torch.dtype") -> int:
    """Bytes of a tensor of ``shape`` and ``dtype``."""
    n = dtype.itemsize
    for s in shape:
        n *= int(s)
    return n


def encode_header(layout: Iterable[tuple[str, Sequence[int], "torch.dtype"]],
                  metadata: Mapping[str, str] | None = None) -> bytes:
    """The 8-byte length and the JSON header of tensors laid out back to back in ``layout`` order
    (name, shape, dtype), ``metadata`` first where given (``{}`` writes an empty one)."""
    header: dict = {} if metadata is None else {"__metadata__": dict(metadata)}
    offset = 0
    for name, shape, dtype in layout:
        n = nbytes(shape, dtype)
        header[name] = {"dtype": dtype_name(dtype), "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # align the data section to 8 bytes
    return struct.pack("<Q", len(raw)) + raw


def safetensors_header(read: Callable[[int, int], bytes], size: int | None = None) -> tuple[int, dict]:
    """(n, header) of a safetensors file: its first 8 bytes are the little-endian length n
    of the JSON header that follows; the data starts at byte 8 + n.

    ``read(offset, size)`` gives the file's bytes; with ``size`` (the file's length) a length
    past the end is refused before it is read: a foreign file would ask for petabytes.

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
