"""The one safetensors header parser (registry blobs and merge inputs read it)."""

from __future__ import annotations

import struct

import pytest
import torch
from safetensors.torch import save

from mmgrid.fileio.safetensors import safetensors_header


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



@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}])  # one key: the library orders several as it hashes them
def test_encode_header_writes_the_librarys_bytes(metadata):
    """The header of encode_header followed by the data is byte for byte what safetensors.torch.save writes
    (the registry's blob names and the merge writer's files depend on it)."""
    from mmgrid.fileio.safetensors import encode_header

    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(5, dtype=torch.bfloat16),
             "i": torch.tensor([1, -2], dtype=torch.int64), "m": torch.tensor([True, False, True])}
    raw = save(state, metadata=metadata)
    # the library sorts tensors by (dtype alignment, name); lay them out in the order it wrote them
    _, header = safetensors_header(_reader(raw), len(raw))
    order = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    head = encode_header([(k, state[k].shape, state[k].dtype) for k in order], metadata)
    data = b"".join(state[k].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() for k in order)
    assert head + data == raw


def test_the_dtype_table_round_trips_and_refuses_what_safetensors_cannot_store():
    from mmgrid.fileio.safetensors import ST_DTYPES, SafetensorsFormatError, dtype_name, torch_dtype

    for name, attr in ST_DTYPES.items():
        if hasattr(torch, attr):
            assert dtype_name(getattr(torch, attr)) == name and torch_dtype(name) == getattr(torch, attr)
    assert torch_dtype("float32") is torch.float32 and torch_dtype("torch.bfloat16") is torch.bfloat16
    assert torch_dtype("bf16") is torch.bfloat16  # names are case-blind
    with pytest.raises(SafetensorsFormatError, match="cannot be stored in safetensors"):
        dtype_name(torch.complex64)
    with pytest.raises(SafetensorsFormatError, match="unsupported tensor dtype C64"):
        torch_dtype("C64")
