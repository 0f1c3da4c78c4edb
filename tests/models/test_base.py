"""Base model factory: named builders, tokenizer, load_base caching, HF folders, bad input."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))
import train_fakes as F  # noqa: E402

from mmgrid.configtools import build  # noqa: E402
from mmgrid.errors import ModelError, UnknownNameError  # noqa: E402
from mmgrid.config import BaseConfig  # noqa: E402
from mmgrid.models import get_builder, load_base, parse_builder, tiny_qwen3, train_tokenizer  # noqa: E402
from mmgrid.registry.api import Registry  # noqa: E402
from mmgrid.train.base_lm import ensure_base  # noqa: E402


def test_tiny_qwen3_has_its_literal_sizes() -> None:
    m = tiny_qwen3(300)
    c = m.config
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
            c.head_dim, c.intermediate_size) == (300, 64, 2, 4, 2, 16, 128)
    assert type(m).__name__ == "Qwen3ForCausalLM"
    out = m(input_ids=torch.tensor([[1, 5, 7]]))
    assert out.logits.shape == (1, 3, 300)


def test_builder_names_and_unknown_builder() -> None:
    assert parse_builder("tiny_qwen3()") == "tiny_qwen3" and parse_builder("Qwen/Qwen3-0.6B") is None
    with pytest.raises(UnknownNameError, match=r"tiny_qwen3\(\)"):
        get_builder("tiny_qwen4")


def test_tokenizer_special_tokens_and_round_trip() -> None:
    tok = train_tokenizer(["red cotton shirt", "blue steel kettle"] * 20, vocab_size=300)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    ids = tok("blue shirt", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == "blue shirt"


def test_load_base_trains_once_then_hits_the_cache(tmp_path) -> None:
    from mmgrid.eval.retention import text_loss
    from mmgrid.models import base as base_mod

    prep = F.FakePrepared([F.make_domain("A")], fingerprint="base-test")
    reg = Registry.open(tmp_path / "reg")
    cfg = BaseConfig(vocab_size=300, lm_epochs=3, lm_batch_size=8, lm_lr=3e-3, max_length=24)
    with pytest.raises(ModelError, match="mmgrid build"):  # models/ loads bases; training one is train/'s
        load_base(cfg, prep, reg, seed=0)
    bundle, bid = ensure_base(cfg, prep, reg, seed=0)
    man = reg.get(bid)
    assert man.kind == "base" and {"config.json", "tokenizer.json"} <= set(man.files)
    assert man.meta["lm_losses"][-1] < man.meta["lm_losses"][0]  # the LM learned something
    # a fresh process would load it from the registry: same tensors, no training
    base_mod._CACHE.clear()
    again, bid2 = load_base(cfg, prep, reg, seed=0)  # no trainer given: it must come from the registry
    assert bid2 == bid
    for k, v in bundle.model.state_dict().items():
        assert torch.equal(v, again.model.state_dict()[k]), k
    heldout = prep.lm_text("heldout")
    assert text_loss(again.model, again.tokenizer, heldout) == pytest.approx(
        text_loss(bundle.model, bundle.tokenizer, heldout), rel=1e-6)
    untrained = tiny_qwen3(len(bundle.tokenizer))
    assert text_loss(bundle.model, bundle.tokenizer, heldout) < text_loss(untrained, bundle.tokenizer, heldout)


def test_hf_folder_without_tokenizer_is_a_model_error(tmp_path) -> None:
    tiny_qwen3(300).save_pretrained(tmp_path / "hf")
    reg = Registry.open(tmp_path / "reg")
    prep = F.FakePrepared([F.make_domain("A")])
    with pytest.raises(ModelError, match="tokenizer"):
        load_base(BaseConfig(model=str(tmp_path / "hf")), prep, reg)
    with pytest.raises(ModelError, match="is no folder .*nothing-here does not exist"):
        load_base(BaseConfig(model=str(tmp_path / "nothing-here")), prep, reg)


def test_hf_folder_with_tokenizer_becomes_the_root(tmp_path) -> None:
    tok = train_tokenizer(["red cotton shirt", "blue steel kettle"] * 20, vocab_size=300)
    model = tiny_qwen3(len(tok))
    model.save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    reg = Registry.open(tmp_path / "reg")
    cfg = build(BaseConfig, {"model": str(tmp_path / "hf")})
    bundle, bid = load_base(cfg, F.FakePrepared([F.make_domain("A")]), reg)
    assert reg.get(bid).kind == "base"
    assert torch.equal(bundle.model.lm_head.weight, model.lm_head.weight)


def test_hf_folder_with_only_pickle_weights_is_refused(tmp_path) -> None:
    tok = train_tokenizer(["red cotton shirt", "blue steel kettle"] * 20, vocab_size=300)
    model = tiny_qwen3(len(tok))
    model.save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    # a folder whose weights exist only as a pickle: mmgrid must refuse it without reading it
    (tmp_path / "hf" / "model.safetensors").unlink()
    (tmp_path / "hf" / "pytorch_model.bin").write_bytes(b"not to be unpickled")
    reg = Registry.open(tmp_path / "reg")
    with pytest.raises(ModelError, match="safetensors"):
        load_base(BaseConfig(model=str(tmp_path / "hf")), F.FakePrepared([F.make_domain("A")]), reg)


def test_a_local_base_folder_is_named_by_its_content_not_its_path(tmp_path, monkeypatch) -> None:
    """The same weights in another folder, behind a symlink, spelled relative or with a trailing
    slash keep one base id; a changed weight gives another; allow_download plays no part."""
    import os
    import shutil

    from mmgrid.models.base import base_checkpoint_id, folder_digest

    tok = train_tokenizer(["red cotton shirt", "blue steel kettle"] * 20, vocab_size=300)
    torch.manual_seed(0)
    tiny_qwen3(len(tok)).save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    shutil.copytree(tmp_path / "hf", tmp_path / "disk2" / "qwen")
    os.symlink(tmp_path / "hf", tmp_path / "link")
    reg = Registry.open(tmp_path / "reg")

    def bid(model: str, **kw) -> str:
        return base_checkpoint_id(build(BaseConfig, {"model": model, **kw}), reg, "fp", 0)

    monkeypatch.chdir(tmp_path)
    one = bid(str(tmp_path / "hf"))
    assert {bid("hf"), bid("hf/"), bid(str(tmp_path / "link")), bid(str(tmp_path / "disk2" / "qwen")),
            bid("hf", allow_download=True)} == {one}
    assert one != base_checkpoint_id(build(BaseConfig, {"model": "hf"}), reg, "fp", 0, identity=1)  # the path-spelled id
    torch.manual_seed(1)
    tiny_qwen3(len(tok)).save_pretrained(tmp_path / "disk2" / "qwen")  # other weights, same folder name
    assert bid(str(tmp_path / "disk2" / "qwen")) != one
    assert folder_digest(tmp_path / "hf") == folder_digest(tmp_path / "link")
    # a tiny builder keeps its identity: no folder to read, the data fingerprint names what it is trained on
    assert bid("tiny_qwen3()") == base_checkpoint_id(build(BaseConfig, {"model": "tiny_qwen3()"}), reg, "fp", 0, identity=1)
