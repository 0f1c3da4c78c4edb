"""The checks ``mmgrid build`` (and ``sweep``, ``calibrate``) run before any work.

Each check returns the problems it finds as ``(check, message)`` pairs, every message naming
what, where and the fix; :func:`preflight` runs them all and raises one
:class:`~mmgrid.errors.PreflightError` listing every failure, before the base is trained or a
stage starts. Nothing is loaded in full (a folder's ``config.json`` is read, its weights only
looked for) and nothing is downloaded.

| check | what fails |
|---|---|
| ``folders`` | ``base.model`` / ``base.tokenizer`` / each paradigm's ``embedder``: a folder without a readable config, safetensors weights or tokenizer files; a hub id not in the local cache with downloads off |
| ``sizes`` | ``paradigm_params.semid.codebook_size`` above a domain's item count (k-means needs as many items as codes) |
| ``device`` | ``train.device`` (or an ``embedder_device``) ``cuda`` without a visible GPU, or a CUDA index past the GPUs; ``train.dtype: bfloat16`` on a GPU without bf16 |
| ``context`` | the longest example a paradigm builds (from its knobs, as its collate cuts it), or ``base.max_length``, beyond the base's ``max_position_embeddings`` |
| ``disk`` | free space where the registry lives below the plan's estimated bytes of the checkpoints still to be written |
| ``ray`` | executor ``ray``: Ray not installed, or the cluster at ``exec.address`` / ``--address`` not reachable within :data:`RAY_TIMEOUT_S` |
| ``data`` | the prepared dataset is missing or lacks a domain the grid names |
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from mmgrid.errors import ConfigError, MmgridError, PreflightError
from mmgrid.models.builders import parse_builder
from mmgrid.paradigms.embedder import DEFAULT_EMBEDDER
from mmgrid.runtime.cost import DomainCounts, PlanInputs, base_shape, cost_plan, counts_from_prepared
from mmgrid.runtime.modelfiles import folder_problems, hub_cache_file, model_config
from mmgrid.runtime.context import open_prepared
from mmgrid.runtime.plan import grid_domains
from mmgrid.runtime.throughput import Throughput

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig

RAY_TIMEOUT_S = 3.0  # seconds to reach a Ray cluster's address
DISK_MARGIN = 1.1  # free space must exceed the estimate by this factor
RAY_DEFAULT_PORT = 6379  # the GCS port of `ray start --head`; 10001 is Ray Client's (ray://)
Failure = tuple[str, str]


@dataclass
class Preflight:
    """What the checks work on: the grid, the command, the executor asked for, and what was found
    on the way (the prepared data's counts, the base's config)."""

    cfg: GridConfig
    command: str = "build"
    executor: str | None = None  # --executor (None: the grid's exec.executor)
    address: str | None = None  # --address (None: the grid's exec.address)
    counts: list[DomainCounts] | None = None
    base_config: dict[str, Any] | None = None

    @property
    def kind(self) -> str:
        return self.executor or self.cfg.exec.executor

    @property
    def ray_address(self) -> str | None:
        return self.address or self.cfg.exec.address


def check_data(pf: Preflight) -> list[Failure]:
    cfg = pf.cfg
    try:
        prepared = open_prepared(cfg.prepared_dir)  # what the build will read (a test may have placed it)
        domains = grid_domains(cfg, prepared)
    except (MmgridError, OSError) as exc:
        return [("data", str(exc))]  # names the folder and the command that prepares it
    try:
        pf.counts = counts_from_prepared(prepared, domains, sample=1)
    except (AttributeError, KeyError, TypeError):  # a prepared dataset without statistics: no counts to check
        pf.counts = None
    return []


def _hub_problem(spec: str, what: str, allow: bool) -> list[Failure]:
    if allow or hub_cache_file(spec, "config.json") is not None:
        return []
    return [("folders", f"{what} {spec!r} is a hub id that is not in the local Hugging Face cache and downloads "
                        f"are off; fetch it by hand (`hf download {spec}`), point {what} at a local folder, or set "
                        "base.allow_download: true.")]


def check_folders(pf: Preflight) -> list[Failure]:
    cfg = pf.cfg
    out: list[Failure] = []
    model = cfg.base.model
    if parse_builder(model) is None:
        folder = Path(model).expanduser()
        if folder.is_dir():
            out += [("folders", f"base.model: {p}; give a complete model folder (config.json, *.safetensors"
                                f"{', tokenizer' if cfg.base.tokenizer is None else ''}).")
                    for p in folder_problems(folder, tokenizer=cfg.base.tokenizer is None, weights=True)]
        else:
            out += _hub_problem(model, "base.model", cfg.base.allow_download)
    tok = cfg.base.tokenizer
    if tok:
        folder = Path(tok).expanduser()
        if folder.is_dir():
            out += [("folders", f"base.tokenizer: {p}.") for p in folder_problems(folder, tokenizer=True, weights=False)
                    if "config.json" not in p]
        else:
            out += _hub_problem(tok, "base.tokenizer", cfg.base.allow_download)
    for paradigm in cfg.paradigms:
        name = (cfg.paradigm_params.get(paradigm) or {}).get("embedder")
        if paradigm in ("text", "semid") and name and name != DEFAULT_EMBEDDER:
            where = f"paradigm_params.{paradigm}.embedder"
            folder = Path(str(name)).expanduser()
            if not folder.is_dir():
                out.append(("folders", f"{where}: {name!r} is not a local folder; mmgrid never downloads models: "
                                       f"place a sentence-transformers folder there (e.g. `hf download <id> "
                                       f"--local-dir {name}`) or use {DEFAULT_EMBEDDER!r}."))
            else:
                out += [("folders", f"{where}: {p}; give a complete sentence-transformers folder.")
                        for p in folder_problems(folder, tokenizer=True, weights=True, sentence=True)]
    return out


def check_sizes(pf: Preflight) -> list[Failure]:
    cfg = pf.cfg
    out: list[Failure] = []
    if "semid" not in cfg.paradigms or not pf.counts:
        return out
    size = int((cfg.paradigm_params.get("semid") or {}).get("codebook_size", 16))
    for d in pf.counts:
        if size > d.items:
            out.append(("sizes", f"paradigm_params.semid.codebook_size={size} > {d.items} items of domain {d.name!r}: "
                                 f"k-means needs at least as many items as codes; lower codebook_size to <= {d.items} "
                                 "or drop the domain (data.domains)."))
    return out


def _cuda(device: str) -> bool:
    return str(device).startswith("cuda")


def check_device(pf: Preflight) -> list[Failure]:
    cfg, out = pf.cfg, []
    wanted = [("train.device", cfg.train.device)] + [
        (f"paradigm_params.{p}.embedder_device", (cfg.paradigm_params.get(p) or {}).get("embedder_device"))
        for p in cfg.paradigms if p in ("text", "semid")]
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    for key, device in wanted:
        if not device or not _cuda(device):
            continue
        if not available:
            fix = "cpu or auto" if key == "train.device" else "cpu"
            out.append(("device", f"{key}={device!r} but no CUDA device is visible on this machine; set {key} to "
                                  f"{fix}, or run on a machine with a GPU."))
            continue
        index = str(device).partition(":")[2]
        if index.isdigit() and int(index) >= count:
            out.append(("device", f"{key}={device!r} but only {count} CUDA device(s) are visible (0..{count - 1})."))
    uses_cuda = _cuda(cfg.train.device) or (cfg.train.device == "auto" and available)
    if cfg.train.dtype == "bfloat16" and uses_cuda and available and not torch.cuda.is_bf16_supported():
        out.append(("device", f"train.dtype=bfloat16 but the GPU ({torch.cuda.get_device_name(0)}) does not support "
                              "bfloat16; set train.dtype=float32 (or auto) or use a GPU with bf16 (Ampere or later)."))
    return out


def longest_examples(cfg: GridConfig) -> list[tuple[str, int]]:
    """(what, tokens) of the longest sequence each paradigm's collate can pass to the base, from its
    knobs (the same sums as the paradigms' ``collate``), and ``base.max_length`` (LM text)."""
    out = [("base.max_length (LM and retention text)", int(cfg.base.max_length))]
    for p in cfg.paradigms:
        k = dict(cfg.paradigm_params.get(p) or {})
        if p == "text":
            h, t = int(k.get("max_history", 10)), int(k.get("max_title_tokens", 16))
            out.append(("text prompt + title", 4 + h * (t + 2) + t + 4))
        elif p == "semid":
            h, lv = int(k.get("max_history", 10)), int(k.get("levels", 3))
            out.append(("semid prompt + codes", 8 + (h + 1) * lv + int(k.get("max_text_tokens", 24))
                        + int(k.get("max_title_tokens", 16))))
        elif p == "emb":
            out.append(("emb item text", int(k.get("max_item_tokens", 16))))
            out.append(("emb user history", int(k.get("max_history", 20)) + 1))
    return out


def check_context(pf: Preflight) -> list[Failure]:
    cfg = pf.cfg
    config = pf.base_config
    if config is None:
        config, _ = model_config(cfg.base.model, cfg.base.vocab_size if parse_builder(cfg.base.model) else None)
    if not config or not config.get("max_position_embeddings"):
        return []  # the model's folder is checked by `folders`
    limit = int(config["max_position_embeddings"])
    return [("context", f"the longest {what} is {n} tokens but the base ({cfg.base.model}) takes at most {limit} "
                        "positions (max_position_embeddings); lower the knobs that make it (max_history, "
                        "max_title_tokens, max_item_tokens, base.max_length) or use a base with a longer context.")
            for what, n in longest_examples(cfg) if n > limit]


def _free_bytes(path: Path) -> tuple[Path, float]:
    p = path.resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p, float(shutil.disk_usage(p).free)


def check_disk(pf: Preflight, estimate: Callable[[Preflight], float] | None = None) -> list[Failure]:
    cfg = pf.cfg
    try:
        need = (estimate or pending_checkpoint_bytes)(pf)
    except (MmgridError, KeyError, TypeError, ValueError):  # no estimate (an unsized model, odd counts): no check
        return []
    where, free = _free_bytes(Path(cfg.registry_root))
    if free < DISK_MARGIN * need:
        return [("disk", f"the registry {cfg.registry} (on {where}) needs about {need / 2**30:.3g} GiB for the "
                         f"checkpoints still to be written (the plan's estimate; `mmgrid plan {cfg.name}`) but "
                         f"{free / 2**30:.3g} GiB are free; free space or pass registry=DIR on a larger disk.")]
    return []


def pending_checkpoint_bytes(pf: Preflight) -> float:
    """The plan's estimated bytes of every checkpoint the command may write (held stages count
    fully: a cheap upper bound that needs no registry)."""
    if not pf.counts:
        return 0.0
    try:
        shape, _ = base_shape(pf.cfg)
    except ConfigError:
        return 0.0  # `folders` names the missing model
    plan = cost_plan(PlanInputs(pf.cfg, pf.counts, shape, Throughput(1.0, 0.0, "none"), "", ""))
    return plan.totals()["ckpt_bytes"]


def _ray_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) of a Ray address (``ray://host:port``, ``host:port``, ``auto``: the running
    cluster's address file); None for ``auto`` without a running cluster."""
    if address == "auto":
        current = Path("/tmp/ray/ray_current_cluster")
        if not current.is_file():
            return None
        address = current.read_text().strip()
    default = 10001 if address.startswith("ray://") else RAY_DEFAULT_PORT
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host:
        return hostport, default
    return host, int(port) if port.isdigit() else default


def check_ray(pf: Preflight) -> list[Failure]:
    if pf.kind != "ray":
        return []
    if importlib.util.find_spec("ray") is None:
        return [("ray", "the executor is ray but Ray is not installed: pip install 'mmgrid[ray]', or use "
                        "--executor local.")]
    address = pf.ray_address
    if not address:
        return []  # a local Ray is started by the executor
    endpoint = _ray_endpoint(str(address))
    if endpoint is None:
        return [("ray", f"exec.address={address!r} but no Ray cluster runs on this machine (no "
                        "/tmp/ray/ray_current_cluster); start one (`ray start --head`) or give ray://HOST:PORT.")]
    try:
        with socket.create_connection(endpoint, timeout=RAY_TIMEOUT_S):
            pass
    except OSError as exc:
        return [("ray", f"the Ray cluster at {address} ({endpoint[0]}:{endpoint[1]}) cannot be reached within "
                        f"{RAY_TIMEOUT_S:g} s ({exc}); start it, fix --address / exec.address, or use --executor "
                        "local.")]
    return []


CHECKS: tuple[Callable[[Preflight], list[Failure]], ...] = (
    check_data, check_folders, check_sizes, check_device, check_context, check_disk, check_ray)


def preflight(cfg: GridConfig, command: str = "build", executor: str | None = None, address: str | None = None,
              skip: tuple[str, ...] = ()) -> Preflight:
    """Run every check (:data:`CHECKS`; ``skip`` names ones a command does not need) and raise
    one :class:`PreflightError` listing every failure.

    Returns:
        The :class:`Preflight` record (with the counts found on the way) when everything passed.
    """
    pf = Preflight(cfg, command, executor, address)
    failures: list[Failure] = []
    for check in CHECKS:
        name = check.__name__.removeprefix("check_")
        if name in skip:
            continue
        try:
            failures += check(pf)
        except (MmgridError, OSError, ValueError) as exc:  # a check that cannot run is a failure of its own
            failures.append((name, f"could not be checked: {exc}"))
    if failures:
        raise PreflightError(command, failures)
    return pf

