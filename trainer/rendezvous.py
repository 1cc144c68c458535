"""Where the data-parallel ranks meet: torch's TCP store, served by rank 0 on its own node's address only.

Rank 0 opens a listening socket on its node's address (never all interfaces, and never 127.0.0.1 when the node is
another address) and serves the store from that very socket; every rank, rank 0 included, connects to that
address. On a cluster it is the address the other nodes reach rank 0's node at (``ray start --node-ip-address``).
"""

from __future__ import annotations

import datetime
import socket

import torch.distributed as dist

STORE_TIMEOUT = datetime.timedelta(minutes=5)  # every rank must join within it


def listen_on(host: str) -> socket.socket:
    """A TCP socket listening on ``host`` at a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind((host, 0))
    listener.listen()
    return listener


def store_address(listener: socket.socket) -> str:
    """``tcp://HOST:PORT`` of ``listener`` (IPv6 hosts in brackets)."""
    host, port = listener.getsockname()[:2]
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def parse(address: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` -> (host, port)."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    return host.strip("[]"), int(port)


def tcp_store(address: str, rank: int, world_size: int, listener: socket.socket | None = None) -> dist.TCPStore:
    """The group's store at ``address``: rank 0 serves it from ``listener`` (whose file descriptor the store
    takes over), the other ranks connect."""
    host, port = parse(address)
    if rank > 0:
        return dist.TCPStore(host, port, world_size, False, timeout=STORE_TIMEOUT)
    if listener is None:
        raise ValueError("rank 0 serves the store: it needs the listener its address came from")
    fd = listener.detach()
    return dist.TCPStore(
        host, port, world_size, True, timeout=STORE_TIMEOUT, wait_for_workers=False, master_listen_fd=fd
    )
