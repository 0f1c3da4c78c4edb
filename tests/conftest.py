"""Tiny models train fastest on one CPU thread (and much faster on a busy machine)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module", autouse=True)  # every test module
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
