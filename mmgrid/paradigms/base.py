"""The one Protocol every generative-recommender paradigm implements.

A paradigm turns the shared base LLM into a recommender for one domain, trains on a
phase's examples, and ranks the domain's items for user histories. Training code
(`mmgrid.train`) and evaluation (`mmgrid.eval`) only talk to this Protocol; paradigms
never read the grid config themselves: their knobs arrive as the plain ``params``
mapping (``paradigm_params.<name>`` in the grid YAML), which ``build`` and ``load`` turn into
the paradigm's typed knob declaration (:class:`mmgrid.paradigms.params.Knobs`, one frozen
dataclass per paradigm: defaults, ranges and meanings in one place); a paradigm class also
exposes ``defaults`` (its knobs' defaults) for the validation pass.

Checkpoints: :meth:`Paradigm.save` returns a :class:`Checkpoint` (flat float state dict
+ small files such as ``config.json``/``tokenizer.json`` + JSON-able meta); the registry
stores it, and :meth:`Paradigm.load` rebuilds the model from it, also when the state dict
is the result of a merge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

    from mmgrid.data.dataset import DomainData
    from mmgrid.models.base import BaseBundle


@dataclass
class Checkpoint:
    """What a paradigm hands to the registry and gets back from it."""

    state: dict[str, "torch.Tensor"]  # flat; merged tensor by tensor by mmgrid.merge
    files: dict[str, bytes] = field(default_factory=dict)  # config.json, tokenizer.json, ...
    meta: dict[str, Any] = field(default_factory=dict)  # JSON-able: item codes, sizes, ...
    # Rows of 2-D tensors that only this model has (added vocabulary such as semantic-ID
    # tokens): tensor name -> (first added row, token names of the added rows). The merge
    # engine keeps these rows per model and merges only the shared rows; Orbit excludes them.
    added_rows: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    # The grid's base LM this checkpoint descends from, loaded on first call (None: unknown, e.g. a
    # checkpoint made outside a registry). Set by ``mmgrid.runtime.checkpoints.load_checkpoint``;
    # text's ``ground_embedder: base`` embeds with it (BIGRec grounds with the frozen base LLM).
    base_model: Callable[[], "torch.nn.Module"] | None = field(default=None, repr=False, compare=False)


ModelT = TypeVar("ModelT", bound="torch.nn.Module")  # a paradigm's own model class


@runtime_checkable
class Paradigm(Protocol[ModelT]):
    """A generative-recommendation paradigm (text, semid, emb, sasrec), generic in its model class."""

    name: str

    def build(self, base: "BaseBundle", domain: "DomainData", params: dict[str, Any], seed: int) -> ModelT:
        """Make this paradigm's model for ``domain`` from the base (the first stage's start)."""
        ...

    def examples(self, model: ModelT, domain: "DomainData", phase: str) -> list[Any]:
        """Training examples of one phase (targets inside the phase, histories before them)."""
        ...

    def collate(self, model: ModelT, examples: list[Any]) -> dict[str, "torch.Tensor"]:
        """Batch a list of examples into tensors."""
        ...

    def loss(self, model: ModelT, batch: dict[str, "torch.Tensor"]) -> "torch.Tensor":
        """Scalar training loss of one batch."""
        ...

    def rank(self, model: ModelT, domain: "DomainData", histories: list[list[int]], k: int) -> "np.ndarray":
        """Top-``k`` item indices (best first) for each history: an int array [len(histories), k]."""
        ...

    def save(self, model: ModelT) -> Checkpoint:
        """The model as a registry checkpoint."""
        ...

    def load(self, ckpt: Checkpoint, domain: "DomainData", params: dict[str, Any]) -> ModelT:
        """Rebuild the model from a checkpoint (possibly merged, possibly with extra added rows)."""
        ...
