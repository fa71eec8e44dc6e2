"""Run under torchrun by a test: which threads are left once ``process_group`` has been left.

Each rank trains one DDP step and all-reduces a tensor it then drops (what ``ncf train`` does),
leaves the group, and writes ``OUT_DIR/rank<r>.json``: the names of its threads before, inside the
group and after it (Linux names each thread in ``/proc/self/task/*/comm``), and whether the dropped
tensor was still alive (kept for the gloo threads) inside the group and freed after it.
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ncf.models.distributed import DistEnv, all_reduce_sum, process_group


def thread_names() -> list[str]:
    tasks = Path("/proc/self/task")
    return sorted((tasks / t / "comm").read_text().strip() for t in os.listdir(tasks))


def train_step(env: DistEnv) -> tuple[list[str], weakref.ref]:
    """One DDP step and one all-reduce; the module and tensors are dropped on return."""
    torch.manual_seed(0)
    net = DDP(torch.nn.Linear(4, 1))
    net(torch.ones(8, 4)).sum().backward()
    reduced = all_reduce_sum(torch.ones(3), env)
    return thread_names(), weakref.ref(reduced)


def main(out_dir: Path) -> None:
    torch.set_num_threads(1)  # no intra-op pool threads: the group's are the only new ones
    before = thread_names()
    with process_group("cpu") as env:
        inside, reduced = train_step(env)
        kept = reduced() is not None  # no gloo thread can be the one that frees it
    report = {"rank": env.rank, "before": before, "inside": inside, "after": thread_names()}
    report |= {"kept_inside": kept, "freed_after": reduced() is None}
    (out_dir / f"rank{env.rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
