"""The console: Tailor's own lines on the terminal; engine, Ray and library output in log files.

``route(log_dir)`` keeps this process's Python ``sys.stdout``/``sys.stderr`` (Tailor's prints, progress bars and
logs) on the terminal and sends file descriptors 1 and 2 (vLLM's log handler, C++ warnings, child processes such
as vLLM's EngineCore) through a pipe into ``log_dir/main.log``. Ray actors do the same in ``worker_setup`` (Ray's
``worker_process_setup_hook``), one ``worker-PID.log`` each. A routed line reaches the console only when ``shown``
passes it: engine INFO/DEBUG chatter, library progress bars and the known-harmless lines of ``QUIET`` stay in the
files; every other warning, every error and every traceback is shown. ``--verbose`` routes nothing.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import select
import sys
import threading
import traceback
from pathlib import Path

from tqdm import tqdm

LOG_DIR_ENV = "TAILOR_LOG_DIR"  # set while routing: Ray actors started from this process route into it
PUMP_POLL_S = 0.1  # how often a pump told to drain checks that nothing is left to read

# Lines known to be harmless on this stack, kept out of the console (they stay in the log files). One entry per
# source; a line that matches none of them and is not INFO/DEBUG chatter is shown.
QUIET: dict[str, str] = {
    # vLLM's in-place weight reload: rotary embeddings have no checkpoint weights, and a tied LM head has none of
    # its own (rollout/vllm_extension.py re-ties it after every load); every weight sync logs both
    "vllm_reload_no_weights": r"(RotaryEmbedding|ParallelLMHead): Failed to load weights",
    # Ray's notice that token authentication is on (docs/getting-started.md: it stays on, as Ray sets it)
    "ray_token_auth": r"Token authentication is enabled for this Ray cluster",
    # the CPU wheel has no triton-cpu: vLLM falls back to its native kernels and the V1 model runner
    "triton_cpu": r"Triton is (not installed|installed, but doesn't include CPU backend)"
    r"|Model Runner V2 requires Triton",
    # torch's CPU memory binding on a one-node machine
    "numa_binding": r"NUMA binding: Using MEMBIND policy",
    # vLLM's CPU performance hints about preloading tcmalloc / Intel OpenMP
    "cpu_preload_hints": r"(libtcmalloc|libiomp) is not found in LD_PRELOAD",
    # consequences of the engine settings Tailor chooses (eager mode, a seeded in-process engine, SSM defaults)
    "engine_settings": r"Enforce eager set, disabling|Inductor compilation was disabled|global random seed is set"
    r"|Reset SSM cache type|CPU backend doesn't allow to use `torch\.set_num_threads` after the thread binding",
    # vLLM's CPU worker sets VLLM_DIST_IDENT in its own process; a process started from one that served an engine
    # in-process (rl eval in a notebook, then rl train) inherits it, and vLLM calls its own variable unknown
    "vllm_cpu_dist_ident": r"Unknown vLLM environment variable detected: VLLM_DIST_IDENT\b",
    # vLLM deprecations inside vLLM itself, not in how Tailor calls it; with LoRA served, its notice that adapters
    # share the base model's tokenizer (Tailor's adapters carry none)
    "vllm_internal_deprecations": r"Passing raw prompts to InputProcessor is deprecated|`torch\.distributed\.reduce_op`"
    r" is deprecated|deprecated support for supporting different tokenizers for different LoRAs",
    # math-verify's notice that its signal-based timeouts are off (a reward called off the main thread): the reward
    # pool's own timeout bounds every call
    "math_verify_timeout": r"Timeout is disabled as (parsing_timeout|timeout_seconds) is None",
    # TRL (rl bench peer's peer) checks vLLM's version at import; on CPU the peer generates with transformers, and
    # Tailor's own vLLM calls are pinned to the installed version in rollout/
    "trl_vllm_version": r"TRL currently supports vLLM versions from",
    # torch's DataLoader (TRL's, in rl bench peer) asked to pin memory on a machine without an accelerator
    "cpu_pin_memory": r"'pin_memory' argument is set as true but no accelerator is found",
    # Ray's notice that a worker process died, IDs and all: the run says itself which actor died and what it does
    # about it (a rollout worker replaced or counted, a trainer's death a one-line stop)
    "ray_worker_died": r"A worker died or was killed while executing a task by an unexpected system error",
    # at a run's end, vLLM's shutdown kills an engine core process that has not exited within its grace period:
    # the run is over and nothing is lost
    "vllm_shutdown_kill": r"\[shutdown\] Process manager: force killing remaining process",
}
_QUIET = re.compile("|".join(f"(?:{p})" for p in QUIET.values()))
# engine and Ray INFO/DEBUG lines: vLLM's "INFO 11-24 20:24:23 [file.py:12]", Ray's "\tINFO file.py:50 --"
_CHATTER = re.compile(r"\b(INFO|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[|\t(INFO|DEBUG) \S+:\d+ -- ")
_PROGRESS_BAR = re.compile(r"\|\s*\d+/\d+ \[|\d+%\|")  # a library's tqdm bar (model loading)
_RAY_TAG = re.compile(r"^:(actor_name|task_name|job_id|event_summary|info_message):")  # Ray's log routing marks
_PY_WARNING = re.compile(r"\w+Warning: ")
# Ray's report, in an actor's own output, that its constructor raised, then its traceback: the run says in one line
# which actor did not start and why (rl/loop/driver.py); the traceback stays in the actor's log file
_CREATION_FAILED = re.compile(r"^Exception raised in creation task")

_state: dict[str, object] = {}


def shown(line: str) -> bool:
    """Whether a line of engine/library output belongs on the console."""
    if _RAY_TAG.match(line):
        return True
    last = line.rsplit("\r", 1)[-1]
    return bool(last.strip()) and not (_CHATTER.search(last) or _PROGRESS_BAR.search(line) or _QUIET.search(last))


class LineSieve:
    """``shown`` line by line; a dropped Python warning's indented source line goes with it, and an actor whose
    constructor raised shows nothing more (Ray's report of it and the traceback)."""

    def __init__(self) -> None:
        self._dropping = False
        self._failed_to_start = False  # this process is an actor whose constructor raised: what follows is its end

    def __call__(self, line: str) -> bool:
        if self._dropping and line.startswith(" "):
            return False
        self._failed_to_start = self._failed_to_start or bool(_CREATION_FAILED.match(line))
        if self._failed_to_start:
            return False
        keep = shown(line)
        self._dropping = not keep and bool(_PY_WARNING.search(line))
        return keep


def console_formatter() -> logging.Formatter:
    """How a record looks on the console: ``12:03:44 INFO message``."""
    return logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")


class ConsoleFilter(logging.Filter):
    """Tailor's own records from INFO up; other libraries' from WARNING up, ``QUIET`` ones left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "rl" or record.name.startswith("rl."):
            return record.levelno >= logging.INFO
        return record.levelno >= logging.WARNING and not _QUIET.search(record.getMessage())


def _pump(read_fd: int, log_path: Path, console_fd: int, drained: threading.Event | None) -> None:
    """Copy everything from ``read_fd`` to ``log_path``; the lines ``shown`` also to ``console_fd``. Ends at end of
    file, or (given ``drained``) once it is set and nothing is left to read: child processes may hold the pipe open
    after this process stopped writing to it."""
    sieve, pending = LineSieve(), b""
    with log_path.open("ab") as log:
        while True:
            if drained is not None and not select.select([read_fd], [], [], PUMP_POLL_S)[0]:
                if drained.is_set():
                    break
                continue
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            log.write(chunk)
            log.flush()
            *lines, pending = (pending + chunk).split(b"\n")
            out = b"".join(line + b"\n" for line in lines if sieve(line.decode(errors="replace")))
            if out:
                os.write(console_fd, out)
    os.close(read_fd)


def _route_fds(log_path: Path, console_fd: int, drained: threading.Event | None = None) -> threading.Thread:
    """Point fds 1 and 2 (inherited by child processes) at a pipe pumped into ``log_path`` (until end of file, or
    ``drained``)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    args = (read_fd, log_path, console_fd, drained)
    pump = threading.Thread(target=_pump, args=args, name="console-pump", daemon=True)
    pump.start()
    return pump


def route(log_dir: Path) -> None:
    """Route this process's and its children's engine and library output into ``log_dir`` (see the module doc).

    Only a process that still writes to its own stdout and stderr routes: where they were replaced (pytest's
    capture around an in-process ``rl`` command) nothing changes.
    """
    if _state or sys.stdout is not sys.__stdout__ or sys.stderr is not sys.__stderr__:
        return
    terminal_out = os.fdopen(os.dup(1), "w", buffering=1)
    terminal_err = os.fdopen(os.dup(2), "w", buffering=1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ[LOG_DIR_ENV] = str(log_dir.resolve())
    os.environ["VLLM_LOGGING_STREAM"] = "ext://sys.__stdout__"  # vLLM's handler writes to fd 1, not the terminal
    drained = threading.Event()
    pump = _route_fds(log_dir / "main.log", os.dup(terminal_err.fileno()), drained)
    sys.stdout, sys.stderr = terminal_out, terminal_err
    _state.update(pump=pump, drained=drained, out=terminal_out, err=terminal_err, log_dir=log_dir)
    handler = AboveTheBar(terminal_err)
    handler.setFormatter(console_formatter())
    handler.addFilter(ConsoleFilter())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)  # Python warnings become records, filtered like the rest
    atexit.register(_unroute)


class AboveTheBar(logging.StreamHandler):
    """The console's log handler: each line goes above the training bar on its stream (``tqdm.write``), so that on a
    terminal it is not glued to the end of the bar's line and the bar is redrawn below it; off one, a plain write."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:
            self.handleError(record)


def routed() -> bool:
    """Whether ``route`` is in effect in this process."""
    return bool(_state)


def log_dir() -> Path | None:
    """Where this process routes engine output (None when it does not)."""
    return _state.get("log_dir")  # type: ignore[return-value]


def keep_traceback(error: BaseException) -> str:
    """Write ``error``'s traceback where this process's engine output goes (``log_dir/main.log``; stderr when not
    routing) and say where: for a one-line message that points at it."""
    text = "".join(traceback.format_exception(error))
    directory = log_dir()
    if directory is None:
        print(text, file=sys.stderr, end="")
        return "above"
    with (directory / "main.log").open("a") as log:
        log.write(text)
    return str(directory / "main.log")


def filter_handlers(logger: logging.Logger) -> None:
    """Put ``ConsoleFilter`` on a library logger's own handlers (Ray's), when routing."""
    if routed():
        for handler in logger.handlers:
            handler.addFilter(ConsoleFilter())


def _unroute() -> None:
    """At exit: give fds 1 and 2 back to the terminal, let the pump drain what is left, wait for it briefly."""
    out, err = _state["out"], _state["err"]
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    os.dup2(out.fileno(), 1)  # type: ignore[attr-defined]
    os.dup2(err.fileno(), 2)  # type: ignore[attr-defined]
    _state["drained"].set()  # type: ignore[attr-defined]
    _state["pump"].join(timeout=2.0)  # type: ignore[attr-defined]


def worker_setup() -> None:
    """Ray's ``worker_process_setup_hook``: route this worker's output into ``TAILOR_LOG_DIR`` when it is set."""
    directory = os.environ.get(LOG_DIR_ENV)
    if not directory:
        return
    try:
        _route_fds(Path(directory) / f"worker-{os.getpid()}.log", os.dup(2))  # pumped as long as the worker lives
    except OSError as e:  # e.g. a node of a cluster that cannot write there: leave the output as Ray routes it
        print(f"tailor: output not routed to {directory}: {e}", file=sys.stderr)


def ray_runtime_env() -> dict:
    """The runtime env that routes every Ray worker's output (empty when this process does not route)."""
    if not routed():
        return {}
    keep = {k: os.environ[k] for k in (LOG_DIR_ENV, "VLLM_LOGGING_STREAM")}
    return {"worker_process_setup_hook": "rl.output.console.worker_setup", "env_vars": keep}


