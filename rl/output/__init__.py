"""What a run shows and writes: the console, metrics (JSONL, TensorBoard, W&B), sampled completions, the report."""
