"""mmgrid's ranking and training against what a researcher would otherwise run.

Peers (each measured in the same run, on the same model, inputs and settings):

- semid ranking (``SemIDParadigm.beam_search``: one prompt cache per history shared by its beams,
  trie-masked code levels) against Hugging Face ``model.generate(num_beams=B,
  prefix_allowed_tokens_fn=...)`` over the same trie, as LC-Rec's evaluation decodes semantic IDs;
  the top-K item lists must be identical;
- text ranking (``TextParadigm.rank``: ``prefilled_beam_generate``, then BIGRec grounding) against
  the same rank with ``model.generate`` doing the beam search (same beams, same grounding); the
  top-K lists must be identical;
- emb and SASRec full ranking against the plain way: the model's forward on the whole padded batch,
  a batched matmul with every item, the history masked, ``torch.topk``; identical top-K lists;
- a training stage (``mmgrid.train.loop.train_stage``) against ``transformers.Trainer`` on the same
  model, examples, batches (the stage's seeded, length-bucketed order), AdamW, learning rate and
  constant schedule, no clipping; the per-step losses must agree within a relative tolerance.

Every arm runs in a fresh subprocess (``--child``), so its peak memory is that process's maximum
resident set (``resource.getrusage``); each child builds the same seeded model, runs its arm once on
a few users to warm up (the embedder loads, the allocator settles), then times the full pass. The
outputs of the two arms are compared before any time is: a mismatch fails the run with no record.

Widths: ``demo`` is the demo's ``tiny_qwen3()`` (hidden 64, 2 layers); ``qwen3-0.6b`` has Qwen3-0.6B's
layer shape (hidden 1024, 16 query / 8 key-value heads of 128, MLP 3072) with fewer layers
(``--qwen-layers``, default 2) and the demo tokenizer's vocabulary, random weights, on CPU.

    python bench/peers.py                 # both widths, every peer
    python bench/peers.py --quick         # smaller inputs (the suite's smoke run)
    python bench/peers.py --widths demo --tasks semid train
    python bench/peers.py --gpu-check [--dry-run]   # what bench/gpu_check.sh runs (record gpu_check)

Where a goal is missed (text ranking), the record adds a profile: the beam search and the grounding timed
apart, and torch.profiler's costliest operators.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import run_recorded  # noqa: E402

TASKS = ("semid", "text", "emb", "sasrec", "train")
WIDTHS = ("demo", "qwen3-0.6b")
GOALS = {"semid": 3.0, "text": 3.0, "train": 1.5}  # emb / sasrec: the matmul is the floor, no goal
PEER = {"semid": "HF generate + prefix_allowed_tokens_fn", "text": "HF generate beam search",
        "emb": "batched matmul + topk", "sasrec": "batched matmul + topk", "train": "transformers.Trainer"}
LOSS_RTOL = 1e-3


# --------------------------------------------------------------------------- the world and the models

class Domain:
    """A synthetic domain with the attributes of ``mmgrid.data.dataset.DomainData`` the paradigms read."""

    def __init__(self, name: str, items: Any, interactions: Any, examples: Any) -> None:
        self.name, self.items, self.interactions, self._examples = name, items, interactions, examples

    @property
    def n_items(self) -> int:
        return self.items.height

    @property
    def item_texts(self) -> list[str]:
        return self.items["text"].to_list()

    @property
    def item_titles(self) -> list[str]:
        return self.items["title"].to_list()

    def examples(self, phase: str) -> Any:
        import polars as pl

        return self._examples.filter(pl.col("phase") == phase)

    def active_users(self, phase: str) -> set[int]:
        import polars as pl

        return set(self.interactions.filter(pl.col("phase") == phase)["user_idx"].to_list())

    def popularity(self, phases: Any) -> np.ndarray:
        import polars as pl

        sel = self.interactions.filter(pl.col("phase").is_in(list(phases)))["item_idx"].to_numpy()
        return np.bincount(sel, minlength=self.n_items).astype(np.int64)


WORDS = ("red blue green black white steel paper cotton wooden glass silver golden small large soft hard "
         "kettle shirt notebook lamp chair mug towel pen bag shoe clock plate").split()


def make_domain(n_items: int, n_users: int, events: int = 12, seed: int = 0) -> Domain:
    """Items with short distinct texts; users walk a few themes; phases pretrain / p1 / p2 / test."""
    import polars as pl

    rng = np.random.default_rng(seed)
    titles = [" ".join(rng.choice(WORDS, 3)) + f" {i}" for i in range(n_items)]
    texts = [f"{t}. " + " ".join(rng.choice(WORDS, 6)) for t in titles]
    items = pl.DataFrame({"item_idx": pl.Series(range(n_items), dtype=pl.Int32),
                          "parent_asin": [f"B{i:09d}" for i in range(n_items)], "title": titles, "text": texts,
                          "first_seen_ms": pl.Series([1_600_000_000_000 + i for i in range(n_items)], dtype=pl.Int64)})
    phase_of = ["pretrain"] * (events - 3) + ["p1", "p2", "test"]
    rows, ex = [], []
    for u in range(n_users):
        start, stride = int(rng.integers(n_items)), int(rng.integers(1, 7))
        seq = [(start + s * stride) % n_items for s in range(events)]
        for s, item in enumerate(seq):
            ts = 1_650_000_000_000 + s * 10_000_000_000 + u
            rows.append({"user_idx": u, "user_id": f"U{u}", "item_idx": item, "timestamp": ts, "phase": phase_of[s]})
            ex.append({"phase": phase_of[s], "user_idx": u, "target": item, "history": seq[:s][-20:], "timestamp": ts})
    inter = pl.DataFrame(rows).with_columns(pl.col("user_idx").cast(pl.Int32), pl.col("item_idx").cast(pl.Int32))
    exdf = pl.DataFrame(ex).with_columns(pl.col("user_idx").cast(pl.Int32), pl.col("target").cast(pl.Int32),
                                         pl.col("history").cast(pl.List(pl.Int32)))
    return Domain("Bench_Home", items, inter, exdf)


def make_base(domain: Domain, width: str, qwen_layers: int = 2, init_std: float = 0.1, seed: int = 0,
              vocab: int | None = None, tied: bool = False) -> Any:
    """The demo's tokenizer (byte-level BPE, 2048) and a random Qwen3 of the given width.

    ``vocab``: rows of the embedding and the head (default: the tokenizer's; Qwen3-0.6B has 151,936, the
    rows past the tokenizer's are unused); ``tied``: tie them, as Qwen3-0.6B does (the demo's are untied).

    ``init_std`` (HF's ``initializer_range``; 0.02 by default) spreads a random model's next-token
    distribution, so that beams are not near-ties that float rounding could reorder."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from mmgrid.models.base import BaseBundle
    from mmgrid.models.tokenizer import train_tokenizer

    tok = train_tokenizer(domain.item_texts, 2048)
    shape = (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=128) if width == "demo" else
             dict(hidden_size=1024, num_hidden_layers=qwen_layers, num_attention_heads=16, num_key_value_heads=8,
                  head_dim=128, intermediate_size=3072))
    cfg = Qwen3Config(vocab_size=max(vocab or 0, len(tok)), max_position_embeddings=512, tie_word_embeddings=tied,
                      use_cache=False,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      initializer_range=init_std, **shape)
    torch.manual_seed(seed)
    return BaseBundle(model=Qwen3ForCausalLM(cfg).eval(), tokenizer=tok, hf_config=cfg)


