"""What a run ran on: ``rl --version`` and the versions its records carry (rl/output/provenance.py)."""

import os
import re
import subprocess
import sys

import ray
import torch
import transformers

from rl.output.provenance import describe_device, stack_versions


def test_rl_version_names_tailor_and_its_stack_as_the_packages_say_them():
    out = subprocess.run([sys.executable, "-m", "rl.cli", "--version"], capture_output=True, text=True, check=True)
    line = out.stdout.strip()
    assert re.fullmatch(r"tailor-rl \d+\.\d+\.\d+ \(vllm \S+, torch \S+, ray \S+, transformers \S+, trl \S+\)", line)
    for name, module in (("torch", torch), ("ray", ray), ("transformers", transformers)):
        assert f"{name} {module.__version__}" in line
    assert stack_versions()["torch"] == torch.__version__


def test_a_cpu_is_named_by_its_model_and_cores():
    """bench_rollout.json's ``device``: which machine a figure was measured on (it said only "cpu" or "gpu")."""
    label = describe_device(cpu=True)
    model = label.removesuffix(f" ({os.cpu_count()} cores)")
    assert model != label and model.strip() and model not in ("cpu", "gpu")
