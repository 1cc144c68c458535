"""The data-parallel ranks' store is served on rank 0's node address only (trainer/rendezvous.py)."""

import pytest
import torch.distributed as dist
from rl.trainer import rendezvous

NODE = "127.0.0.3"  # a node of a loopback cluster: an address of its own, not the machine's 127.0.0.1


def test_rank_0_serves_the_store_on_its_node_address_and_nowhere_else():
    listener = rendezvous.listen_on(NODE)
    address = rendezvous.store_address(listener)
    host, port = rendezvous.parse(address)
    assert (host, address) == (NODE, f"tcp://{NODE}:{port}")
    server = rendezvous.tcp_store(address, 0, 2, listener)
    client = rendezvous.tcp_store(address, 1, 2)
    client.set("from rank 1", "seen")
    assert server.get("from rank 1") == b"seen"
    with pytest.raises(dist.DistNetworkError):  # not bound to all interfaces: the machine's loopback finds nothing
        dist.TCPStore("127.0.0.1", port, 2, False, timeout=rendezvous.datetime.timedelta(seconds=1))


def test_rank_0_needs_its_listener():
    with pytest.raises(ValueError, match="listener"):
        rendezvous.tcp_store(f"tcp://{NODE}:1", 0, 2)


def test_ipv6_addresses_are_bracketed():
    assert rendezvous.parse("tcp://[fd00::5]:29500") == ("fd00::5", 29500)
