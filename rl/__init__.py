"""Tailor: asynchronous RL post-training for LLMs that trims the long tail of rollouts."""

import os

# The environment Tailor was started with, taken when ``rl`` is first imported: before Ray's driver or vLLM's CPU
# platform (``LD_PRELOAD``, thread variables) write into ``os.environ``. Processes that must run as a user's own
# would (the TRL peer, ``rl.bench.trl_peer``) start from it.
STARTING_ENVIRONMENT: dict[str, str] = dict(os.environ)
