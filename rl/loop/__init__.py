"""The asynchronous training loop: the driver, the actors it runs (a ``Fleet``), the buffer and admission control
between them, weight sync, checkpoints, and where the actors are placed."""
