"""Hub names where the Hugging Face Hub cannot be reached: the local cache is read at once.

Without a network, transformers and datasets retry each request for about half a minute and flood the console
with their retries before they fall back to the cache or fail. Before the first hub name is loaded, one connection
attempt decides: where the Hub does not answer, this process and those it starts (Ray's, the engines') switch to the
Hub's offline mode, so a cached model or dataset loads at once and an uncached one fails in one line.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from urllib.parse import urlparse

log = logging.getLogger("rl.inputs")
CONNECT_TIMEOUT_S = 3.0


def endpoint() -> str:
    """The Hub's address (``HF_ENDPOINT`` or huggingface.co)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def offline() -> bool:
    """Whether hub names are read from the local cache only (``HF_HUB_OFFLINE``, set or switched on here)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def reachable(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether a TCP connection to ``url``'s host opens within ``timeout_s``."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def offline_unless_reachable() -> bool:
    """Switch to the Hub's offline mode (this process and its children) if the Hub does not answer; returns whether
    hub names are now read from the cache only."""
    if offline():
        return True
    if reachable(endpoint()):
        return False
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
    if "datasets" in sys.modules:  # it copies the flag at import
        sys.modules["datasets"].config.HF_HUB_OFFLINE = True
    log.info("the Hugging Face Hub (%s) cannot be reached: hub names are read from the local cache", endpoint())
    return True


def not_cached(name: str) -> str:
    """Why ``name`` cannot load, when the Hub is unreachable or off, and what to do."""
    return (
        f"{name!r} is not in the local Hugging Face cache, and the Hub ({endpoint()}) cannot be reached or "
        f"HF_HUB_OFFLINE is set; give a local path, or fetch it where the Hub is reachable"
    )