def params_for(task: str, cache: str | None, width: str) -> dict[str, Any]:
    """Paradigm knobs: the demo's defaults, the beam widths of MMGRid's evaluation (20 codes, 5 titles)."""
    if task in ("semid", "train"):
        return {"codes": "text", "levels": 3, "codebook_size": 16, "num_beams": 20, "embed_cache": cache}
    if task == "text":
        return {"num_beams": 5, "embed_cache": cache}
    if task == "emb":
        return {"max_item_tokens": 8}
    if task == "sasrec":
        return {"hidden": 64, "heads": 1} if width == "demo" else {"hidden": 1024, "heads": 8}
    raise ValueError(task)


def build_model(task: str, domain: Domain, width: str, qwen_layers: int, cache: str | None) -> tuple[Any, Any]:
    """(paradigm, model) of a task, seeded: every child builds the same one."""
    from mmgrid.paradigms import get_paradigm

    paradigm = get_paradigm("semid" if task == "train" else task)
    base = make_base(domain, width, qwen_layers)
    return paradigm, paradigm.build(base, domain, params_for(task, cache, width), seed=0)


def test_histories(domain: Domain, n: int) -> list[list[int]]:
    return [list(h) for h in domain.examples("test")["history"].to_list()[:n]]


# --------------------------------------------------------------------------- the arms

def semid_mmgrid(paradigm: Any, model: Any, histories: list[list[int]], k: int) -> list[list[int]]:
    """mmgrid's trie beam search (beam ``max(num_beams, k + 10)``, as ``rank``): top-k items per history."""
    beam = max(int(model.mmgrid_semid.params.num_beams), k + 10)
    return [items[:k] for items in paradigm.beam_search(model, histories, beam)]


