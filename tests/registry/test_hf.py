"""export_hf gives a folder transformers opens with equal weights; import_hf brings one in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mmgrid.registry.api import Registry
from mmgrid.registry.errors import ArchitectureMismatchError

from .conftest import COORDS


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3 causal LM and a word-level tokenizer, saved the Hugging Face way."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

    words = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(60)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    cfg = Qwen3Config(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=64, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    out = tmp_path_factory.mktemp("hf") / "tiny"
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def test_import_then_export_opens_with_transformers(reg: Registry, hf_folder: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cid = reg.import_hf(hf_folder, COORDS, expect_arch="Qwen3ForCausalLM")
    m = reg.get(cid)
    assert m.kind == "imported" and {"config.json", "tokenizer.json", "tokenizer_config.json"} <= set(m.files)
    assert reg.import_hf(hf_folder, COORDS) == cid  # same content: cache hit
    out = reg.export_hf(cid, tmp_path / "export")
    model = AutoModelForCausalLM.from_pretrained(out)
    ref = AutoModelForCausalLM.from_pretrained(hf_folder)
    theirs, ours = ref.state_dict(), model.state_dict()
    assert set(theirs) == set(ours) and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    tok, ref_tok = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(hf_folder)
    assert tok("w1 w2 w3")["input_ids"] == ref_tok("w1 w2 w3")["input_ids"]


def test_put_state_dict_with_files_exports(reg: Registry, hf_folder: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_folder)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.add_(1.0)  # a "trained" stage
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    files = {n: (hf_folder / n).read_bytes() for n in ("config.json", "tokenizer.json", "tokenizer_config.json")}
    cid = reg.put(state, {**COORDS, "period": "p1"}, "trained", files=files, params={"method": "sft"})
    out = reg.export_hf(cid, tmp_path / "exp")
    back = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    got = back.state_dict()
    assert all(torch.equal(got[k], state[k]) for k in state)
    with pytest.raises(Exception, match="not an empty folder"):
        reg.export_hf(cid, out)


def test_import_mismatches_are_named(reg: Registry, hf_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(ArchitectureMismatchError, match="LlamaForCausalLM"):
        reg.import_hf(hf_folder, COORDS, expect_arch="LlamaForCausalLM")
    other = {"model.embed_tokens.weight": torch.zeros(100, 16), "lm_head.weight": torch.zeros(100, 16)}
    base = reg.put(other, {**COORDS, "period": "base"}, "base")
    with pytest.raises(ArchitectureMismatchError, match=r"shape mismatches.*\(100, 32\) vs \(100, 16\)"):
        reg.import_hf(hf_folder, COORDS, like=base)
    cfg = json.loads((hf_folder / "config.json").read_text())
    assert cfg["model_type"] == "qwen3"
    with pytest.raises(Exception, match="config.json"):
        reg.export_hf(base, tmp_path / "nocfg")


def test_cli_import_export(tmp_path: Path, hf_folder: Path, capsys: pytest.CaptureFixture) -> None:
    from mmgrid.cli import main

    root = str(tmp_path / "reg")
    assert main(["registry", "import-hf", root, str(hf_folder), "--paradigm", "text", "--domain", "Books",
                 "--period", "released", "--expect-arch", "qwen3"]) == 0
    cid = capsys.readouterr().out.strip()
    assert main(["registry", "export-hf", root, cid, str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "model.safetensors").is_file() and (tmp_path / "out" / "tokenizer.json").is_file()
    assert Registry.open(root).get(cid).coords["period"] == "released"
