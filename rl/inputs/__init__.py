"""A run's inputs before any actor starts: checked (``preflight``), fitted to the GPU (``memory_plan``), and the
prompts encoded for the engines and the reward functions (``prompting``)."""
