"""The RL algorithm, free of actors and I/O: advantages, policy-gradient losses, off-policy weights, DAPO's dynamic
sampling, and the split of a step's samples over the trainer ranks."""
