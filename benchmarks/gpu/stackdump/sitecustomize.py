"""On the GPU machine, with this folder first on PYTHONPATH and TAILOR_STACKS naming a folder: every Python process
(the bench and vLLM's engine core alike, forked or spawned) writes all its threads' stacks there every 20 s, to show
where a slow start spends its time (the first engine start on a fresh H200 sat silent for over 2 minutes,
2026-11-27)."""

import faulthandler
import os
import threading
import time
from typing import IO


def _stacks_file() -> IO[str] | None:
    try:
        return open(os.path.join(os.environ["TAILOR_STACKS"], f"stacks-{os.getpid()}.txt"), "w")  # noqa: SIM115
    except OSError:
        return None


def _dump_in_a_thread() -> None:
    """In a forked child, where faulthandler's watchdog does not run: a daemon thread that dumps every 20 s."""
    file = _stacks_file()

    def loop() -> None:
        while True:
            time.sleep(20)
            file.write(f"-- {time.strftime('%T')}\n")
            faulthandler.dump_traceback(file, all_threads=True)
            file.flush()

    if file is not None:
        threading.Thread(target=loop, daemon=True).start()


if os.environ.get("TAILOR_STACKS"):
    first = _stacks_file()
    if first is not None:
        faulthandler.dump_traceback_later(20, repeat=True, file=first)
    os.register_at_fork(after_in_child=_dump_in_a_thread)
