"""Tiny fixtures shared by every paradigm's tests: a DomainData stand-in and a tiny Qwen3 base.

Both are built on the fly (nothing downloaded). ``TinyDomain`` has the attributes of
``mmgrid.data.dataset.DomainData`` that paradigms use, so a test can later swap in the
real class without changing the paradigm code. Fixtures:

- ``tiny_domain`` (session): 30 items in 3 themes, 40 users whose next item follows a
  learnable rule (the next item of the same theme), phases pretrain / p1 / p2 / test.
- ``tiny_base`` (function): a fresh deep copy of a session-built ``BaseBundle`` (tiny
  Qwen3ForCausalLM, hidden 32, 2 layers, and a byte-level BPE tokenizer trained on the
  item texts with ``<pad>``, ``<eos>``, ``<bos>``), so tests may mutate it.
- ``tiny_base_shared`` (session): the same bundle, not copied (read-only use).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from paradigm_helpers import TinyDomain, make_tiny_base, make_tiny_domain


@pytest.fixture(scope="session")
def tiny_domain() -> TinyDomain:
    return make_tiny_domain()


@pytest.fixture(scope="session")
def tiny_base_shared(tiny_domain: TinyDomain) -> Any:
    return make_tiny_base(tiny_domain.item_texts)


@pytest.fixture()
def tiny_base(tiny_base_shared: Any) -> Any:
    return copy.deepcopy(tiny_base_shared)


@pytest.fixture(scope="session")
def tiny_base_factory() -> Any:
    """``make_tiny_base`` itself, for tests that need another seed or depth (``n_layers=3``)."""
    return make_tiny_base
