"""The error a benchmark stops with when one of its runs ends without results."""


class BenchStopped(RuntimeError):
    """A run of a benchmark (a Tailor variant, TRL's process) ended without its results; the message names the run
    and why, in one line."""
