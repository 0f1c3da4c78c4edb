"""The bytes of a tensor blob: a one-tensor safetensors file under the key ``"t"``.

``tensor_bytes`` writes exactly what ``safetensors.torch.save({"t": tensor})`` writes
(the header of :func:`mmgrid.fileio.safetensors.encode_header`), so a blob's name (the sha256
of its bytes) does not depend on which code path wrote it. ``blob_header`` reads a blob's
header with the one parser (:func:`mmgrid.fileio.safetensors.safetensors_header`);
``from_blob`` turns verified bytes back into a tensor without copying them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from mmgrid.fileio.safetensors import ST_DTYPES, encode_header, safetensors_header
from mmgrid.registry.errors import CorruptBlobError

if TYPE_CHECKING:  # pragma: no cover
    import torch

TENSOR_KEY = "t"


def tensor_bytes(tensor: "torch.Tensor") -> tuple[bytes, memoryview]:
    """A one-tensor safetensors file as (header, data view), without copying the data."""
    import torch  # lazy: torch (~2-4 s) stays out of `import mmgrid.registry`

    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    head = encode_header([(TENSOR_KEY, t.shape, t.dtype)])
    data = t.reshape(-1).view(torch.uint8).numpy().data if t.numel() else memoryview(b"")
    return head, data


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
        return n, ST_DTYPES[info["dtype"]], tuple(info["shape"]), start, end
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
