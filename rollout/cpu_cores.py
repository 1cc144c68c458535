"""Which CPU cores a rollout engine's process runs on (``rollout.cpu_threads_bind``, ``--cpu-bind``)."""

from __future__ import annotations

import os
import re

CORE_LIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")  # "0", "0-1", "0,2-3"


def parse_cores(bind: str) -> set[int]:
    """The core ids of a list such as ``"0,2-3"``; a ``ValueError`` naming the list when it is not one."""
    if not CORE_LIST.fullmatch(bind):
        raise ValueError(f"{bind!r} is not a list of CPU cores; write it as 0, 0-1 or 0,2-3")
    ids: set[int] = set()
    for part in bind.split(","):
        first, _, last = part.partition("-")
        if last and int(last) < int(first):
            raise ValueError(f"{bind!r}: the range {part} runs backwards; write it low-high")
        ids.update(range(int(first), int(last or first) + 1))
    return ids


def local_cores(bind: str) -> set[int]:
    """``parse_cores``, and a ``ValueError`` when this process may not run on one of them."""
    cores = parse_cores(bind)
    missing = cores - os.sched_getaffinity(0)
    if missing:
        allowed = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        raise ValueError(f"{bind!r} names core(s) {sorted(missing)}, which this machine does not give; use {allowed}")
    return cores


def pin_process(bind: str) -> None:
    """Run every thread of this process on the cores in ``bind``; threads and processes it starts later inherit
    that. Pins the whole process, not one thread: Ray's threads and the tokenizer's then stay off the cores the
    trainer and driver use as well. Torch then runs at most one intra-op thread per pinned core: two threads on one
    core take turns at every op, each spinning while it waits for the other (the tiny model's batch took 5.9 s
    instead of 0.63 s)."""
    import torch

    cores = local_cores(bind)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except ProcessLookupError:  # a thread that ended while the list was read
            pass
    torch.set_num_threads(min(torch.get_num_threads(), len(cores)))