def semid_generate(paradigm: Any, model: Any, histories: list[list[int]], k: int) -> list[list[int]]:
    """LC-Rec's way: ``generate(num_beams, prefix_allowed_tokens_fn)`` over the same trie of code tokens."""
    import torch

    from mmgrid.paradigms.lm import left_pad
    from mmgrid.paradigms.semid.paradigm import seq_prompt

    info = model.mmgrid_semid
    beam = max(int(info.params.num_beams), k + 10)
    tok_rows = [r.tolist() for r in info.rows]
    children: dict[tuple[int, ...], list[int]] = {}
    for code in info.codes.tolist():
        toks = [tok_rows[lvl][c] for lvl, c in enumerate(code)]
        for lvl in range(len(toks)):
            kids = children.setdefault(tuple(toks[:lvl]), [])
            if toks[lvl] not in kids:
                kids.append(toks[lvl])
    item_of = {tuple(tok_rows[lvl][c] for lvl, c in enumerate(code)): i for i, code in enumerate(info.codes.tolist())}
    ids, mask, _ = left_pad([seq_prompt(info, h) for h in histories], info.tokenizer.pad_token_id)
    width, eos = ids.shape[1], info.tokenizer.eos_token_id

    def allowed(_batch: int, sent: torch.Tensor) -> list[int]:
        return children.get(tuple(sent[width:].tolist()), [eos])  # a dead (-inf) beam: anything

    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, num_beams=beam, num_return_sequences=beam,
                             max_new_tokens=len(info.level_sizes), do_sample=False, use_cache=True,
                             prefix_allowed_tokens_fn=allowed, pad_token_id=info.tokenizer.pad_token_id,
                             eos_token_id=eos, output_scores=True, return_dict_in_generate=True)
    seqs, scores = out.sequences[:, width:].tolist(), out.sequences_scores.tolist()
    result = []
    for q in range(len(histories)):
        items: list[int] = []
        for j in range(q * beam, (q + 1) * beam):
            item = item_of.get(tuple(seqs[j]))
            if scores[j] != float("-inf") and item is not None and item not in items:
                items.append(item)
        result.append(items[:k])
    return result


def text_mmgrid(paradigm: Any, model: Any, domain: Domain, histories: list[list[int]], k: int) -> list[list[int]]:
    return paradigm.rank(model, domain, histories, k).tolist()


def text_generate(paradigm: Any, model: Any, domain: Domain, histories: list[list[int]], k: int) -> list[list[int]]:
    """The same rank with HF ``generate`` doing the beam search (the paradigm's module-level hook swapped)."""
    import mmgrid.paradigms.text as text_module

    def plain(model: Any, input_ids: Any, attention_mask: Any, num_beams: int, **kw: Any) -> Any:
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams, **kw)

    own = text_module.prefilled_beam_generate
    text_module.prefilled_beam_generate = plain
    try:
        return paradigm.rank(model, domain, histories, k).tolist()
    finally:
        text_module.prefilled_beam_generate = own


def _mask_topk(scores: Any, histories: list[list[int]], k: int) -> list[list[int]]:
    import torch

    for i, h in enumerate(histories):
        if h and scores.shape[1] - len(set(h)) >= k:
            scores[i, torch.tensor(sorted(set(h)))] = float("-inf")
    return torch.topk(scores, k, dim=1).indices.tolist()


def emb_mmgrid(paradigm: Any, model: Any, domain: Domain, histories: list[list[int]], k: int,
               item_emb: Any) -> list[list[int]]:
    return paradigm.rank(model, domain, histories, k, item_emb=item_emb).tolist()


def emb_matmul(paradigm: Any, model: Any, domain: Domain, histories: list[list[int]], k: int,
               item_emb: Any) -> list[list[int]]:
    """The user LLM's plain forward on the padded batch, its last real position, cosine matmul, topk."""
    import torch
    import torch.nn.functional as F

    from mmgrid.paradigms.examples import pad_right

    keep = int(model.params.max_history)
    hist = [list(h)[-keep:] for h in histories]
    ids, lengths = pad_right(hist, pad=0)
    with torch.no_grad():
        seq = item_emb[ids] * (torch.arange(ids.shape[1])[None] < lengths[:, None])[..., None]
        mask = (torch.arange(ids.shape[1])[None] < lengths[:, None]).long()
        mask[:, 0] = 1
        hidden = model.user_llm(attention_mask=mask, inputs_embeds=seq, use_cache=False).last_hidden_state
        user = hidden[torch.arange(len(hist)), (lengths - 1).clamp(min=0)]
        scores = F.normalize(user.float(), dim=-1) @ F.normalize(item_emb.float(), dim=-1).T
        return _mask_topk(scores, hist, k)


def sasrec_mmgrid(paradigm: Any, model: Any, domain: Domain, histories: list[list[int]], k: int) -> list[list[int]]:
    return paradigm.rank(model, domain, histories, k).tolist()


