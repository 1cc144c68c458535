"""TRL's environment-owned reward (an environment class with ``get_reward``): called on the live instance when the
episode ends (sync or async, its error kept), carried by the snapshot, read by the built-in reward ``environment``;
preflight refuses that reward without such an environment and warns of such an environment without it."""

import asyncio
import logging
import math

import pytest
from rl.rollout.tool_workflow import ended
from test_tool_preflight import _config

from rl.inputs.preflight import BadInput, preflight
from rl.rewards.environment import environment_reward


class Plain:
    def __init__(self) -> None:
        self.total = 3


class Sync(Plain):
    def get_reward(self) -> float:
        return self.total * 2.0


class Async(Plain):
    async def get_reward(self) -> float:
        return self.total + 0.5


class Broken(Plain):
    def get_reward(self) -> float:
        raise KeyError("score")


class Slow(Plain):
    async def get_reward(self) -> float:
        await asyncio.sleep(10)
        return 1.0


def test_get_reward_is_called_as_the_episode_ends_and_read_from_the_snapshot():
    views = [asyncio.run(ended(cls(), timeout_s=0.2)) for cls in (Sync, Async, Broken, Slow, Plain)]
    assert [v.total for v in views] == [3] * 5  # the attributes, as before
    values = environment_reward([*views, None])
    assert values[:2] == [6.0, 3.5] and values[4:] == [None, None]  # no get_reward, no environment: not scored
    assert math.isnan(values[2]) and math.isnan(values[3])  # raised, timed out: that sample's counted failure
    with pytest.raises(RuntimeError, match="get_reward: KeyError: 'score'"):
        views[2].get_reward()
    with pytest.raises(RuntimeError, match="get_reward: TimeoutError"):
        views[3].get_reward()


OWNER = '''
class Owner:
    def reset(self, **row):
        self.total = int(row["answer"])

    def double(self) -> int:
        """Double the running total."""
        self.total *= 2
        return self.total

    def get_reward(self) -> float:
        return float(self.total)
'''


@pytest.mark.parametrize(
    "environment, message",
    [
        (
            "null",
            r"^reward 'environment' is rollout\.environment's get_reward\(\), but there is no rollout\.environment",
        ),
        ("{tools}:Counter", r"^reward 'environment' .*, but Counter defines no get_reward\(\); drop it or add one$"),
    ],
    ids=["no-environment", "no-get-reward"],
)
def test_the_environment_reward_without_an_owning_environment_is_refused(tmp_path, environment, message):
    tools = tmp_path / "tools.py"
    overrides = [
        f"rollout.environment={environment.replace('{tools}', str(tools))}",
        "reward.functions=[{fn: environment}]",
    ]
    with pytest.raises(BadInput, match=message):
        preflight(_config(tmp_path, *overrides))


def test_an_owning_environment_trains_on_its_reward_or_is_said_to_be_unread(tmp_path, caplog):
    (tmp_path / "owner.py").write_text(OWNER)
    owner = f"rollout.environment={tmp_path / 'owner.py'}:Owner"
    with caplog.at_level(logging.WARNING, logger="rl.preflight"):
        preflight(_config(tmp_path, owner))  # the recipe's env_reward reads .total; get_reward goes unread
    assert "Owner defines get_reward(), which no reward reads" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rl.preflight"):
        inputs = preflight(_config(tmp_path, owner, "reward.functions=[{fn: environment}]"))
    assert "get_reward" not in caplog.text and inputs.train_rows


NAMED = '''
class Adder:
    def reset(self, **row):
        self.row = row
        self.total = 0

    def add(self, n: int) -> int:
        """Add n to the total.

        Args:
            n: the number to add
        """
        self.total += n
        return self.total


class Timer:
    def reset(self, **row):
        self.row = row
        self.total = 1

    def times(self, n: int) -> int:
        """Multiply the total by n.

        Args:
            n: the factor
        """
        self.total *= n
        return self.total


def env_reward(completions, environments, **columns):
    return [float(e.total) for e in environments]
'''


def _named_config(tmp_path, picks: list[str | None], *overrides: str):
    """``_config`` on a file whose rows pick an environment by their ``environment`` column (None: no column)."""
    import json

    (tmp_path / "named.py").write_text(NAMED)
    rows = [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(len(picks))]
    rows = [r | ({} if p is None else {"environment": p}) for r, p in zip(rows, picks, strict=True)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    named = tmp_path / "named.py"
    return _config(
        tmp_path,
        f"data.source={tmp_path / 'rows.jsonl'}",
        f"rollout.environment={{add: '{named}:Adder', mul: '{named}:Timer'}}",
        "rollout.tools=[]",
        f"reward.functions=[{{fn: '{named}:env_reward'}}]",
        *overrides,
    )


def test_named_environments_each_serve_the_rows_that_pick_them(tmp_path):
    from rl.rollout.tool_workflow import ToolSettings
    from tool_chat import byte_chat_tokenizer

    cfg = _named_config(tmp_path, ["add", "mul"] * 20)
    inputs = preflight(cfg)
    assert sorted(s["function"]["name"] for s in inputs.encoder.tools) == ["add", "times"]  # lengths count both
    workflow = ToolSettings.of(cfg).build(byte_chat_tokenizer())
    for row in inputs.train_rows[:4]:
        env, box, prompt = workflow._start(row)
        assert type(env).__name__ == {"add": "Adder", "mul": "Timer"}[row.columns["environment"]]
        tool = {"Adder": "add", "Timer": "times"}[type(env).__name__]
        assert [s["function"]["name"] for s in box.schemas()] == [tool]  # its own tools only
        assert "environment" not in env.row and env.row["answer"] == row.answer  # the pick is not reset's


@pytest.mark.parametrize("pick, said", [(None, "None"), ("div", "'div'")], ids=["no-column", "unknown"])
def test_a_row_picking_no_named_environment_is_refused_in_one_line(tmp_path, pick, said):
    """Any row, training or held-out (held-out rows run episodes too)."""
    refused = rf"^rollout\.environment: row .*: its environment column is {said}, not one of add, mul; give each row"
    for at in range(40):  # wherever the split puts it
        picks: list[str | None] = ["add", "mul"] * 20
        picks[at] = pick
        with pytest.raises(BadInput, match=refused):
            preflight(_named_config(tmp_path, picks))
