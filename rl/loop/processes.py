"""Process trees on Linux (``/proc``): what a run started, whether it is alive, waiting for a condition; the exit a
signal asks for."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


class Terminated(SystemExit):
    """The exit a SIGTERM asks of a command (code 128 + signal): code that turns a user's ``SystemExit`` into a
    reported failure (a reward that calls ``sys.exit``) lets this one through."""


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def command_line(pid: int) -> str:
    """``pid``'s command line (as Ray titles its workers, e.g. ``ray::RolloutWorker``), or "" if it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def wait_for(predicate: Callable[[], object], timeout_s: float, poll_s: float = 0.5) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passes; returns its last truth."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> set[int]:
    """Send ``sig`` to ``pid`` and every process below it; returns the pids signalled."""
    pids = descendants(pid) | {pid}
    for p in pids:
        if alive(p):
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
    return pids
