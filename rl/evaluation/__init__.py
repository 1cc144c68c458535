"""Evaluation: held-out accuracy through rollout engines during training, and ``rl eval`` on a model or checkpoint."""
