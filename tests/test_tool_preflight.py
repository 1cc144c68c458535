"""``rollout.tools`` / ``rollout.environment`` checked before any actor starts: a good setup passes (its environment
reaches the rewards' check as TRL's ``environments``); each bad one is one line naming the key and what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rl.rollout.tool_workflow import ToolSettings
from tool_chat import byte_chat_tokenizer, saved_chat_tokenizer

from rl.cli.common import RECIPES_DIR
from rl.config import load_config
from rl.inputs.preflight import BadInput, preflight

TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def undocumented(a: int) -> int:
    return a


class Counter:
    def reset(self, **row):
        self.total = int(row["answer"])

    def multiply(self, a: int) -> int:
        """Multiply the running total.

        Args:
            a: the factor
        """
        self.total *= a
        return self.total


def env_reward(completions, environments, **columns):
    return [float(e.total) for e in environments]
'''


def _model(tmp_path: Path, family: str = "qwen") -> Path:
    """A model folder the checks accept: a config, a one-tensor weight file, the byte-level chat tokenizer with the
    template of ``family`` (``tests/tool_chat.py``), or with ``plain`` one that ignores tools as SmolLM2's does."""
    out = tmp_path / f"model-{family}"
    if family == "plain":
        tok = byte_chat_tokenizer("qwen")
        tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }} {{ m.content }}<|im_end|>{% endfor %}"
        tok.save_pretrained(out)
    else:
        saved_chat_tokenizer(family, out)
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (out / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    (out / "config.json").write_text('{"model_type": "llama", "max_position_embeddings": 8192}')
    return out


def _config(tmp_path: Path, *overrides: str, family: str = "qwen"):
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS)
    base = [
        f"model.path={_model(tmp_path, family)}",
        "data.chat=true",
        "data.arith.num_train=40",  # every prompt goes through the chat template with the schemas: keep them few
        "data.arith.num_test=8",
        "train.batch_groups=2",
        "eval.num_problems=2",
        "rollout.max_model_len=4096",
        "rollout.max_tokens=64",
        f"rollout.tools=[{tools}:add]",
        f"rollout.environment={tools}:Counter",
        f"reward.functions=[{{fn: '{tools}:env_reward'}}]",
    ]
    return load_config("recipes/arith_tiny.yaml", [*base, *overrides])


def test_tools_and_environment_pass_and_the_schemas_count_in_prompts(tmp_path):
    inputs = preflight(_config(tmp_path))
    assert [s["function"]["name"] for s in inputs.encoder.tools] == ["add", "multiply"]
    row = inputs.train_rows[0]
    assert '"name": "multiply"' in inputs.encoder.tokenizer.decode(inputs.encoder.encode(row.prompt))


@pytest.mark.parametrize(
    "family",
    [
        "qwen3",
        "qwen3.5",
        "llama3",
        "mistral",
        "mistral11",
        "glm",
        "gemma4",
        "harmony",
        "pythonic",
        "lfm2",
        "olmo3",
        "string_arguments",
        "deepseek",
    ],
)
def test_the_templates_of_other_call_syntaxes_pass(tmp_path, family):
    """Qwen3's template renders the turn before a tool result without its empty think block: its results are what
    follows that turn's end-of-turn token all the same (it was refused as rewriting the turn)."""
    assert preflight(_config(tmp_path, family=family)).encoder.tools


@pytest.mark.parametrize(("family", "parser"), [("kimi", "kimi_k2"), ("minimax", "minimax_m2")])
def test_a_syntax_no_reader_reads_passes_with_vllms_parser_for_it(tmp_path, family, parser):
    """Kimi's template writes a call's id where the name goes: the probe is checked under Kimi's id form too."""
    assert preflight(_config(tmp_path, f"rollout.tool_parser={parser}", family=family)).encoder.tools


@pytest.mark.parametrize("policy", ["darts", "sart", "darts+sart"])
def test_shaping_policies_shape_episodes(tmp_path, policy):
    """DARTS and SART run per episode (``run_episodes``): a tool run takes any shaping policy."""
    assert preflight(_config(tmp_path, f"shaping.policy={policy}")).encoder.tools


@pytest.mark.parametrize(
    "overrides, family, message",
    [
        (["rollout.tools=[{tools}:missing]"], "qwen", r"^rollout\.tools\.0: tool spec '.*:missing': .* no attribute"),
        (["rollout.tools=[{tools}:undocumented]"], "qwen", r"^rollout\.tools\.0: .*undocumented cannot be a tool"),
        (["rollout.environment={tools}:add"], "qwen", r"^rollout\.environment: .*with no arguments failed: TypeError"),
        (["rollout.tools=[{tools}:add, {tools}:add]"], "qwen", r"two tools named 'add'"),
        (["data.chat=false"], "qwen", r"need chat prompts .* set data\.chat=true"),
        ([], "plain", r"^model\.path '.*': its chat template does not render tools"),
        (
            [],
            "minimax",
            r"^model\.path '.*': .*a syntax Tailor does not read \(.*<invoke name=.tailor_probe.>.*Llama 3.*; "
            r"vLLM's minimax_m2 parser reads it: set rollout\.tool_parser=minimax_m2$",
        ),
        (
            [],
            "kimi",
            r"^model\.path '.*': its chat template drops an assistant's tool calls; .*; "
            r"vLLM's kimi_k2 parser reads it: set rollout\.tool_parser=kimi_k2$",
        ),
        (["rollout.tool_parser=kimi"], "kimi", r"^rollout\.tool_parser: vLLM has no tool parser named 'kimi' \(its"),
        (["rollout.tool_parser=hermes"], "kimi", r"^rollout\.tool_parser 'hermes': vLLM's parser reads no call in"),
        (["rollout.tool_parser=openai"], "harmony", r"'openai': vLLM's parser failed on a call: NotImplementedError"),
        (["reward.functions=[{fn: '{tools}:env_reward'}]", "rollout.environment=null"], "qwen", r"environments"),
    ],
    ids=[
        *("missing", "undocumented", "env-not-a-class", "same-name", "text-prompts", "template", "syntax", "kimi"),
        *("unknown-parser", "wrong-parser", "stub-parser", "no-env"),
    ],
)
def test_bad_tool_setups_get_one_line_errors(tmp_path, overrides, family, message):
    tools = tmp_path / "tools.py"
    cfg = _config(tmp_path, *(o.replace("{tools}", str(tools)) for o in overrides), family=family)
    with pytest.raises(BadInput, match=message) as e:
        preflight(cfg)
    assert "\n" not in str(e.value)


def test_the_bundled_tool_recipe_names_tools_that_load():
    settings = ToolSettings.of(load_config(RECIPES_DIR / "calculator_qwen2.5-0.5b.yaml"))
    tools, environments = settings.load()
    assert [t.__name__ for t in tools] == ["add", "subtract"] and environments == {}
    assert tools[1](5, 7) == -2
