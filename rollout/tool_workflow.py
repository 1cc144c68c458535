"""A tool-calling episode, token in, token out: the model's turns and the tools' results in one token sequence.

The loop: sample a turn after the prompt plus everything so far; if it ended on the model's own end-of-turn token and
holds tool calls, run them (concurrently, each under the call timeout), append the format's tokens for the results,
sample again. The episode ends on a turn without calls, a turn that did not end on its end-of-turn token (length,
abort), a turn whose calls would pass ``max_tool_calls``, or when the next tokens would pass the episode's budget
(``sampling.max_tokens``, model and tool tokens together, so prompt + episode stays within the engine's context).

A stopped episode (the group's shaping controller stopped it, ``EpisodeTrace.stop``) ends at once: its decoding turn
is aborted, a tool call it waits on is cancelled (a plain function's thread is left behind), and no turn follows.

Invariants of the episode's ``Sample``: ``tokens`` are the sampled ids exactly as the engine returned them, with the
results' ids between turns (nothing is decoded and re-encoded); ``loss_mask`` is 1 at sampled ids and 0 at result
ids; ``logprobs`` are the sampler's at sampled ids and 0.0 at result ids; a result id carries the version of the
sampled id before it.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from rl.rollout.engine import InferenceEngine, SamplingSpec
from rl.rollout.tool_format import ChatTemplateFormat, Messages, ToolFormat
from rl.rollout.tools import ToolBox, ToolCall, environment_tools, load_environment, load_tool
from rl.rollout.workflow import Episode, EpisodeTrace

from rl.config import RunConfig
from rl.rewards.environment import EnvironmentReward, owns_reward
from rl.types import PromptRow, Sample, assistant_message, opens_thought

ENVIRONMENT_COLUMN = "environment"  # with named environments, the row's pick (TRL's control field; not given to reset)
THOUGHT_OPENER = 8  # the ids before a turn read for a think block its header opened (Qwen3.5's `<think>\n`)
Environments = dict[str | None, Callable[[], Any]]  # factories by name; the key None: one for every row


class ToolWorkflow:
    """Episodes that call ``tools`` and, with ``environment``, the methods of a fresh instance of it (``reset(**row)``
    first; a string it returns is appended to the last user message, as TRL does). The episode keeps a ``snapshot``
    of the instance for the rewards."""

    def __init__(
        self,
        format: ToolFormat,
        tools: list[Callable[..., Any]],
        environment: Callable[[], Any] | Environments | None,
        max_tool_calls: int,
        timeout_s: float,
    ) -> None:
        self.format = format
        self.tools = tools
        self.environments: Environments = (  # one factory for every row (key None), or named ones a row picks
            environment if isinstance(environment, dict) else {None: environment} if environment is not None else {}
        )
        self.max_tool_calls = max_tool_calls
        self.timeout_s = timeout_s

    async def run(
        self, engine: InferenceEngine, trace: EpisodeTrace, row: PromptRow, sampling: SamplingSpec
    ) -> Episode:
        env, box, prompt = self._start(row)
        said: Messages = []
        schemas = box.schemas()
        while True:
            budget = replace(sampling, max_tokens=sampling.max_tokens - len(trace.ids))
            in_thought = opens_thought(self.format.decode((prompt + trace.ids)[-THOUGHT_OPENER:]))
            turn = await trace.sample(engine, prompt + trace.ids, budget)
            finish = turn.finish_reason or "abort"
            closed = finish == "stop" and bool(turn.tokens) and turn.tokens[-1] in self.format.turn_ends
            calls = self.format.calls(turn.tokens, schemas) if closed and not trace.stopped else []
            said.append(self._said(turn.tokens, calls, in_thought))
            if not calls or box.stats.calls + len(calls) > self.max_tool_calls:
                break
            contents = await trace.unless_stopped(asyncio.gather(*map(box.call, calls)))
            if contents is None:
                break
            results = list(zip([c.name for c in calls], contents, strict=True))
            said += [{"role": "tool", "name": name, "content": content} for name, content in results]
            ids = self.format.results(results, [c.id for c in calls])
            if len(trace.ids) + len(ids) >= sampling.max_tokens:
                finish = "length"  # no room left for the results and a reply to them
                break
            trace.appended(ids)
        sample = Sample(
            index=trace.index,
            tokens=trace.ids,
            logprobs=trace.logprobs,
            versions=trace.versions,
            finish_reason=trace.end(finish),
            text=self.format.decode(trace.ids),
            loss_mask=trace.mask,
        )
        view = await ended(env, self.timeout_s)
        return Episode(prompt, sample, turns=trace.turns, tools=box.stats, environment=view, messages=said)

    def _said(self, ids: list[int], calls: list[ToolCall], in_thought: bool) -> dict[str, Any]:
        """A model turn as the rewards' message, as TRL parses one: its content (``prose``: without the calls, or a
        reasoning channel the syntax marks; all reasoning where it never closes the think block its header opened),
        with its usable calls as ``tool_calls``; a turn whose calls are all unusable is its whole text, broken calls
        included."""
        if usable := [c.message() for c in calls if c.arguments is not None]:
            return {**assistant_message(self.format.prose(ids), in_thought), "tool_calls": usable}
        return assistant_message(self.format.decode(ids) if calls else self.format.prose(ids), in_thought)

    def prompt(self, row: PromptRow) -> list[int]:
        """The ids an episode of ``row`` starts from, the tools' schemas included (an environment is reset first)."""
        return self._start(row)[2]

    def _start(self, row: PromptRow) -> tuple[Any, ToolBox, list[int]]:
        """The episode's environment (a new instance, reset with ``row``; None without one), tools and prompt ids."""
        name = environment_name(self.environments, row)
        env = self.environments[name]() if self.environments else None
        messages = _messages(row.prompt)
        if env is not None:
            observation = env.reset(**reset_arguments(row, named=name is not None))
            if isinstance(observation, str):
                messages[-1] = {**messages[-1], "content": messages[-1]["content"] + observation}
        box = ToolBox(self.tools + (environment_tools(env) if env is not None else []), self.timeout_s)
        return env, box, self.format.prompt(messages, box.schemas())


