"""The names the policy loss takes (``LossSpec``, rl/algorithm/losses.py), one list each for the config's fields and
the spec's checks; torch-free, so reading a config imports no torch."""

from __future__ import annotations

from typing import Literal

LossKind = Literal["ppo", "gspo", "cispo", "sapo", "vespo"]
Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
KlEstimator = Literal["k1", "k2", "k3"]
Correction = Literal["none", "tis-token", "tis-seq", "mis-token", "mis-seq"]
