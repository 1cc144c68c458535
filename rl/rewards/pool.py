"""Weighted reward functions run in worker processes, with a per-call timeout and counted failures.

Each reward function gets the whole batch in one call, TRL style:
``fn(prompts=..., completions=..., trainer_state=..., log_metric=..., log_extra=..., **columns) ->
list[float | None]``, sync or ``async``. Calls go to a pool of spawned worker processes that load the functions
(and reward models) from their specs themselves; what a call logs comes back with its values. A call that
outlives ``timeout_s`` gets its worker killed and replaced, so scoring never stalls.

Failures are per (function, sample) value. A failed value contributes nothing to the weighted sum; with
``on_failure="zero"`` the sample keeps the sum of its valid values (0.0 if none is left), with
``on_failure="drop"`` the sample's reward is ``None``. ``None`` from a function is not a failure (TRL:
"this function does not score this sample") unless every function gives ``None`` for that sample.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import math
import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

from rl.loop.processes import Terminated
from rl.rewards.hooks import CallLog, RewardState
from rl.rewards.loading import RewardSpec, load_reward_fn
from rl.types import RewardLog

logger = logging.getLogger("rl.rewards")

STARTUP_TIMEOUT_S = 120.0  # time a fresh worker gets to import and load the reward functions
FAILURE_KINDS = ("raised", "timeout", "wrong_length", "nan", "none")
TRL_HOOKS = ("trainer_state", "log_extra", "log_metric")  # keyword arguments every call gets besides the columns
RESERVED_KEYWORDS = ("prompts", "completions", *TRL_HOOKS)  # what no dataset column may be named

# (kind, payload, what the call logged): ("ok", values, log) or (failure kind, message, log)
Outcome = tuple[str, Any, CallLog]


@dataclass
class RewardResult:
    """Combined rewards for one batch.

    ``rewards[i]`` is the weighted sum for sample ``i`` (``None``: dropped, only with ``on_failure="drop"``).
    ``failures`` has every kind in ``FAILURE_KINDS``: ``raised`` (the function raised, or its worker died),
    ``timeout`` and ``wrong_length`` count failed function calls, ``nan`` counts non-finite values and
    ``none`` counts samples that no function scored.
    ``per_function`` maps each spec to its valid values (``None`` where it gave none or failed).
    ``errors`` maps each spec whose call failed (raised, timed out, wrong length) or gave no finite value to the
    error's last line.
    ``metrics`` holds every ``log_metric`` value by name; ``extra`` the ``log_extra`` columns, each one value per
    sample (a column of another length is left out, with a warning).
    """

    rewards: list[float | None]
    failures: dict[str, int] = field(default_factory=dict)
    per_function: dict[str, list[float | None]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    extra: dict[str, list] = field(default_factory=dict)

    def log_of(self, keep: list[int]) -> RewardLog:
        """The per-sample values (each function's, each ``extra`` column) of the samples ``keep``, and the metrics."""
        return RewardLog(
            functions={name: [values[i] for i in keep] for name, values in self.per_function.items()},
            extra={column: [values[i] for i in keep] for column, values in self.extra.items()},
            metrics=self.metrics,
        )


def call_reward(
    fn: Callable, prompts: list, completions: list, columns: dict[str, list], state: RewardState, log: CallLog
) -> list:
    """Call one reward function as TRL's ``GRPOTrainer`` does (keywords; an async one runs to completion).

    Besides the per-sample columns it passes ``state`` as TRL's ``trainer_state`` and ``log``'s ``log_extra`` /
    ``log_metric`` hooks. Returns what the function returned.
    """
    out = fn(
        prompts=prompts,
        completions=completions,
        trainer_state=state,
        log_extra=log.log_extra,
        log_metric=log.log_metric,
        **columns,
    )
    return asyncio.run(_await(out)) if inspect.isawaitable(out) else out


def reward_values(out: Any) -> list[float | None]:
    """A reward function's output as floats and ``None``s (numbers of any kind: numpy, 0-d tensors); raises
    ``TypeError`` for anything else (strings, lists...)."""
    if isinstance(out, (str, bytes, dict)) or not hasattr(out, "__iter__"):
        raise TypeError(f"a reward function must return a list of numbers, got {type(out).__name__}")
    values = list(out)
    bad = [v for v in values if v is not None and (isinstance(v, (str, bytes)) or not hasattr(v, "__float__"))]
    if bad:
        raise TypeError(f"a reward function must return numbers or None, got {type(bad[0]).__name__} {bad[0]!r}")
    return [None if v is None else float(v) for v in values]


def _call_safely(
    fn: Callable, prompts: list, completions: list, columns: dict[str, list], state: RewardState
) -> Outcome:
    """``call_reward`` with its values checked and what it logged; an exception, or an exit (``sys.exit``), becomes
    a ``raised`` outcome with the traceback (an ``os._exit`` ends the worker: a ``died`` call, also counted as
    ``raised``)."""
    log = CallLog()
    try:
        return "ok", reward_values(call_reward(fn, prompts, completions, columns, state, log)), log
    except Terminated:
        raise
    except (Exception, SystemExit):
        return "raised", traceback.format_exc(), log


async def _await(awaitable: Awaitable) -> Any:
    return await awaitable


def _worker_main(conn: Connection, specs: list[RewardSpec], base_dir: str) -> None:
    """Worker process: load the functions, answer ``("ready", None)``, then serve calls until ``None``/EOF. Ctrl-C
    reaches the terminal's whole process group; the run decides what it means and stops this worker itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = mp.parent_process()
    if parent is not None:  # exit if the parent dies, even while a reward function hangs
        threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    try:
        fns = [load_reward_fn(spec, base_dir) for spec in specs]
    except Exception as e:
        conn.send(("error", str(e), CallLog()))
        return
    conn.send(("ready", None, CallLog()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        index, prompts, completions, columns, state = msg
        outcome = _call_safely(fns[index], prompts, completions, columns, state)
        try:
            conn.send(outcome)
        except (pickle.PicklingError, TypeError, AttributeError):  # a logged value that cannot be sent back
            conn.send(("raised", traceback.format_exc(), CallLog()))


def _exit_with(parent: Any) -> None:
    parent.join()
    os._exit(1)


class _Worker:
    """One spawned worker process and the parent's end of its pipe."""

    def __init__(self, ctx: Any, specs: list[RewardSpec], base_dir: str):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, specs, base_dir), name="reward-worker")
        self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self) -> Outcome:
        """Wait for the worker to finish loading; ``("ok", None, _)`` or a failure."""
        if self.ready:
            return "ok", None, CallLog()
        if not self.conn.poll(STARTUP_TIMEOUT_S):
            return "timeout", f"worker did not load the reward functions in {STARTUP_TIMEOUT_S:.0f} s", CallLog()
        kind, payload, _ = self._recv()
        if kind != "ready":
            return "raised", payload, CallLog()
        self.ready = True
        return "ok", None, CallLog()

    def call(
        self, index: int, prompts: list, completions: list, columns: dict, state: RewardState, timeout_s: float
    ) -> Outcome:
        kind, payload, log = self.wait_ready()
        if kind != "ok":
            return kind, payload, log
        try:
            self.conn.send((index, prompts, completions, columns, state))
        except (BrokenPipeError, OSError):
            return self._died()
        if not self.conn.poll(timeout_s):
            return "timeout", f"no result after {timeout_s:g} s; worker killed and replaced", CallLog()
        return self._recv()

    def _recv(self) -> Outcome:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return self._died()

    def _died(self) -> Outcome:
        self.process.join(1.0)
        return "died", f"reward worker process died (exit code {self.process.exitcode})", CallLog()

    @property
    def healthy(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5.0)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.process.join(2.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)
        self.conn.close()


