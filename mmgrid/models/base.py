"""The grid's root checkpoint: a base causal LM and its tokenizer.

``base.model`` is either a named tiny builder (``tiny_qwen3()``: a byte-level BPE
tokenizer is trained on every domain's item text, then the model is trained as a
language model on the review text set apart for it, ``prepared.lm_text("train")``) or a
Hugging Face folder / hub id (``from_pretrained``; offline unless ``base.allow_download``).
Either way the base goes into the registry (kind ``base``, coords paradigm ``base``,
domain ``all``, period ``base``), and a second call with the same identity is a cache hit.
"""

from __future__ import annotations

import copy
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.configtools import stable_hash, to_dict
from mmgrid.errors import ModelError
from mmgrid.models.builders import get_builder, parse_builder
from mmgrid.models.tokenizer import train_tokenizer

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from mmgrid.train.config import BaseConfig

# domain "all": the registry allows no "*" in coordinates.
BASE_COORDS = {"paradigm": "base", "domain": "all", "period": "base", "variant": "default"}
_CACHE: dict[str, "BaseBundle"] = {}  # base id -> bundle, so jobs in one process load it once
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


@dataclass
class BaseBundle:
    """A causal LM with its tokenizer (and the HF config it was built from)."""

    model: "PreTrainedModel"
    tokenizer: "PreTrainedTokenizerBase"
    hf_config: Any = None
    lm_losses: list[float] | None = None  # tiny base: mean LM loss per epoch of its training

    def copy(self) -> "BaseBundle":
        """A deep copy of the model (paradigms may resize or train it); the tokenizer is shared."""
        return BaseBundle(copy.deepcopy(self.model), self.tokenizer, self.hf_config, self.lm_losses)


def lm_batch(tokenizer: "PreTrainedTokenizerBase", texts: list[str], max_length: int) -> dict[str, "torch.Tensor"]:
    """Tokenize ``<bos> text <eos>`` (truncated to ``max_length``) into a padded LM batch.

    Labels are the input ids with padding set to -100, so the loss is the mean next-token
    NLL over real tokens. Used for base training and for text retention alike.
    """
    import torch

    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    pad = eos if pad is None else pad
    rows = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = ([bos] if bos is not None else []) + ids
        rows.append((ids[: max_length - 1] + ([eos] if eos is not None else []))[:max_length])
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    labels = input_ids.masked_fill(mask == 0, -100)
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


class LanguageModelTask:
    """Causal-LM training through the same loop as the paradigms (collate + loss)."""

    name = "base"

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", max_length: int) -> None:
        self.tokenizer, self.max_length = tokenizer, max_length

    def collate(self, model: "torch.nn.Module", examples: list[str]) -> dict[str, "torch.Tensor"]:
        return lm_batch(self.tokenizer, examples, self.max_length)

    def loss(self, model: "torch.nn.Module", batch: dict[str, "torch.Tensor"]) -> "torch.Tensor":
        return model(**batch).loss


def base_identity(cfg: "BaseConfig", fingerprint: str, seed: int) -> dict[str, Any]:
    """What :meth:`Registry.make_id` hashes for the base checkpoint."""
    params = to_dict(cfg)
    return {
        "coords": dict(BASE_COORDS),
        "kind": "base",
        "parents": [],
        "params": params,
        # a tiny base is trained on the data; an HF base does not depend on it
        "config_hash": stable_hash({"base": params, "data": fingerprint if parse_builder(cfg.model) else None}),
        "seed": seed,
    }


def load_base(cfg: "BaseConfig", prepared: Any, registry: Any, seed: int = 0,
              progress: bool = False) -> tuple[BaseBundle, str]:
    """Build (or fetch from the registry) the grid's base model and tokenizer.

    Args:
        cfg: the ``base:`` section of the grid YAML.
        prepared: a ``PreparedDataset`` (item texts for the tokenizer, LM text, fingerprint).
        registry: an open ``Registry``; the base is stored there as the grid's root.
        seed: seed of the tiny base's initialisation and LM training.
        progress: show a progress bar while training a tiny base.

    Returns:
        ``(bundle, base_id)``; the bundle is a private copy the caller may modify.

    Raises:
        UnknownNameError: ``base.model`` looks like ``name()`` but no such builder exists.
        ModelError: an HF base cannot be loaded or has no tokenizer.
    """
    ident = base_identity(cfg, getattr(prepared, "fingerprint", ""), seed)
    base_id = registry.make_id(ident["coords"], ident["kind"], ident["parents"], ident["params"],
                               ident["config_hash"], ident["seed"])
    bundle = _CACHE.get(base_id)
    if bundle is None and registry.has(base_id):
        bundle = bundle_from_registry(registry, base_id)
    if bundle is None:
        name = parse_builder(cfg.model)
        bundle = _train_tiny_base(name, cfg, prepared, seed, progress) if name is not None else _load_hf_base(cfg)
    if not registry.has(base_id):
        registry.put({k: v.detach().cpu().contiguous() for k, v in bundle.model.state_dict().items()},
                     ident["coords"], ident["kind"], parents=[], params=ident["params"], files=bundle_files(bundle),
                     meta={"source": cfg.model, "vocab_size": len(bundle.tokenizer), "lm_losses": bundle.lm_losses},
                     seed=seed, config_hash=ident["config_hash"],
                     data_fingerprint=getattr(prepared, "fingerprint", ""))
    _CACHE[base_id] = bundle
    return bundle.copy(), base_id