def sasrec_matmul(paradigm: Any, model: Any, domain: Domain, histories: list[list[int]], k: int) -> list[list[int]]:
    """SASRec's forward on the whole padded batch, a matmul with every item embedding, topk."""
    import torch

    from mmgrid.paradigms.examples import pad_right

    hist = [list(h)[-int(model.params.max_len):] for h in histories]
    ids, lengths = pad_right(hist, pad=0)
    with torch.no_grad():
        return _mask_topk(model.item_emb.weight[1:].matmul(model.users(ids, lengths).T).T.float(), hist, k)


class Recording:
    """A training task that records each step's loss (delegates everything else to the paradigm)."""

    def __init__(self, task: Any) -> None:
        self.task, self.losses = task, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def loss(self, model: Any, batch: Any) -> Any:
        loss = self.task.loss(model, batch)
        self.losses.append(float(loss.detach()))
        return loss


def stage_batches(paradigm: Any, model: Any, examples: list[Any], batch_size: int, epochs: int,
                  seed: int) -> list[list[Any]]:
    """The batches :func:`mmgrid.train.loop.train_stage` forms, in its order (its seeded shuffle, then
    :func:`mmgrid.train.loop.length_buckets` where the task buckets): what the Trainer is fed."""
    import math

    import torch

    from mmgrid.train.loop import length_buckets, task_option

    gen = torch.Generator().manual_seed(seed)
    window = int(task_option(paradigm, model, "bucket_window", 0) or 0)
    lengths = [paradigm.example_length(e) for e in examples] if window > 1 else None
    out = []
    for _ in range(epochs):
        order = torch.randperm(len(examples), generator=gen).tolist()
        if lengths is not None:
            order = length_buckets(order, lengths, batch_size, window, gen)
        for b in range(math.ceil(len(examples) / batch_size)):
            out.append([examples[i] for i in order[b * batch_size:(b + 1) * batch_size]])
    return out


def train_mmgrid(paradigm: Any, model: Any, examples: list[Any], batch_size: int, epochs: int, lr: float,
                 seed: int = 0) -> list[float]:
    """One mmgrid training stage; the per-step losses."""
    from mmgrid.train.loop import StageSettings, train_stage

    task = Recording(paradigm)
    train_stage(task, model, examples, StageSettings(epochs=epochs, lr=lr, batch_size=batch_size, seed=seed,
                                                     device="cpu", dtype="float32"), progress=False)
    return task.losses


def train_trainer(paradigm: Any, model: Any, examples: list[Any], batch_size: int, epochs: int, lr: float,
                  seed: int = 0, out_dir: str | None = None) -> list[float]:
    """``transformers.Trainer`` on the same batches (one dataset row per batch, read in order), AdamW
    (fused where the paradigm's stage uses the fused one), constant learning rate, no clipping; the model's
    own HF loss from ``labels``. Returns the per-step losses."""
    import torch
    from transformers import Trainer, TrainingArguments

    from mmgrid.train.loop import task_option

    batches = stage_batches(paradigm, model, examples, batch_size, epochs, seed)
    losses: list[float] = []

    class InOrder(Trainer):
        def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
            return torch.utils.data.SequentialSampler(self.train_dataset)

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False, **kw: Any) -> Any:
            out = super().compute_loss(model, inputs, return_outputs=return_outputs, **kw)
            losses.append(float((out[0] if return_outputs else out).detach()))
            return out

    fused = bool(task_option(paradigm, model, "fused_optimizer", False))
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=out_dir or tmp, per_device_train_batch_size=1, num_train_epochs=1, learning_rate=lr,
            weight_decay=0.0, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=0.0,
            optim="adamw_torch_fused" if fused else "adamw_torch", logging_strategy="no", save_strategy="no",
            report_to="none", disable_tqdm=True, use_cpu=True, seed=seed, dataloader_num_workers=0,
            dataloader_pin_memory=False, remove_unused_columns=False)
        trainer = InOrder(model=model, args=args, train_dataset=batches,
                          data_collator=lambda rows: paradigm.collate(model, rows[0]))
        trainer.train()
    model.eval()
    return losses


# --------------------------------------------------------------------------- one arm in its own process

SIZES = {  # (items, users ranked, training examples, batch size, epochs) per width; --quick shrinks them
    "demo": dict(items=400, users=64, train=256, batch=32, epochs=2),
    "qwen3-0.6b": dict(items=400, users=12, train=64, batch=16, epochs=2),
}
QUICK = dict(items=300, users=6, train=32, batch=8, epochs=1)


