"""Offline by default: with downloads off, loading a hub id opens no network connection.

Sockets are blocked (every connect attempt is recorded and refused): a hub id that is not in
the Hugging Face cache fails at once with a named error that says where it looked and how to
fetch the model by hand; a hub id whose snapshot is cached, a local folder and the default
embedder load without a single connect attempt.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))
import train_fakes as F  # noqa: E402

from mmgrid.config import BaseConfig  # noqa: E402
from mmgrid.errors import ModelError  # noqa: E402
from mmgrid.models import load_base, tiny_qwen3, train_tokenizer  # noqa: E402
from mmgrid.paradigms import embedder as E  # noqa: E402
from mmgrid.registry.api import Registry  # noqa: E402


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list:
    """Block every socket connection; the list records each attempt."""
    attempts: list = []

    def connect(self, address):  # noqa: ANN001, ANN202
        attempts.append(address)
        raise OSError("network blocked by the test")

    def create_connection(address, *args, **kwargs):  # noqa: ANN001, ANN202
        attempts.append(address)
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    return attempts


@pytest.fixture
def empty_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_the_fixture_blocks_and_records_a_connection(no_network: list) -> None:
    with pytest.raises(OSError, match="blocked"):
        socket.create_connection(("huggingface.co", 443), timeout=1)
    assert no_network == [("huggingface.co", 443)]


def test_a_hub_id_with_downloads_off_fails_by_name_without_a_connect(no_network: list, empty_hf_cache: Path,
                                                                    tmp_path: Path) -> None:
    reg = Registry.open(tmp_path / "reg")
    with pytest.raises(ModelError) as info:
        load_base(BaseConfig(model="Qwen/Qwen3-0.6B"), F.FakePrepared([F.make_domain("A")]), reg)
    msg = str(info.value)
    assert no_network == []  # not one attempt: no retry, no wait
    assert str(empty_hf_cache) in msg  # where it looked: the HF cache ...
    assert str(Path("Qwen/Qwen3-0.6B").absolute()) in msg  # ... and the folder the name would be
    assert "hf download Qwen/Qwen3-0.6B --local-dir models/Qwen3-0.6B" in msg
    assert "base.model=models/Qwen3-0.6B" in msg and "base.allow_download=true" in msg
    assert reg.query().empty  # nothing was stored


def test_a_hub_id_embedder_fails_by_name_without_a_connect(no_network: list, empty_hf_cache: Path) -> None:
    with pytest.raises(ModelError) as info:
        E.resolve_embedder_path("sentence-transformers/all-MiniLM-L6-v2")
    msg = str(info.value)
    assert no_network == []
    assert "never downloads" in msg and str(empty_hf_cache) in msg
    assert "hf download sentence-transformers/all-MiniLM-L6-v2 --local-dir models/all-MiniLM-L6-v2" in msg
    assert "paradigm_params.<text|semid>.embedder=models/all-MiniLM-L6-v2" in msg


def _hf_folder(folder: Path) -> torch.nn.Module:
    tok = train_tokenizer(["red cotton shirt", "blue steel kettle"] * 20, vocab_size=300)
    model = tiny_qwen3(len(tok))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model


def test_a_cached_hub_id_loads_from_the_cache_without_a_connect(no_network: list, empty_hf_cache: Path,
                                                               tmp_path: Path) -> None:
    # the Hugging Face cache layout: models--ORG--NAME/{refs/main, snapshots/REVISION/...}
    repo = empty_hf_cache / "models--acme--tiny-qwen3"
    model = _hf_folder(repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    reg = Registry.open(tmp_path / "reg")
    bundle, bid = load_base(BaseConfig(model="acme/tiny-qwen3"), F.FakePrepared([F.make_domain("A")]), reg)
    assert no_network == []
    assert reg.get(bid).kind == "base"
    assert torch.equal(bundle.model.lm_head.weight, model.lm_head.weight)


def test_a_local_folder_and_the_default_embedder_load_without_a_connect(no_network: list, tmp_path: Path) -> None:
    model = _hf_folder(tmp_path / "hf")
    reg = Registry.open(tmp_path / "reg")
    bundle, _ = load_base(BaseConfig(model=str(tmp_path / "hf")), F.FakePrepared([F.make_domain("A")]), reg)
    assert torch.equal(bundle.model.lm_head.weight, model.lm_head.weight)
    E.clear_caches()
    vecs = E.encode(["red cotton shirt", "steel kettle"])
    assert vecs.shape == (2, 384)
    assert no_network == []
