"""Hugging Face folders in and out of the registry.

``export_hf`` writes a folder its paradigm's documented loader opens into the trained model:

* ``text``, ``semid``, the ``base`` LM and their merges: a Hugging Face causal-LM folder,
  ``model.safetensors`` (tensor names exactly as stored, e.g. ``model.layers.0...``; the
  vocabulary size of ``config.json`` set to the embedding rows the state holds, which a
  merge of two semid models can grow) plus the tokenizer files, which is what
  ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` read, and a
  ``README.md`` model card (:mod:`mmgrid.registry.card`: ``base_model``,
  ``base_model_relation``, the method, its parameters and the lineage);
* ``emb`` and ``sasrec``: refused with :class:`ExportUnsupportedError`: their scoring head (an
  item LLM plus a user LLM, or a SASRec network) is no transformers model, and a causal-LM
  folder of their tensors would load with every weight missing. Load them through mmgrid
  (:func:`mmgrid.query.load_model`).

Files are written into a hidden folder beside the target and renamed into place at the end
(a failure, a full disk included, leaves no folder behind), with the permissions the user's
umask gives new files (never a library's 0600 temporary-file mode). Tensors are serialised in
memory and written with Python's own file calls, so a registry or target under a folder name
that is not valid UTF-8 works.
``import_hf`` brings in a folder trained elsewhere (the released MMGRid checkpoints, say):
its safetensors shards and small files; pickles are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from mmgrid.errors import MmgridError, RegistryError
from mmgrid.fileio.atomic import swap_dir
import mmgrid.registry.card as card
import mmgrid.registry.names as names
import mmgrid.registry.writing as writing
from mmgrid.registry.errors import ArchitectureMismatchError, InvalidFileError, UnsafePathError
from mmgrid.registry.manifest import Manifest, Parent, code_version
from mmgrid.registry.tensors import UNSAFE_SUFFIXES, iter_path, member, safetensors_files

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry

MAX_FILE_BYTES = 64 << 20  # small assets only; anything bigger is not a config or tokenizer
_SKIP = (".safetensors", ".safetensors.index.json", ".lock", ".md5")


LM_PARADIGMS = ("text", "semid", "base")  # a transformers causal LM is the whole trained model
OWN_LOADER = {
    "emb": "an item LLM and a user LLM scoring item embeddings (mmgrid/paradigms/emb.py)",
    "sasrec": "a SASRec network over item ids (mmgrid/paradigms/sasrec.py)",
}


class ExportUnsupportedError(MmgridError):
    """The checkpoint's paradigm has no folder format a standard loader opens into the trained model."""


def export_kind(m: Manifest) -> str:
    """``"causal-lm"`` for the paradigms a transformers causal LM holds whole; else the paradigm."""
    par = str(m.coords.get("paradigm") or m.meta.get("paradigm") or "")
    return "causal-lm" if par in LM_PARADIGMS else par


