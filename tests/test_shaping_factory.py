"""Policies by name, their composition, and all of them run on simulated heavy-tailed groups."""

from __future__ import annotations

import numpy as np
import pytest
from rl.shaping.compose import DartsSartPolicy
from rl.shaping.darts import DartsController, DartsPolicy
from rl.shaping.factory import make_policy, make_scorer
from rl.shaping.plain import PlainPolicy
from rl.shaping.policy import FinishedSample, RunningSample
from rl.shaping.sart import SartController, SartPolicy
from rl.shaping.scorers import RepetitionScorer

CAP = 1024


def test_make_policy_by_name():
    assert isinstance(make_policy("plain", 8), PlainPolicy)
    darts = make_policy("darts", 8, avg_redundancy=1.25, long_slots=2)
    assert isinstance(darts, DartsPolicy) and darts.long_slots == 2
    sart = make_policy("sart", 8, redundancy=2.0, alpha=0.4)
    assert isinstance(sart, SartPolicy) and isinstance(sart.scorer, RepetitionScorer) and sart.alpha == 0.4
    assert make_policy("sart", 8, scorer="none").scorer is None
    both = make_policy("darts+sart", 8, beta=3, warmup_steps=0)
    assert isinstance(both, DartsSartPolicy) and both.beta == 3 and both.darts.warmup_steps == 0
    with pytest.raises(ValueError):
        make_policy("dart", 8)
    with pytest.raises(TypeError):
        make_policy("plain", 8, alpha=0.1)
    with pytest.raises(ValueError):
        make_policy("darts+sart", 8, scorer="none")
    with pytest.raises(ValueError):
        make_scorer("prm")
    custom = RepetitionScorer(ngram=2)
    assert make_scorer(custom) is custom


def test_composition_plans_like_darts_and_prunes_like_sart():
    policy = make_policy("darts+sart", 2, warmup_steps=0, long_slots=1, alpha=0.5, beta=1)
    policy.observe("calm", [100, 101, 99, 100])
    policy.observe("wild", [50, 900, 300, 20])
    assert policy.darts.lengths.std("wild") > policy.darts.lengths.std("calm")
    calm, wild = policy.plan(["calm", "wild"])
    assert (calm.n_launch, calm.long_slots) == (2, 1)
    assert (wild.n_launch, wild.long_slots) == (4, 0)  # at the cap: tail pruning
    ctrl = policy.controller(wild, prompt="q")
    assert isinstance(ctrl, SartController) and isinstance(ctrl.base, DartsController)
    loop = "x = 1 then " * 60
    fine = " ".join(f"step{i}" for i in range(60))
    decision = ctrl.on_progress([RunningSample(i, 300, loop if i == 2 else fine) for i in range(4)])
    assert decision.abort == [2]
    ctrl.on_finish(FinishedSample(0, 120, "stop", text=fine))
    decision = ctrl.on_finish(FinishedSample(3, 200, "stop", text=fine))
    assert decision.done and decision.abort == [1]
    assert ctrl.kept() == [0, 3]
    assert ctrl.stats()["pruned"] == 1 and ctrl.stats()["aborted"] == 1


def test_long_wait_reaches_the_controllers():
    plan = make_policy("darts", 8, warmup_steps=0).plan(["q"])[0]
    assert make_policy("darts", 8, long_wait=2.0).controller(plan).long_wait == 2.0
    assert make_policy("darts+sart", 8, long_wait=1.5).controller(plan).base.long_wait == 1.5
    assert make_policy("darts", 8).controller(plan).long_wait is None


def _simulate(policy, laws, steps, rng):
    """Plan each step's batch, finish each group in length order, feed kept lengths back."""
    kept_lengths, generated, plans_seen = [], 0, []
    for _ in range(steps):
        for plan in policy.plan(list(laws)):
            plans_seen.append(plan)
            mu, sigma = laws[plan.prompt_id]
            lengths = np.minimum(np.round(np.exp(mu + sigma * rng.standard_t(3.5, plan.n_launch))), CAP)
            ctrl = policy.controller(plan)
            aborted: set[int] = set()
            for i in np.argsort(lengths, kind="stable"):
                if i in aborted:
                    continue
                reason = "length" if lengths[i] >= CAP else "stop"
                aborted.update(ctrl.on_finish(FinishedSample(int(i), int(lengths[i]), reason)).abort)
            assert len(ctrl.kept()) == plan.m_keep
            stats = ctrl.stats()
            assert stats["kept"] + stats["discarded"] + stats["aborted"] + stats["pruned"] == plan.n_launch
            cut = max(lengths[ctrl.kept()])  # aborted samples ran until the group's last kept finish
            generated += sum(min(n, cut) if i in aborted else n for i, n in enumerate(lengths))
            group = [int(lengths[i]) for i in ctrl.kept()]
            kept_lengths.extend(group)
            policy.observe(plan.prompt_id, group)
    return np.array(kept_lengths), generated, plans_seen


def test_policies_on_heavy_tailed_prompts():
    rng = np.random.default_rng(0)
    laws = {f"q{i}": (rng.normal(5.3, 0.3), rng.uniform(0.2, 1.0)) for i in range(24)}
    results = {}
    for name in ("plain", "darts", "sart", "darts+sart"):
        options = {} if name == "plain" else {"scorer": "none"} if name == "sart" else {"warmup_steps": 1}
        policy = make_policy(name, 8, **options)
        results[name] = (policy, *_simulate(policy, laws, steps=4, rng=np.random.default_rng(1)))
    plain_kept = results["plain"][1]
    sart_kept = results["sart"][1]
    # early stop keeps the shortest M of N = 12: shorter kept responses, fewer truncated ones
    assert np.median(sart_kept) < 0.8 * np.median(plain_kept)
    assert np.mean(sart_kept >= CAP) < np.mean(plain_kept >= CAP)
    # after warm-up DARTS gives the wide prompts more samples
    darts_plans = results["darts"][3][24:]
    sigmas = np.array([laws[p.prompt_id][1] for p in darts_plans])
    budgets = np.array([p.n_launch for p in darts_plans])
    assert budgets[sigmas > 0.8].mean() > budgets[sigmas < 0.4].mean()
    assert all(p.long_slots == 0 for p in darts_plans if p.n_launch == 16)
    # dual-end selection keeps a long sample per group, so DARTS keeps longer responses than pure early stop
    assert np.mean(results["darts"][1]) > np.mean(sart_kept)
    assert results["plain"][2] < results["sart"][2]  # redundancy costs generated tokens
