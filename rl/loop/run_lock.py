"""One ``rl train`` per run directory at a time: a second one started into the same folder (the same command run
twice) would start the folder afresh under the first, interleave its records with the first's and take the
first's checkpoints for its own.

The lock is ``flock`` on a file in the run directory: the kernel releases it when the holder exits, however it
exits (a SIGKILLed run leaves no stale lock), and the file is never removed (removing it would let two runs lock
two different files).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rl.inputs.preflight import BadInput

LOCK_FILE = ".rl-train.lock"


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir`` for this process while the block runs; ``BadInput`` (one line, naming the holder's pid)
    if another process holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise BadInput(
                f"{run_dir} is in use by another rl train (pid {holder}); wait for it or stop it, or give this run "
                f"another name= or output_dir="
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
