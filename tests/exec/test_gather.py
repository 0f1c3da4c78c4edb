"""gather: results in submission order, the first failure raised only after every job finished and the
registry was synced (so what the other jobs recorded is indexed)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from mmgrid.runtime.gather import gather


class _Registry:
    def __init__(self, futures: list[Future]) -> None:
        self.futures, self.synced_after = futures, None

    def sync(self) -> None:
        self.synced_after = [f.done() for f in self.futures]


def _finish_later(futures: list[Future], outcomes: list) -> None:
    def run() -> None:
        for f, v in reversed(list(zip(futures, outcomes))):  # the last submitted finishes first
            time.sleep(0.01)
            f.set_exception(v) if isinstance(v, BaseException) else f.set_result(v)
    threading.Thread(target=run, daemon=True).start()


def test_results_in_submission_order_and_each_seen_once() -> None:
    futs = [Future() for _ in range(4)]
    reg, seen = _Registry(futs), []
    _finish_later(futs, [10, 11, 12, 13])
    assert gather(futs, reg, enabled=False, on_result=lambda i, r: seen.append((i, r))) == [10, 11, 12, 13]
    assert seen == [(0, 10), (1, 11), (2, 12), (3, 13)] and reg.synced_after == [True] * 4


def test_a_failure_is_raised_after_every_job_finished_and_the_index_synced() -> None:
    futs = [Future() for _ in range(3)]
    reg = _Registry(futs)
    futs[0].set_exception(ValueError("first job failed"))  # fails before the others finish
    _finish_later(futs[1:], [1, 2])
    with pytest.raises(ValueError, match="first job failed"):
        gather(futs, reg, enabled=False)
    assert reg.synced_after == [True, True, True]
