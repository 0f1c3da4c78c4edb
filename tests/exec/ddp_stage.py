"""Run one real training stage (``mmgrid.train.stage:run_stage``) from a JSON job file.

    torchrun --standalone --nproc_per_node=2 tests/exec/ddp_stage.py JOB.json OUT

The same entry point an executor calls; under torchrun every rank trains its shard and
only rank 0 stores the checkpoint. Each rank writes the id it got back to
``OUT/returned_rank<r>.txt`` so that the test can check them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mmgrid.train.stage import run_stage


def main(job_file: Path, out: Path) -> None:
    cid = run_stage(**json.loads(job_file.read_text()))
    (out / f"returned_rank{os.environ.get('RANK', '0')}.txt").write_text(cid)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
