"""The one safetensors header parser (registry blobs and merge inputs read it)."""

from __future__ import annotations

import struct

import pytest
import torch
from safetensors.torch import save

from mmgrid.registry.blobfmt import safetensors_header


def _reader(raw: bytes):
    return lambda offset, size: raw[offset:offset + size]


def test_reads_what_the_safetensors_library_writes():
    raw = save({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.zeros(4, dtype=torch.bfloat16)},
               metadata={"k": "v"})
    n, header = safetensors_header(_reader(raw), len(raw))
    assert n == struct.unpack("<Q", raw[:8])[0] and raw[8 + n:8 + n + 1] != b""
    assert header["__metadata__"] == {"k": "v"}
    assert header["w"]["shape"] == [2, 3] and header["w"]["dtype"] == "F32"
    assert header["b"]["dtype"] == "BF16"
    begin, end = header["w"]["data_offsets"]
    data = raw[8 + n + begin:8 + n + end]
    assert torch.frombuffer(bytearray(data), dtype=torch.float32).tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("raw, size, match", [
    (b"\x01\x02", 2, "shorter than the 8-byte header length"),
    (struct.pack("<Q", 1 << 50) + b"{}", 10, r"header length 1125899906842624 is larger than the file \(10 bytes\)"),
    (struct.pack("<Q", 2) + b"[]", 10, "JSON list, not an object"),
    (struct.pack("<Q", 3) + b"{x}", 11, "Expecting property name"),
])
def test_refuses_what_is_not_a_header(raw, size, match):
    with pytest.raises(ValueError, match=match):
        safetensors_header(_reader(raw), size)

