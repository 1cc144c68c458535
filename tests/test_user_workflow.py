"""``rollout.workflow``: a user's episode logic on the real vLLM engine (the session's warm tiny-model worker), loaded
from a file by the worker as a run loads it, trained on by the real trainer, and refused in one line when it cannot
load."""

import asyncio
import json

import pytest
import ray
from rl.rollout.engine import SamplingSpec
from rl.rollout.user_workflow import UserWorkflowSettings
from rl.shaping.plain import PlainController
from rl.shaping.policy import GroupPlan
from rl.trainer.engine import TrainerSpec
from rl.trainer.worker import TrainerWorker
from small_runs import on_the_warm_engine, small_run

from rl.cli.main import main
from rl.inputs.preflight import BadInput, preflight
from rl.loop.driver import RunFailed, run_training
from rl.loop.processes import wait_for
from rl.types import PromptRow

pytestmark = pytest.mark.integration  # starts real Ray or vLLM

ROW = PromptRow("w", "3+1=", "4")

WORKFLOWS = '''
SEEN = []


async def answer_then_retry(episode, row):
    """The model answers; told to try again, it answers once more. The answer takes at most 30 of the episode's 40
    tokens, so the retry always has room: every episode has two turns."""
    first = await episode.generate(max_tokens=30)
    SEEN.append((row["prompt"], row["answer"], first.finish_reason))
    episode.append("=")
    await episode.generate(max_tokens=5)


class Broken:
    async def run(self, episode, row):
        await episode.generate()
        raise KeyError("no such tool")


async def scored_by_length(episode, row):
    """Answers, and hands the rewards its own score of the answer."""
    turn = await episode.generate()
    return {"workflow_score": float(len(turn.ids)), **({"retried": True} if row["answer"] == "4" else {})}


async def takes_a_column(episode, row):
    await episode.generate()
    return {"answer": "mine"}


async def returns_a_number(episode, row):
    await episode.generate()
    return 3


async def retry_but_fail_on_evens(episode, row):
    """answer_then_retry, but raising on the problems whose answer is even."""
    if int(row["answer"]) % 2 == 0:
        await episode.generate()
        raise KeyError("no such tool")
    await answer_then_retry(episode, row)


def not_async(episode, row):
    return None


async def one_argument(episode):
    return None
'''


def workflow_file(tmp_path) -> str:
    path = tmp_path / "workflows.py"
    path.write_text(WORKFLOWS)
    return str(path)


def group(worker, spec: str, tag: str, n: int = 3):
    settings = UserWorkflowSettings(spec, "/")
    plain = PlainController(GroupPlan("w", n, n))
    return ray.get(worker.generate_episodes.remote(tag, ROW, SamplingSpec(max_tokens=40), settings, plain))


def test_a_workflow_file_runs_two_turns_with_feedback_between_and_the_trainer_agrees(
    rollout_worker, tmp_path, tiny_model_dir, encode
):
    prompt, _, episodes = group(rollout_worker, f"{workflow_file(tmp_path)}:answer_then_retry", "two-turns")
    assert prompt == encode("3+1=")  # the row's prompt as a single-turn run renders it
    trainer = TrainerWorker(TrainerSpec(model=tiny_model_dir))
    for e in episodes:
        s = e.sample
        assert e.turns == 2 and e.messages == s.text  # a text prompt: rewards get the text after it
        assert len(s.tokens) == len(s.logprobs) == len(s.loss_mask) == len(s.versions) <= 40
        feedback = s.loss_mask.index(0)  # the appended "=": one id, not trained on, log-prob 0.0
        assert s.loss_mask.count(0) == 1 and s.tokens[feedback] == encode("=")[-1] and s.logprobs[feedback] == 0.0
        assert 1 <= s.loss_mask[feedback:].count(1) <= 5 or s.finish_reason == "length"  # a second turn, capped at 5
        recomputed = trainer.sequence_logprobs(prompt, s.tokens)
        gaps = [abs(a - b) for a, b, m in zip(recomputed, s.logprobs, s.loss_mask, strict=True) if m == 1]
        assert max(gaps) < 1e-3, f"largest gap {max(gaps)}"  # exactly what the engine sampled, turns and all


