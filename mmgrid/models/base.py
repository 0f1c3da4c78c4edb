"""The grid's root checkpoint: a base causal LM and its tokenizer.

``base.model`` is either a named tiny builder (``tiny_qwen3()``: a byte-level BPE
tokenizer is trained on every domain's item text, then the model is trained as a
language model on the review text set apart for it, ``prepared.lm_text("train")``; that
training lives in :mod:`mmgrid.train.base_lm`, which hands it to :func:`load_base`) or a
Hugging Face folder / hub id (``from_pretrained``; offline unless ``base.allow_download``).
Either way the base goes into the registry (kind ``base``, coords paradigm ``base``,
domain ``all``, period ``base``), and a second call with the same identity is a cache hit.
"""

from __future__ import annotations

import copy
import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from mmgrid.config import BaseConfig
from mmgrid.configtools import stable_hash, to_dict
from mmgrid.errors import ModelError
from mmgrid.models.builders import get_builder, parse_builder
from mmgrid.models.tokenizer import tokenizer_files

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

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


_DIGESTS: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}  # folder + its files' (name, size, mtime) -> digest


def folder_digest(folder: str | Path) -> str:
    """``sha256:<hex>`` of a model folder's content: every file's relative name and bytes, in name
    order (hidden files and folders left out). Where the folder lies, or how its path is spelled,
    plays no part. Computed once per process for an unchanged folder (same names, sizes, mtimes)."""
    root = Path(folder).resolve()
    files = sorted(p for p in root.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    stat = tuple((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    key = (str(root), stat)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        for p in files:
            h.update(str(p.relative_to(root)).encode() + b"\0")
            with p.open("rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
            h.update(b"\0")
        _DIGESTS[key] = "sha256:" + h.hexdigest()
    return _DIGESTS[key]


BASE_IDENTITY = 2  # 2: a local folder's base is named by its content (folder_digest), not its path


def base_identity(cfg: BaseConfig, fingerprint: str, seed: int, identity: int = BASE_IDENTITY) -> dict[str, Any]:
    """What :meth:`Registry.make_id` hashes for the base checkpoint.

    A tiny builder is named by its knobs and trained on the data (its fingerprint joins the
    hash); a hub id by its name. A local Hugging Face folder (``base.model``, and
    ``base.tokenizer`` when it is one) is named by :func:`folder_digest` since identity 2, so the
    same weights on another disk, behind a symlink or spelled relative keep their id, and
    ``allow_download`` (where to look, not what is computed) is left out. ``identity=1`` is the
    earlier formula (the path as written), for ``mmgrid registry remap-ids``."""
    params = to_dict(cfg)
    if identity >= 2 and not parse_builder(cfg.model):
        params.pop("allow_download", None)
        for key in ("model", "tokenizer"):
            value = params.get(key)
            if isinstance(value, str) and Path(value).expanduser().is_dir():
                params[key] = folder_digest(Path(value).expanduser())
        params["identity"] = identity
    return {
        "coords": dict(BASE_COORDS),
        "kind": "base",
        "parents": [],
        "params": params,
        # a tiny base is trained on the data; an HF base does not depend on it
        "config_hash": stable_hash({"base": params, "data": fingerprint if parse_builder(cfg.model) else None}),
        "seed": seed,
    }


def base_checkpoint_id(cfg: BaseConfig, registry: Registry, fingerprint: str, seed: int,
                       identity: int = BASE_IDENTITY) -> str:
    """The id the base of ``cfg`` has (or will have) in ``registry`` (``identity``: :func:`base_identity`)."""
    return _make_id(registry, base_identity(cfg, fingerprint, seed, identity))


def _make_id(registry: Registry, ident: dict[str, Any]) -> str:
    return registry.make_id(ident["coords"], ident["kind"], ident["parents"], ident["params"],
                            ident["config_hash"], ident["seed"])


# (builder, base config, prepared data, seed, progress) -> a trained tiny base
TinyBaseTrainer = Callable[[Callable[[int], Any], BaseConfig, Any, int, bool], "BaseBundle"]


def load_base(cfg: BaseConfig, prepared: PreparedDataset, registry: Registry, seed: int = 0, progress: bool = False,
              train_tiny: TinyBaseTrainer | None = None) -> tuple[BaseBundle, str]:
    """Fetch the grid's base model and tokenizer from the registry, or load / train and store it.

    Args:
        cfg: the ``base:`` section of the grid YAML.
        prepared: a ``PreparedDataset`` (item texts for the tokenizer, LM text, fingerprint).
        registry: an open ``Registry``; the base is stored there as the grid's root.
        seed: seed of the tiny base's initialisation and LM training.
        progress: show a progress bar while training a tiny base.
        train_tiny: trains a named tiny base that is not stored yet
            (:func:`mmgrid.train.base_lm.train_tiny_base`); None: such a base must be stored.

    Returns:
        ``(bundle, base_id)``; the bundle is a private copy the caller may modify.

    Raises:
        UnknownNameError: ``base.model`` looks like ``name()`` but no such builder exists.
        ModelError: an HF base cannot be loaded or has no tokenizer; a tiny base is not
            stored and no ``train_tiny`` was given.
    """
    ident = base_identity(cfg, getattr(prepared, "fingerprint", ""), seed)
    base_id = _make_id(registry, ident)
    bundle = _CACHE.get(base_id)
    if bundle is None and registry.has(base_id):
        bundle = shared_base(registry, base_id)
    if bundle is None:
        name = parse_builder(cfg.model)
        if name is None:
            bundle = _load_hf_base(cfg)
        else:
            builder = get_builder(name)
            if train_tiny is None:
                raise ModelError(f"base.model {cfg.model}: the tiny base {base_id[:12]} is not in the registry "
                                 f"{getattr(registry, 'root', '')} yet; `mmgrid build` trains it first.")
            bundle = train_tiny(builder, cfg, prepared, seed, progress)
    if not registry.has(base_id):
        registry.put({k: v.detach().cpu().contiguous() for k, v in bundle.model.state_dict().items()},
                     ident["coords"], ident["kind"], parents=[], params=ident["params"], files=bundle_files(bundle),
                     meta={"source": cfg.model, "vocab_size": len(bundle.tokenizer), "lm_losses": bundle.lm_losses},
                     seed=seed, config_hash=ident["config_hash"],
                     data_fingerprint=getattr(prepared, "fingerprint", ""))
    _CACHE[base_id] = bundle
    return bundle.copy(), base_id


def local_model_folder(name: str, key: str, download_key: str | None = None) -> Path:
    """The local folder of a model named by a folder path or a hub id, without the network:
    ``name`` itself when it is a folder, else the hub id's snapshot in the Hugging Face cache
    (``huggingface_hub.try_to_load_from_cache``: files only, no request).

    Args:
        name: a folder path or a hub id (``Qwen/Qwen3-0.6B``).
        key: the grid key that named it (for the message).
        download_key: the grid key that would allow a download (named in the message), if any.

    Raises:
        ModelError: neither exists; names both places looked and the command that fetches it by hand.
    """
    folder = Path(name).expanduser()
    if folder.is_dir():
        return folder
    # lazy: huggingface_hub is needed only for a name that is not a folder
    from huggingface_hub import constants, try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(repo_id=name, filename="config.json")
    except ValueError:  # not a valid hub id (huggingface_hub's HFValidationError): a mistyped path
        raise ModelError(f"{key}: {name!r} is no folder ({folder.absolute()} does not exist) and no hub id; give "
                         "the path of a local model folder (config.json and safetensors weights).") from None
    if isinstance(cached, str) and Path(cached).parent.is_dir():
        return Path(cached).parent
    local = f"models/{Path(name).name or 'model'}"
    allow = f", or set {download_key}=true to let mmgrid fetch it" if download_key else ""
    raise ModelError(
        f"{key}: {name!r} is not a local model folder and downloads are off, so the hub was not asked. Looked in "
        f"{folder.absolute()} (a folder) and the Hugging Face cache {constants.HF_HUB_CACHE} (a snapshot of hub id "
        f"{name!r}). Fetch it by hand where there is network: `hf download {name} --local-dir {local}` (then copy "
        f"{local} here if needed), and set {key}={local}{allow}."
    )


def _load_hf_base(cfg: BaseConfig) -> BaseBundle:
    offline = not cfg.allow_download
    where = "a local folder" if offline else "a local folder or the hub"
    # downloads off: the model is a local folder before transformers sees it (given, or the hub id's
    # cached snapshot), so nothing asks the hub (from_pretrained asks it even with local_files_only)
    model_path = str(local_model_folder(cfg.model, "base.model", "base.allow_download")) if offline else cfg.model
    try:
        # use_safetensors: a folder with only pickle weights (.bin) is refused, never unpickled
        model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=offline, dtype="float32",
                                                     use_safetensors=True)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"base.model: cannot load {cfg.model!r} from {where}: {exc}. Give a folder with config.json and "
            "safetensors weights (convert .bin with safetensors.torch.save_file), a named builder such as tiny_qwen3(), "
            "or set base.allow_download=true to fetch a hub id."
        ) from exc
    tok_path = cfg.tokenizer or cfg.model
    if offline:
        tok_path = model_path if cfg.tokenizer is None else str(local_model_folder(tok_path, "base.tokenizer",
                                                                                   "base.allow_download"))
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
    return {"config.json": bundle.model.config.to_json_string().encode(), **tokenizer_files(bundle.tokenizer)}


def bundle_from_files(state: dict[str, "torch.Tensor"], files: dict[str, bytes]) -> BaseBundle:
    """Rebuild a :class:`BaseBundle` from a state dict and the files of :func:`bundle_files`."""
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


def bundle_from_registry(registry: Registry, base_id: str) -> BaseBundle:
    """Load a base checkpoint (weights + tokenizer files) from the registry."""
    man = registry.get(base_id)
    files = {name: registry.file(base_id, name) for name in _file_names(man)}
    return bundle_from_files(registry.load(base_id), files)


def shared_base(registry: Registry, base_id: str) -> BaseBundle:
    """The base ``base_id``, loaded once per process (the bundle :func:`load_base` keeps): read it,
    never train or resize it (take :meth:`BaseBundle.copy` for that)."""
    bundle = _CACHE.get(base_id)
    if bundle is None:
        bundle = _CACHE[base_id] = bundle_from_registry(registry, base_id)
    return bundle


def _file_names(manifest: Any) -> list[str]:
    files = getattr(manifest, "files", None) or {}
    return list(files) if not isinstance(files, list) else [f if isinstance(f, str) else f["name"] for f in files]