def _train_tiny_base(name: str, cfg: "BaseConfig", prepared: Any, seed: int, progress: bool) -> BaseBundle:
    import torch

    from mmgrid.train.loop import train_stage

    builder = get_builder(name)
    texts = [t for d in prepared.domains for t in prepared.domain(d).item_texts]
    tokenizer = train_tokenizer(texts, cfg.vocab_size)
    torch.manual_seed(seed)
    model = builder(len(tokenizer))
    lm_texts = list(prepared.lm_text("train"))
    bundle = BaseBundle(model, tokenizer, model.config)
    if lm_texts and cfg.lm_epochs > 0:
        log = train_stage(LanguageModelTask(tokenizer, cfg.max_length), model, lm_texts, epochs=cfg.lm_epochs,
                          lr=cfg.lm_lr, batch_size=cfg.lm_batch_size, seed=seed, where="base/*/lm",
                          progress=progress)
        bundle.lm_losses = log.epoch_losses
    model.to("cpu")  # the registry and the paradigms start from CPU tensors
    model.eval()
    return bundle


def _load_hf_base(cfg: "BaseConfig") -> BaseBundle:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    offline = not cfg.allow_download
    where = "a local folder" if offline else "a local folder or the hub"
    try:
        # use_safetensors: a folder with only pickle weights (.bin) is refused, never unpickled
        model = AutoModelForCausalLM.from_pretrained(cfg.model, local_files_only=offline, dtype="float32",
                                                     use_safetensors=True)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"base.model: cannot load {cfg.model!r} from {where}: {exc}. Give a folder with config.json and "
            "safetensors weights (convert .bin with safetensors.torch.save_file), a named builder such as tiny_qwen3(), "
            "or set base.allow_download=true to fetch a hub id."
        ) from exc
    tok_path = cfg.tokenizer or cfg.model
    fix = ("Put tokenizer.json / tokenizer_config.json next to the weights or set base.tokenizer to a "
           "tokenizer folder.")
    if Path(tok_path).is_dir() and not any((Path(tok_path) / f).is_file() for f in TOKENIZER_FILES):
        raise ModelError(f"base.tokenizer: the folder {tok_path!r} has no tokenizer files "
                         f"({', '.join(TOKENIZER_FILES)}). {fix}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(tok_path, local_files_only=offline)
    except (OSError, ValueError, TypeError) as exc:
        raise ModelError(f"base.tokenizer: {tok_path!r} has no loadable tokenizer ({exc}). {fix}") from exc
    if len(tokenizer) < 2:  # transformers may make an empty tokenizer from config.json alone
        raise ModelError(f"base.tokenizer: the tokenizer of {tok_path!r} is empty. {fix}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return BaseBundle(model, tokenizer, model.config)


def bundle_files(bundle: BaseBundle) -> dict[str, bytes]:
    """``config.json`` plus every tokenizer file, as the registry stores them."""
    files = {"config.json": bundle.model.config.to_json_string().encode()}
    with tempfile.TemporaryDirectory() as tmp:
        bundle.tokenizer.save_pretrained(tmp)
        for p in sorted(Path(tmp).iterdir()):
            if p.is_file():
                files[p.name] = p.read_bytes()
    return files


def bundle_from_files(state: dict[str, "torch.Tensor"], files: dict[str, bytes]) -> BaseBundle:
    """Rebuild a :class:`BaseBundle` from a state dict and the files of :func:`bundle_files`."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if "config.json" not in files:
        raise ModelError("base checkpoint: config.json is missing; it cannot be rebuilt.")
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            (Path(tmp) / name).write_bytes(data)
        cfg_dict = json.loads(files["config.json"])
        config = AutoConfig.for_model(**cfg_dict)
        try:
            tokenizer = AutoTokenizer.from_pretrained(tmp, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ModelError(f"base checkpoint: the tokenizer files cannot be loaded ({exc}).") from exc
    model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise ModelError(f"base checkpoint: tensors do not match its config (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}).")
    if missing:  # tied head: share the embedding
        model.tie_weights()
    model.eval()
    return BaseBundle(model, tokenizer, config)


def bundle_from_registry(registry: Any, base_id: str) -> BaseBundle:
    """Load a base checkpoint (weights + tokenizer files) from the registry."""
    man = registry.get(base_id)
    files = {name: registry.file(base_id, name) for name in _file_names(man)}
    return bundle_from_files(registry.load(base_id), files)


def _file_names(manifest: Any) -> list[str]:
    files = getattr(manifest, "files", None) or {}
    return list(files) if not isinstance(files, list) else [f if isinstance(f, str) else f["name"] for f in files]