class RewardPool:
    """Weighted reward functions scored in ``num_workers`` spawned processes with a per-call timeout.

    ``specs`` is ``[(spec, weight), ...]`` with specs as accepted by ``load_reward_fn`` (a reward model's spec
    loads the model in every worker). The constructor waits for the workers to load the functions and raises
    ``ValueError`` if a spec cannot be loaded. Workers are
    spawned, so a script that builds a pool needs the ``if __name__ == "__main__":`` guard. Each worker is
    driven by one daemon thread; a call's timeout runs from when its worker receives it.
    ``num_workers=0`` runs the functions in-process (for debugging): timeouts are then NOT enforced and a
    hanging function hangs the caller.
    """

    def __init__(
        self,
        specs: list[tuple[RewardSpec, float]],
        num_workers: int = 1,
        timeout_s: float = 10.0,
        on_failure: Literal["zero", "drop"] = "zero",
        base_dir: str | Path | None = None,
    ):
        if not specs:
            raise ValueError("RewardPool needs at least one (spec, weight) pair")
        if on_failure not in ("zero", "drop"):
            raise ValueError(f"on_failure must be 'zero' or 'drop', got {on_failure!r}")
        if num_workers < 0 or timeout_s <= 0:
            raise ValueError(f"need num_workers >= 0 and timeout_s > 0, got {num_workers}, {timeout_s}")
        self.specs = [(spec if not isinstance(spec, str) else spec.strip(), float(weight)) for spec, weight in specs]
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self.on_failure = on_failure
        self.base_dir = str(Path(base_dir if base_dir is not None else Path.cwd()).resolve())
        self._names = _unique_names([str(spec) for spec, _ in self.specs])
        self._explained: set[tuple[str, str]] = set()  # (function, failure kind) pairs whose traceback was logged
        self._bad_columns: set[str] = set()  # log_extra columns of a wrong length, warned about once
        self._closed = False
        self._lock = threading.Lock()
        self._busy: set[int] = set()  # slots whose worker is running a call
        self._tasks: queue.SimpleQueue[tuple[Future, int, tuple] | None] = queue.SimpleQueue()
        self._ctx = mp.get_context("spawn")
        if num_workers == 0:
            self._fns = [load_reward_fn(spec, self.base_dir) for spec, _ in self.specs]
            self._slots: list[_Worker] = []
            self._threads: list[threading.Thread] = []
            return
        self._slots = [self._spawn() for _ in range(num_workers)]
        self._threads = [
            threading.Thread(target=self._serve, args=(slot,), name=f"reward-{slot}", daemon=True)
            for slot in range(num_workers)
        ]
        for thread in self._threads:
            thread.start()
        atexit.register(self.close)
        for worker in self._slots:
            kind, payload, _ = worker.wait_ready()
            if kind != "ok":
                self.close()
                raise ValueError(f"reward workers failed to start: {payload}")

    @property
    def names(self) -> list[str]:
        """Each function's key in ``RewardResult.per_function`` and ``errors`` (its spec, ``#2`` if repeated)."""
        return list(self._names)

    def _spawn(self) -> _Worker:
        return _Worker(self._ctx, [spec for spec, _ in self.specs], self.base_dir)

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (idempotent); calls still running are cut short and count as ``raised``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            busy = [self._slots[slot] for slot in self._busy]
        atexit.unregister(self.close)
        for _ in self._threads:
            self._tasks.put(None)
        for worker in busy:
            worker.process.kill()
        for thread in self._threads:
            thread.join(10.0)

    def score_sync(
        self,
        prompts: list,
        completions: list,
        columns: dict[str, list] | None = None,
        state: RewardState | None = None,
    ) -> RewardResult:
        """Score a batch, blocking the calling thread; ``state`` is the functions' ``trainer_state`` (default: a
        run's start)."""
        columns, state = self._check(prompts, completions, columns), state or RewardState()
        if not completions:
            return self._combine([("ok", [], CallLog())] * len(self.specs), 0)
        if not self._threads:
            outcomes = [_call_safely(fn, prompts, completions, columns, state) for fn in self._fns]
        else:
            outcomes = [f.result() for f in self._submit(prompts, completions, columns, state)]
        return self._combine(outcomes, len(completions))

    async def score(
        self,
        prompts: list,
        completions: list,
        columns: dict[str, list] | None = None,
        state: RewardState | None = None,
    ) -> RewardResult:
        """Score a batch without blocking the event loop (the waiting happens in pool threads)."""
        if not self._threads:
            return await asyncio.to_thread(self.score_sync, prompts, completions, columns, state)
        columns, state = self._check(prompts, completions, columns), state or RewardState()
        if not completions:
            return self._combine([("ok", [], CallLog())] * len(self.specs), 0)
        futures = self._submit(prompts, completions, columns, state)
        outcomes = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        return self._combine(list(outcomes), len(completions))

    def _check(self, prompts: list, completions: list, columns: dict[str, list] | None) -> dict[str, list]:
        if self._closed:
            raise RuntimeError("RewardPool is closed")
        columns = dict(columns or {})
        n = len(completions)
        bad = {k: len(v) for k, v in columns.items() if len(v) != n}
        if len(prompts) != n or bad:
            raise ValueError(f"{n} completions but {len(prompts)} prompts; columns of other lengths: {bad}")
        if set(RESERVED_KEYWORDS) & columns.keys():
            raise ValueError(f"columns may not be named {', '.join(RESERVED_KEYWORDS)}")
        return columns

    def _submit(self, prompts: list, completions: list, columns: dict[str, list], state: RewardState) -> list[Future]:
        futures = []
        for index in range(len(self.specs)):
            future: Future = Future()
            self._tasks.put((future, index, (prompts, completions, columns, state)))
            futures.append(future)
        return futures

    def _serve(self, slot: int) -> None:
        """Dispatch thread of one worker slot: run calls, replace a worker that hangs or dies."""
        while True:
            task = self._tasks.get()
            if task is None:
                self._slots[slot].stop()
                return
            future, index, (prompts, completions, columns, state) = task
            if not future.set_running_or_notify_cancel():  # its caller stopped waiting (a cancelled group): skip it
                continue
            with self._lock:
                closed = self._closed
                if not closed:
                    self._busy.add(slot)
            if closed:
                future.set_exception(RuntimeError("RewardPool is closed"))
                continue
            worker = self._slots[slot]
            try:
                kind, payload, log = worker.call(index, prompts, completions, columns, state, self.timeout_s)
            except Exception:  # e.g. a column value that cannot be pickled
                kind, payload, log = "raised", traceback.format_exc(), CallLog()
            if kind in ("timeout", "died") or not worker.healthy:
                worker.kill()
                with self._lock:
                    if not self._closed:
                        self._slots[slot] = self._spawn()
            with self._lock:
                self._busy.discard(slot)
            future.set_result(("raised" if kind == "died" else kind, payload, log))

    def _combine(self, outcomes: list[Outcome], n: int) -> RewardResult:
        """Weighted sum per sample, applying the failure policy and counting failures."""
        failures: Counter[str] = Counter()
        total = [0.0] * n
        scored = [False] * n
        failed = [False] * n
        per_function: dict[str, list[float | None]] = {}
        errors: dict[str, str] = {}
        metrics: dict[str, list[float]] = {}
        extra: dict[str, list] = {}
        for name, (_, weight), (kind, payload, log) in zip(self._names, self.specs, outcomes, strict=True):
            for key, values in log.metrics.items():
                metrics.setdefault(key, []).extend(values)
            extra.update(self._columns_of_length(log.extra, n))
            if kind == "ok" and len(payload) != n:
                kind, payload = "wrong_length", f"returned {len(payload)} values for {n} completions"
            if kind != "ok":
                failures[kind] += 1
                last_line = str(payload).strip().splitlines()[-1]
                errors[name] = f"{kind}: {last_line}"
                self._explain(name, kind, f"failed ({kind}): {payload}", f"failed ({kind}): {last_line}")
                per_function[name] = [None] * n
                failed = [True] * n
                continue
            values: list[float | None] = []
            for i, v in enumerate(payload):
                if v is not None and not math.isfinite(v):
                    failures["nan"] += 1
                    failed[i] = True
                    v = None
                elif v is not None:
                    total[i] += weight * v
                    scored[i] = True
                values.append(v)
            per_function[name] = values
            nans = sum(v is not None and not math.isfinite(v) for v in payload)
            if nans:
                if nans == n:  # a call that gives no finite value has failed, as one that raises has
                    errors[name] = f"nan: no finite value for {n} completions"
                what = f"returned {nans} non-finite values of {n}, replaced by the fallback"
                self._explain(name, "nan", what, what)
        for i in range(n):
            if not scored[i] and not failed[i]:
                failures["none"] += 1
                failed[i] = True
        drop = self.on_failure == "drop"
        rewards: list[float | None] = [None if drop and failed[i] else total[i] for i in range(n)]
        counts = {kind: failures[kind] for kind in FAILURE_KINDS}
        return RewardResult(rewards, counts, per_function, errors, metrics, extra)

    def _explain(self, name: str, kind: str, detail: str, line: str) -> None:
        """Log a failure of reward ``name``: the first of each ``kind`` as a warning with ``detail`` (a traceback,
        say), the later ones at debug level with ``line``; the failure counts keep every one."""
        first = (name, kind) not in self._explained
        self._explained.add((name, kind))
        logger.log(logging.WARNING if first else logging.DEBUG, "reward %s %s", name, detail if first else line)

    def _columns_of_length(self, columns: dict[str, list], n: int) -> dict[str, list]:
        """The ``log_extra`` columns with one value per sample; a column of another length warned about once."""
        for column in columns.keys() - self._bad_columns:
            if len(columns[column]) != n:
                self._bad_columns.add(column)
                logger.warning(
                    "log_extra column %r has %d values for %d completions: left out", column, len(columns[column]), n
                )
        return {column: values for column, values in columns.items() if len(values) == n}


def _unique_names(specs: list[str]) -> list[str]:
    """Specs as result keys; a repeated spec gets a ``#2``, ``#3``... suffix."""
    seen: Counter[str] = Counter()
    names = []
    for spec in specs:
        seen[spec] += 1
        names.append(spec if seen[spec] == 1 else f"{spec}#{seen[spec]}")
    return names