def run_arm(task: str, arm: str, width: str, qwen_layers: int, quick: bool, cache: str | None) -> dict[str, Any]:
    """Build the task's model, warm up, time one full pass of the arm; what it returned and cost."""
    import torch

    size = QUICK if quick else SIZES[width]
    domain = make_domain(size["items"], max(size["users"], 48))
    paradigm, model = build_model(task, domain, width, qwen_layers, cache)
    k = 10
    hist = test_histories(domain, size["users"])
    if task == "train":
        examples = paradigm.examples(model, domain, "pretrain")[: size["train"]]
        fn = train_mmgrid if arm == "mmgrid" else train_trainer
        warm = paradigm.build(make_base(domain, width, qwen_layers), domain, params_for(task, cache, width), seed=0)
        fn(paradigm, warm, examples[: size["batch"]], size["batch"], 1, 1e-3)  # imports, allocator, optimizer
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        out = fn(paradigm, model, examples, size["batch"], size["epochs"], 1e-3)
        seconds = time.perf_counter() - t0
        tokens = sum(len(e.ids) for e in examples) * size["epochs"]
        work = {"examples": len(examples) * size["epochs"], "tokens": tokens}
    else:
        if task == "semid":
            fn = semid_mmgrid if arm == "mmgrid" else semid_generate
            call = lambda h: fn(paradigm, model, h, k)  # noqa: E731
        elif task == "emb":
            item_emb = paradigm.item_embeddings(model)  # once, outside the timed pass (both arms)
            fn = emb_mmgrid if arm == "mmgrid" else emb_matmul
            call = lambda h: fn(paradigm, model, domain, h, k, item_emb)  # noqa: E731
        else:
            fn = {"text": (text_mmgrid, text_generate), "sasrec": (sasrec_mmgrid, sasrec_matmul)}[task][
                arm != "mmgrid"]
            call = lambda h: fn(paradigm, model, domain, h, k)  # noqa: E731
        model.eval()
        call(hist[:2])
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        out = call(hist)
        seconds = time.perf_counter() - t0
        reps = 1
        if seconds < 0.5:  # a pass of milliseconds: repeat it for about a second, time per pass = the mean
            reps = min(200, 1 + int(1.0 / max(seconds, 1e-4)))
            t0 = time.perf_counter()
            for _ in range(reps):
                call(hist)
            seconds = (time.perf_counter() - t0) / reps
        work = {"users": len(hist), "reps": reps}
    n_params = sum(p.numel() for p in model.parameters())
    lm = getattr(model, "item_llm", model)
    work["vocab"] = int(lm.config.vocab_size) if hasattr(lm, "config") else None
    return {"task": task, "arm": arm, "width": width, "out": out, "seconds": seconds, "params": n_params,
            "rss_before_mib": rss0 / 1024, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "threads": torch.get_num_threads(), **work}


