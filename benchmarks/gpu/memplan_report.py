"""The memory plan of a one-GPU ``rl train`` run beside what the run measured (benchmarks/gpu/run_on_device.sh,
step ``memplan``): the plan's line and share from the run's output, the trainer's ``gpu_peak_gib`` (torch's
``max_memory_allocated``, per step in metrics.jsonl), vLLM's own start-up figures from its log, and nvidia-smi's
per-process samples. Reads whatever a run cut short left; prints one JSON object.

    python benchmarks/gpu/memplan_report.py RUN_LOG METRICS_JSONL SMI_SAMPLES RECIPE [key=value ...]
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from rl.cli.common import recipe_path
from rl.config import load_config
from rl.inputs.memory_plan import GIB, ModelShape, engine_need, model_shape, trainer_need, visible_gpu
from rl.models import resolve_model

VLLM_LINES = {  # vLLM 0.26's start-up log: what it measured, in GiB, and the KV cache in tokens
    "vllm_weights_gib": r"Model loading took ([\d.]+) GiB",
    "vllm_available_kv_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "vllm_kv_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "vllm_cuda_graph_gib": r"Estimated CUDA graph memory: ([\d.]+) GiB",
}


def vllm_figures(log: str) -> dict[str, float]:
    """The first match of each ``VLLM_LINES`` pattern in ``log``."""
    out = {}
    for key, pattern in VLLM_LINES.items():
        if m := re.search(pattern, log):
            out[key] = float(m.group(1).replace(",", ""))
    return out


def plan_figures(log: str) -> dict[str, object]:
    """The run's plan line and the engine share it set."""
    line = next((x for x in log.splitlines() if "memory plan: " in x), "")
    share = re.search(r"rollout\.gpu_memory_utilization=([\d.]+)", line)
    total = re.search(r"of ([\d.]+) GiB", line)
    return {
        "plan_line": line[line.find("memory plan: ") :] if line else None,
        "share": float(share.group(1)) if share else None,
        "budget_gib": float(total.group(1)) if total else None,
    }


def smi_figures(path: Path) -> dict[str, float]:
    """Peak device memory used, and each process's peak (MiB), from ``pid, used_memory`` lines (a ``total`` line per
    sample gives the device's)."""
    device, processes = 0.0, {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 or not parts[1].replace(".", "").isdigit():
            continue
        if parts[0] == "total":
            device = max(device, float(parts[1]))
        else:
            processes[parts[0]] = max(processes.get(parts[0], 0.0), float(parts[1]))
    return {"smi_device_peak_mib": device, "smi_process_peaks_mib": processes}


def main(argv: list[str]) -> dict[str, object]:
    log_path, metrics_path, smi_path, recipe, *overrides = argv
    log = Path(log_path).read_text(errors="replace") if Path(log_path).is_file() else ""
    cfg = load_config(recipe_path(recipe), overrides)
    shape: ModelShape | None = model_shape(resolve_model(cfg.model.path))
    assert shape is not None, cfg.model.path
    trainer, engine = trainer_need(shape, cfg), engine_need(shape, cfg)
    steps = [json.loads(x) for x in Path(metrics_path).read_text().splitlines()] if Path(metrics_path).is_file() else []
    peaks = [s["gpu_peak_gib"] for s in steps if "gpu_peak_gib" in s]
    out: dict[str, object] = {
        **plan_figures(log),
        "planned_trainer_peak_gib": trainer.peak / GIB,
        "planned_engine_weights_gib": engine.weights / GIB,
        "planned_engine_kv_need_gib": engine.kv_cache / GIB,
        "planned_engine_overhead_gib": engine.overhead / GIB,
        "measured_trainer_peak_gib": max(peaks) if peaks else None,
        "steps": len(peaks),
        **vllm_figures(log),
        **smi_figures(Path(smi_path)),
    }
    try:
        gpu = visible_gpu()
    except (OSError, subprocess.SubprocessError):  # the figures above still come back
        gpu = None
    if gpu and out["share"]:  # what vLLM should find for its KV cache in the share the plan gave it
        out["gpu_total_gib"] = gpu[2] / GIB
        out["planned_kv_room_gib"] = (out["share"] * gpu[2] - engine.weights - engine.overhead) / GIB
    if out["measured_trainer_peak_gib"]:
        out["trainer_measured_over_planned"] = out["measured_trainer_peak_gib"] / out["planned_trainer_peak_gib"]
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=1))
