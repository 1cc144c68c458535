"""The ``rl`` command (``main``): training, evaluation, reports, models and clusters here; ``rl bench`` in ``bench``."""
