"""The model scorer: lm-confidence and reward-model math in-process, then SART pruning through the real
scorer actor next to a real rollout worker (tiny offline model throughout)."""

from __future__ import annotations

import math

import pytest
import ray
import torch
from rl.rollout.engine import SamplingSpec
from rl.rollout.scorer_worker import ScorerClient, ScorerSpec, ScorerWorker, remote_scorer_worker
from rl.shaping.darts import DartsController
from rl.shaping.policy import GroupPlan
from rl.shaping.sart import SartController
from rl.shaping.scorers import ExternalScorer

PROMPT = "3+4="
CAP = 120  # response tokens that fit the session engine's 128-token context after PROMPT


@pytest.fixture(scope="module")
def confidence(tiny_model_dir) -> ScorerWorker:
    return ScorerWorker(ScorerSpec("lm-confidence", tiny_model_dir))


def test_lm_confidence_is_the_mean_response_log_prob(confidence):
    tok, model = confidence.tokenizer, confidence.model
    context = tok(PROMPT)["input_ids"]
    texts = ["3+4=7;#7", "12+5=17", "=+=+=+ 99", ""]  # the first is its greedy answer
    scores = confidence.score(PROMPT, texts)
    for text, score in zip(texts[:3], scores, strict=False):
        ids = context + tok(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0], dim=-1)
        picked = [float(logprobs[p - 1, ids[p]]) for p in range(len(context), len(ids))]  # response tokens
        assert score == pytest.approx(sum(picked) / len(picked), abs=1e-4)
    assert all(s <= 0 for s in scores) and scores[3] == 0.0  # nothing generated yet: no evidence against it
    # padding in a batch changes nothing; the model is confident in its own answer, not in symbol soup
    assert [confidence.score(PROMPT, [t])[0] for t in texts] == pytest.approx(scores, abs=1e-4)
    assert scores[0] > -1.0 > -3.0 > scores[2]
    assert confidence.stats()["texts"] == 2 * len(texts)


def test_reward_model_scores_a_one_label_head(tiny_model_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    # no reward model is reachable offline: the tiny LM with a fresh one-label head stands in (values meaningless)
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path)
    rm = ScorerWorker(ScorerSpec("reward-model", str(tmp_path)))
    texts = ["7", "12+5=17 and more", "1"]
    scores = rm.score(PROMPT, texts)
    assert len(scores) == 3 and all(math.isfinite(s) for s in scores)
    assert [rm.score(PROMPT, [t])[0] for t in texts] == pytest.approx(scores, abs=1e-4)
    with pytest.raises(ValueError, match="one label"):
        ScorerWorker(ScorerSpec("reward-model", tiny_model_dir))  # a causal LM config: two labels by default


@pytest.mark.integration
def test_sart_prunes_through_the_scorer_actor(rollout_worker, tiny_model_dir, encode):
    scorer = remote_scorer_worker(num_cpus=1).remote(ScorerSpec("lm-confidence", tiny_model_dir))
    ray.get(scorer.stats.remote())  # loaded: the group below does not wait for the model
    client = ScorerClient(scorer, PROMPT)

    def group(tag: str, sampling: SamplingSpec):
        # alpha = 0 is above every log-prob: phase 1 prunes beta = 3 samples as soon as a tick has them scored
        controller = SartController(DartsController(GroupPlan("s", 8, 2)), ExternalScorer(), alpha=0.0, beta=3)
        return ray.get(rollout_worker.generate_group.remote(tag, encode(PROMPT), sampling, controller, 0.02, client))

    try:
        # every sample runs to the cap (no early stop), so the only aborts are the scorer's prunes. A prune needs a
        # reply before the samples end: beside a neighbour's heavy load (a SmolLM2 engine in the other test worker) a
        # whole 120-token group has ended before the first one, so up to three groups run; a broken path prunes none
        for attempt in range(3):
            texts_before = ray.get(scorer.stats.remote())["texts"]
            result = group(f"sart-remote-cap{attempt}", SamplingSpec(max_tokens=CAP, ignore_eos=True))
            stats = result.controller_stats
            assert stats["aborted"] == 0 and result.score_failures == 0
            if stats["pruned"]:
                break
        assert stats["pruned"] == 3
        cut = [n for n, why in zip(result.all_lengths, result.finish_reasons, strict=True) if why == "abort"]
        assert len(cut) == 3 and max(cut) < CAP
        assert len(result.samples) == 2  # kept groups have exactly M samples (here truncated ones)
        # the controller has no scores of its own: they all came from the actor, and they are log-probs; a tick scores
        # the samples that have started, so how many were scored before the 3 prunes depends on the engine's pace
        assert ray.get(scorer.stats.remote())["texts"] - texts_before == result.scored >= 3
        assert all(s <= 0 for s in ray.get(scorer.score.remote(PROMPT, [s.text for s in result.samples])))
        # natural lengths: early stop plus the first completion scored remotely for phase 2
        result = group("sart-remote-eos", SamplingSpec(max_tokens=100, temperature=1.5))
        assert len(result.samples) == 2 and result.scored > 0 and result.score_failures == 0
        assert ray.get(rollout_worker.stats.remote())["unfinished"] == 0
    finally:
        ray.kill(scorer)