def loader_hint(m: Manifest) -> str:
    """How to open what :func:`export_hf` wrote for ``m`` (printed by ``mmgrid registry export-hf``)."""
    return ("open it with transformers: AutoModelForCausalLM.from_pretrained(DIR) and "
            "AutoTokenizer.from_pretrained(DIR)")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def export_hf(reg: "Registry", ref: Any, out_dir: Path, require_config: bool = True) -> Path:
    """Write ``out_dir`` as a Hugging Face causal-LM folder; returns it.

    Raises:
        ExportUnsupportedError: an emb or sasrec checkpoint (no standard loader opens it into
            the trained model; load it through mmgrid), named before anything is written.
        RegistryError: ``out_dir`` is a non-empty folder, the checkpoint has no config.json
            (put it with ``files={"config.json": ...}``), or the disk refused a write (full,
            read-only): nothing is left behind.
    """
    from safetensors.torch import save as to_bytes  # lazy: imports torch (~2-4 s)

    m = reg.get(ref)  # refuses a manifest whose file names or blob hashes could leave a folder
    kind = export_kind(m)
    if kind in OWN_LOADER:
        raise ExportUnsupportedError(
            f"checkpoint {m.id[:12]} is of paradigm {kind} ({OWN_LOADER[kind]}), which no Hugging Face auto class "
            f"opens: a causal-LM folder of its tensors would load with every weight missing. Load it with "
            f"mmgrid instead: `mmgrid.query.load_model(reg, {m.id[:12]!r})` (README, \"Export a checkpoint\"); "
            "nothing was written.")
    if require_config and "config.json" not in m.files:
        raise RegistryError(
            f"checkpoint {m.id} has no config.json, so transformers could not open the export; "
            "put checkpoints with files={'config.json': ..., 'tokenizer.json': ...} (Paradigm.save does)."
        )
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise RegistryError(f"{out_dir} exists and is not an empty folder; choose a new folder or empty it.")
    mode = 0o666 & ~_umask()
    tmp = out_dir.parent / f".{out_dir.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        tmp.mkdir(parents=True)
        state = reg.load(m.id)
        files = {name: reg.file(m.id, name) for name in m.files}
        if "config.json" in files and "model.embed_tokens.weight" in state:
            config = json.loads(files["config.json"])
            config["vocab_size"] = int(state["model.embed_tokens.weight"].shape[0])  # a merge may add rows
            files["config.json"] = (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()
        _write(tmp / "model.safetensors", to_bytes(state, metadata={"format": "pt"}), mode)
        files[card.CARD_FILE] = card.render_card(card.checkpoint_card(reg, m)).encode()  # replaces an imported card
        for name, data in files.items():
            target = tmp / names.check_file_name(name)
            if not names.inside(tmp, target):  # defence in depth: check_file_name already forbids it
                raise UnsafePathError(f"file {name!r} of {m.id} would be written outside {out_dir}; nothing was exported.")
            _write(target, data, mode)
        swap_dir(tmp, out_dir)  # readers never see a half-written export (an empty out_dir is replaced)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RegistryError(f"cannot write the export to {out_dir} ({exc.strerror or exc}); free space or pick "
                            "a folder you can write to. Nothing was left behind.") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a new file with ``mode`` (already masked by the umask) and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _asset_files(path: Path) -> dict[str, bytes]:
    """The small files of an HF folder (config, tokenizer...); symlinks only inside it.

    Raises:
        UnsafePathError: a file is a symlink leading outside the folder (see ``tensors.member``).
    """
    out: dict[str, bytes] = {}
    for f in sorted(path.iterdir()):
        low = f.name.lower()
        if f.name.startswith(".") or low.endswith(_SKIP) or f.suffix.lower() in UNSAFE_SUFFIXES:
            continue
        if f.is_dir():  # sub-folders (symlinked or not) are never read
            continue
        if not member(path, f).is_file() or f.stat().st_size > MAX_FILE_BYTES:  # member: refuses escaping links
            continue
        out[names.check_file_name(f.name)] = f.read_bytes()
    return out


def _config(path: Path, files: Mapping[str, bytes]) -> dict[str, Any]:
    """The folder's config.json as a dict ({} when there is none).

    Raises:
        InvalidFileError: config.json is not a JSON object.
    """
    if "config.json" not in files:
        return {}
    try:
        config = json.loads(files["config.json"])
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidFileError(
            f"{path / 'config.json'} is not valid JSON ({exc}); a Hugging Face config.json is the JSON object "
            "save_pretrained writes: restore it or re-export the model. Nothing was stored."
        ) from exc
    if not isinstance(config, dict):
        raise InvalidFileError(
            f"{path / 'config.json'} holds a JSON {type(config).__name__}, not an object; a Hugging Face "
            "config.json is the JSON object save_pretrained writes. Nothing was stored."
        )
    return config