def test_what_a_workflow_returns_reaches_the_rewards_as_keyword_arguments(rollout_worker, tmp_path):
    from rl.rollout.workflow import episode_columns

    from rl.rewards.pool import RewardPool

    _, _, episodes = group(rollout_worker, f"{workflow_file(tmp_path)}:scored_by_length", "returns")
    columns = episode_columns(episodes)
    assert columns["workflow_score"] == [float(len(e.sample.tokens)) for e in episodes]
    assert columns["retried"] == [True] * len(episodes)  # ROW's answer is 4: every episode returned it
    reward = tmp_path / "reward.py"
    reward.write_text("def by_workflow(completions, workflow_score, **kwargs):\n    return list(workflow_score)\n")
    with RewardPool([(f"{reward}:by_workflow", 1.0)], 1) as pool:  # a worker process: the values cross to it
        scored = pool.score_sync([ROW.prompt] * len(episodes), [e.sample.text for e in episodes], columns)
    assert scored.rewards == columns["workflow_score"]
    for name, said in (
        ("takes_a_column", "returned 'answer', a name rewards get already; rename it"),
        ("returns_a_number", "returned int: return None, or a dict of reward keyword arguments"),
    ):
        with pytest.raises(ray.exceptions.RayTaskError) as raised:
            group(rollout_worker, f"{workflow_file(tmp_path)}:{name}", name)
        assert said in [line for line in str(raised.value).splitlines() if "WorkflowError" in line][-1]


def test_a_workflow_that_raises_fails_its_group_in_one_line(rollout_worker, tmp_path):
    with pytest.raises(ray.exceptions.RayTaskError) as raised:
        group(rollout_worker, f"{workflow_file(tmp_path)}:Broken", "broken")
    last = [line for line in str(raised.value).splitlines() if "WorkflowError" in line][-1]
    assert last.endswith(":Broken' raised KeyError: 'no such tool'")
    assert ray.get(rollout_worker.stats.remote())["unfinished"] == 0  # nothing left running on the engine


def test_a_run_trains_on_the_episodes_and_goes_on_past_those_that_fail(ray_session, rollout_worker, tmp_path, caplog):
    spec = f"{workflow_file(tmp_path)}:retry_but_fail_on_evens"
    overrides = ["train.max_steps=3", "train.max_staleness=0", "eval.num_problems=32", f"rollout.workflow={spec}"]
    summary = run_training(small_run(tmp_path, "wf", *overrides), start_actors=on_the_warm_engine(rollout_worker))
    assert summary["steps"] == 3 and summary["rollout_errors"] > 0 and summary["groups_unaccounted"] == 0
    records = [json.loads(line) for line in (tmp_path / "wf" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["turns"] for r in train] == [2 * r["samples_launched"] for r in train]  # every episode: two turns
    assert all(r["skipped_nonfinite"] == 0 and r["logprob_gap"] < 1e-3 for r in train)  # on-policy: they agree
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["num_problems"] + r["failed_problems"] for r in evals] == [32, 32]
    assert all(0 < r["failed_problems"] < 32 for r in evals)  # the held-out problems that raised are left out
    said = [r.getMessage() for r in caplog.records if "failed: WorkflowError" in r.getMessage()]
    assert len(said) == 1, said  # the first failed group says why; the others are counted
    assert said[0].endswith(
        ":retry_but_fail_on_evens' raised KeyError: 'no such tool' (groups failing so again: counted in rollout_errors)"
    )


