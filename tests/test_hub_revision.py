"""A hub model pinned to a revision (``model.revision``), and one whose repository ships its own code
(``model.trust_remote_code``): the checks, the trainer and the engine load that version.

No hub is reachable here: a Hugging Face cache is built in a temporary folder, read offline as the libraries read
the real one. Its repository ``tailor-tests/arith-tiny`` holds the tiny model at ``main``, and at ``REVISION``
other weights, 192 positions instead of 256, one more end-of-sequence id, and configuration and model classes of its
own code (``auto_map``; vLLM runs it as the Qwen2 its ``architectures`` names).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rl.config import ModelConfig, load_config
from rl.inputs.preflight import BadInput, preflight

REPO = "tailor-tests/arith-tiny"
MAIN, REVISION = "a" * 40, "b" * 40
EOT = 16  # an end-of-sequence id the revision's generation config adds to main's 2
CODE = {
    "configuration_tiny.py": "from transformers import Qwen2Config\n\n\nclass TinyConfig(Qwen2Config):\n"
    '    model_type = "tailor_tiny"\n',
    "modeling_tiny.py": "from transformers import Qwen2ForCausalLM\n\nfrom .configuration_tiny import TinyConfig\n\n\n"
    "class TinyForCausalLM(Qwen2ForCausalLM):\n    config_class = TinyConfig\n",
}
AUTO_MAP = {"AutoConfig": "configuration_tiny.TinyConfig", "AutoModelForCausalLM": "modeling_tiny.TinyForCausalLM"}


@pytest.fixture(scope="module")
def hub_cache(tiny_model_dir, tmp_path_factory) -> Path:
    """A Hugging Face cache with ``REPO`` at ``MAIN`` (the tiny model) and at ``REVISION``."""
    import torch
    from transformers import AutoModelForCausalLM

    cache = tmp_path_factory.mktemp("hub-cache")
    repo = cache / f"models--{REPO.replace('/', '--')}"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / MAIN)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(MAIN)
    other = repo / "snapshots" / REVISION
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.config.max_position_embeddings = 192
    model.generation_config.eos_token_id = [2, EOT]  # a turn also ends on EOT there
    model.save_pretrained(other)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(tiny_model_dir) / name, other / name)
    for name, code in CODE.items():
        (other / name).write_text(code)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "tailor_tiny", "auto_map": AUTO_MAP}))
    return cache


@pytest.fixture
def offline_hub(hub_cache, monkeypatch) -> dict[str, str]:
    """This process reads ``hub_cache`` offline; returns the environment a child process needs for the same."""
    from huggingface_hub import constants

    env = {"HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return env


def _hub_config(*overrides: str):
    return load_config(
        "recipes/arith_tiny.yaml",
        [f"model.path={REPO}", "rollout.max_model_len=null", "rollout.max_tokens=185", *overrides],
    )


def test_load_kwargs_pin_hub_names_only_and_a_revision_needs_a_hub_model(tmp_path):
    pinned = ModelConfig(path=REPO, revision=REVISION, trust_remote_code=True)
    assert pinned.load_kwargs(REPO) == {"revision": REVISION, "trust_remote_code": True}
    assert pinned.load_kwargs(str(tmp_path)) == {"trust_remote_code": True}  # a checkpoint of it: a local folder
    assert ModelConfig(path=REPO).load_kwargs(REPO) == {"trust_remote_code": False}  # never asked on a terminal
    with pytest.raises(
        ValueError,
        match="revision picks a version of a hub model, and builtin:arith-tiny is built here; remove revision",
    ):
        ModelConfig(path="builtin:arith-tiny", revision="v1")


def test_a_revision_of_a_local_folder_is_refused_in_one_line(tiny_model_dir):
    cfg = load_config("recipes/arith_tiny.yaml", [f"model.path={tiny_model_dir}", "model.revision=v1"])
    with pytest.raises(BadInput, match=r"is a local folder; remove model.revision, or give the hub name$"):
        preflight(cfg, say=False)


def test_the_checks_read_the_revisions_files_and_ask_before_running_its_code(offline_hub):
    main = _hub_config()
    preflight(main, say=False)
    assert (
        main.rollout.max_model_len == 208
    )  # the longest prompt, 8 tokens, + 185, in 16-token blocks: main's 256 allow

    refused = _hub_config(f"model.revision={REVISION}")
    with pytest.raises(BadInput) as e:
        preflight(refused, say=False)
    assert str(e.value) == (
        f"model.path {REPO!r} ships its own Python code (an architecture or tokenizer transformers does not "
        "include); set model.trust_remote_code=true if you trust it"
    )

    pinned = _hub_config(f"model.revision={REVISION}", "model.trust_remote_code=true")
    preflight(pinned, say=False)
    assert pinned.rollout.max_model_len == 192  # the revision's positions (its 8-token prompts are skipped)


@pytest.mark.integration
def test_trainer_and_engine_load_the_revision(offline_hub, ray_session, encode, tmp_path):
    """The engine's log-probs equal the trainer's at the revision (both loaded it), and differ from main's; the
    trainer's checkpoint carries the model's own code, so transformers loads it as it loaded the model."""
    from rl.rollout.engine import EngineSpec
    from rl.rollout.worker import remote_rollout_worker
    from rl.trainer.engine import TrainerSpec
    from rl.trainer.worker import TrainerWorker
    from test_weight_sync import mean_abs_gap, sample_once
    from transformers import AutoModelForCausalLM

    cfg = _hub_config(f"model.revision={REVISION}", "model.trust_remote_code=true")
    load_kwargs = cfg.model.load_kwargs(REPO)
    worker = remote_rollout_worker(num_cpus=1).options(runtime_env={"env_vars": offline_hub})
    engine = worker.remote(EngineSpec(model=REPO, load_kwargs=load_kwargs, max_model_len=128))
    try:
        prompt = encode("3+1=")
        samples = sample_once(engine, "rev", prompt)
        pinned = TrainerWorker(TrainerSpec.from_config(cfg, REPO))
        main = TrainerWorker(TrainerSpec.from_config(_hub_config(), REPO))
        assert type(pinned.engine.model.config).__name__ == "TinyConfig"  # the revision's own code ran
        assert mean_abs_gap(pinned, samples, prompt) < 1e-3
        assert mean_abs_gap(main, samples, prompt) > 1e-2
        assert np.isfinite([lp for s in samples for lp in s.logprobs]).all()
        saved = pinned.engine.save(str(tmp_path / "checkpoint"))
        assert type(AutoModelForCausalLM.from_pretrained(saved, trust_remote_code=True)).__name__ == "TinyForCausalLM"
    finally:
        ray_session.get(engine.shutdown.remote())
        ray_session.kill(engine)


def test_the_rollout_bench_loads_the_recipes_model_at_its_revision(offline_hub):
    from rl.bench.rollout import RolloutBench, RolloutBenchConfig

    pinned = [f"model.path={REPO}", f"model.revision={REVISION}", "model.trust_remote_code=true"]
    cfg = RolloutBenchConfig(recipe="recipes/arith_tiny.yaml", recipe_overrides=pinned, model=REPO, prompts=2)
    assert RolloutBench(cfg, REPO).engine_spec().load_kwargs == {"revision": REVISION, "trust_remote_code": True}
    other = cfg.model_copy(update={"recipe_overrides": []})  # --model, not the recipe's: loaded as it is
    assert RolloutBench(other, REPO).engine_spec().load_kwargs == {"trust_remote_code": False}


def test_tool_turns_end_on_the_revisions_end_of_sequence_ids(offline_hub):
    from rl.rollout.tool_format import generation_eos
    from rl.rollout.tool_workflow import ToolSettings
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(REPO, revision=REVISION, trust_remote_code=True)
    assert generation_eos(tokenizer, REVISION) == [2, EOT]
    assert generation_eos(tokenizer) == [2]  # main's
    cfg = _hub_config(f"model.revision={REVISION}", "rollout.tools=[builtins:abs]")
    assert ToolSettings.of(cfg).revision == REVISION  # what the rollout workers build their episodes' turns with