@dataclass(frozen=True)
class ToolSettings:
    """A run's tools as plain data (``rollout.tools`` and friends), sent to rollout workers, which load them there."""

    tools: tuple[str, ...]
    environment: str | tuple[tuple[str, str], ...] | None  # one spec for every row, or (name, spec) pairs
    max_tool_calls: int
    timeout_s: float
    base_dir: str  # relative file specs are resolved against it
    template_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)  # data.chat_template_kwargs
    tool_parser: str | None = None  # rollout.tool_parser: vLLM's parser of that name reads the calls
    revision: str | None = None  # model.revision: the generation config's end-of-turn ids are that version's

    @staticmethod
    def of(cfg: RunConfig) -> ToolSettings | None:
        """The settings of ``cfg.rollout`` (relative specs against the current directory) with the chat template's
        keyword arguments; None without tools."""
        r, kwargs = cfg.rollout, cfg.data.chat_template_kwargs
        if not r.tools and r.environment is None:
            return None
        env = tuple(sorted(r.environment.items())) if isinstance(r.environment, dict) else r.environment
        return ToolSettings(
            tuple(r.tools),
            env,
            r.max_tool_calls,
            r.tool_timeout_s,
            os.getcwd(),
            kwargs,
            r.tool_parser,
            cfg.model.revision,
        )

    def specs(self) -> dict[str | None, str]:
        """The environment specs by name (the key None: the one environment of every row)."""
        if self.environment is None:
            return {}
        return {None: self.environment} if isinstance(self.environment, str) else dict(self.environment)

    def load(self) -> tuple[list[Callable[..., Any]], Environments]:
        """The tool functions and the environment factories by name; ``ValueError`` with one line naming a bad
        spec."""
        tools = [load_tool(spec, self.base_dir) for spec in self.tools]
        return tools, {name: load_environment(spec, self.base_dir) for name, spec in self.specs().items()}

    def build(self, tokenizer: Any) -> ToolWorkflow:
        """The workflow, through ``tokenizer``'s chat template, its calls read in the syntax the template writes (or
        by vLLM's ``tool_parser``)."""
        tools, environments = self.load()
        fmt = ChatTemplateFormat(tokenizer, self.template_kwargs, self.tool_parser, self.revision)
        return ToolWorkflow(fmt, tools, environments, self.max_tool_calls, self.timeout_s)


def reset_arguments(row: PromptRow, named: bool = False) -> dict[str, Any]:
    """What an environment's ``reset`` gets: the dataset row as TRL passes it (every column, the prompt, the answer;
    with ``named`` environments not the column that picked it)."""
    columns = {k: v for k, v in row.columns.items() if not (named and k == ENVIRONMENT_COLUMN)}
    return {**columns, "answer": row.answer, "prompt": row.prompt}


def environment_name(environments: Environments, row: PromptRow) -> str | None:
    """The key of ``row``'s environment: None where one serves every row (or there is none), else the row's
    ``environment`` column; ``ValueError`` naming the row when that names none of them."""
    if not environments or None in environments:
        return None
    name = row.columns.get(ENVIRONMENT_COLUMN)
    if name not in environments:
        known = ", ".join(sorted(str(n) for n in environments))
        raise ValueError(f"row {row.prompt_id}: its environment column is {name!r}, not one of {known}")
    return name


def snapshot(env: Any, reward: EnvironmentReward | None = None) -> SimpleNamespace | None:
    """What rewards get of an environment: its attributes after the episode, as a plain namespace (it crosses
    processes; the user's class may not import there), with ``reward`` as its ``get_reward`` where given."""
    if env is None:
        return None
    view = SimpleNamespace(**vars(env))
    if reward is not None:
        view.get_reward = reward
    return view


async def ended(env: Any, timeout_s: float) -> SimpleNamespace | None:
    """``snapshot`` of an episode's environment once the episode is over, its ``get_reward()`` called now, on the
    live instance, where its class defines one (an async one awaited, for at most ``timeout_s``)."""
    if not owns_reward(env):
        return snapshot(env)
    try:
        value = env.get_reward()
        if inspect.isawaitable(value):
            value = await asyncio.wait_for(value, timeout_s)
        reward = EnvironmentReward(value=None if value is None else float(value))
    except Exception as e:  # the reward call fails for this sample alone (``environment_reward``)
        reward = EnvironmentReward(error=f"get_reward: {type(e).__name__}: {e}")
    return snapshot(env, reward)


def _messages(prompt: str | Messages) -> Messages:
    """Chat messages of a prompt (a text prompt is one user message); a copy, so the row stays untouched."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
