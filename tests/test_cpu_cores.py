"""``rollout.cpu_threads_bind``: a core list is read strictly, and a pin moves every thread of the process and runs
no more torch threads than it gives cores."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rl.rollout.cpu_cores import parse_cores

PIN_AND_REPORT = """
import json, os, subprocess, sys, threading
import torch
from rl.rollout.cpu_cores import pin_process

torch.set_num_threads(2)  # as many as a 2-core machine gives by default

stop = threading.Event()
before = threading.Thread(target=stop.wait)  # a thread started before the pin, as Ray's are
before.start()
pin_process("0")
seen = {"tasks": [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]}
seen["torch_threads"] = torch.get_num_threads()
after = threading.Thread(target=lambda: seen.setdefault("later_thread", sorted(os.sched_getaffinity(0))))
after.start(); after.join()
child = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
seen["child"] = json.loads(subprocess.run(child, capture_output=True, text=True, check=True).stdout)
stop.set(); before.join()
print(json.dumps(seen))
"""


def test_a_core_list_is_read_as_a_set_and_anything_else_is_refused():
    assert parse_cores("0") == {0} and parse_cores("0,2-3") == {0, 2, 3} and parse_cores("1-1") == {1}
    for bad in ("", "x", "0,", "0-", "-1", "0 1"):
        with pytest.raises(ValueError, match="is not a list of CPU cores"):
            parse_cores(bad)
    with pytest.raises(ValueError, match="runs backwards"):
        parse_cores("3-1")


def test_a_pin_moves_every_thread_and_what_the_process_starts_later_and_caps_torch_threads():
    out = subprocess.run([sys.executable, "-c", PIN_AND_REPORT], capture_output=True, text=True, check=True).stdout
    seen = json.loads(out)
    assert len(seen["tasks"]) >= 2 and all(cores == [0] for cores in seen["tasks"])
    assert seen["later_thread"] == [0] and seen["child"] == [0]
    assert seen["torch_threads"] == 1  # one core: a second torch thread would only wait on the first