def profile_text(width: str, qwen_layers: int, quick: bool, cache: str | None) -> dict[str, Any]:
    """Where text ranking's time goes: the beam search (mmgrid's and HF's) and the grounding that both
    arms share, timed apart on the arms' inputs, and torch.profiler's costliest operators of one rank."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import mmgrid.paradigms.text as text_module

    size = QUICK if quick else SIZES[width]
    domain = make_domain(size["items"], max(size["users"], 48))
    paradigm, model = build_model("text", domain, width, qwen_layers, cache)
    model.eval()
    hist, k = test_histories(domain, size["users"]), 10
    text_mmgrid(paradigm, model, domain, hist[:2], k)
    vecs = text_module.grounding_vectors(model, model.mmgrid_text.params) if hasattr(model, "mmgrid_text") else None
    t0 = time.perf_counter()
    texts, scores = paradigm.generate(model, hist)
    gen_mmgrid = time.perf_counter() - t0
    own = text_module.prefilled_beam_generate
    text_module.prefilled_beam_generate = lambda m, i, a, b, **kw: m.generate(input_ids=i, attention_mask=a,
                                                                              num_beams=b, **kw)
    try:
        t0 = time.perf_counter()
        paradigm.generate(model, hist)
        gen_hf = time.perf_counter() - t0
    finally:
        text_module.prefilled_beam_generate = own
    t0 = time.perf_counter()
    paradigm.rank_generated(model, domain, hist, k, texts, scores, model_items=vecs)
    ground = time.perf_counter() - t0
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        text_mmgrid(paradigm, model, domain, hist, k)
    ops = [(e.key, e.self_cpu_time_total / 1e6) for e in prof.key_averages()]
    ops = sorted(ops, key=lambda kv: -kv[1])[:6]
    return {"gen_mmgrid": gen_mmgrid, "gen_hf": gen_hf, "ground": ground, "users": len(hist), "ops": ops}


def print_text_profile(width: str, r: dict[str, Any], goal: float) -> None:
    mm, hf, g = r["gen_mmgrid"], r["gen_hf"], r["ground"]
    print(f"\nprofile, text at {width} ({r['users']} users; the goal of {goal:g}x is missed):")
    print(f"  beam search: mmgrid {mm:.2f} s, HF generate {hf:.2f} s ({hf / mm:.2f}x); "
          f"grounding (the same code in both arms: sentence-embedding the generated titles, scoring every item) "
          f"{g:.2f} s")
    print(f"  so the whole rank is at most (HF + grounding) / (mmgrid + grounding) = {(hf + g) / (mm + g):.2f}x "
          f"faster; grounding is {100 * g / (mm + g):.0f} % of mmgrid's rank")
    print("  costliest operators of one mmgrid rank (self CPU s): " +
          ", ".join(f"{name} {sec:.2f}" for name, sec in r["ops"]))
    print("  what would remove it: for the grounding, a cheaper embedding of the generated titles (the embedder "
          "on the device, or ground_embedder: model, which reuses the LM's hidden states); for the beam search, "
          "prefilled_beam_generate still runs HF generate's per-step loop and per-beam cache copies, which a "
          "shared-prefix decoder for titles (as semid's SharedPrefixDecoder) would not")


def spawn(task: str, arm: str, width: str, args: argparse.Namespace, cache: str) -> dict[str, Any]:
    """One arm in a fresh interpreter; its JSON result."""
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "arm.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", task, arm, width, str(res),
               "--qwen-layers", str(args.qwen_layers), "--threads", str(args.threads), "--cache", cache]
        if args.quick:
            cmd.append("--quick")
        subprocess.run(cmd, check=True, env={**os.environ, "MMGRID_BENCH_NO_RECORD": "1"})
        return json.loads(res.read_text())


def same_outputs(task: str, a: Any, b: Any) -> tuple[bool, str]:
    """Identical top-K lists (ranking) or per-step losses within LOSS_RTOL (training)."""
    if task == "train":
        if len(a) != len(b):
            return False, f"{len(a)} vs {len(b)} steps"
        rel = max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)), default=0.0)
        return rel <= LOSS_RTOL, f"{len(a)} steps, losses {a[0]:.4f} -> {a[-1]:.4f}, max rel. diff {rel:.1e}"
    diff = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
    return diff == 0, f"{len(a)} users, top-{len(a[0]) if a else 0} lists differ for {diff}"


# --------------------------------------------------------------------------- the GPU check (bench/gpu_check.sh)

# Peak dense bf16 tensor-core FLOP/s (no sparsity) from the vendors' data sheets, matched in the device's name
# (first match wins; --peak-tflops overrides).
PEAK_BF16 = (("H200", 989.4e12), ("H100 PCIe", 756.0e12), ("H100", 989.4e12), ("A100", 312.0e12),
             ("L40S", 362.1e12), ("L4", 121.0e12))
QWEN3_06B = dict(layers=28, vocab=151_936, tied=True)  # Qwen3-0.6B's depth, vocabulary and tied head
DRY_SHAPE = dict(layers=2, vocab=4096, tied=True)
GPU_SIZES = dict(train=512, batch=32, users=256)
DRY_SIZES = dict(train=16, batch=8, users=4)


def matmul_params(model: Any) -> int:
    """N of nanoGPT's MFU: every parameter but the input embedding (a lookup, no FLOPs; nanoGPT leaves out
    its position embedding alike); a tied head counts once, as the head."""
    body = sum(p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name and "lm_head" not in name)
    return body + model.lm_head.weight.numel()


def peak_flops(device_name: str, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    return next((f for key, f in PEAK_BF16 if key in device_name), None)


def gpu_check(dry: bool, peak_tflops: float | None, rehearsal: str, cache: str | None) -> dict[str, Any]:
    """Time a semid training stage (bf16 autocast) and a ranking pass (bf16 weights) at Qwen3-0.6B's
    shape on CUDA; ``dry``: the same code on CPU at the demo's width. Tokens/s and MFU."""
    import torch

    from mmgrid.paradigms import get_paradigm
    from mmgrid.paradigms.semid.paradigm import seq_prompt
    from mmgrid.train.loop import StageSettings, train_stage

    dev = torch.device("cpu" if dry else "cuda")
    size = DRY_SIZES if dry else GPU_SIZES
    domain = make_domain(400, max(size["users"], 48))
    paradigm = get_paradigm("semid")
    shape = DRY_SHAPE if dry else QWEN3_06B  # the dry run: a tied head and unused vocabulary rows too
    base = make_base(domain, "demo" if dry else "qwen3-0.6b", shape["layers"], vocab=shape["vocab"], tied=shape["tied"])
    model = paradigm.build(base, domain, params_for("semid", cache, "qwen3-0.6b"), seed=0)
    n = matmul_params(model)
    name = "CPU (dry run)" if dry else torch.cuda.get_device_name(dev)
    peak = peak_flops(name, peak_tflops)
    sync = (lambda: None) if dry else (lambda: torch.cuda.synchronize(dev))
    dtype = "bfloat16"  # autocast in training, bf16 weights in ranking; the dry run too (CPU bf16)
    examples = paradigm.examples(model, domain, "pretrain")[: size["train"]]
    settings = StageSettings(epochs=1, lr=1e-4, batch_size=size["batch"], seed=0, device=dev.type, dtype=dtype)
    train_stage(paradigm, model, examples[: size["batch"] * 2], settings, progress=False)  # warm-up: kernels, allocator
    sync()
    t0 = time.perf_counter()
    log = train_stage(paradigm, model, examples, settings, progress=False)
    sync()
    train_s = time.perf_counter() - t0
    train_tokens = sum(len(e.ids) for e in examples)
    model.to(dtype=torch.bfloat16)
    model.eval()
    hist = test_histories(domain, size["users"])
    info = model.mmgrid_semid
    beam = max(int(info.params.num_beams), 20)
    paradigm.beam_search(model, hist[:2], beam)
    sync()
    t0 = time.perf_counter()
    found = paradigm.beam_search(model, hist, beam)
    sync()
    rank_s = time.perf_counter() - t0
    # tokens through the model: each prompt once, then one token per beam at each code level after the first
    rank_tokens = sum(len(seq_prompt(info, h)) for h in hist) + len(hist) * beam * (len(info.level_sizes) - 1)
    out = {"device": name, "dtype": dtype, "params": sum(p.numel() for p in model.parameters()), "matmul_params": n,
           "layers": model.config.num_hidden_layers, "hidden": model.config.hidden_size,
           "vocab": model.config.vocab_size, "rehearsal": rehearsal,
           "train_examples": len(examples), "train_steps": log.steps, "train_s": train_s,
           "train_tokens_s": train_tokens / train_s, "train_loss": log.epoch_losses,
           "rank_users": len(hist), "rank_found": sum(len(f) > 0 for f in found), "rank_s": rank_s,
           "rank_tokens_s": rank_tokens / rank_s, "beam": beam, "peak_flops": peak}
    out["train_mfu"] = 6 * n * out["train_tokens_s"] / peak if peak else None
    out["rank_mfu"] = 2 * n * out["rank_tokens_s"] / peak if peak else None
    if not dry:
        out["peak_gpu_mem_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
    return out


def print_gpu_check(r: dict[str, Any]) -> None:
    mfu = lambda v: f"{100 * v:.1f} %" if v is not None else "n/a (peak FLOP/s of this device unknown: --peak-tflops)"  # noqa: E731
    dry = r["device"].startswith("CPU")
    if dry:
        print("DRY RUN on CPU at the demo's width (bf16 as on the GPU): checks that the code runs; not a GPU figure. No CUDA "
              "device was available for this record; on a GPU machine, `bash bench/gpu_check.sh` writes the real one.")
    peak = f"{r['peak_flops'] / 1e12:.1f} TFLOP/s" if r["peak_flops"] else "unknown"
    print(f"device: {r['device']}; dtype {r['dtype']}; peak dense bf16: {peak}; run by bench/gpu_check.sh")
    print(f"model: Qwen3 {r['layers']} layers, hidden {r['hidden']}, vocab {r['vocab']}; {r['params'] / 1e6:.1f}M "
          f"parameters, N = {r['matmul_params'] / 1e6:.1f}M without the input embedding (MFU: 6N FLOP per training token, "
          f"2N per ranking token, over the device's peak)")
    print(f"rehearsal of grids/amazon2023.yaml (mmgrid build --rehearse): {r['rehearsal']}")
    print(f"training stage (semid, {r['train_examples']} examples, {r['train_steps']} steps, AdamW): "
          f"{r['train_s']:.2f} s, {r['train_tokens_s']:.0f} tokens/s, MFU {mfu(r['train_mfu'])}; "
          f"loss {r['train_loss'][0]:.4f}")
    print(f"ranking pass (semid trie beam search, beam {r['beam']}, {r['rank_users']} users): {r['rank_s']:.2f} s, "
          f"{r['rank_users'] / r['rank_s']:.1f} users/s, {r['rank_tokens_s']:.0f} tokens/s, MFU {mfu(r['rank_mfu'])}")
    if "peak_gpu_mem_gib" in r:
        print(f"peak GPU memory: {r['peak_gpu_mem_gib']:.2f} GiB")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", nargs="+", default=list(WIDTHS), choices=WIDTHS)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--qwen-layers", type=int, default=2, help="decoder layers at the Qwen3-0.6B width (it has 28)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per arm (default 1: a shared machine)")
    ap.add_argument("--quick", action="store_true", help="tiny inputs: a smoke run of every comparison")
    ap.add_argument("--cache", default=None, help="item-embedding cache folder shared by the arms (default: a temp)")
    ap.add_argument("--record", default="peers", help="record name (bench/results/<name>.md)")
    ap.add_argument("--gpu-check", action="store_true",
                    help="time a training stage and a ranking pass at Qwen3-0.6B's shape on CUDA in bf16, "
                         "tokens/s and MFU (bench/gpu_check.sh runs this; record gpu_check)")
    ap.add_argument("--dry-run", action="store_true", help="with --gpu-check: the same code on CPU, demo width (the suite runs it)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="with --gpu-check: the device's peak dense "
                    "bf16 TFLOP/s, where the built-in table does not know it")
    ap.add_argument("--child", nargs=4, metavar=("TASK", "ARM", "WIDTH", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if args.gpu_check:
        if not args.dry_run and not torch.cuda.is_available():
            print("gpu check: no CUDA device is visible; run it on a GPU machine, or with --dry-run on CPU",
                  file=sys.stderr)
            return 2
        rehearsal = os.environ.get("MMGRID_GPU_REHEARSAL", "not run (run bench/gpu_check.sh for it)")
        print_gpu_check(gpu_check(args.dry_run, args.peak_tflops, rehearsal, args.cache))
        return 0
    if args.child:
        task, arm, width, out = args.child
        result = profile_text(width, args.qwen_layers, args.quick, args.cache) if arm == "profile" else \
            run_arm(task, arm, width, args.qwen_layers, args.quick, args.cache)
        Path(out).write_text(json.dumps(result))
        return 0
    tmp = tempfile.TemporaryDirectory()  # the embedding cache of the arms (removed at exit)
    cache = args.cache or tmp.name
    rows, failed = [], []
    for width in args.widths:
        for task in args.tasks:
            mine = spawn(task, "mmgrid", width, args, cache)
            peer = spawn(task, "peer", width, args, cache)
            ok, what = same_outputs(task, mine["out"], peer["out"])
            print(f"{width:10s} {task:6s} equal outputs: {'yes' if ok else 'NO'} ({what})", flush=True)
            if not ok:
                failed.append(f"{width}/{task}")
            rows.append((width, task, mine, peer))
    if failed:
        print(f"outputs differ for {', '.join(failed)}: no time is compared", file=sys.stderr)
        return 1
    print(f"\nthreads per arm: {args.threads}; load average now: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    vocab = next((m["vocab"] for _, _, m, _ in rows if m.get("vocab")), None)
    print(f"widths: demo = tiny_qwen3()'s shape (hidden 64, 2 layers); qwen3-0.6b = Qwen3-0.6B's layer shape "
          f"(hidden 1024, 16 / 8 heads of 128, MLP 3072), {args.qwen_layers} of its 28 layers; vocabulary: a "
          f"byte-level BPE trained on the bench items' text plus the code tokens ({vocab} rows, Qwen3-0.6B has "
          f"151,936); random weights (std 0.1), float32, CPU")
    print("\n| width | task | params | mmgrid | peer | mmgrid rate | peer rate | ratio | goal | "
          "peak RSS mmgrid / peer (MiB) |")
    print("|---|---|---:|---|---|---:|---:|---:|---|---:|")
    for width, task, mine, peer in rows:
        unit = "examples/s" if task == "train" else "users/s"
        key = "examples" if task == "train" else "users"
        rm, rp = mine[key] / mine["seconds"], peer[key] / peer["seconds"]
        ratio = rm / rp
        goal = GOALS.get(task)
        verdict = "-" if goal is None else f">= {goal:g}x: {'met' if ratio >= goal else 'MISSED'}"
        extra = f" ({mine['tokens'] / mine['seconds']:.0f} vs {peer['tokens'] / peer['seconds']:.0f} tokens/s)" \
            if task == "train" else ""
        print(f"| {width} | {task} | {mine['params'] / 1e6:.2f}M | {mine['seconds']:.2f} s | {PEER[task]} "
              f"{peer['seconds']:.2f} s | {rm:.1f} {unit} | {rp:.1f} {unit}{extra} | {ratio:.2f}x | {verdict} | "
              f"{mine['peak_rss_mib']:.0f} / {peer['peak_rss_mib']:.0f} |")
    print("\nratio = mmgrid's rate / the peer's; rates are over the timed pass after a warm-up call (a pass under "
          "0.5 s: the mean of repeats for about a second); peak RSS: the arm's process (torch and the model included)")
    for width, task, mine, peer in rows:
        goal = GOALS.get(task)
        if task == "text" and goal and (mine["users"] / mine["seconds"]) / (peer["users"] / peer["seconds"]) < goal:
            print_text_profile(width, spawn(task, "profile", width, args, cache), goal)
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        raise SystemExit(main())
    run_recorded(main, "gpu_check" if "--gpu-check" in sys.argv else "peers")
