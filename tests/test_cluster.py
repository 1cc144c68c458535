"""The loopback cluster's bookkeeping (rl/loop/cluster.py) without Ray: addresses, and a stop that ends only the
cluster's own processes and files."""

import subprocess
import sys
import time

import psutil
import pytest

from rl.loop import cluster


def test_nodes_start_above_the_machines_own_loopback():
    assert [cluster.node_address(i) for i in range(3)] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert cluster.node_resource(2) == "tailor_node_2"


def test_stop_refuses_a_folder_that_holds_no_cluster(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds no loopback cluster"):
        cluster.stop(tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "mine"


def _process_naming(folder) -> subprocess.Popen:
    """A process whose command line names ``folder`` (as a raylet's does) with a child that does not."""
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    code += "time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, f"--session-dir={folder}/session_x"])
    deadline = time.monotonic() + 30
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def test_stop_ends_a_node_and_its_children_and_nothing_else(tmp_path):
    c = cluster.LoopbackCluster(tmp_path / "c", "127.0.0.2:1", ["127.0.0.2", "127.0.0.3"])
    c.folder.mkdir()
    c.save()
    (c.folder / "notes.txt").write_text("not the cluster's")
    lost, kept = _process_naming(c.folder / "n1"), _process_naming(c.folder / "n10")  # n1 must not match n10
    try:
        (c.folder / "n1").mkdir()
        ended = cluster.stop(c.folder / "n1", grace_s=0)  # a lost node: SIGKILL at once
        assert lost.pid in ended and kept.pid not in ended and len(ended) == 2  # the process and its child
        assert lost.wait(timeout=10) == -9 and kept.poll() is None
        assert not (c.folder / "n1").exists()
        assert set(cluster.stop(c.folder, grace_s=5)) >= {kept.pid}  # the whole cluster: SIGTERM first
        assert kept.wait(timeout=10) == -15
        assert [p.name for p in c.folder.iterdir()] == ["notes.txt"]  # the folder stays for what is not ours
    finally:
        lost.kill()
        kept.kill()