def test_a_reward_may_require_what_the_workflow_returns_as_trl_rewards_do(ray_session, rollout_worker, tmp_path):
    reward = tmp_path / "by_workflow.py"
    reward.write_text("def r(completions, workflow_score, **kwargs):\n    return [s / 100 for s in workflow_score]\n")
    scored = ["reward.functions=[{fn: " + f"{reward}:r" + "}]", "train.max_steps=1", "train.max_staleness=0"]
    with pytest.raises(BadInput, match="it needs 'workflow_score', which the data has no column for"):
        preflight(small_run(tmp_path, "no-workflow", *scored))  # no workflow: nothing can give it
    spec = f"{workflow_file(tmp_path)}:scored_by_length"
    summary = run_training(
        small_run(tmp_path, "wf-reward", *scored, f"rollout.workflow={spec}"),
        start_actors=on_the_warm_engine(rollout_worker),
    )
    records = [json.loads(line) for line in (tmp_path / "wf-reward" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert summary["steps"] == 1 and summary["reward_failures"].get("raised", 0) == 0
    assert train[0]["reward_mean"] == pytest.approx(train[0]["response_len_mean"] / 100, rel=1e-3)
    spec = f"{workflow_file(tmp_path)}:answer_then_retry"  # returns nothing
    with pytest.raises(RunFailed, match="missing 1 required positional argument: 'workflow_score'"):
        run_training(
            small_run(tmp_path, "wf-none", *scored, f"rollout.workflow={spec}"),
            start_actors=on_the_warm_engine(rollout_worker),
        )


def test_a_workflow_that_always_raises_stops_the_run_at_its_first_evaluation(ray_session, rollout_worker, tmp_path):
    cfg = small_run(tmp_path, "broken", f"rollout.workflow={workflow_file(tmp_path)}:Broken")
    with pytest.raises(RunFailed) as failed:
        run_training(cfg, start_actors=on_the_warm_engine(rollout_worker))
    assert str(failed.value) == (
        f"the held-out evaluation before failed: none of the 8 held-out problems could be sampled: WorkflowError: "
        f"rollout.workflow '{workflow_file(tmp_path)}:Broken' raised KeyError: 'no such tool'"
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("not_async", "not_async': run must be an async function of (episode, row)"),
        ("one_argument", "one_argument': run takes two arguments, (episode, row)"),
        ("missing", "workflows.py has no attribute 'missing'"),
    ],
)
def test_a_workflow_that_cannot_run_is_one_line_before_any_actor(tmp_path, capsys, name, message):
    spec = f"{workflow_file(tmp_path)}:{name}"
    ray_before = ray.is_initialized()  # up only where an earlier test of this pytest worker started it
    code = main(["train", "arith_tiny", f"output_dir={tmp_path}", f"rollout.workflow={spec}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "rollout.workflow: workflow spec" in err and message in err
    assert len(err.splitlines()) == 1, err
    assert ray.is_initialized() == ray_before  # refused before any actor


def test_a_workflow_beside_tools_is_refused(tmp_path, capsys):
    code = main(["train", "calc_tiny", f"output_dir={tmp_path}", "rollout.workflow=x.py:run"])
    assert code == 2 and "workflow runs episodes of its own: drop tools and environment" in capsys.readouterr().err


def test_misusing_the_episode_is_one_line_naming_the_workflow(rollout_worker, tmp_path):
    path = tmp_path / "misuse.py"
    path.write_text(
        "import asyncio\n\n\n"
        "async def two_at_once(episode, row):\n    await asyncio.gather(episode.generate(), episode.generate())\n\n\n"
        "async def feedback_first(episode, row):\n    episode.append('=')\n"
    )
    for name, said in (
        ("two_at_once", "generate while another turn of the episode samples: await each turn before the next"),
        ("feedback_first", "append before the first generate: put what comes first in the prompt"),
    ):
        with pytest.raises(ray.exceptions.RayTaskError) as raised:
            group(rollout_worker, f"{path}:{name}", name)
        last = [line for line in str(raised.value).splitlines() if "WorkflowError" in line][-1]
        assert f"rollout.workflow '{path}:{name}': {said}" in last
    # the turn the failed run left decoding is aborted; the engine drops it at its next step
    assert wait_for(lambda: ray.get(rollout_worker.stats.remote())["unfinished"] == 0, 10)


class HangingEngine:
    """An engine whose requests decode until aborted, recording the aborts."""

    version = 0

    def __init__(self) -> None:
        self.aborted: list[str] = []

    async def generate(self, trace, prompt_tokens, sampling, priority=0, on_output=None):
        while trace.request_id not in self.aborted:
            await asyncio.sleep(0.01)
        trace.finish_reason = "abort"
        return trace

    async def abort(self, request_ids: list[str]) -> None:
        self.aborted += request_ids


def test_a_failed_workflow_aborts_the_turn_it_left_decoding(tiny_model_dir):
    """asyncio.gather's second generate fails the run while the first still decodes: the group ends with that turn
    aborted, not left on the engine."""
    from rl.rollout.user_workflow import UserWorkflow, WorkflowError
    from rl.rollout.workflow import run_episodes
    from transformers import AutoTokenizer

    async def two_at_once(episode, row):
        await asyncio.gather(episode.generate(), episode.generate())

    workflow = UserWorkflow("w.py:two_at_once", two_at_once, AutoTokenizer.from_pretrained(tiny_model_dir), {})
    engine = HangingEngine()
    controller = PlainController(GroupPlan("w", 1, 1))
    with pytest.raises(WorkflowError, match="generate while another turn of the episode samples"):
        asyncio.run(run_episodes(engine, "g", workflow, ROW, SamplingSpec(max_tokens=8), controller))
    assert engine.aborted == ["g-0-t0"]