def _check_arch(path: Path, config: Mapping[str, Any], expect_arch: str | Iterable[str]) -> None:
    want = {expect_arch} if isinstance(expect_arch, str) else set(expect_arch)
    have = set(config.get("architectures") or []) | ({config["model_type"]} if "model_type" in config else set())
    if not want & have:
        raise ArchitectureMismatchError(
            f"{path}/config.json describes {sorted(have) or 'no architecture'}, expected {sorted(want)}; "
            "import the right folder or change expect_arch."
        )


def _check_like(reg: "Registry", path: Path, blobs: Mapping[str, Any], like: Any) -> None:
    base = reg.get(like)
    theirs = {k: b.shape for k, b in base.blobs.items()}
    ours = {k: b.shape for k, b in blobs.items()}
    missing, extra = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
    diff = [f"{k}: {ours[k]} vs {theirs[k]}" for k in sorted(set(ours) & set(theirs)) if ours[k] != theirs[k]]
    if missing or extra or diff:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensors (e.g. {', '.join(missing[:3])})")
        if extra:
            parts.append(f"{len(extra)} unexpected tensors (e.g. {', '.join(extra[:3])})")
        if diff:
            parts.append(f"{len(diff)} shape mismatches (e.g. {'; '.join(diff[:3])})")
        raise ArchitectureMismatchError(
            f"{path} does not match checkpoint {base.id} ({'; '.join(parts)}); import a model of the "
            "same architecture and size, or drop like= to import it as an unrelated model."
        )


def import_hf(
    reg: "Registry",
    path: Path,
    coords: Mapping[str, Any],
    kind: str = "imported",
    parents: Iterable[Any] | None = None,
    params: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
    expect_arch: str | Iterable[str] | None = None,
    like: Any = None,
) -> str:
    """Import a Hugging Face folder; returns the checkpoint id.

    The identity is the coords plus a digest of the content, so importing the same
    weights again (from any path) is a cache hit.

    Args:
        path: folder with ``*.safetensors`` (sharded or not), config.json, tokenizer files.
        coords: where it sits in the grid (paradigm, domain, period[, variant]).
        expect_arch: an architecture class or model_type the config must name.
        like: a checkpoint (id/alias/coords) whose tensor names and shapes must match.

    Raises:
        UnsafeFormatError: the folder has only .bin/.pt/.pkl weights.
        UnsafePathError: a file is a symlink leading outside the folder (or, for a Hugging
            Face cache snapshot, outside its models--ORG--NAME folder).
        InvalidFileError: config.json is not a JSON object.
        NonFiniteTensorError: a tensor holds NaN or Inf.
        ArchitectureMismatchError: expect_arch or like does not match.
    """
    if not path.is_dir():
        raise RegistryError(f"{path} is not a folder; import_hf takes a Hugging Face model folder.")
    safetensors_files(path)  # refuses pickle-only folders and escaping symlinks before anything is stored
    files = _asset_files(path)
    config = _config(path, files)
    if expect_arch is not None:
        _check_arch(path, config, expect_arch)
    with reg.store.batch():
        blobs = writing.store_tensors(reg.store, iter_path(path))
        if like is not None:
            _check_like(reg, path, blobs, like)
        file_refs = writing.store_files(reg.store, files)
    content = names.hash_json({"tensors": {k: b.sha256 for k, b in blobs.items()}, "files": file_refs}, n=64)
    full_params = {**dict(params or {}), "content": content}
    coords = names.normalize_coords(coords)
    plist = names.normalize_parents(reg.resolve_parents(parents))
    cid = names.make_id(coords, kind, plist, full_params)
    if reg.has(cid):
        return cid
    m = Manifest(
        id=cid, coords=coords, kind=kind, parents=[Parent(*p) for p in plist], params=full_params,
        meta={**dict(meta or {}), "source": str(path.resolve()), "architectures": config.get("architectures")},
        files=file_refs, blobs=blobs, code_version=code_version(), created=names.now_iso(),
    )
    reg.commit_manifest(m)
    return cid