def step_postfix(metrics: dict[str, float]) -> str:
    """The training bar's key metrics of one step: reward, accuracy, step time, rollout tokens/s, waste."""
    return (
        f"reward {metrics['reward_mean']:.3f}, acc {metrics['accuracy']:.2f}, {metrics['step_seconds']:.1f} s/step, "
        f"{metrics['rollout_tokens_per_s']:.0f} tok/s, waste {metrics['waste_ratio']:.2f}"
    )


_RAISED = re.compile(r"^[\w.]+(Error|Exception)\b.*: ")  # a traceback's last line: the exception and its message


def last_raised(text: str) -> str:
    """A remote error's text (a traceback) as one line: its last "SomeError: message" line, else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    raised = [line for line in lines if _RAISED.match(line)] or lines  # "ValueError: ...", not its message's tail
    return re.sub(r"^[\w.]+\.(?=\w+(Error|Exception)\b)", "", raised[-1]) if raised else ""  # the class, not its module


def error_line(error: BaseException) -> str:
    """An error as one line: ``last_raised`` of its text (a remote one's carries its traceback), else its class."""
    return last_raised(str(error)) or type(error).__name__


def eval_line(tag: str, step: int, metrics: dict[str, float]) -> str:
    """A held-out evaluation's line: its tag, the trainer's step, the accuracy (with several samples a problem, and
    pass@k at the most samples), how many problems, the share of samples the accuracy reward gave no value
    (counted wrong), if any, and the problems that could not be sampled (left out), if any."""
    unscored, failed = metrics.get("unscored_frac", 0.0), int(metrics.get("failed_problems", 0))
    caveat = f"; the accuracy reward gave no value for {unscored:.0%} of samples" if unscored else ""
    caveat += f"; {failed} more could not be sampled (left out)" if failed else ""
    k = int(metrics.get("samples_per_problem", 1))
    best = f", pass@{k} {metrics[f'pass@{k}']:.3f}" if k > 1 else ""
    each = f" x {k} samples" if k > 1 else ""
    return (
        f"[eval {tag}] step {step}: held-out accuracy {metrics['accuracy']:.3f}{best} "
        f"({int(metrics['num_problems'])} problems{each}{caveat})"
    )


def unscored_warning(unscored: int, samples: int) -> str:
    """The summary's line for samples that every reward function returned None for (TRL warns of them too)."""
    which = f"all {samples} samples" if unscored >= samples else f"{unscored} of {samples} samples"
    return (
        f"warning: every reward function returned None for {which}, which counted as a reward failure (reward "
        f"0.0, or dropped with reward.on_failure=drop); return a float for every sample (0.0 for a wrong answer)"
    )


REWARD_FAILURES_SAID = {  # the summary's words for rl.rewards.pool.FAILURE_KINDS (calls, or values for nan)
    "raised": "reward calls that raised",
    "timeout": "reward calls timed out",
    "wrong_length": "reward calls of the wrong length",
    "nan": "non-finite reward values",
}


def run_summary(summary: dict, run_dir: Path) -> str:
    """Write ``summary.json`` into ``run_dir``; return the few lines a person reads at the end of ``rl train``."""
    path = run_dir / "summary.json"
    finite = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in summary.items()}
    lines, written = [], [path.name]
    try:
        path.write_text(json.dumps(finite, indent=2, default=str) + "\n")  # strict JSON: a figure not measured is null
    except OSError as e:  # a full disk: the summary is still printed
        lines.append(f"warning: {path.name} not written ({e.strerror or e})")
        written = []
    if not summary.get("stopped_by") and not summary.get("failure"):
        lines.append(
            f"held-out accuracy: {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f} "
            f"in {summary['train_seconds']:.0f} s of training ({summary['steps']} step{'s'[: summary['steps'] != 1]})"
        )
    # faults only: groups dropped as stale or without signal are the algorithm at work (summary.json counts them)
    faults = {k: summary.get(k) for k in ("rollout_errors", "dead_workers", "restarted_workers", "stalls")}
    failures = dict(summary.get("reward_failures") or {})
    unscored = failures.pop("none", 0)
    faults |= {REWARD_FAILURES_SAID.get(k, f"reward {k}"): v for k, v in failures.items()}
    if noted := [f"{k.replace('_', ' ')} {v}" for k, v in faults.items() if v]:
        lines.append("note: " + ", ".join(noted))
    if unscored:
        lines.append(unscored_warning(unscored, summary.get("scored_samples", 0)))
    saved = summary.get("checkpoint")
    where = [*written, "metrics.jsonl", *([f"checkpoints/{Path(saved).name}"] if saved else [])]
    if (run_dir / "logs").is_dir():
        where.append("logs/")
    lines.append(f"run directory: {run_dir} ({', '.join(where)})")
    return "\n".join(lines)
